"""A rectangular image size stated in a source's config builds that rectangle (issue 35, items 3 and 7): a 2 x 8
grid used to be built square (4 x 4, the table resampled) and a 2 x 6 grid refused as "not a square"."""

import numpy as np
import pytest

import keras_vit
from helpers import vit_checkpoint
from keras_vit.errors import CheckpointError

pytest.importorskip("safetensors.numpy")
from foreign_files import TINY_TIMM_CONFIG, timm_file, transformers_folder  # noqa: E402

TINY = dict(patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=5)


def _transformers(tmp_path, grid):
    size = [8 * grid[0], 8 * grid[1]]
    return transformers_folder(tmp_path / "vit", vit_checkpoint(grid=grid), image_size=size), tuple(size)


def _timm(tmp_path, grid):
    size = [8 * grid[0], 8 * grid[1]]
    config = dict(TINY_TIMM_CONFIG, num_classes=5, model_args=dict(TINY_TIMM_CONFIG["model_args"], img_size=size))
    return timm_file(tmp_path / "timm", vit_checkpoint(grid=grid), config), tuple(size)


@pytest.mark.parametrize("grid", [(2, 8), (2, 6)])
@pytest.mark.parametrize("writer", [_transformers, _timm])
def test_a_stated_rectangle_is_built_as_that_rectangle(tmp_path, writer, grid):
    path, size = writer(tmp_path, grid)
    model = keras_vit.from_pretrained(path, classifier_activation=None)
    assert model.vit_config.image_size == size and model.vit_config.grid == grid
    assert not model.load_report.resized  # nothing resampled: the weights are the model's own grid
    built = keras_vit.ViT(image_size=size, **TINY, classifier_activation=None, weights=path)
    x = np.random.default_rng(0).uniform(0, 255, (2, *size, 3)).astype("float32")
    np.testing.assert_allclose(np.asarray(model(x)), np.asarray(built(x)), rtol=0, atol=1e-5)


def test_a_stated_size_the_positions_do_not_fill_is_refused(tmp_path):
    path = transformers_folder(tmp_path / "vit", vit_checkpoint(grid=(2, 6)), image_size=[16, 40])
    with pytest.raises(CheckpointError, match=r"(2 x 5 grid of patches, but the weights have 12|16, 40)"):
        keras_vit.from_pretrained(path)


def test_a_stated_size_past_the_last_whole_patch_is_cropped_as_timm_does(tmp_path):
    """timm's So400m/14 at 384: its stride-14 convolution covers 378 pixels and drops 6; the model takes 384-pixel
    images (it used to be built for 378 and refuse the 384-pixel images its own config asks for)."""
    config = dict(TINY_TIMM_CONFIG, num_classes=5, model_args=dict(TINY_TIMM_CONFIG["model_args"], img_size=36))
    path = timm_file(tmp_path / "timm", vit_checkpoint(grid=(4, 4)), config)
    model = keras_vit.from_pretrained(path, classifier_activation=None)
    assert (model.vit_config.image_size, model.vit_config.grid, model.vit_config.crop_remainder) == ((36, 36), (4, 4), True)
    x = np.random.default_rng(0).uniform(0, 255, (2, 36, 36, 3)).astype("float32")
    whole = keras_vit.ViT(image_size=32, **TINY, classifier_activation=None, weights=path)
    np.testing.assert_allclose(np.asarray(model(x)), np.asarray(whole(x[:, :32, :32])), rtol=0, atol=1e-5)
    assert model.count_params() == whole.count_params()


def test_crop_remainder_is_refused_where_it_cannot_apply():
    with pytest.raises(ValueError, match=r"crop_remainder=True crops a fixed image size .* needs stem=None and an image_size"):
        keras_vit.ViT(image_size=None, crop_remainder=True, **TINY)
    with pytest.raises(ValueError, match=r"divisible by the patch size"):
        keras_vit.ViT(image_size=36, **TINY)  # without it, a size the patches do not divide is refused as before
    assert keras_vit.ViT(image_size=32, crop_remainder=True, **TINY).vit_config.crop_remainder is False  # nothing to crop
