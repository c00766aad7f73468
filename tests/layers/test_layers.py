import numpy as np
import pytest

import keras
import keras_vit
from helpers import run_layer_test
from keras_vit.layers import StochasticDepth, TokenPooling


def test_patches_order_matches_conv_kernel_layout():
    x = np.random.default_rng(0).normal(size=(2, 8, 12, 3)).astype("float32")
    out = np.asarray(keras_vit.Patches(4)(x))
    assert out.shape == (2, 6, 48)
    # patch (row 1, col 2) is the 5th+1 in row-major order, flattened as (row, col, channel)
    np.testing.assert_array_equal(out[1, 1 * 3 + 2], x[1, 4:8, 8:12, :].reshape(-1))
    run_layer_test(keras_vit.Patches((4, 4)), x)


def test_patches_rejects_indivisible_size():
    with pytest.raises(ValueError, match=r"divisible.*image_size=\(10, 12\), patch_size=\(4, 4\)"):
        keras_vit.Patches(4)(np.zeros((1, 10, 12, 3), "float32"))


def test_patch_encoder_is_eq1():
    layer = keras_vit.PatchEncoder(num_patches=6, hidden_size=8)
    x = np.random.default_rng(1).normal(size=(2, 6, 12)).astype("float32")
    out = np.asarray(run_layer_test(layer, x))
    assert out.shape == (2, 7, 8)
    kernel, bias = np.asarray(layer.projection.kernel), np.asarray(layer.projection.bias)
    pos, cls = np.asarray(layer.position_embedding)[0], np.asarray(layer.cls)[0, 0]
    np.testing.assert_allclose(out[:, 0], np.broadcast_to(cls + pos[0], (2, 8)), atol=1e-6)
    np.testing.assert_allclose(out[:, 1:], x @ kernel + bias + pos[1:], atol=1e-5)


def test_patch_encoder_without_class_token():
    layer = keras_vit.PatchEncoder(num_patches=6, hidden_size=8, class_token=False, dropout=0.1)
    assert run_layer_test(layer, np.zeros((1, 6, 12), "float32")).shape == (1, 6, 8)


def test_transformer_block_config_and_attention_scores():
    layer = keras_vit.TransformerBlock(num_heads=2, mlp_dim=16, dropout=0.1, attention_dropout=0.1, drop_path=0.1)
    x = np.random.default_rng(2).normal(size=(2, 5, 8)).astype("float32")
    run_layer_test(layer, x)
    out, scores = layer(x, return_attention_scores=True)
    assert scores.shape == (2, 2, 5, 5)
    np.testing.assert_allclose(np.asarray(scores).sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out), np.asarray(layer(x)), atol=1e-6)
    assert layer.norm1.epsilon == 1e-6


def test_transformer_block_validates_heads():
    with pytest.raises(ValueError, match="width=10, num_heads=4"):
        keras_vit.TransformerBlock(num_heads=4, mlp_dim=8)(np.zeros((1, 3, 10), "float32"))
    with pytest.raises(ValueError, match="dropout"):
        keras_vit.TransformerBlock(num_heads=4, mlp_dim=8, dropout=1.5)


def test_stochastic_depth_drops_whole_samples_and_is_identity_at_inference():
    layer = StochasticDepth(0.5, seed=1)
    x = np.ones((64, 3, 4), "float32")
    np.testing.assert_array_equal(np.asarray(layer(x)), x)  # inference returns its input: exact
    out = np.asarray(layer(x, training=True))
    per_sample = out.reshape(64, -1)
    # exact on purpose: 1 * mask / 0.5 with a 0/1 mask is exactly 0 or 2 (division by a power of two)
    assert set(np.unique(per_sample)) <= {0.0, 2.0}
    assert np.all(per_sample.min(1) == per_sample.max(1))
    assert 0 < (per_sample[:, 0] == 0).sum() < 64
    run_layer_test(StochasticDepth(0.2, seed=3), x)


def test_token_pooling():
    x = np.random.default_rng(3).normal(size=(2, 5, 4)).astype("float32")
    np.testing.assert_array_equal(np.asarray(run_layer_test(TokenPooling("token"), x)), x[:, 0])  # a slice: exact
    np.testing.assert_allclose(np.asarray(run_layer_test(TokenPooling("gap"), x)), x.mean(1), atol=1e-6)
    with pytest.raises(ValueError, match="mode='median'"):
        TokenPooling("median")


def test_no_lambda_layers_and_all_registered():
    from helpers import tiny_vit

    model = tiny_vit()
    for layer in model.layers:
        assert not isinstance(layer, keras.layers.Lambda)
        name = keras.saving.get_registered_name(type(layer))
        assert name.startswith(("keras_vit>",)) or type(layer).__module__.startswith("keras.")


@pytest.mark.parametrize(
    "patch_size, message",
    [
        (0, r"positive\. Received: patch_size=0"),
        (-4, r"positive\. Received: patch_size=-4"),
        ((4, 0), r"positive\. Received: patch_size=\(4, 0\)"),
        ("16", r"int or a pair of ints\. Received: patch_size='16'"),
        ((4, 4, 4), r"Received: patch_size=\(4, 4, 4\)"),
        (4.0, r"Received: patch_size=4\.0"),
    ],
)
def test_patches_rejects_bad_patch_sizes(patch_size, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.Patches(patch_size)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_heads=0, mlp_dim=8), r"positive integer\. Received: num_heads=0"),
        (dict(num_heads=-1, mlp_dim=8), r"num_heads=-1"),
        (dict(num_heads="4", mlp_dim=8), r"num_heads='4'"),
        (dict(num_heads=4, mlp_dim=0), r"mlp_dim=0"),
        (dict(num_heads=4, mlp_dim=8, drop_path=-0.1), r"drop_path=-0.1"),
    ],
)
def test_transformer_block_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.TransformerBlock(**kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [(dict(num_patches=0, hidden_size=8), r"num_patches=0"), (dict(num_patches=4, hidden_size=-8), r"hidden_size=-8")],
)
def test_patch_encoder_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.PatchEncoder(**kwargs)


def test_stateless_layers_are_built_when_created():
    # model.quantize() refuses unbuilt layers; the block's stochastic depth is only ever called inside its call
    assert keras_vit.Patches(4).built and TokenPooling("gap").built
    assert StochasticDepth(0.1).built and StochasticDepth(0.0).built
    block = keras_vit.TransformerBlock(num_heads=2, mlp_dim=8)
    block.build((None, 5, 8))
    attention = block.attention
    sublayers = [block.norm1, block.norm2, block.drop_path_layer, block.mlp_dropout, block.attention_dropout_layer,
                 block.mlp_dense_1, block.mlp_dense_2, attention, attention.dropout_layer, attention.query_dense,
                 attention.key_dense, attention.value_dense, attention.output_dense]
    assert all(layer.built for layer in sublayers)


def test_patches_patch_size_pair():
    assert keras_vit.Patches(4).patch_size_pair == (4, 4)
    assert keras_vit.Patches((2, 3)).patch_size_pair == (2, 3)


def test_transformer_block_returns_two_tensors_in_a_functional_model():
    inputs = keras.Input((5, 8))
    block = keras_vit.TransformerBlock(num_heads=2, mlp_dim=16)
    out, scores = block(inputs, return_attention_scores=True)
    assert out.shape == (None, 5, 8) and scores.shape == (None, 2, 5, 5)
    model = keras.Model(inputs, [out, scores])
    x = np.random.default_rng(4).normal(size=(3, 5, 8)).astype("float32")
    got_out, got_scores = model(x)
    expected_out, expected_scores = block(x, return_attention_scores=True)
    np.testing.assert_allclose(np.asarray(got_out), np.asarray(expected_out), atol=1e-6)
    np.testing.assert_allclose(np.asarray(got_scores), np.asarray(expected_scores), atol=1e-6)
