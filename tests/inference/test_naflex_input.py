"""NaFlex's grid rule and patchification in TensorFlow ops (keras_vit.inference.naflex_input) equal to the NumPy ones
(keras_vit.layers.naflex_grid, which tools/check_timm_naflex.py holds equal to timm's)."""

import numpy as np
import pytest
import tensorflow as tf

from keras_vit.inference import decoding, naflex_input
from keras_vit.layers import naflex_grid


def test_target_size_equals_the_numpy_rule_on_random_sizes():
    rng = np.random.default_rng(0)
    for p in (4, 7, 16):  # one graph per patch size; heights, widths and budgets as tensors, element by element
        h, w, b = rng.integers(1, 2000, 400), rng.integers(1, 2000, 400), rng.integers(1, 1100, 400)
        h, w, b = (np.concatenate([v, extra]) for v, extra in zip((h, w, b), ([16, 1, 3000, 224, 100], [16, 4000, 2, 224, 200], [1, 8, 256, 196, 32])))
        got_h, got_w = naflex_input.target_size(tf.constant(h), tf.constant(w), p, tf.constant(b))
        expected = np.array([naflex_grid.target_size((int(x), int(y)), p, int(n)) for x, y, n in zip(h, w, b)])
        np.testing.assert_array_equal(np.stack([got_h.numpy(), got_w.numpy()], -1), expected)


def test_siglip2_target_size_equals_the_numpy_rule_on_random_sizes():
    """SigLIP 2's rule (the last feasible scale however small, no floor at 1e-5) in TensorFlow equals the NumPy one;
    the strips at the end are where timm's rule refuses (a scale under 1e-5) and SigLIP 2's gives a grid."""
    rng = np.random.default_rng(3)
    for p in (3, 8, 16):
        # 1 x w strips whose scale under budget n is about p * n / w, between 1e-6 and timm's floor 1e-5
        strips = ([1, 1, 2], [p * 2 * 125_000, p * 7 * 300_000, p * 40 * 500_000], [2, 7, 40])
        h, w, b = rng.integers(1, 3000, 400), rng.integers(1, 3000, 400), rng.integers(1, 1100, 400)
        h, w, b = (np.concatenate([v, extra]) for v, extra in zip((h, w, b), strips))
        got_h, got_w = naflex_input.target_size(tf.constant(h), tf.constant(w), p, tf.constant(b), rule="siglip2")
        expected = np.array([naflex_grid.target_size((int(x), int(y)), p, int(n), rule="siglip2")
                             for x, y, n in zip(h, w, b)])
        np.testing.assert_array_equal(np.stack([got_h.numpy(), got_w.numpy()], -1), expected)
        # the strips: timm's rule refuses them, in NumPy and in the graph, so the two rules are told apart here
        for x, y, n in zip(*strips):
            with pytest.raises(ValueError, match="No scale"):
                naflex_grid.target_size((x, y), p, n)
        with pytest.raises(tf.errors.InvalidArgumentError, match="No scale"):
            naflex_input.target_size(tf.constant(strips[0]), tf.constant(strips[1]), p, tf.constant(strips[2]))


def test_siglip2_target_size_past_the_budget_is_refused_in_the_graph():
    """A strip so long that SigLIP 2's last feasible scale is the search's start (1e-6, never tried) gets a grid past
    the budget: refused, as the NumPy rule refuses it, in a graph too."""
    with pytest.raises(ValueError, match="more than max_patches=1"):
        naflex_grid.target_size((1, 20_000_000), 4, 1, rule="siglip2")
    with pytest.raises(tf.errors.InvalidArgumentError, match="more than max_patches"):
        naflex_input.target_size(1, 20_000_000, 4, 1, rule="siglip2")
    fn = tf.function(lambda h, w, n: naflex_input.target_size(h, w, 4, n, rule="siglip2"))
    with pytest.raises(tf.errors.InvalidArgumentError, match="more than max_patches"):
        fn(tf.constant([16, 1]), tf.constant([16, 20_000_000]), tf.constant([4, 1]))
    assert tuple(int(v) for v in fn(tf.constant(16), tf.constant(16), tf.constant(4))) == (8, 8)


def test_an_unknown_rule_or_siglip2_with_oblong_patches_is_refused_by_name():
    with pytest.raises(ValueError, match="rule='bogus'"):
        naflex_input.target_size(16, 16, 4, 4, rule="bogus")
    with pytest.raises(ValueError, match=r"one square patch size.*patch_size=\(4, 8\)"):
        naflex_input.target_size(16, 16, (4, 8), 4, rule="siglip2")


def test_image_to_patches_by_siglip2_s_rule():
    """A strip timm's rule refuses: image_to_patches by SigLIP 2's rule resizes it to that rule's grid, then cuts."""
    image = np.random.default_rng(4).uniform(0, 255, (1, 1_000_000, 3)).astype("float32")
    size = naflex_grid.target_size(image.shape[:2], 4, 2, rule="siglip2")
    assert size == (4, 8)
    resized = decoding.resize(tf.constant(image), size).numpy()
    expected = naflex_grid.batch([resized], 4, 2)
    got = naflex_input.batch([image], 4, 2, rule="siglip2")
    for key in naflex_grid.KEYS:  # a resize traced in a graph against one run eagerly: as below
        np.testing.assert_allclose(got[key].astype("float64"), expected[key].astype("float64"), rtol=0, atol=1e-3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="No scale"):
        naflex_input.batch([image], 4, 2)  # timm's rule


def test_target_size_in_a_graph_with_a_fixed_budget():
    fn = tf.function(lambda h, w: naflex_input.target_size(h, w, (16, 8), 50))
    assert tuple(int(v) for v in fn(tf.constant(333), tf.constant(77))) == naflex_grid.target_size((333, 77), (16, 8), 50)


def test_patchify_equals_the_numpy_patchify():
    image = np.random.default_rng(1).uniform(0, 255, (12, 20, 3)).astype("float32")
    got = [t.numpy() for t in naflex_input.patchify(tf.constant(image), (4, 4), 17)]
    expected = naflex_grid.patchify(image, 4, 17)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)  # a copy of the pixels: equal to float32 rounding
    assert got[1].dtype == np.int32 and got[2].dtype == bool


def test_image_to_patches_resizes_by_the_one_rule_then_cuts():
    image = np.random.default_rng(2).uniform(0, 255, (37, 101, 3)).astype("float32")
    size = naflex_grid.target_size(image.shape[:2], 8, 24)
    resized = decoding.resize(tf.constant(image), size).numpy()
    expected = naflex_grid.batch([resized], 8, 24)
    got = naflex_input.batch([image], 8, 24)
    for key in naflex_grid.KEYS:
        # the resize traced in a graph and run eagerly round apart: measured 3.7e-4, ~24 float32 ulps of [128, 255]
        np.testing.assert_allclose(got[key].astype("float64"), expected[key].astype("float64"), rtol=0, atol=1e-3)
    assert int(got["patch_valid"].sum()) == size[0] // 8 * size[1] // 8


def test_an_image_of_too_many_patches_is_refused_in_the_graph():
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_patches"):
        naflex_input.patchify(tf.zeros((16, 16, 3)), 4, 4)
