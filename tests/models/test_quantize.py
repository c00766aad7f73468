"""Keras' own ``model.quantize(...)`` on every kind of keras_vit model: predict, save, load, export.

keras_vit's attention, MLP, patch projection and MAP-head projections are Keras ``Dense``/``EinsumDense``
layers that the keras_vit layers create; ``model.quantize`` quantizes them in place, and the keras_vit
layers record which in their configs (keras_vit/layers/policies.py) so that ``.keras`` files load.
"""

import numpy as np
import pytest

import keras
import keras_vit
from harness import _randomize, model_inputs

SMALL = dict(hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=5, classifier_activation=None)
MODELS = {
    "vit": dict(image_size=32, patch_size=8, **SMALL),
    "hybrid": dict(image_size=32, stem="resnet", block_units=(1,), width=0.5, patch_size=1, **SMALL),
    # SigLIP's MAP head, SwiGLU, LayerScale, registers, no q/k/v bias and CLIP's projection
    "family": dict(
        image_size=32, patch_size=8, pooling="map", mlp_type="glu", mlp_activation="silu", layer_scale_init=0.1,
        num_register_tokens=2, qkv_bias=False, projection_dim=16, **SMALL,
    ),
}
# max |quantized - float32| / max |float32| over the logits of these tiny random models (weights N(0, 0.2),
# so activations are larger than a trained model's): measured 0.005-0.033 (int8), 0.066 at most (float8),
# 0.05-0.22 (int4) with Keras 3.15 on CPU; the bounds leave about 2x
RELATIVE_BOUND = {"int8": 0.08, "float8": 0.15, "int4": 0.45}
# a quantized model saved and loaded again computes with the same integer weights and scales: float32 round-off of
# logits of order 1-10
RELOADED_ATOL = 1e-5


def quantized(name, mode):
    config = keras_vit.ViTConfig.from_dict(MODELS[name])
    model = keras_vit.build_model(config)
    _randomize(model)
    inputs = model_inputs(config)
    expected = np.asarray(model(inputs))
    with pytest.warns(UserWarning, match="does not have a `quantize` method"):  # Keras names each layer it skips
        model.quantize(mode)
    return model, inputs, expected


@pytest.mark.parametrize("mode", sorted(RELATIVE_BOUND))
@pytest.mark.parametrize("name", sorted(MODELS))
def test_quantized_model_predicts_saves_and_loads_with_both_loaders(name, mode, tmp_path):
    model, inputs, expected = quantized(name, mode)
    modes = {layer.quantization_mode for layer in model._flatten_layers() if isinstance(layer, keras.layers.Dense)}
    assert modes == {mode}, "every Dense (the patch projection, the MLP, the head...) is quantized"
    attention = [l for l in model._flatten_layers() if isinstance(l, keras.layers.EinsumDense)]
    assert attention and {l.quantization_mode for l in attention} == {mode}
    actual = np.asarray(model(inputs))
    relative = np.abs(actual - expected).max() / np.abs(expected).max()
    assert 0 < relative < RELATIVE_BOUND[mode]
    path = str(tmp_path / f"{name}_{mode}.keras")
    keras_vit.save_model(model, path)
    for loaded in (keras_vit.load_model(path), keras.saving.load_model(path)):
        assert loaded.get_layer("transformer_block_0").attention.query_dense.quantization_mode == mode
        np.testing.assert_allclose(np.asarray(loaded(inputs)), actual, rtol=RELOADED_ATOL, atol=RELOADED_ATOL)


def test_a_loaded_quantized_model_saves_again(tmp_path):
    """Keras 3.15's Dense saves its scale only when its own policy (not a map's default) is quantized."""
    model, inputs, _ = quantized("family", "int8")
    first, second = str(tmp_path / "first.keras"), str(tmp_path / "second.keras")
    keras_vit.save_model(model, first)
    keras_vit.save_model(keras_vit.load_model(first), second)
    np.testing.assert_allclose(np.asarray(keras_vit.load_model(second)(inputs)), np.asarray(model(inputs)), atol=RELOADED_ATOL)


def test_the_blocks_configs_name_their_quantized_sublayers(tmp_path):
    """The defect: without them, the float layers the blocks created met the int8 variables and the file did not load."""
    model, inputs, _ = quantized("vit", "int8")
    config = model.get_layer("transformer_block_0").get_config()
    assert config["dtype"]["class_name"] == "DTypePolicyMap"
    policies = config["dtype"]["config"]["policy_map"]
    assert "transformer_block_0/attention/query" in policies and "transformer_block_0/mlp_dense_1" in policies
    path = str(tmp_path / "q.keras")
    keras_vit.save_model(model, path)
    assert keras_vit.load_model(path).get_layer("patch_encoder").projection.quantization_mode == "int8"


def test_a_compiled_quantized_model_saves_without_its_optimizer(tmp_path):
    model, inputs, _ = quantized("hybrid", "int8")
    model.compile(optimizer="sgd", loss="mse")
    path = str(tmp_path / "q.keras")
    keras_vit.save_model(model, path, include_optimizer=False)
    np.testing.assert_allclose(np.asarray(keras_vit.load_model(path)(inputs)), np.asarray(model(inputs)), atol=RELOADED_ATOL)


# the same export path as the ViT's; the hybrid's (~12 s more) in test-slow
@pytest.mark.parametrize("name", ["vit", pytest.param("hybrid", marks=pytest.mark.slow)])
def test_quantized_model_exports_a_verified_saved_model(name, tmp_path):
    model, _, _ = quantized(name, "int8")
    report = keras_vit.export_model(model, "saved_model", str(tmp_path / "served"), num_images=8)
    # passed: within the SavedModel's own bar (1e-5, keras_vit.export.verify.TOLERANCES), as TensorFlow runs the
    # int8 kernels Keras ran; the 1e-4 below restates the order of magnitude
    assert report.passed and report.max_abs_diff < 1e-4


def test_tflite_refuses_a_keras_quantized_model_with_the_reason(tmp_path):
    """TFLite's FULLY_CONNECTED takes no raw int8 activations (the converter stopped on "must be tensor of 32-bit float
    or QI8"): refused before any work, with the way out: export the float model with quantize='dynamic'/'int8'."""
    model, _, _ = quantized("vit", "int8")
    with pytest.raises(ValueError, match=r"Cannot export model 'vit' to TFLite: it is quantized \(int8, \d+ layers\); "
                       r".*export the float model with quantize='dynamic'"):
        keras_vit.export_model(model, "tflite", str(tmp_path / "m.tflite"), num_images=4)
    assert not (tmp_path / "m.tflite").exists()
