"""The TFLite export's formulation of the layers (keras_vit.layers.formulation) computes what Keras computes."""

import keras
import numpy as np
import pytest

from keras_vit.layers import SelfAttention, TokenPooling, formulation
from keras_vit.layers.pooling import AttentionPooling


def _both(fn):
    plain = keras.ops.convert_to_numpy(fn())
    with formulation.rank4():
        rank4 = keras.ops.convert_to_numpy(fn())
    return plain, rank4


def test_attention_and_its_weights():
    layer = SelfAttention(num_heads=4, key_dim=8)
    x = keras.random.normal((2, 5, 32), seed=0)
    out, weights = layer(x, return_attention_scores=True)
    with formulation.rank4():
        out4, weights4 = layer(x, return_attention_scores=True)
    np.testing.assert_allclose(out4, out, atol=1e-5)
    np.testing.assert_allclose(weights4, weights, atol=1e-6)


def test_attention_pooling():
    layer = AttentionPooling(num_heads=4, mlp_dim=16)
    x = keras.random.normal((2, 5, 32), seed=1)
    plain, rank4 = _both(lambda: layer(x))
    np.testing.assert_allclose(rank4, plain, atol=1e-5)


@pytest.mark.parametrize("mode", TokenPooling.MODES)
def test_token_pooling(mode):
    layer = TokenPooling(mode, num_prefix_tokens=2)
    x = keras.random.normal((2, 5, 8), seed=2)
    plain, rank4 = _both(lambda: layer(x))
    np.testing.assert_allclose(rank4, plain, atol=1e-6)


def test_norms_of_a_model_are_restored_after_the_trace():
    inputs = keras.Input((4, 4, 32))
    x = keras.layers.GroupNormalization(groups=4)(inputs)
    outputs = keras.layers.LayerNormalization()(keras.layers.Reshape((16, 32))(x))
    model = keras.Model(inputs, outputs)
    for weight in model.weights:
        weight.assign(keras.random.normal(weight.shape, seed=3))
    x = keras.random.normal((1, 4, 4, 32), seed=4)
    plain = keras.ops.convert_to_numpy(model(x))
    with formulation.rank4(model):
        assert all("call" in vars(layer) for layer in model.layers[1:] if "normalization" in layer.name)
        rank4 = keras.ops.convert_to_numpy(model(x))
    assert not any("call" in vars(layer) for layer in model.layers) and not formulation.active()
    np.testing.assert_allclose(rank4, plain, atol=1e-5)


@pytest.mark.parametrize("kind", ["axial", "mixed", "dinov3"])
def test_rope_attention_of_rank_4_and_through_separate_projections(kind):
    """RoPE (keras_vit.layers.rope) in the TFLite export's graph, and in the path of quantized projections (each
    projection called, the query and key de-interleaved by strided slices), computes what the fused graph computes."""
    rope = {"kind": kind, "grid": (2, 3), "num_prefix_tokens": 1, "grid_indexing": "ij"}
    layer = SelfAttention(num_heads=2, key_dim=8, rope=rope)
    x = keras.random.normal((2, 7, 16), seed=3)
    out, weights = layer(x, return_attention_scores=True)
    with formulation.rank4():
        out4, weights4 = layer(x, return_attention_scores=True)
    np.testing.assert_allclose(out4, out, atol=1e-5)
    np.testing.assert_allclose(weights4, weights, atol=1e-6)
    separate = layer._rotate(*layer._separate_projections(x)[:2], heads_first=False)
    fused = keras.ops.split(layer._fused_qkv_matmul(x), 3, axis=-1)[:2]
    fused = layer._rotate(*(keras.ops.reshape(t, (2, 7, 2, 8)) for t in fused), heads_first=False)
    for a, b in zip(separate, fused):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b), atol=1e-5)


def test_attention_inner_norm_of_rank_4_and_through_separate_projections():
    """The attention's inner LayerNorm (EVA-02 CLIP's sub-LN) normalises the joined heads before the output projection,
    alike in the fused graph, the TFLite export's and the path of quantized projections ((B, N, heads, hd) joined for
    the norm and split again)."""
    layer = SelfAttention(num_heads=2, key_dim=8, inner_norm_epsilon=1e-6)
    x = keras.random.normal((2, 5, 16), seed=5)
    layer(x)
    rng = np.random.default_rng(0)
    for weight in layer.inner_norm.weights:
        weight.assign(rng.normal(1.0 if weight.name == "gamma" else 0.0, 0.5, weight.shape).astype("float32"))
    plain, rank4 = _both(lambda: layer(x))
    np.testing.assert_allclose(rank4, plain, atol=1e-5)
    heads = rng.normal(size=(2, 5, 2, 8)).astype("float32")
    separate = keras.ops.convert_to_numpy(layer._output_projection(keras.ops.convert_to_tensor(heads), plain=False))
    joined = heads.reshape(2, 5, 16)
    normed = (joined - joined.mean(-1, keepdims=True)) / np.sqrt(joined.var(-1, keepdims=True) + 1e-6)
    normed = normed * keras.ops.convert_to_numpy(layer.inner_norm.gamma) + keras.ops.convert_to_numpy(layer.inner_norm.beta)
    kernel = keras.ops.convert_to_numpy(layer.output_dense.kernel).reshape(16, 16)
    want = normed @ kernel + keras.ops.convert_to_numpy(layer.output_dense.bias)
    np.testing.assert_allclose(separate, want, atol=1e-4)
    fused = keras.ops.convert_to_numpy(layer._output_projection(keras.ops.convert_to_tensor(joined), plain=True))
    np.testing.assert_allclose(fused, want, atol=1e-4)
