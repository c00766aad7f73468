"""NaFlex's grid rules (timm's get_image_size_for_seq, SigLIP 2's get_image_size_for_max_num_patches) and
patchification (timm's patchify_image + NaFlexCollator)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_vit.layers import naflex_grid


def test_grid_of_a_hand_derived_case():
    # 100 x 200, patches of 16, budget 32: at r = 0.64 the image is 64 x 128 = 4 x 8 = 32 patches; any larger r makes
    # ceil(100 r / 16) = 5 and ceil(200 r / 16) = 9: 45 patches
    assert naflex_grid.target_size((100, 200), 16, 32) == (64, 128)
    assert naflex_grid.grid_for((100, 200), 16, 32) == (4, 8)
    # a square at its own budget keeps its grid; a 1 x 1 budget gives one patch whatever the shape
    assert naflex_grid.grid_for((384, 384), 16, 576) == (24, 24)
    assert naflex_grid.grid_for((50, 900), 16, 1) == (1, 1)


def test_patchify_of_a_hand_derived_case():
    image = np.arange(4 * 6 * 2, dtype="float32").reshape(4, 6, 2)  # 2 x 3 patches of 2 x 2, two channels
    patches, coords, valid = naflex_grid.patchify(image, 2, max_patches=8)
    # patch (row 1, col 2) is image[2:4, 4:6], flattened (ph, pw, C) with the channel fastest
    np.testing.assert_array_equal(patches[5], image[2:4, 4:6].reshape(-1))
    assert coords[:6].tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    assert valid.tolist() == [True] * 6 + [False] * 2
    assert not patches[6:].any() and not coords[6:].any()


def test_patchify_pads_a_side_the_patches_do_not_divide():
    image = np.ones((3, 5, 1), np.float32)
    patches, coords, valid = naflex_grid.patchify(image, 2, max_patches=6)
    assert valid.sum() == 6 and coords[5].tolist() == [1, 2]
    np.testing.assert_array_equal(patches[5].reshape(2, 2), [[1, 0], [0, 0]])  # image[2, 4] and the zero padding


def test_bad_input_is_refused_by_name():
    with pytest.raises(ValueError, match="max_patches=0"):
        naflex_grid.grid_for((10, 10), 16, 0)
    with pytest.raises(ValueError, match="more than max_patches=2"):
        naflex_grid.patchify(np.zeros((32, 32, 3)), 16, 2)
    with pytest.raises(ValueError, match="image_size"):
        naflex_grid.grid_for((0, 10), 16, 4)


sizes = st.integers(min_value=1, max_value=4000)
patches = st.sampled_from([8, 14, 16, 32])
budgets = st.integers(min_value=1, max_value=2048)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(h=sizes, w=sizes, p=patches, budget=budgets)
def test_grid_fits_the_budget_and_no_larger_scale_does(h, w, p, budget):
    rows, cols = naflex_grid.grid_for((h, w), p, budget)
    assert rows >= 1 and cols >= 1 and rows * cols <= budget
    # the grid grows when r passes b = min(p * rows / h, p * cols / w); the largest feasible scale r* is below b + eps
    # (the search keeps a feasible scale within eps = 1e-5 of r*), so the grid at b + eps no longer fits
    b = min(p * rows / h, p * cols / w)
    r = (b + naflex_grid.SEARCH_EPS) * (1 + 1e-9)
    if r < 100:
        assert math.ceil(h * r / p) * math.ceil(w * r / p) > budget


@settings(max_examples=200, deadline=None, derandomize=True)
@given(h=sizes, w=sizes, p=patches, budget=st.integers(min_value=4, max_value=2048))
def test_grid_keeps_the_aspect_ratio_to_one_patch(h, w, p, budget):
    rows, cols = naflex_grid.grid_for((h, w), p, budget)
    ratio = naflex_grid.target_size((h, w), p, budget)[0] / (rows * p) if rows else 0  # exact multiples of p
    assert ratio == 1.0
    # each side is ceil(side * r / p) for one scale r: r lies in ((rows - 1) p / h, rows p / h] and the same for cols
    low = max((rows - 1) * p / h, (cols - 1) * p / w)
    high = min(rows * p / h if rows > 1 else math.inf, cols * p / w if cols > 1 else math.inf)
    assert low <= high * (1 + 1e-9)


@settings(max_examples=50, deadline=None, derandomize=True)
@given(rows=st.integers(1, 6), cols=st.integers(1, 6), extra=st.integers(0, 5), c=st.sampled_from([1, 3]))
def test_patchify_round_trips_the_image(rows, cols, extra, c):
    p = 4
    image = np.random.default_rng(rows * 7 + cols).normal(size=(rows * p, cols * p, c)).astype("float32")
    patches, coords, valid = naflex_grid.patchify(image, p, rows * cols + extra)
    rebuilt = np.zeros_like(image)
    for patch, (r, col) in zip(patches[valid], coords[valid]):
        rebuilt[r * p:(r + 1) * p, col * p:(col + 1) * p] = patch.reshape(p, p, c)
    np.testing.assert_array_equal(rebuilt, image)
    assert valid.sum() == rows * cols and not patches[~valid].any()


def test_batch_stacks_images_of_three_aspect_ratios():
    images = [np.ones((s[0] * 16, s[1] * 16, 3), np.float32) for s in ((4, 4), (3, 5), (8, 2))]
    inputs = naflex_grid.batch(images, 16, 16)
    assert [inputs[k].shape for k in naflex_grid.KEYS] == [(3, 16, 768), (3, 16, 2), (3, 16)]
    assert inputs["patch_valid"].sum(axis=1).tolist() == [16, 15, 16]


def siglip2_size(image_height, image_width, patch_size, max_num_patches, eps=1e-5):
    """transformers 5.24's get_image_size_for_max_num_patches (models/siglip2/image_processing_siglip2.py), as written."""

    def get_scaled_image_size(scale, size, patch_size):
        scaled_size = size * scale
        scaled_size = math.ceil(scaled_size / patch_size) * patch_size
        scaled_size = max(patch_size, scaled_size)
        return int(scaled_size)

    scale_min, scale_max = eps / 10, 100.0
    while (scale_max - scale_min) >= eps:
        scale = (scale_min + scale_max) / 2
        target_height = get_scaled_image_size(scale, image_height, patch_size)
        target_width = get_scaled_image_size(scale, image_width, patch_size)
        num_patches = (target_height / patch_size) * (target_width / patch_size)
        if num_patches <= max_num_patches:
            scale_min = scale
        else:
            scale_max = scale
    scale = scale_min
    return get_scaled_image_size(scale, image_height, patch_size), get_scaled_image_size(scale, image_width, patch_size)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(h=sizes, w=sizes, p=patches, budget=budgets)
def test_siglip2_rule_is_its_processors_search(h, w, p, budget):
    assert naflex_grid.target_size((h, w), p, budget, rule="siglip2") == siglip2_size(h, w, p, budget)


def test_the_rules_part_where_only_a_scale_under_eps_fits():
    # a 1 x 20,000,000 panorama: two patches of 16 fit only below r = 32 / 2e7 = 1.6e-6 < eps = 1e-5
    assert siglip2_size(1, 20_000_000, 16, 2) == (16, 32)
    assert naflex_grid.target_size((1, 20_000_000), 16, 2, rule="siglip2") == (16, 32)
    with pytest.raises(ValueError, match="timm's binary search fails the same way"):
        naflex_grid.target_size((1, 20_000_000), 16, 2, rule="timm")
    # under a budget of 1, SigLIP 2's search ends at its start (1e-6) and gives 2 patches: refused, not padded to -1
    assert siglip2_size(1, 20_000_000, 16, 1) == (16, 32)
    with pytest.raises(ValueError, match=r"SigLIP 2's grid rule gives an image of 1x20000000 a size of 16x32"):
        naflex_grid.target_size((1, 20_000_000), 16, 1, rule="siglip2")


def test_a_rule_is_refused_by_name_with_what_it_lacks():
    with pytest.raises(ValueError, match=r"Unknown NaFlex grid rule.*rule='clip'"):
        naflex_grid.grid_for((10, 10), 16, 4, rule="clip")
    with pytest.raises(ValueError, match="no max_ratio"):
        naflex_grid.target_size((10, 10), 16, 4, rule="siglip2", max_ratio=1.0)
    with pytest.raises(ValueError, match=r"one square patch size.*patch_size=\(16, 8\)"):
        naflex_grid.target_size((10, 10), (16, 8), 4, rule="siglip2")


def test_resize_to_budget_takes_the_rules_resize():
    image = np.random.default_rng(0).uniform(0, 255, (30, 50, 3)).astype("float32")
    import tensorflow as tf

    for rule, method in (("timm", "bicubic"), ("siglip2", "bilinear")):
        got = naflex_grid.resize_to_budget(image, 8, 12, rule=rule)
        want = tf.image.resize(image, naflex_grid.target_size((30, 50), 8, 12), method=method, antialias=True).numpy()
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
