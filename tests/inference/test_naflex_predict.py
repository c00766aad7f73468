"""`predict` with a NaFlex model: image files of any shape read without a crop, each resized by the grid rule under the
model's budget (keras_vit.inference.naflex_runtime), equal to the model on the NumPy rule's patches."""

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from keras_vit.architecture.config import ViTConfig
from keras_vit.architecture.model import VisionTransformer
from keras_vit.inference import decoding
from keras_vit.inference.predictors import load_predictor, predict
from keras_vit.layers import naflex_grid
from export_helpers import assert_decided
from helpers import png_files, randomized

SIZES = ((48, 48), (45, 80), (90, 30))  # 1:1, 16:9, 1:3


def tiny(max_patches=None, grid_rule="timm"):
    config = ViTConfig(image_size=16, patch_size=4, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=3,
                       input_mode="naflex", max_patches=max_patches, pooling="gap", class_token=False,
                       grid_rule=grid_rule)
    model = VisionTransformer.from_vit_config(config)
    return randomized(model)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return png_files(tmp_path_factory.mktemp("shapes"), SIZES)


def expected(model, paths, budget, rule="timm"):
    """The NumPy grid rule ``rule`` (keras_vit.layers.naflex_grid) on the pixels of the files, resized by the one rule."""
    pixels = [np.asarray(Image.open(p).convert("RGB"), "float32") for p in paths]
    resized = [decoding.resize(tf.constant(p), naflex_grid.target_size(p.shape[:2], 4, budget, rule=rule)).numpy()
               for p in pixels]
    return np.asarray(model(naflex_grid.batch(resized, 4, budget)))


def test_predict_reads_each_image_at_its_own_aspect_ratio(files):
    model = tiny()
    results = predict(model, files, top_k=3, labels=["a", "b", "c"])
    got = np.array([[p["probability"] for p in sorted(r["predictions"], key=lambda p: p["index"])] for r in results])
    want = expected(model, files, 16)  # no max_patches: the native grid's 4 x 4 patches
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    # the grids differ by aspect ratio: the wide image has more columns than rows, the tall one more rows
    assert [naflex_grid.grid_for(s, 4, 16) for s in SIZES] == [(4, 4), (3, 5), (6, 2)]
    np.testing.assert_allclose(
        np.array([[p["probability"] for p in sorted(r["predictions"], key=lambda p: p["index"])]
                  for r in predict(model, files, top_k=3, max_patches=30)]),
        expected(model, files, 30), rtol=0, atol=1e-5)


def test_a_fixed_budget_is_the_model_s_own(files, tmp_path):
    model = tiny(max_patches=20)
    predictor = load_predictor(model)
    assert predictor.naflex == ((4, 4), 20)
    with pytest.raises(ValueError, match=r"max_patches=20 patches per image only\. Received: max_patches=16"):
        load_predictor(model, max_patches=16)
    path = str(tmp_path / "naflex.keras")
    model.save(path)
    (result,) = predict(path, files[2:], top_k=1)
    want = expected(model, files[2:], 20)[0]
    assert_decided(want[None], 1e-5)  # the top class is a verdict only where float32 round-off cannot swap it
    assert result["predictions"][0]["index"] == int(np.argmax(want))
    assert abs(result["predictions"][0]["probability"] - want.max()) <= 1e-5


def test_a_siglip2_rule_model_is_predicted_by_its_own_rule(files, tmp_path):
    """A model whose weights were trained under SigLIP 2's grid rule (grid_rule="siglip2", transformers' SigLIP 2
    NaFlex) gets its images cut by that rule: on 1:1, 16:9, 1:3 files (where the two rules' searches agree) and on a
    1 x 1,000,000 strip under a budget of 2, whose scale (~8e-6) timm's rule refuses and SigLIP 2's keeps (1 x 2
    patches). Before, predict refused the model; cut by timm's rule, the strip would fail."""
    model = tiny(grid_rule="siglip2")
    results = predict(model, files, top_k=3)
    got = np.array([[p["probability"] for p in sorted(r["predictions"], key=lambda p: p["index"])] for r in results])
    np.testing.assert_allclose(got, expected(model, files, 16, rule="siglip2"), rtol=0, atol=1e-5)
    strip = str(tmp_path / "strip.png")
    Image.fromarray(np.random.default_rng(2).integers(0, 255, (1, 1_000_000, 3), dtype=np.uint8)).save(strip)
    assert naflex_grid.grid_for((1, 1_000_000), 4, 2, rule="siglip2") == (1, 2)
    with pytest.raises(ValueError, match="No scale"):
        naflex_grid.grid_for((1, 1_000_000), 4, 2)  # timm's rule
    (result,) = predict(model, [strip], top_k=3, max_patches=2)
    got = np.array([p["probability"] for p in sorted(result["predictions"], key=lambda p: p["index"])])
    np.testing.assert_allclose(got, expected(model, [strip], 2, rule="siglip2")[0], rtol=0, atol=1e-5)
    path = str(tmp_path / "siglip2.keras")  # the rule read back from the saved model's config
    model.save(path)
    (result,) = predict(path, [strip], top_k=3, max_patches=2)
    got = np.array([p["probability"] for p in sorted(result["predictions"], key=lambda p: p["index"])])
    np.testing.assert_allclose(got, expected(model, [strip], 2, rule="siglip2")[0], rtol=0, atol=1e-5)


def test_an_unknown_grid_rule_is_refused_by_name():
    from types import SimpleNamespace

    from keras_vit.inference import naflex_runtime

    assert naflex_runtime.check_grid_rule(SimpleNamespace(grid_rule="siglip2"), "predict") == "siglip2"
    with pytest.raises(ValueError, match=r"predict cuts images by the model's NaFlex grid rule.*grid_rule='bogus'"):
        naflex_runtime.check_grid_rule(SimpleNamespace(grid_rule="bogus"), "predict")


def test_a_model_without_its_own_scaling_gets_scaled_pixels(files):
    """A NaFlex model built with include_preprocessing=False takes [-1, 1] patches, as the image models do; predict
    scales the [0, 255] pixels of each file for it (before, the NaFlex path fed them raw: a silent wrong answer)."""
    model = tiny()
    bare = VisionTransformer.from_vit_config(
        ViTConfig(**{**model.vit_config.to_dict(), "include_preprocessing": False}))
    bare.set_weights(model.get_weights())
    results = predict(bare, files, top_k=3)
    got = np.array([[p["probability"] for p in sorted(r["predictions"], key=lambda p: p["index"])] for r in results])
    np.testing.assert_allclose(got, expected(model, files, 16), rtol=0, atol=1e-5)
