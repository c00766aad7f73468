"""resize_position_embedding with each framework's rule: timm's resample_abs_pos_embed (bicubic, antialias), the
interpolate_pos_encoding of transformers (bicubic, by size) and of DINOv2's original code (bicubic by
scale_factor), against the loops transcribed from torch's C++ (reference_resampling.py), in float64 (1e-12).
"""

import numpy as np
import pytest

from keras_vit.layers.resampling import RESAMPLING_METHODS
from keras_vit.weights import resize_position_embedding
from reference_resampling import torch_bicubic, torch_bicubic_antialias


def embeddings(prefix, grid, dim=4, seed=0):
    return np.random.default_rng(seed).normal(size=(1, prefix + grid[0] * grid[1], dim))


def resample_like_torch(posemb, prefix, old, new, reference, **kwargs):
    """timm's resample_abs_pos_embed / transformers' interpolate_pos_encoding, with ``reference`` as interpolate."""
    grid = posemb[0, prefix:].reshape(old + (-1,))
    out = np.stack([reference(grid[..., c], new, **kwargs) for c in range(grid.shape[-1])], axis=-1)
    return np.concatenate([posemb[:, :prefix], out.reshape(1, new[0] * new[1], -1)], axis=1)


@pytest.mark.parametrize("prefix", [0, 1, 5])  # no class token; a class token; class + 4 registers (timm's reg4)
@pytest.mark.parametrize("old, new", [((16, 16), (37, 37)), ((37, 37), (16, 16)), ((14, 14), (24, 20))])
def test_timm_rule_antialiased_bicubic(prefix, old, new):
    posemb = embeddings(prefix, old)
    got = resize_position_embedding(posemb, new, old, num_prefix_tokens=prefix, method="bicubic_torch_antialias")
    np.testing.assert_array_equal(got[:, :prefix], posemb[:, :prefix])  # copied, not computed
    np.testing.assert_allclose(got, resample_like_torch(posemb, prefix, old, new, torch_bicubic_antialias), atol=1e-12)


@pytest.mark.parametrize("old, new", [((16, 16), (37, 37)), ((37, 37), (16, 16)), ((16, 16), (8, 24))])
def test_transformers_rule_bicubic_by_size(old, new):
    posemb = embeddings(1, old, seed=1)
    got = resize_position_embedding(posemb, new, method="bicubic_torch")  # old grid inferred as a square
    np.testing.assert_allclose(got, resample_like_torch(posemb, 1, old, new, torch_bicubic), atol=1e-12)


def test_dinov2_original_rule_bicubic_by_scale_factor():
    """DINOv2's code (and transformers' Dinov2 before it passed a size): scale_factor=((h + 0.1) / M, (w + 0.1) / M)."""
    old, new = (37, 37), (16, 24)
    factors = tuple((n + 0.1) / 37 for n in new)
    posemb = embeddings(1, old, seed=2)
    got = resize_position_embedding(posemb, new, method="bicubic_torch", scale_factor=factors)
    expected = resample_like_torch(posemb, 1, old, new, torch_bicubic, scale_factor=factors)
    np.testing.assert_allclose(got, expected, atol=1e-12)
    by_size = resize_position_embedding(posemb, new, method="bicubic_torch")
    assert np.abs(got - by_size).max() > 1e-4  # the two transformers versions differ


@pytest.mark.parametrize("method", RESAMPLING_METHODS)
def test_the_same_grid_is_returned_unchanged(method):
    posemb = embeddings(1, (4, 4)).astype("float32")
    np.testing.assert_array_equal(resize_position_embedding(posemb, (4, 4), method=method), posemb)


@pytest.mark.parametrize("method", RESAMPLING_METHODS)
def test_the_dtype_is_kept(method):
    posemb = embeddings(1, (4, 4)).astype("float32")
    assert resize_position_embedding(posemb, (6, 3), method=method).dtype == np.float32


def test_the_default_is_still_the_aligned_linear_rule():
    posemb = embeddings(1, (4, 4))
    np.testing.assert_array_equal(resize_position_embedding(posemb, (6, 3)),
                                  resize_position_embedding(posemb, (6, 3), method="linear_aligned"))


def test_an_unknown_method_is_refused_even_for_the_same_grid():
    with pytest.raises(ValueError, match=r"Unknown resampling method 'bilinear'; expected one of 'linear_aligned'"):
        resize_position_embedding(embeddings(1, (4, 4)), (4, 4), method="bilinear")


def test_a_scale_factor_for_another_size_is_refused():
    with pytest.raises(ValueError, match=r"resizes 4 samples to floor\(4 \* 2\.0\) = 8 in torch, not 6"):
        resize_position_embedding(embeddings(1, (4, 4)), (6, 8), method="bicubic_torch", scale_factor=2.0)
