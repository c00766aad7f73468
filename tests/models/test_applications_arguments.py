"""The keras.applications spellings the builders take: classes, input_shape, pooling="avg"/"max" and the feature map."""

import inspect

import numpy as np
import pytest

import keras
from foreign_files import transformers_folder
from helpers import TINY, images, save_npz, vit_checkpoint

import keras_vit
from keras_vit.architecture.config import ViTConfig
from keras_vit.inspect import features
from keras_vit.weights import declared

SMALL = {k: v for k, v in TINY.items() if k != "image_size"}  # patch 8, width 32, 2 layers, 4 heads


def test_every_keras_applications_argument_is_a_builder_argument():
    applications = set(inspect.signature(keras.applications.ConvNeXtTiny).parameters)
    for builder in (keras_vit.ViT, keras_vit.ViTB16, keras_vit.HybridViT):
        assert applications <= set(inspect.signature(builder).parameters), builder.__name__


def test_classes_is_num_classes():
    model = keras_vit.ViT(image_size=32, classes=3, **SMALL)
    assert model.output_shape == (None, 3) and model.vit_config.num_classes == 3
    assert keras_vit.ViT(image_size=32, classes=3, num_classes=3, **SMALL).output_shape == (None, 3)  # the same: taken
    with pytest.raises(ValueError, match=r"Received: classes=3, num_classes=4"):
        keras_vit.ViT(image_size=32, classes=3, num_classes=4, **SMALL)
    with pytest.raises(ValueError, match=r"Received: classes=10, num_classes=1000"):
        keras_vit.ViTTi16(1000, classes=10)  # positional num_classes, as keras.applications' first argument is not


def test_input_shape_is_image_size():
    model = keras_vit.ViT(input_shape=(32, 48, 3), include_top=False, **SMALL)
    assert model.input_shape == (None, 32, 48, 3) and model.vit_config.image_size == (32, 48)
    assert keras_vit.ViT(input_shape=(32, 48, 3), image_size=(32, 48), **SMALL).vit_config.image_size == (32, 48)
    any_size = keras_vit.ViT(input_shape=(None, None, 3), native_image_size=32, **SMALL)
    assert any_size.input_shape == (None, None, None, 3) and any_size.vit_config.image_size is None
    with pytest.raises(ValueError, match=r"must be \(height, width, 3\)\. Received: input_shape=\(32, 32, 1\)"):
        keras_vit.ViT(input_shape=(32, 32, 1), **SMALL)
    with pytest.raises(ValueError, match=r"Received: input_shape=\(32, 32, 3\), image_size=48"):
        keras_vit.ViT(input_shape=(32, 32, 3), image_size=48, **SMALL)
    with pytest.raises(ValueError, match=r"Received: input_shape=\(0, 32, 3\)"):
        keras_vit.ViT(input_shape=(0, 32, 3), **SMALL)


def _tokens_and(pooling, **overrides):
    """The token sequence of a model and the output of the same weights with ``pooling`` (no top)."""
    tokens = keras_vit.ViT(image_size=(32, 48), include_top=False, pooling=None, **SMALL, **overrides)
    pooled = keras_vit.ViT(image_size=(32, 48), include_top=False, pooling=pooling, **SMALL, **overrides)
    pooled.set_weights(tokens.get_weights())  # the pooling reads no weights: the same list
    x = images(2, (32, 48), seed=4)
    return np.asarray(tokens(x), "float64"), np.asarray(pooled(x), "float64"), pooled


@pytest.mark.parametrize("overrides, prefix", [({}, 1), ({"num_register_tokens": 2}, 3)])
def test_avg_and_max_pool_the_patch_tokens_with_the_class_token_kept(overrides, prefix):
    tokens, mean, model = _tokens_and("avg", **overrides)
    assert model.vit_config.class_token and model.output_shape == (None, 32)
    np.testing.assert_allclose(mean, tokens[:, prefix:].mean(axis=1), atol=1e-5)
    tokens, peak, _ = _tokens_and("max", **overrides)
    np.testing.assert_allclose(peak, tokens[:, prefix:].max(axis=1), atol=1e-5)
    # the class token's vector is no patch's: the pooled vectors are not it
    assert np.abs(mean - tokens[:, 0]).max() > 1e-3 and np.abs(peak - tokens[:, 0]).max() > 1e-3


def test_feature_map_is_the_patch_tokens_on_their_grid(tmp_path):
    tokens, grid, model = _tokens_and("feature_map")
    assert model.output_shape == (None, 4, 6, 32)  # 32x48 in patches of 8
    np.testing.assert_allclose(grid, tokens[:, 1:].reshape(2, 4, 6, 32), atol=1e-6)
    assert "pooled" not in features.available_features(model)
    path = str(tmp_path / "map.keras")
    model.save(path)
    loaded = keras_vit.load_model(path)
    assert loaded.vit_config.pooling == "feature_map"
    np.testing.assert_allclose(loaded(images(2, (32, 48), seed=4)), grid, atol=1e-5)


def test_feature_map_of_an_any_size_model_follows_each_image():
    model = keras_vit.ViT(image_size=None, native_image_size=32, include_top=False, pooling="feature_map", **SMALL)
    assert model.output_shape == (None, None, None, 32)
    assert tuple(model(images(1, (48, 64))).shape) == (1, 6, 8, 32)
    assert tuple(model(images(1, (32, 32))).shape) == (1, 4, 4, 32)


def test_token_outputs_need_include_top_false():
    for pooling in (None, "feature_map"):
        with pytest.raises(ValueError, match=rf"pooling={pooling!r} returns tokens.*needs include_top=False"):
            keras_vit.ViT(image_size=32, pooling=pooling, **SMALL)
    with pytest.raises(ValueError, match=r"Unknown pooling type.*Received: pooling='mean'"):
        keras_vit.ViT(image_size=32, include_top=False, pooling="mean", **SMALL)
    with pytest.raises(ValueError, match=r"pooling='feature_map' has none"):
        ViTConfig(image_size=32, **SMALL, include_top=False, pooling="feature_map", projection_dim=8)


def test_a_variant_without_top_pooled_avg_is_still_the_variant():
    config = ViTConfig(include_top=False, pooling="avg", patch_size=16, hidden_size=192, num_layers=12, num_heads=3,
                       mlp_dim=768)
    assert config.variant == "Ti/16" and config.class_token  # its presets are looked up; the class token is loaded


def test_a_class_token_checkpoint_loads_into_avg_max_and_feature_map_models(tmp_path):
    folder = transformers_folder(tmp_path / "vit", vit_checkpoint())  # its config.json declares the class token
    classifier = keras_vit.ViT(image_size=32, weights=str(folder), include_top=False, **SMALL)  # the class token
    tokens = keras_vit.ViT(image_size=32, weights=str(folder), include_top=False, pooling=None, **SMALL)
    x = images(2, 32, seed=5)
    sequence = np.asarray(tokens(x), "float64")
    np.testing.assert_allclose(classifier(x), sequence[:, 0], atol=1e-5)
    mean = keras_vit.ViT(image_size=32, weights=str(folder), include_top=False, pooling="avg", **SMALL)
    np.testing.assert_allclose(mean(x), sequence[:, 1:].mean(axis=1), atol=1e-5)
    grid = keras_vit.from_pretrained(str(folder), include_top=False, pooling="feature_map")
    np.testing.assert_allclose(grid(x), sequence[:, 1:].reshape(2, 4, 4, 32), atol=1e-5)
    with pytest.raises(ValueError, match=r"trained with pooling='token'.*Received: pooling='avg'"):
        keras_vit.from_pretrained(str(folder), pooling="avg")  # its head reads the class token: kept with a head


def test_a_declared_pooling_is_compared_only_when_the_head_reads_it():
    record = declared.declare({}, "pooling", "token", "the class token", "config.json")
    base = dict(image_size=32, **SMALL)
    assert declared.mismatches(record, ViTConfig(**base, include_top=False, pooling="max")) == []
    assert declared.mismatches(record, ViTConfig(**base, include_top=False, pooling="feature_map")) == []
    assert declared.mismatches(record, ViTConfig(**base, include_top=True, pooling="avg"))  # a head on the mean: refused


def test_an_npz_checkpoint_loads_into_a_pooled_variant_shape(tmp_path):
    path = save_npz(tmp_path / "tiny.npz", vit_checkpoint(num_classes=5))
    model = keras_vit.ViT(image_size=32, weights=path, include_top=False, pooling="max", **SMALL)
    assert model.output_shape == (None, 32) and model.load_report is not None
