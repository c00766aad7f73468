"""SelfAttention (fused QKV) computes what keras.layers.MultiHeadAttention computes, with the same weights."""

import numpy as np
import pytest

import keras
from keras_vit.layers import SelfAttention, TransformerBlock


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
    with pytest.raises(ValueError, match="value_dim=16"):
        SelfAttention(num_heads=4, key_dim=8, value_dim=16).build((1, 7, 32))


def test_block_still_returns_explicit_attention_weights():
    block = TransformerBlock(num_heads=4, mlp_dim=16)
    x = np.random.default_rng(2).normal(size=(2, 5, 8)).astype("float32")
    out, weights = block(x, return_attention_scores=True)
    assert isinstance(block.attention, SelfAttention)
    assert weights.shape == (2, 4, 5, 5)
    np.testing.assert_allclose(np.asarray(weights).sum(-1), 1.0, atol=1e-5)
