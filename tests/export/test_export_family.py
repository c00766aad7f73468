"""SavedModel, TFLite and ONNX exports of ViT-family members, each run in its runtime and compared with Keras.

DINOv2-S/14-like (registers, LayerScale, patch 14, ImageNet mean and std, exact GELU), SigLIP-B/16-like (MAP head,
tanh GELU, no class token) and CLIP-like (pre-norm, projection, quick GELU) tiny models: each activation
lowers to builtin TFLite ops (no Flex op) and to ONNX ops onnxruntime runs (no Erfc left).
"""

import numpy as np
import pytest

import keras_vit
from helpers import images
from keras_vit.export import export_model, tflite

# the op each MLP activation lowers to: TFLite builtin, ONNX
ACTIVATION_OPS = {"gelu": ("GELU", "Erf"), "gelu_tanh": ("GELU", "Tanh"), "quick_gelu": ("LOGISTIC", "Sigmoid")}
SMALL = dict(hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=10)
# the export's own float32 bars (keras_vit.export.verify.TOLERANCES): a SavedModel runs Keras' graph (round-off
# only); TFLite (XNNPACK) and onnxruntime run other float32 kernels, which sum in another order
ROUND_OFF = 1e-5
RUNTIME_ATOL = 1e-4
FAMILY = {
    "dinov2_s14": dict(image_size=28, patch_size=14, num_register_tokens=4, layer_scale_init=0.1,
                       input_mean=(0.485, 0.456, 0.406), input_std=(0.229, 0.224, 0.225)),
    "siglip_b16": dict(image_size=32, patch_size=16, pooling="map", class_token=False, mlp_activation="gelu_tanh"),
    "clip_quick_gelu": dict(image_size=32, patch_size=16, pre_norm=True, projection_dim=16, mlp_activation="quick_gelu"),
}


@pytest.fixture(scope="module", params=sorted(FAMILY))
def family(request):
    model = keras_vit.build_model(keras_vit.ViTConfig(**SMALL, **FAMILY[request.param]), name=request.param)
    rng = np.random.default_rng(0)
    for variable in model.weights:  # random weights everywhere (the head included), so that outputs differ per image
        variable.assign(variable + rng.normal(size=variable.shape).astype("float32") * 0.2)
    size = model.vit_config.image_size
    return request.param, model, images(16, size, seed=1)


def _keras(model, x):
    return np.asarray(model.predict(x, verbose=0))


def test_saved_model_serves_what_keras_computes(family, tmp_path):
    import tensorflow as tf

    name, model, x = family
    report = export_model(model, "saved_model", str(tmp_path), eval_data=x, num_images=16, warmup=False)
    assert report.passed and report.max_abs_diff <= ROUND_OFF
    out = tf.saved_model.load(report.path).signatures["serving_default"](images=tf.constant(x[:5]))
    np.testing.assert_allclose(out["probabilities"].numpy(), _keras(model, x[:5]), atol=ROUND_OFF)


def test_tflite_is_builtin_only_and_within_runtime_atol(family, tmp_path):
    name, model, x = family
    path = str(tmp_path / f"{name}.tflite")
    report = export_model(model, "tflite", path, eval_data=x, num_images=16)
    assert report.passed and report.max_abs_diff <= RUNTIME_ATOL
    ops = set(tflite.flatbuffer_ops(open(path, "rb").read()))
    assert not [op for op in ops if op.startswith("Flex")], ops
    assert ACTIVATION_OPS[model.vit_config.mlp_activation][0] in ops
    np.testing.assert_allclose(tflite.run(path, x[:5]), _keras(model, x[:5]), atol=RUNTIME_ATOL)


def test_onnx_runs_in_onnxruntime_within_runtime_atol(family, tmp_path):
    import onnxruntime as ort

    name, model, x = family
    path = str(tmp_path / f"{name}.onnx")
    report = export_model(model, "onnx", path, eval_data=x, num_images=16)
    assert report.passed and report.max_abs_diff <= RUNTIME_ATOL
    assert "Erfc" not in report.ops and ACTIVATION_OPS[model.vit_config.mlp_activation][1] in report.ops
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"images": x[:5]})[0], _keras(model, x[:5]), atol=RUNTIME_ATOL)
