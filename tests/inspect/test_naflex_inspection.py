"""The inspection tools that take images of one size refuse a NaFlex model by name (they failed inside: a float() of
a dict, an attribute its patch encoder lacks, a block re-run without its key mask); feature_model serves one. And
keras-vit resize records a NaFlex model's native size (it wrote the dict input's shapes as image_size)."""

import numpy as np
import pytest

import keras_vit
from keras_vit import cli, saving
from keras_vit.layers import naflex_grid

KW = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64, num_classes=3)


@pytest.fixture(scope="module")
def naflex():
    model = keras_vit.ViT(**KW, input_mode="naflex", max_patches=20)
    batch = naflex_grid.batch([np.random.default_rng(0).uniform(0, 255, (16, 40, 3)).astype("float32")], 8, 20)
    return model, batch


@pytest.mark.parametrize("call", [
    lambda m, b: keras_vit.attention_weights(m, b), lambda m, b: keras_vit.rollout_map(m, b),
    lambda m, b: keras_vit.mean_attention_distance(m, b), lambda m, b: keras_vit.position_embedding_similarity(m),
    lambda m, b: keras_vit.forward_features(m, b), lambda m, b: keras_vit.intermediates_model(m, indices=1),
    lambda m, b: keras_vit.forward_intermediates(m, b),
])
def test_one_size_inspection_refuses_a_naflex_model_by_name(naflex, call):
    model, batch = naflex
    with pytest.raises(ValueError, match=r"takes images of one size .* is a NaFlex model \(input_mode='naflex'"):
        call(model, batch)
    assert keras_vit.feature_model(model)(batch) is not None  # the way the message names


def test_resize_records_a_naflex_models_native_size(naflex, tmp_path):
    model, _ = naflex
    source, out = tmp_path / "nf.keras", tmp_path / "out.keras"
    saving.save_model(model, str(source), metadata={"class_names": ["a", "b", "c"], "image_size": 32})
    assert cli.main(["resize", str(source), "--patch-size", "4", "--output", str(out)]) == 0
    assert saving.read_metadata(str(out))["image_size"] == 32
