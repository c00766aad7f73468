"""Patch-size resampling of the patch-embedding kernel: FlexiViT's pseudo-inverse resize (Beyer et al., 2023).

A patch ``x`` of ``P x P`` pixels, resized to ``P' x P'``, is ``B x``, where ``B`` is the ``(P'^2, P^2)`` matrix of
the bilinear resize big_vision applies to images (``tf.image.resize(method="bilinear")``: half-pixel centres, no
antialiasing). A kernel ``w`` moves to the new patch size as the ``w'`` that gives the same token on the resized
patch, in the least-squares sense over all patches (Sec. 3.4 of the FlexiViT paper):
``w' = argmin ||<x, w> - <B x, w'>|| = pinv(B^T) w``. Growing the patch, ``B`` has full column rank and
``<B x, w'> = <x, w>`` for every patch (a test); shrinking it, ``w'`` is the least-squares solution. Each input
channel and output unit is resampled alike, in float64.
"""

import numpy as np


def bilinear_matrix(new, old):
    """``(new, old)``: ``tf.image.resize(method="bilinear")``'s resize along one axis (half-pixel centres, clamped
    edges, no antialiasing), as big_vision's ``resample_patchemb``.

    Example:
    >>> bilinear_matrix(4, 2).tolist()
    [[1.0, 0.0], [0.75, 0.25], [0.25, 0.75], [0.0, 1.0]]
    """
    rows = np.arange(new)
    source = np.clip((rows + 0.5) * (old / new) - 0.5, 0.0, old - 1.0)
    low = np.floor(source).astype(int)
    high = np.minimum(low + 1, old - 1)
    fraction = source - low
    matrix = np.zeros((new, old))
    np.add.at(matrix, (rows, low), 1.0 - fraction)
    np.add.at(matrix, (rows, high), fraction)
    return matrix


def resize_matrix(new_hw, old_hw):
    """``(nh * nw, oh * ow)``: the bilinear resize of a row-major flattened ``(oh, ow)`` patch to ``(nh, nw)``."""
    return np.kron(bilinear_matrix(new_hw[0], old_hw[0]), bilinear_matrix(new_hw[1], old_hw[1]))


def resample_patch_embedding(kernel, new_hw):
    """Resample a ``(ph, pw, C, D)`` patch-embedding kernel to ``new_hw`` by the pseudo-inverse resize, in
    ``kernel``'s dtype (``kernel`` itself when the size is the same).

    Example:
    >>> kernel = np.random.default_rng(0).normal(size=(2, 2, 1, 1))
    >>> patch = np.random.default_rng(1).normal(size=(2, 2))
    >>> bigger = resample_patch_embedding(kernel, (4, 4))
    >>> resized = (resize_matrix((4, 4), (2, 2)) @ patch.reshape(-1)).reshape(4, 4)
    >>> bool(np.isclose((resized * bigger[..., 0, 0]).sum(), (patch * kernel[..., 0, 0]).sum()))
    True
    """
    kernel = np.asarray(kernel)
    if kernel.ndim != 4:
        raise ValueError(f"Expected a patch-embedding kernel (ph, pw, channels, width). Received: shape={kernel.shape}")
    old_hw, new_hw = tuple(kernel.shape[:2]), tuple(int(v) for v in new_hw)
    if old_hw == new_hw:
        return kernel
    inverse = np.linalg.pinv(resize_matrix(new_hw, old_hw).T)  # (new cells, old cells)
    flat = kernel.reshape(old_hw[0] * old_hw[1], -1).astype(np.float64)
    return (inverse @ flat).reshape(new_hw + kernel.shape[2:]).astype(kernel.dtype)
