"""SelfAttention (fused QKV) computes what keras.layers.MultiHeadAttention computes, with the same weights."""

import os

import numpy as np
import pytest

import keras
import keras_vit
from keras_vit.layers import SelfAttention, TransformerBlock

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "v0.1.0_layers")


def _legacy_config(**overrides):
    """The config keras_vit 0.1.0 saved: its SelfAttention subclassed MultiHeadAttention and kept its get_config."""
    reference = keras.layers.MultiHeadAttention(num_heads=4, key_dim=8, dropout=0.1, **overrides)
    reference.build((1, 7, 32), (1, 7, 32))  # build fills in value_dim and attention_axes, as in a saved model
    return reference.get_config()


def _pair(num_heads=4, key_dim=8, width=32, dtype=None, dropout=0.0):
    x = np.random.default_rng(0).normal(size=(3, 7, width)).astype("float32")
    fused = SelfAttention(num_heads=num_heads, key_dim=key_dim, dropout=dropout, dtype=dtype)
    fused.build(x.shape)
    reference = keras.layers.MultiHeadAttention(num_heads=num_heads, key_dim=key_dim, dtype=dtype)
    reference.build(x.shape, x.shape)
    rng = np.random.default_rng(1)
    fused.set_weights([rng.normal(size=w.shape).astype("float32") * 0.2 for w in fused.get_weights()])
    reference.set_weights(fused.get_weights())
    return x, fused, reference


def test_same_weights_names_and_outputs_as_multi_head_attention():
    x, fused, reference = _pair()
    assert [w.path.split("/", 1)[1] for w in fused.weights] == [w.path.split("/", 1)[1] for w in reference.weights]
    assert [tuple(w.shape) for w in fused.weights] == [tuple(w.shape) for w in reference.weights]
    assert tuple(fused.query_dense.kernel.shape) == (32, 4, 8)  # the original checkpoint layout
    out, weights = fused(x, return_attention_scores=True)
    ref_out, ref_weights = reference(x, x, return_attention_scores=True)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref_out), atol=1e-5)
    np.testing.assert_allclose(np.asarray(weights), np.asarray(ref_weights), atol=1e-6)
    assert weights.shape == (3, 4, 7, 7)
    np.testing.assert_allclose(np.asarray(fused(x)), np.asarray(ref_out), atol=1e-5)


def test_bfloat16_softmax_in_float32_stays_close():
    x, fused, reference = _pair(dtype="mixed_bfloat16")
    out, weights = fused(x, return_attention_scores=True)
    assert out.dtype == "bfloat16" and weights.dtype == "bfloat16"
    _, f32, _ = _pair()
    f32.set_weights(fused.get_weights())
    # bfloat16 keeps 8 significant bits of every matmul's inputs and output: measured 0.022 (AMD EPYC, AVX-512)
    np.testing.assert_allclose(np.asarray(keras.ops.cast(out, "float32")), np.asarray(f32(x)), atol=0.1)


def test_attention_dropout_only_in_training():
    x, fused, _ = _pair(dropout=0.5)
    # exact on purpose: training=None and training=False take the same path, so the same ops run on the same
    # input in one process (the same bits on any CPU); dropout at 0.5 would change the output by O(1)
    np.testing.assert_array_equal(np.asarray(fused(x)), np.asarray(fused(x, training=False)))
    assert not np.allclose(np.asarray(fused(x, training=True)), np.asarray(fused(x)))


def test_functional_symbolic_shapes_and_config_round_trip():
    inputs = keras.Input((7, 32))
    out, weights = SelfAttention(num_heads=4, key_dim=8)(inputs, return_attention_scores=True)
    assert out.shape == (None, 7, 32) and weights.shape == (None, 4, 7, 7)
    layer = SelfAttention(num_heads=4, key_dim=8, dropout=0.1)
    clone = SelfAttention.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    with pytest.raises(ValueError, match="value_dim=16"):  # a MultiHeadAttention config it cannot compute
        SelfAttention.from_config({**_legacy_config(), "value_dim": 16})
    with pytest.raises(ValueError, match="'value_dim': 16"):  # not an argument of this layer
        SelfAttention(num_heads=4, key_dim=8, value_dim=16)


def test_block_still_returns_explicit_attention_weights():
    block = TransformerBlock(num_heads=4, mlp_dim=16)
    x = np.random.default_rng(2).normal(size=(2, 5, 8)).astype("float32")
    out, weights = block(x, return_attention_scores=True)
    assert isinstance(block.attention, SelfAttention)
    assert weights.shape == (2, 4, 5, 5)
    np.testing.assert_allclose(np.asarray(weights).sum(-1), 1.0, atol=1e-5)


def test_only_public_keras_api():
    # keras_vit 0.1.0 subclassed MultiHeadAttention and read 29 of its private attributes
    assert not issubclass(SelfAttention, keras.layers.MultiHeadAttention)
    layer = SelfAttention(num_heads=4, key_dim=8)
    layer.build((None, 7, 32))
    projections = (layer.query_dense, layer.key_dense, layer.value_dense, layer.output_dense)
    assert all(type(p) is keras.layers.EinsumDense for p in projections)
    assert [p.name for p in projections] == ["query", "key", "value", "attention_output"]


def test_reads_the_configs_saved_by_0_1_0():
    config = _legacy_config()
    assert {"value_dim", "attention_axes", "output_shape", "use_gate", "sliding_window"} <= set(config)
    layer = SelfAttention.from_config(config)
    assert (layer.num_heads, layer.key_dim, layer.dropout, layer.name) == (4, 8, 0.1, config["name"])
    # the 0.1.0 config without build (value_dim and attention_axes None) reads the same
    unbuilt = keras.layers.MultiHeadAttention(num_heads=4, key_dim=8, dropout=0.1).get_config()
    assert SelfAttention.from_config(unbuilt).get_config() == {**layer.get_config(), "name": unbuilt["name"]}


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(output_shape=(16,)), r"output_shape=\(16,\)"),
        (dict(attention_axes=(0, 1)), r"attention_axes=\(0, 1\)"),
        (dict(use_gate=True), r"use_gate=True"),
    ],
)
def test_refuses_the_configs_it_cannot_compute(overrides, message):
    with pytest.raises(ValueError, match=message):
        SelfAttention.from_config({**_legacy_config(), **overrides})


def test_a_model_saved_by_0_1_0_loads_and_computes_the_same():
    # written by keras_vit 0.1.0 (commit 3ed6e4b): Input((5, 16)) -> its SelfAttention(num_heads=2, key_dim=8,
    # dropout=0.1, kernel_initializer="he_normal") with return_attention_scores=True, random weights
    model = keras_vit.load_model(os.path.join(FIXTURES, "self_attention.keras"))
    arrays = np.load(os.path.join(FIXTURES, "self_attention_io.npz"))
    assert isinstance(model.get_layer("attention"), SelfAttention)
    out, weights = model(arrays["inputs"])
    # same weights, same ops: float32 rounding only
    np.testing.assert_allclose(np.asarray(out), arrays["outputs"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(weights), arrays["attention_weights"], rtol=1e-5, atol=1e-6)


def test_a_second_input_is_refused_with_a_clear_error():
    layer = SelfAttention(num_heads=4, key_dim=8)
    x = np.zeros((1, 7, 32), "float32")
    with pytest.raises(TypeError, match="takes one input.*Received 2 positional arguments"):
        layer(x, x)
    with pytest.raises(TypeError, match="takes one input"):
        layer(keras.Input((7, 32)), keras.Input((7, 32)))
    assert layer(x, training=False).shape == (1, 7, 32)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_heads=0, key_dim=8), r"num_heads=0"),
        (dict(num_heads=-2, key_dim=8), r"num_heads=-2"),
        (dict(num_heads=4, key_dim=0), r"key_dim=0"),
        (dict(num_heads=4.0, key_dim=8), r"num_heads=4.0"),
        (dict(num_heads=4, key_dim=8, dropout=1.0), r"dropout=1.0"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SelfAttention(**kwargs)


def test_quantized_projections_are_called_as_keras_quantized_them():
    # after quantization the fused path (which reads float kernels) hands over to the quantized EinsumDense
    # layers; Keras' MultiHeadAttention with the same weights quantized the same way computes the same
    x, fused, reference = _pair()
    for layer in (fused, reference):
        for projection in (layer.query_dense, layer.key_dense, layer.value_dense, layer.output_dense):
            projection.quantize("int8")
    assert fused.query_dense.kernel.dtype == "int8"
    out, weights = fused(x, return_attention_scores=True)
    ref_out, ref_weights = reference(x, x, return_attention_scores=True)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref_out), atol=1e-5)
    np.testing.assert_allclose(np.asarray(weights), np.asarray(ref_weights), atol=1e-6)


def test_each_projection_gets_its_own_initial_values():
    layer = SelfAttention(num_heads=2, key_dim=4)
    layer.build((None, 3, 8))
    query, key, value = (np.asarray(d.kernel) for d in (layer.query_dense, layer.key_dense, layer.value_dense))
    assert not np.allclose(query, key) and not np.allclose(key, value)
