"""The attention tools on the ViT family: register and distillation tokens, no prefix positions, MAP pooling
without a class token, CLIP's pre-norm."""

import functools

import numpy as np
import pytest

import keras
import keras_vit
from helpers import images
from keras_vit.inspect import attention

SMALL = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=3)
FAMILY = {
    "registers_distillation": dict(distillation_token=True, num_register_tokens=3, layer_scale_init=0.1),
    "registers_distillation_no_prefix_positions": dict(distillation_token=True, num_register_tokens=2, prefix_positions=False),
    "map_no_class_token": dict(pooling="map", class_token=False, mlp_activation="gelu_tanh", include_top=False),
    "map_registers": dict(pooling="map", class_token=False, num_register_tokens=2, include_top=False),
    "clip_pre_norm": dict(pre_norm=True, projection_dim=8, mlp_activation="quick_gelu", include_top=False),
}


@functools.lru_cache(maxsize=None)
def family_model(row):
    """The tiny model of ``row``, built once per worker: the tests read it, none changes it."""
    model = keras_vit.build_model(keras_vit.ViTConfig(**SMALL, **FAMILY[row]))
    rng = np.random.default_rng(3)
    encoder = model.get_layer("patch_encoder")
    for variable in encoder.weights:  # tokens and positions far from their initial zeros, so that order matters
        variable.assign(rng.normal(size=variable.shape).astype("float32"))
    if model.vit_config.pre_norm:  # not the identity-like initial LayerNorm that the blocks' own norm would undo
        for variable in model.get_layer("pre_norm").weights:
            variable.assign(rng.normal(size=variable.shape).astype("float32"))
    return model


def _softmax(x):
    x = np.exp(x - x.max(-1, keepdims=True))
    return x / x.sum(-1, keepdims=True)


@pytest.mark.parametrize("row", sorted(FAMILY))
def test_attention_weights_are_each_blocks_softmax_over_every_token(row):
    model = family_model(row)
    config = model.vit_config
    x = images(2)
    weights = keras_vit.attention_weights(model, x)
    tokens = config.num_prefix_tokens + 16
    assert weights.shape == (2, 2, 4, tokens, tokens)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    # block 0's weights from its own input, the pre_norm's output where the model has one
    first = model.get_layer("transformer_block_0")
    inputs = np.asarray(keras.Model(model.input, first.input)(x))
    if config.pre_norm:
        raw = np.asarray(keras.Model(model.input, model.get_layer("patch_encoder").output)(x))
        assert not np.allclose(raw, inputs, atol=1e-3)
    y = np.asarray(first.norm1(inputs))
    dense = first.attention.query_dense, first.attention.key_dense
    q, k = (np.einsum("btc,che->bthe", y, np.asarray(d.kernel)) + np.asarray(d.bias) for d in dense)
    expected = _softmax(np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(8))
    np.testing.assert_allclose(weights[:, 0], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("row", sorted(FAMILY))
def test_rollout_map_reads_the_patch_tokens_only(row):
    model = family_model(row)
    config = model.vit_config
    image = images(1)[0]
    weights = keras_vit.attention_weights(model, image)
    rollout = keras_vit.attention_rollout(weights)
    prefix = config.num_prefix_tokens
    grid_map = keras_vit.rollout_map(model, image, weights=weights, size=(4, 4))  # on the patch grid: no resize
    if config.pooling in ("gap", "avg", "max", "map"):  # the rows of the tokens the pooling reads
        rows = rollout[0 if config.pool_include_prefix else prefix :]
    elif config.class_token:  # the class token's row, and the distillation token's (DeiT averages its two heads)
        rows = rollout[: 2 if config.distillation_token else 1]
    else:
        rows = rollout[prefix:]
    expected = rows[:, prefix:].mean(0)
    np.testing.assert_allclose(grid_map.sum(), 1.0 - rows[:, :prefix].sum(1).mean(), rtol=1e-5)  # rows sum to 1
    np.testing.assert_allclose(grid_map, expected.reshape(4, 4), rtol=1e-5, atol=1e-7)
    assert keras_vit.rollout_map(model, image, weights=weights).shape == (32, 32)


@pytest.mark.parametrize("row", sorted(FAMILY))
def test_mean_attention_distance_leaves_the_prefix_tokens_out(row):
    model = family_model(row)
    prefix = model.vit_config.num_prefix_tokens
    rng = np.random.default_rng(0)
    n = 16
    weights = rng.uniform(size=(1, 2, 4, prefix + n, prefix + n))  # anything on the prefix tokens' rows and columns
    weights[..., prefix:, prefix:] = 1.0  # uniform over the patches
    distance = keras_vit.mean_attention_distance(model, None, weights=weights)
    rows, cols = np.meshgrid(np.arange(4), np.arange(4), indexing="ij")
    centres = np.stack([rows.ravel() * 8 + 4, cols.ravel() * 8 + 4], -1)
    uniform = np.linalg.norm(centres[:, None] - centres[None], axis=-1).mean()
    np.testing.assert_allclose(distance, np.full((2, 4), uniform), rtol=1e-9)
    assert keras_vit.mean_attention_distance(model, images(2)).shape == (2, 4)


@pytest.mark.parametrize("row", sorted(FAMILY))
def test_position_embedding_similarity_is_of_the_patches_positions(row):
    model = family_model(row)
    config = model.vit_config
    stored = np.asarray(model.get_layer("patch_encoder").position_embedding)[0]
    assert stored.shape[0] == 16 + config.num_position_prefix  # registers never, prefix_positions=False: no prefix
    patches = stored[config.num_position_prefix :]
    unit = patches / np.linalg.norm(patches, axis=-1, keepdims=True)
    similarity = keras_vit.position_embedding_similarity(model)
    np.testing.assert_allclose(similarity, (unit @ unit.T).reshape(4, 4, 4, 4), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.einsum("ijij->ij", similarity), 1.0, atol=1e-6)


def test_attention_of_a_pre_norm_model_starts_after_the_pre_norm():
    """CLIP's ln_pre is part of the model: the attention model must not skip it (it started at patch_encoder)."""
    model = family_model("clip_pre_norm")
    x = images(1)
    weights = keras_vit.attention_weights(model, x)
    first = model.get_layer("transformer_block_0")
    inputs = keras.Model(model.input, first.input)(x)
    _, expected = first(inputs, return_attention_scores=True)
    np.testing.assert_allclose(weights[:, 0], np.asarray(expected), rtol=1e-4, atol=1e-6)
    assert attention.attention_model(model).get_layer("pre_norm") is model.get_layer("pre_norm")


def test_rope_models_attention_maps_and_intermediates():
    """A RoPE model (no position table) gives its attention weights and intermediates; the position-embedding
    similarity, which it has none of, is refused naming why."""
    from keras_vit.inspect import features

    model = keras_vit.ViT(image_size=(32, 48), patch_size=8, hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64,
                          num_classes=3, rope="mixed", position_embedding=False)
    x = np.random.default_rng(0).uniform(0, 255, (2, 32, 48, 3)).astype("float32")
    weights = attention.attention_weights(model, x)
    assert weights.shape == (2, 2, 2, 25, 25)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    _, maps = features.forward_intermediates(model, x, indices=[0, 1], output_fmt="NHWC")
    assert [m.shape for m in maps] == [(2, 4, 6, 32)] * 2
    with pytest.raises(ValueError, match="no learned position embeddings"):
        attention.position_embedding_similarity(model)


def test_rollout_map_of_a_batch_says_it_takes_one_image():
    """A batch used to be refused for the shape of attention weights, which the caller never passed."""
    model = family_model(sorted(FAMILY)[0])
    with pytest.raises(ValueError, match=r"rollout_map takes one image \(H, W, 3\); for a batch, call it once per "
                                         r"image\. Received: image of shape \(2, 32, 32, 3\)"):
        keras_vit.rollout_map(model, images(2))


def test_differential_attention_maps_are_given_and_the_analyses_of_distributions_refused():
    """A differential model's maps are softmax_1 - lambda softmax_2 (rows sum to 1 - lambda, entries of either sign):
    attention_weights returns them; rollout and mean distance, which renormalise rows as distributions, refuse."""
    model = keras_vit.ViT(**SMALL, differential_attention=True, layer_scale_init=0.1)
    layer = model.get_layer("transformer_block_1").attention
    x = images(1)
    weights = attention.attention_weights(model, x)
    assert weights.shape == (1, 2, 4, 17, 17)
    lam = float(keras.ops.convert_to_numpy(layer.differential_lambda()))
    np.testing.assert_allclose(weights[:, 1].sum(-1), 1.0 - lam, atol=1e-5)
    for call, name in ((lambda: keras_vit.rollout_map(model, x[0]), "rollout_map"),
                       (lambda: keras_vit.mean_attention_distance(model, x), "mean_attention_distance")):
        with pytest.raises(ValueError, match=rf"{name} reads attention rows as distributions.*differential attention"):
            call()
