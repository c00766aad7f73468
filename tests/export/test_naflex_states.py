"""A NaFlex model quantized by Keras (``model.quantize("int8")``), with LoRA factors, or both (QLoRA): each path a
user takes next -- call, save and reload, predict, resize, export to a SavedModel and to TFLite -- either agrees
with the float model within the stated tolerance or is refused by name.

Tolerances (probabilities of a 3-class tiny model whose weights are drawn from N(0, 0.2)): int8 kernels against
float, 0.01; the same computation in another place (a .keras file read back, a traced graph, the
SavedModel), 1e-5; TFLite float32, 1e-4 (the exporter's own bar).
"""

import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit.architecture.state import model_state
from keras_vit.export import export_model, naflex_graph
from keras_vit.inference import naflex_input
from keras_vit.inference.predictors import predict
from keras_vit.layers.naflex_grid import KEYS
from keras_vit.models.lora import enable_lora, lora_layers, merge_lora
from helpers import randomized

SIZES = ((48, 48), (45, 80), (90, 30))  # 1:1, 16:9, 1:3
# Keras' int8 layers (abs-max scales, inputs quantized at run time) against the float model's probabilities:
# measured 1.5e-3 (int8) and 1.1e-3 (QLoRA against float LoRA) on AMD EPYC (Zen 5, AVX-512); the bar leaves about
# 6x for another CPU's int8 kernels. Dropping the trained LoRA factors moves the probabilities by 0.014, past it
INT8_ATOL = 0.01
# the same computation in another place (a .keras file read back, a traced graph, the SavedModel): float32
# round-off of probabilities below 1
SAME_ATOL = 1e-5


def tiny():
    model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
                          num_classes=3, class_token=False, pooling="gap", input_mode="naflex")
    return randomized(model)


def train_factors(model, seed=2):
    """Factors as after training (Keras starts B at zero: no effect until then), both drawn here: Keras draws A
    unseeded, so two models compared with each other (float LoRA and QLoRA) would differ by more than int8's error."""
    rng = np.random.default_rng(seed)
    for layer in lora_layers(model):
        layer.lora_kernel_a.assign(rng.normal(0.0, 0.5, layer.lora_kernel_a.shape).astype("float32"))
        layer.lora_kernel_b.assign(rng.normal(0.0, 0.1, layer.lora_kernel_b.shape).astype("float32"))


IMAGES = [np.random.default_rng(1).uniform(0, 255, size + (3,)).astype("float32") for size in SIZES]


@pytest.fixture(scope="module")
def inputs():
    return naflex_input.batch(IMAGES, 8, 16)


def run(model, inputs):
    return np.asarray(model(inputs))


def traced(model, inputs):
    """The model as the SavedModel's serving_default traces it (any batch, any length), run on ``inputs``."""
    fn = tf.function(lambda patches, patch_coord, patch_valid: model(
        {"patches": patches, "patch_coord": patch_coord, "patch_valid": patch_valid}, training=False),
        input_signature=naflex_graph.input_specs(model, None, None))
    return np.asarray(fn(*(tf.constant(inputs[key]) for key in KEYS)))


def test_an_int8_naflex_model_agrees_with_float_through_a_file_predict_and_a_traced_graph(inputs, tmp_path):
    model = tiny()
    float_out = run(model, inputs)
    model.quantize("int8")
    state = model_state(model)
    assert state.kind == "quantized" and "patch_encoder/projection" in state.quantized_layers
    int8_out = run(model, inputs)
    np.testing.assert_allclose(int8_out, float_out, rtol=0, atol=INT8_ATOL)
    assert np.abs(int8_out - float_out).max() > 1e-7  # the int8 kernels are what ran
    path = str(tmp_path / "int8.keras")
    model.save(path)
    reloaded = keras_vit.load_model(path)
    assert model_state(reloaded).quantization == "int8"
    np.testing.assert_allclose(run(reloaded, inputs), int8_out, rtol=0, atol=SAME_ATOL)
    np.testing.assert_allclose(traced(reloaded, inputs), int8_out, rtol=0, atol=SAME_ATOL)
    files = []
    for i, image in enumerate(IMAGES):
        files.append(str(tmp_path / f"{i}.png"))
        tf.io.write_file(files[-1], tf.io.encode_png(tf.cast(tf.round(image), tf.uint8)))
    got = np.array([[p["probability"] for p in sorted(r["predictions"], key=lambda p: p["index"])]
                    for r in predict(path, files, top_k=3)])
    pixels = [np.round(image) for image in IMAGES]
    np.testing.assert_allclose(got, run(model, naflex_input.batch(pixels, 8, 16)), rtol=0, atol=SAME_ATOL)


def test_a_lora_naflex_model_saves_merges_and_traces_as_it_computes(inputs, tmp_path):
    model = tiny()
    enable_lora(model, rank=2)
    train_factors(model)
    lora_out = run(model, inputs)
    path = str(tmp_path / "lora.keras")
    model.save(path)  # Keras writes the merged kernels W + (alpha / rank) A B
    np.testing.assert_allclose(run(keras_vit.load_model(path), inputs), lora_out, rtol=0, atol=SAME_ATOL)
    merged = merge_lora(model)
    assert model_state(merged).kind == "float"
    np.testing.assert_allclose(run(merged, inputs), lora_out, rtol=0, atol=SAME_ATOL)
    np.testing.assert_allclose(traced(model, inputs), lora_out, rtol=0, atol=SAME_ATOL)
    # the merged model is a plain NaFlex model: it resizes (its position table to another native grid)
    assert keras_vit.resize_model(merged, 48).vit_config.native_image_size == (48, 48)


def test_qlora_on_a_naflex_model_agrees_with_float_lora(inputs, tmp_path):
    float_lora = tiny()
    enable_lora(float_lora, rank=2)
    train_factors(float_lora)
    model = tiny()
    model.quantize("int8")
    enable_lora(model, rank=2)
    train_factors(model)
    assert model_state(model).describe().startswith("LoRA enabled (rank 2 on 12 layers, trained factors) and quantized")
    qlora_out = run(model, inputs)
    np.testing.assert_allclose(qlora_out, run(float_lora, inputs), rtol=0, atol=INT8_ATOL)
    path = str(tmp_path / "qlora.keras")
    model.save(path)  # Keras merges the factors into the int8 kernels and quantizes them again
    np.testing.assert_allclose(run(keras_vit.load_model(path), inputs), qlora_out, rtol=0, atol=INT8_ATOL)


def test_resize_and_tflite_refuse_int8_and_lora_naflex_models_by_name(tmp_path):
    quantized = tiny()
    quantized.quantize("int8")
    with pytest.raises(ValueError, match=r"Cannot resize model 'vit': it is quantized \(int8"):
        keras_vit.resize_model(quantized, 48)
    eval_data = np.random.default_rng(5).uniform(0, 255, (3, 32, 32, 3)).astype("float32")
    for mode in ("float32", "dynamic"):
        with pytest.raises(ValueError, match=r"Cannot export model 'vit' to TFLite: it is quantized \(int8.*export the "
                                             r"float model with quantize='dynamic'"):
            export_model(quantized, "tflite", str(tmp_path / "q.tflite"), quantize=mode, eval_data=eval_data)
    assert not (tmp_path / "q.tflite").exists()
    adapted = tiny()
    enable_lora(adapted, rank=2)
    train_factors(adapted)
    with pytest.raises(ValueError, match=r"Cannot resize model 'vit': it is LoRA enabled .*merge_lora"):
        keras_vit.resize_model(adapted, 48)


@pytest.mark.slow
def test_int8_lora_and_qlora_naflex_exports(inputs, tmp_path):
    """The SavedModel of an int8 model (verified by the exporter against the int8 Keras model at 1e-5) within 0.01 of
    the float model; a LoRA model's SavedModel and TFLite file verified against it; QLoRA: SavedModel, TFLite refused."""
    eval_data = np.random.default_rng(5).uniform(0, 255, (3, 32, 32, 3)).astype("float32")
    model = tiny()
    float_out = run(model, inputs)
    model.quantize("int8")
    report = export_model(model, "saved_model", str(tmp_path / "int8"), eval_data=eval_data, warmup=False)
    assert report.passed and report.max_abs_diff <= SAME_ATOL, report.summary()
    signature = tf.saved_model.load(report.path).signatures["serving_default"]
    served = signature(**{key: tf.constant(inputs[key]) for key in KEYS})["probabilities"]
    np.testing.assert_allclose(served.numpy(), float_out, rtol=0, atol=INT8_ATOL)

    adapted = tiny()
    enable_lora(adapted, rank=2)
    train_factors(adapted)
    report = export_model(adapted, "saved_model", str(tmp_path / "lora"), eval_data=eval_data, warmup=False)
    assert report.passed and report.max_abs_diff <= SAME_ATOL, report.summary()
    report = export_model(adapted, "tflite", str(tmp_path / "lora.tflite"), eval_data=eval_data)
    assert report.passed and report.max_abs_diff <= 1e-4, report.summary()

    qlora = tiny()
    qlora.quantize("int8")
    enable_lora(qlora, rank=2)
    train_factors(qlora)
    report = export_model(qlora, "saved_model", str(tmp_path / "qlora"), eval_data=eval_data, warmup=False)
    assert report.passed and report.max_abs_diff <= SAME_ATOL, report.summary()
    with pytest.raises(ValueError, match=r"Cannot export model 'vit' to TFLite: it is LoRA enabled .* and quantized"):
        export_model(qlora, "tflite", str(tmp_path / "qlora.tflite"), eval_data=eval_data)
