"""A RoPE model (keras_vit.layers.rope) exports to TFLite in the rank-4 formulation: the file computes what Keras
computes, and LiteRT's GPU delegate takes every op of it (no rank-5 tensor, no 5-axis transpose)."""

import numpy as np
import pytest

import keras_vit
from harness import _randomize
from keras_vit.export import export_model, gpu_delegate_report


# mixed is slow (~5 s): tests/layers/test_formulation.py runs its rank-4 attention fast
# eva02: EVA-02 CLIP's blocks (a table and axial RoPE on a reference grid, SwiGLU, the sub-LayerNorms); slow (~8 s):
# tests/layers/test_formulation.py runs the attention's inner norm in the rank-4 graph fast
EVA02 = dict(rope_reference_grid=(3, 5), mlp_type="glu", mlp_activation="silu", mlp_norm=True, attention_norm=True)


@pytest.mark.parametrize("kind, table, switches", [
    ("axial", False, dict(layer_scale_init=1e-5)),
    pytest.param("axial", True, EVA02, marks=pytest.mark.slow, id="eva02"),
    pytest.param("mixed", True, dict(layer_scale_init=1e-5), marks=pytest.mark.slow),
])
def test_rope_model_exports_whole_to_the_gpu_delegate(kind, table, switches, tmp_path):
    model = keras_vit.ViT(image_size=(32, 48), patch_size=8, hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64,
                          num_classes=10, classifier_activation=None, rope=kind, position_embedding=table, **switches)
    _randomize(model)  # order-one weights: a zero head would hide a wrong graph
    x = np.random.default_rng(0).uniform(0, 255, (4, 32, 48, 3)).astype("float32")
    path = str(tmp_path / f"rope_{kind}.tflite")
    report = export_model(model, "tflite", path, quantize="float32", eval_data=x, num_images=4)
    assert report.passed
    from ai_edge_litert import interpreter as litert  # deferred: the TFLite runtime

    interpreter = litert.Interpreter(model_path=path)
    interpreter.allocate_tensors()
    inputs, outputs = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    interpreter.set_tensor(inputs["index"], x[:1])
    interpreter.invoke()
    got, want = interpreter.get_tensor(outputs["index"]), np.asarray(model(x[:1]))
    assert np.max(np.abs(want)) > 0.1  # logits far from zero: the comparison means something
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.max(np.abs(want)))
    delegate = gpu_delegate_report(path)
    assert delegate.whole, delegate.line()


def test_a_keras_hub_preset_cannot_express_rope_or_the_sub_layer_norms():
    from keras_vit.export.keras_hub import unsupported

    config = keras_vit.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
                                 rope="mixed", position_embedding=False)
    assert unsupported(config) == ["rope='mixed': rotary position embeddings (RoPE) in the attention",
                                   "position_embedding=False: no learned position embeddings"]
    config = keras_vit.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
                                 mlp_norm=True, attention_norm=True)
    assert unsupported(config) == [
        "mlp_norm=True: a LayerNorm inside the MLP", "attention_norm=True: a LayerNorm inside the attention"]


# slow (~5 s, as the axial test above): its paths run fast there (RoPE) and in tests/layers/test_formulation.py's
# test_attention_pooling (the pooling head's rank-4 form)
@pytest.mark.slow
def test_perception_encoder_like_model_exports_whole_to_the_gpu_delegate(tmp_path):
    """PE's switches together (axial RoPE on a reference grid with an offset, the table, the pre-norm, attention
    pooling with its own heads and MLP width, the projection): the TFLite file computes what Keras computes and the
    GPU delegate takes every op."""
    model = keras_vit.ViT(image_size=(32, 48), patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
                          include_top=False, rope="axial", rope_temperature=10000.0, rope_grid_offset=1.0,
                          rope_reference_grid=(3, 5), pre_norm=True, pooling="map", map_num_heads=4, map_mlp_dim=48,
                          projection_dim=16, layer_norm_epsilon=1e-5)
    _randomize(model)
    x = np.random.default_rng(0).uniform(0, 255, (4, 32, 48, 3)).astype("float32")
    path = str(tmp_path / "pe.tflite")
    report = export_model(model, "tflite", path, quantize="float32", eval_data=x, num_images=4)
    assert report.passed and report.max_abs_diff <= 1e-4 * max(1.0, float(np.max(np.abs(np.asarray(model(x))))))
    delegate = gpu_delegate_report(path)
    assert delegate.whole, delegate.line()
