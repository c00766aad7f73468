"""The rollout map follows the tokens the model's output reads: the class token, or the tokens a mean pools."""

import numpy as np

import keras
import keras_vit

BASE = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=3)


def test_a_gap_models_map_is_of_the_patch_tokens_its_mean_reads_not_of_its_class_token():
    """A GAP model with a class token drew the class token's map, which its head never reads."""
    keras.utils.set_random_seed(0)
    token = keras_vit.ViT(**BASE)
    gap = keras_vit.ViT(**BASE, pooling="gap", class_token=True)
    gap.set_weights(token.get_weights())
    image = np.random.default_rng(0).uniform(0, 255, (32, 32, 3)).astype("float32")
    weights = keras_vit.attention_weights(gap, image[None])[0]
    rollout = keras_vit.attention_rollout(weights)
    want = rollout[1:, 1:].mean(0).reshape(4, 4)
    np.testing.assert_allclose(keras_vit.rollout_map(gap, image, weights=weights, size=(4, 4)), want, atol=1e-6)
    token_map = keras_vit.rollout_map(token, image, weights=weights, size=(4, 4))
    np.testing.assert_allclose(token_map, rollout[0, 1:].reshape(4, 4), atol=1e-6)
    assert np.max(np.abs(token_map - want)) > 1e-3  # the two rows differ: the check tells them apart
