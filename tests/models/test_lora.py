"""LoRA on keras_vit models: keras_vit.enable_lora (Keras' own enable_lora on the projections) and merge_lora."""

import numpy as np
import pytest

import keras
import keras_vit
from harness import _randomize, model_inputs
from keras_vit.models.lora import lora_layers, lora_state, restore_lora_state
from keras_vit.train.resumable import build_optimizer_slots

SMALL = dict(hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=5, classifier_activation=None)
MODELS = {
    "vit": dict(image_size=32, patch_size=8, **SMALL),
    "hybrid": dict(image_size=32, stem="resnet", block_units=(1,), width=0.5, patch_size=1, **SMALL),
    "family": dict(image_size=32, patch_size=8, pooling="map", mlp_type="glu", mlp_activation="silu", layer_scale_init=0.1, **SMALL),
}


def adapted(name, rank=2, **options):
    config = keras_vit.ViTConfig.from_dict(MODELS[name])
    model = keras_vit.build_model(config)
    _randomize(model)
    paths = keras_vit.enable_lora(model, rank, **options)
    return model, paths, model_inputs(config, batch=4)


def fit_two_steps(model, inputs):
    """Two SGD steps: B starts at zero, so the first step moves only B (and the head), the second A too."""
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    build_optimizer_slots(model)  # one trace of the step instead of two (keras_vit.train.resumable)
    model.fit(inputs, np.ones((len(inputs), 5), "float32"), epochs=2, batch_size=len(inputs), verbose=0)


@pytest.fixture(scope="module")
def fitted():
    """``fitted(name)``: ``(model, paths, inputs, weights before the fit)`` of ``adapted(name)`` after
    :func:`fit_two_steps`, built and fitted once per module (each fit traces a train step); the tests only read it."""
    cache = {}

    def get(name):
        if name not in cache:
            model, paths, inputs = adapted(name)
            before = {v.path: np.array(v) for v in model.weights}
            fit_two_steps(model, inputs)
            cache[name] = model, paths, inputs, before
        return cache[name]

    return get


@pytest.mark.parametrize("name", sorted(MODELS))
def test_trainable_weights_are_the_factors_and_the_head_and_fitting_changes_only_them(name, fitted):
    model, paths, inputs, before = fitted(name)
    layers_per_block = 6  # query, key, value, attention_output, mlp_dense_1, mlp_dense_2
    assert len(paths) == 2 * layers_per_block + (6 if name == "family" else 0)  # and the MAP head's six
    factors = {f"{p}/lora_kernel_{x}" for p in paths for x in "ab"}
    assert {v.path for v in model.trainable_weights} == factors | {"head/kernel", "head/bias"}
    changed = {v.path for v in model.weights if not np.array_equal(before[v.path], np.array(v))}
    assert changed <= factors | {"head/kernel", "head/bias"}
    # every B and the head move; an A moves once its B is not zero (where the softmax of these random weights
    # saturates, an update of A can be below float32's resolution)
    assert {p for p in factors if p.endswith("_b")} | {"head/kernel", "head/bias"} <= changed
    assert any(p.endswith("_a") for p in changed)


@pytest.mark.parametrize("name", ["vit", "hybrid"])
def test_lora_model_saves_reloads_and_merges_into_plain_weights(name, tmp_path, fitted):
    model, _, inputs, _ = fitted(name)  # fitted: B is no longer zero, the factors change the outputs
    expected = np.asarray(model(inputs))
    path = str(tmp_path / "lora.keras")
    keras_vit.save_model(model, path, include_optimizer=False)
    merged = keras_vit.merge_lora(model)
    for plain in (keras_vit.load_model(path), keras.saving.load_model(path), merged):
        assert not lora_layers(plain) and not any("lora" in v.path for v in plain.weights)
        np.testing.assert_allclose(np.asarray(plain(inputs)), expected, rtol=1e-5, atol=1e-5)
    if name == "vit":  # a merged model is a plain one: its SavedModel (~5 s) once, the hybrid's export elsewhere
        report = keras_vit.export_model(merged, "saved_model", str(tmp_path / "served"), num_images=4)
        assert report.passed


def test_lora_state_restores_the_unmerged_factors(fitted):
    """A weights file holds merged kernels and Keras zeroes both factors when it loads one (no gradient then)."""
    model, _, inputs, _ = fitted("vit")
    state = lora_state(model)
    other, _, _ = adapted("vit")
    restore_lora_state(other, state, where="the test")
    other.get_layer("head").set_weights(model.get_layer("head").get_weights())  # the head is in the weights file
    np.testing.assert_allclose(np.asarray(other(inputs)), np.asarray(model(inputs)), rtol=1e-5, atol=1e-5)
    for layer, source in zip(lora_layers(other), lora_layers(model)):
        np.testing.assert_array_equal(np.array(layer.lora_kernel_b), np.array(source.lora_kernel_b))
    with pytest.raises(ValueError, match="The LoRA factors in backup/x do not fit this model: not in both"):
        restore_lora_state(adapted("vit", targets=("query",))[0], state, where="backup/x")


def test_a_model_used_before_lora_predicts_with_its_factors_and_fit_asks_for_a_new_compile():
    """Keras' traced predict and train functions of the model without LoRA are dropped: predict with the factors;
    fit refuses the factors its optimizer was not built for (it trained the frozen kernels instead)."""
    config = keras_vit.ViTConfig.from_dict(MODELS["vit"])
    inputs = model_inputs(config, batch=4)
    plain = keras_vit.build_model(config)
    _randomize(plain)
    plain.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    plain.fit(inputs, np.ones((len(inputs), 5), "float32"), batch_size=len(inputs), verbose=0)
    plain.predict(inputs, verbose=0)
    keras_vit.enable_lora(plain, 1)
    for layer in lora_layers(plain):
        layer.lora_kernel_b.assign(np.full(layer.lora_kernel_b.shape, 0.5, "float32"))
    np.testing.assert_allclose(plain.predict(inputs, verbose=0), np.asarray(plain(inputs)), atol=1e-5)
    frozen = {v.path: np.array(v) for v in plain.non_trainable_weights}
    with pytest.raises(ValueError, match="lora_kernel"):
        plain.fit(inputs, np.ones((len(inputs), 5), "float32"), batch_size=len(inputs), verbose=0)
    assert all(np.array_equal(frozen[v.path], np.array(v)) for v in plain.non_trainable_weights)


def test_lora_on_a_quantization_without_it_is_refused_before_anything_changes():
    model = keras_vit.build_model(keras_vit.ViTConfig.from_dict(MODELS["vit"]))
    model.quantize("float8")
    trainable = [v.path for v in model.trainable_weights]
    with pytest.raises(ValueError, match=r"quantized to \['float8'\], whose Keras layers run no LoRA"):
        keras_vit.enable_lora(model, 2)
    assert not lora_layers(model) and [v.path for v in model.trainable_weights] == trainable


def test_lora_on_layers_of_int8_and_int4_is_qlora_and_a_float8_layer_it_does_not_adapt_is_left():
    model = keras_vit.build_model(keras_vit.ViTConfig.from_dict(MODELS["vit"]))
    model.quantize("int8", filters=lambda layer: layer.name.startswith("mlp_dense"))
    model.quantize("int4", filters=lambda layer: layer.name in ("query", "key", "value"))
    assert len(keras_vit.enable_lora(model, 2)) == 2 * 6  # q, k, v (int4), out (float), mlp_dense_1 / 2 (int8) of each block
    model = keras_vit.build_model(keras_vit.ViTConfig.from_dict(MODELS["vit"]))
    model.quantize("float8", filters=lambda layer: layer.name.startswith("mlp_dense"))
    assert len(keras_vit.enable_lora(model, 2, targets=("query", "value"))) == 2 * 2


@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_qlora_on_a_quantized_head_trains_its_bias_not_its_integer_kernel_or_scale(mode):
    """model.quantize quantizes the head too: its int8 kernel and its scale stay frozen, as Keras made them (an int8
    trainable weight made jax.grad refuse the whole fit on the JAX backend)."""
    model = keras_vit.build_model(keras_vit.ViTConfig.from_dict(MODELS["vit"]))
    model.quantize(mode)
    keras_vit.enable_lora(model, 2)
    trainable = [v.path for v in model.trainable_weights]
    assert [p for p in trainable if p.startswith("head/")] == ["head/bias"]
    assert all(keras.backend.is_float_dtype(v.dtype) for v in model.trainable_weights)
    assert all(p.endswith(("lora_kernel_a", "lora_kernel_b")) for p in trainable if not p.startswith("head/"))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m: keras_vit.enable_lora(m, 0), r"`rank` must be .*Received: rank=0"),
        (lambda m: keras_vit.enable_lora(m, 2, targets=("query", "ffn")), r"Unknown LoRA target.*'ffn'"),
        (lambda m: keras_vit.merge_lora(m), "has no LoRA factors to merge"),
        (lambda m: [keras_vit.enable_lora(m, 2), keras_vit.enable_lora(m, 2)], "LoRA is already enabled on model 'vit'"),
        (lambda m: keras_vit.enable_lora(keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]), 2), "Expected a keras_vit model"),
    ],
)
def test_bad_lora_arguments_are_refused_by_name(call, message):
    model = keras_vit.build_model(keras_vit.ViTConfig.from_dict(MODELS["vit"]))
    with pytest.raises(ValueError, match=message):
        call(model)
