"""2-D resampling of a grid of position embeddings: one formula for the model's graph and the checkpoint loader;
and of a patch-embedding kernel to another patch size (FlexiViT, :func:`resample_patch_embedding`).

Each framework resamples a checkpoint's grid of position embeddings its own way,
and a model reproduces a checkpoint's outputs at another resolution only with
the same rule. Every rule here is separable and linear, so it is written as a
matrix product, ``new = Mh @ grid @ Mw^T``, with ``M`` (``n x o``) the weights of
output sample ``i`` on input sample ``j``, selected by name
(:data:`RESAMPLING_METHODS`):

* ``"linear_aligned"`` (the default): the original code's
  ``scipy.ndimage.zoom(order=1)``, linear along each axis with the first and last
  samples aligned (``align_corners``). Output sample ``i`` sits at input
  coordinate ``i * (o - 1) / (n - 1)``:

      ``M[i, j] = max(0, 1 - |i * (o - 1) - j * (n - 1)| / (n - 1))``

  The numerator is an integer, so the weights are exact: at the same size ``M``
  is the identity bit for bit. It is also torch's
  ``F.interpolate(mode="bilinear", align_corners=True, antialias=False)`` (C-RADIO v3-B / H's position tables in
  timm's NaFlexVit, ``pos_embed_align_corners=True``): ``UpSample.h`` samples output ``i`` at
  ``i * (o - 1) / (n - 1)`` (0 for one output sample) between its two neighbours, the same triangle. torch rounds
  that coordinate in float32, ``(o - 1) / (n - 1)`` first and then times ``i`` (1e-5 off the exact one near 127);
  the per-token rows of a NaFlex model (:func:`sample_weights`) round it the same way, the matrix here is exact.
* ``"bilinear_torch"``: ``F.interpolate(mode="bilinear", align_corners=False, antialias=False)`` (C-RADIO's
  position tables in timm's NaFlexVit, ``pos_embed_antialias=False``): the triangle ``max(0, 1 - |x - j|)`` at
  ``x = s * (i + 0.5) - 0.5`` clamped to ``[0, o - 1]`` (``area_pixel_compute_source_index`` with ``cubic=false``
  floors it at 0, ``guard_index_and_lambda`` puts all the weight on the last sample past it), also when
  downsampling (no widening: samples between the taps are skipped); at the same size the copy torch makes.
* ``"bicubic_torch"``: ``torch.nn.functional.interpolate(mode="bicubic",
  align_corners=False)`` (transformers' ViT, DINOv2, CLIP ``interpolate_pos_encoding``):
  Keys' cubic convolution with ``A = -0.75`` at the source coordinate
  ``x = s * (i + 0.5) - 0.5`` (half-pixel centres, ``s = o / n``, or
  ``1 / scale_factor`` when torch is given a ``scale_factor``), taps beyond the
  border clamped onto the first or last sample (PyTorch's ``UpSample.h``,
  ``HelperInterpCubic::compute_indices_weights``).
* ``"bicubic_torch_antialias"``: the same call with ``antialias=True`` (timm's
  ``resample_abs_pos_embed``), which follows Pillow's ``ImagingResample``: Keys'
  kernel with ``A = -0.5`` centred on ``s * (i + 0.5)``, widened by ``s`` when
  downsampling, each row normalised to sum 1 (``HelperInterpBase::
  _compute_indices_min_size_weights_aa``, Pillow's ``precompute_coeffs``). It is also TensorFlow's
  ``tf.image.resize(method="bicubic", antialias=True)`` (``scale_and_translate_op.cc``, Keys' cubic), so
  keras-hub's DINOv2 with ``antialias_in_interpolation`` on the TensorFlow backend.
* ``"bilinear_torch_antialias"``: ``mode="bilinear", antialias=True`` (timm's SigLIP 2 NaFlex): the same with the
  triangle ``max(0, 1 - |x|)`` for Keys' kernel.
* ``"bicubic_tf"``: ``tf.image.resize(method="bicubic")`` without antialiasing, which ``keras.ops.image.resize``
  calls on TensorFlow (keras-hub's DINOv2 ``_interpolate_position_embeddings``): ``ResizeBicubic`` with
  half-pixel centres, Keys' kernel with ``A = -0.5`` at ``x = s * (i + 0.5) - 0.5``, the fraction of ``x``
  rounded to 1/1024 (its table of coefficients, ``resize_bicubic_op.cc`` ``GetWeightsAndIndices``), taps
  outside ``[0, old)`` given no weight and the row renormalised.

Every ``M`` is built dense, each weight from the distance between output ``i``
and input ``j`` with masks instead of windows, so the same function runs on
NumPy arrays (the loader, :func:`keras_vit.weights.resize_position_embedding`, in
float64) and on ``keras.ops`` tensors whose sizes are only known when the graph
runs (:class:`keras_vit.layers.PatchEncoder` of a model built with
``image_size=None``). At the same size every rule gives the identity exactly, as
torch copies the input.
"""

import math
import numbers

import keras
import numpy as np
from keras import ops

from keras_vit.errors import CheckpointError

RESAMPLING_METHODS = ("linear_aligned", "bicubic_torch", "bicubic_torch_antialias", "bicubic_tf", "bilinear_torch_antialias",
                      "bilinear_torch")
"""The names :func:`interpolation_matrix` and :func:`resize_grid` take as ``method``."""


def _cast(xp, value, dtype):
    return np.asarray(value, dtype) if xp is np else xp.cast(value, dtype)


def _is_number(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_method(method, scale_factor=None):
    """Refuse an unknown ``method``, or a ``scale_factor`` where the method has none, with the value at fault.

    Example:
    >>> check_method("bicubic")
    Traceback (most recent call last):
    ...
    ValueError: Unknown resampling method 'bicubic'; expected one of 'linear_aligned', 'bicubic_torch', 'bicubic_torch_antialias', 'bicubic_tf', 'bilinear_torch_antialias', 'bilinear_torch'.
    """
    if method not in RESAMPLING_METHODS:
        names = ", ".join(repr(name) for name in RESAMPLING_METHODS)
        raise ValueError(f"Unknown resampling method {method!r}; expected one of {names}.")
    if scale_factor is not None and method == "linear_aligned":
        raise ValueError(
            f"scale_factor={scale_factor!r} is given with method='linear_aligned', which aligns the corners "
            "and has no scale; it sets the sampling of the half-pixel methods ('bicubic_torch', "
            "'bicubic_torch_antialias')."
        )


def _source_scale(new, old, xp, dtype, scale_factor):
    """The source step ``s``: ``old / new``, or ``1 / scale_factor`` (``UpSample.h`` ``area_pixel_compute_scale``).

    torch's output size for a ``scale_factor`` is ``floor(old * scale_factor)``; a
    ``new`` and ``scale_factor`` known here that disagree are refused.
    """
    if scale_factor is None:
        return _cast(xp, old, dtype) / _cast(xp, new, dtype)
    if _is_number(scale_factor):
        if not (math.isfinite(scale_factor) and scale_factor > 0):
            raise ValueError(f"scale_factor must be a positive number, got {scale_factor!r}.")
        if _is_number(new) and int(new) != math.floor(old * scale_factor):
            raise ValueError(
                f"scale_factor={scale_factor!r} resizes {old} samples to floor({old} * {scale_factor!r}) = "
                f"{math.floor(old * scale_factor)} in torch, not {int(new)}."
            )
        return _cast(xp, 1.0 / scale_factor, dtype)  # the reciprocal in double, then cast, as torch
    return 1.0 / _cast(xp, scale_factor, dtype)


def _cubic(x, a, xp):
    """Keys' cubic convolution kernel of ``|x|`` (``UpSample.h`` ``cubic_convolution1/2``; Pillow ``bicubic_filter``)."""
    x = xp.abs(x)
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    far = ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    return xp.where(x < 1.0, near, xp.where(x < 2.0, far, xp.zeros_like(x)))


def _linear_aligned(new, old, xp, dtype):
    i = xp.expand_dims(xp.arange(new), 1)
    j = xp.expand_dims(xp.arange(old), 0)
    span = xp.maximum(new - 1, 1)  # one output sample sits on the first input sample
    distance = xp.abs(i * (old - 1) - j * span)  # integers: exact
    return xp.maximum(1.0 - _cast(xp, distance, dtype) / _cast(xp, span, dtype), 0.0)


def _bicubic_torch(new, old, xp, dtype, scale):
    """``antialias=False``: four taps around ``x = s * (i + 0.5) - 0.5``, those outside ``[0, old)`` clamped.

    The taps of output ``i`` are the integers ``k`` within 2 of ``x``; ``x`` lies in
    ``[-0.5, old)`` (``guard_index_and_lambda`` caps it at ``old``), so every tap is
    in ``[-2, old + 1]``. The weights over those ``old + 4`` positions are folded
    onto the ``old`` samples by a constant 0/1 matrix: positions ``-2`` and ``-1``
    onto sample 0, ``old`` and ``old + 1`` onto sample ``old - 1``.
    """
    i = _cast(xp, xp.arange(new), dtype)
    source = xp.minimum(scale * (i + 0.5) - 0.5, _cast(xp, old, dtype))
    taps = np.arange(-2, old + 2)
    distance = xp.expand_dims(_cast(xp, taps, dtype), 0) - xp.expand_dims(source, 1)
    fold = np.zeros((old + 4, old))
    fold[np.arange(old + 4), np.clip(taps, 0, old - 1)] = 1.0
    return xp.matmul(_cubic(distance, -0.75, xp), _cast(xp, fold, dtype))


def _triangle(x, xp):
    """torch's antialiased bilinear filter (``aa_filter`` of ``UpSampleKernel.cpp``): ``max(0, 1 - |x|)``."""
    return xp.maximum(1.0 - xp.abs(x), 0.0)


def _linear_torch(i, scale, old, xp, dtype):
    """``antialias=False, align_corners=False`` weights on ``old`` samples of output indices ``i`` (``i.shape + (old,)``):
    the triangle at ``s * (i + 0.5) - 0.5`` clamped to ``[0, old - 1]`` (``UpSample.h``
    ``compute_source_index_and_lambda``)."""
    source = xp.minimum(xp.maximum(scale * (i + 0.5) - 0.5, 0.0), _cast(xp, old - 1, dtype))
    return _triangle(_cast(xp, np.arange(old), dtype) - source, xp)


def sample_weights(index, new, old, xp=ops, dtype="float32", method="bicubic_torch_antialias"):
    """``index.shape + (old,)``: the weights of output samples ``index`` of ``old`` samples resampled to ``new``.

    One row of :func:`interpolation_matrix` per output index, for sizes that differ per sample (NaFlex: each image
    of a batch resamples the table to its own grid): ``index`` and ``new`` are tensors that broadcast together.
    ``"linear_aligned"``, the antialiased torch rules (``"bicubic_torch_antialias"``, ``"bilinear_torch_antialias"``) and ``"linear_torch"``
    (``F.interpolate(mode="linear", align_corners=False)``: the source ``x = s (i + 0.5) - 0.5`` clamped to
    ``[0, old - 1]``, timm's factorised NaFlex tables), whose weights along each axis are ``"bilinear_torch"``'s.

    Example:
    >>> sample_weights(np.array([0, 2]), np.array([3, 3]), 2, xp=np, method="linear_torch").tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    i = xp.expand_dims(_cast(xp, index, dtype), -1)
    scale = _cast(xp, old, dtype) / xp.expand_dims(_cast(xp, new, dtype), -1)
    j = _cast(xp, np.arange(old), dtype)
    if method == "linear_aligned":  # the matrix's triangle at i (o - 1) / (n - 1), in torch's order of rounding:
        # area_pixel_compute_scale's (o - 1) / (n - 1) first, then times i (C-RADIO v3's 128-sample tables)
        span = xp.maximum(xp.expand_dims(_cast(xp, new, dtype), -1) - 1.0, 1.0)
        return _triangle(j - _cast(xp, old - 1, dtype) / span * i, xp)
    if method in ("linear_torch", "bilinear_torch"):
        return _linear_torch(i, scale, old, xp, dtype)
    if method not in ("bicubic_torch_antialias", "bilinear_torch_antialias"):
        raise ValueError(f"sample_weights has 'linear_aligned', 'bicubic_torch_antialias', 'bilinear_torch_antialias', "
                         f"'bilinear_torch' and 'linear_torch'. Received: method={method!r}")
    inverse = 1.0 / xp.maximum(scale, _cast(xp, 1.0, dtype))
    distance = (j - scale * (i + 0.5) + 0.5) * inverse
    weights = _cubic(distance, -0.5, xp) if method == "bicubic_torch_antialias" else _triangle(distance, xp)
    total = xp.sum(weights, axis=-1, keepdims=True)
    return weights / xp.where(total != 0.0, total, xp.ones_like(total))


def _bicubic_torch_antialias(new, old, xp, dtype, scale):
    """``antialias=True``: ``A = -0.5`` around the centre ``s * (i + 0.5)``, stretched by ``max(s, 1)``, rows normalised.

    Pillow and torch sum the kernel over the window ``[trunc(c - 2m + 0.5),
    trunc(c + 2m + 0.5))`` (``m = max(s, 1)``) clipped to ``[0, old)``: every sample the
    kernel does not vanish on lies in it, so the dense sum over all ``old`` samples
    is the same.
    """
    i = _cast(xp, xp.arange(new), dtype)
    center = scale * (i + 0.5)
    inverse = 1.0 / xp.maximum(scale, _cast(xp, 1.0, dtype))
    j = xp.expand_dims(_cast(xp, np.arange(old), dtype), 0)
    weights = _cubic((j - xp.expand_dims(center, 1) + 0.5) * inverse, -0.5, xp)
    total = xp.sum(weights, axis=1, keepdims=True)
    return weights / xp.where(total != 0.0, total, xp.ones_like(total))  # an empty row stays zero, as in torch


def _bicubic_tf(new, old, xp, dtype, scale):
    """``tf.image.resize(method="bicubic")``: ``A = -0.5`` at ``x = s * (i + 0.5) - 0.5``, its fraction rounded to
    1/1024 (half to even, as ``lrintf``), the taps outside ``[0, old)`` dropped and each row renormalised."""
    i = _cast(xp, xp.arange(new), dtype)
    source = scale * (i + 0.5) - 0.5
    base = xp.floor(source)
    source = base + xp.round((source - base) * 1024.0) / 1024.0
    j = xp.expand_dims(_cast(xp, np.arange(old), dtype), 0)
    weights = _cubic(j - xp.expand_dims(source, 1), -0.5, xp)
    total = xp.sum(weights, axis=1, keepdims=True)
    return weights / xp.where(total != 0.0, total, xp.ones_like(total))


def interpolation_matrix(new, old, xp=ops, dtype="float32", method="linear_aligned", scale_factor=None):
    """``(new, old)`` weights that resample ``old`` samples to ``new`` by ``method`` (see the module docstring).

    Args:
        new: the output size (an int, or a scalar tensor when ``xp`` is ``keras.ops``).
        old: the input size (an int).
        xp: ``numpy`` or ``keras.ops``.
        dtype: the weights' dtype.
        method: one of :data:`RESAMPLING_METHODS`.
        scale_factor: for the torch methods, the ``scale_factor`` torch was called
            with instead of a size (the source step is then ``1 / scale_factor``,
            not ``old / new``); a number, or a scalar tensor with ``keras.ops``.

    Example:
    >>> interpolation_matrix(3, 2, xp=np).tolist()
    [[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]]
    >>> interpolation_matrix(4, 2, xp=np, dtype="float64", method="bicubic_torch").tolist()
    [[1.10546875, -0.10546875], [0.7734375, 0.2265625], [0.2265625, 0.7734375], [-0.10546875, 1.10546875]]
    >>> interpolation_matrix(2, 4, xp=np, dtype="float64", method="bicubic_torch_antialias").round(4).tolist()
    [[0.4587, 0.4587, 0.1198, -0.0372], [-0.0372, 0.1198, 0.4587, 0.4587]]
    """
    check_method(method, scale_factor)
    if method == "linear_aligned":
        return _linear_aligned(new, old, xp, dtype)
    scale = _source_scale(new, old, xp, dtype, scale_factor)
    if method == "bicubic_torch":
        return _bicubic_torch(new, old, xp, dtype, scale)
    if method == "bicubic_tf":
        return _bicubic_tf(new, old, xp, dtype, scale)
    if method == "bilinear_torch_antialias":
        return sample_weights(xp.arange(new), new, old, xp, dtype, method)
    if method == "bilinear_torch":  # torch copies at the same size, whatever its scale_factor (UpSample.h)
        scale = xp.where(_cast(xp, new, dtype) == _cast(xp, old, dtype), _cast(xp, 1.0, dtype), scale)
        return _linear_torch(xp.expand_dims(_cast(xp, xp.arange(new), dtype), 1), scale, old, xp, dtype)
    return _bicubic_torch_antialias(new, old, xp, dtype, scale)


def _pair(scale_factor):
    if scale_factor is None or not isinstance(scale_factor, (tuple, list)):
        return scale_factor, scale_factor
    if len(scale_factor) != 2:
        raise ValueError(f"scale_factor must be one number or (rows, cols), got {scale_factor!r}.")
    return tuple(scale_factor)


def resize_grid(grid, size, xp=ops, method="linear_aligned", scale_factor=None):
    """Resample ``(rows, cols, D)`` to ``(size[0], size[1], D)`` by ``method`` (see the module docstring).

    Args:
        grid: ``(rows, cols, D)`` with static ``rows`` and ``cols``.
        size: ``(new_rows, new_cols)``: ints, or scalar tensors known when the graph runs.
        xp: ``numpy`` or ``keras.ops``; the computation is in ``grid``'s dtype.
        method: one of :data:`RESAMPLING_METHODS`.
        scale_factor: for the torch methods, torch's ``scale_factor``: one number or ``(rows, cols)``.

    Example:
    >>> grid = np.array([[1.0, 2.0], [3.0, 4.0]])[..., None]
    >>> resize_grid(grid, (3, 3), xp=np)[..., 0].tolist()
    [[1.0, 1.5, 2.0], [2.0, 2.5, 3.0], [3.0, 3.5, 4.0]]
    >>> resize_grid(grid, (1, 1), xp=np, method="bicubic_torch")[..., 0].tolist()
    [[2.5]]
    """
    rows, cols = grid.shape[0], grid.shape[1]
    dtype = str(grid.dtype) if xp is np else keras.backend.standardize_dtype(grid.dtype)
    row_factor, col_factor = _pair(scale_factor)
    m_rows = interpolation_matrix(size[0], rows, xp, dtype, method=method, scale_factor=row_factor)
    m_cols = interpolation_matrix(size[1], cols, xp, dtype, method=method, scale_factor=col_factor)
    grid = xp.einsum("ih,hwd->iwd", m_rows, grid)
    return xp.einsum("jw,iwd->ijd", m_cols, grid)


def resize_position_embedding(posemb, new_grid, old_grid=None, num_prefix_tokens=1, method="linear_aligned",
                              scale_factor=None):
    """Resample a checkpoint's ``(1, prefix + gh*gw, D)`` position embeddings to ``new_grid`` in float64 by
    :func:`resize_grid` (Sec. 3.2 of the paper: fine-tuning at another resolution), the prefix (class token) positions
    kept; by default bilinearly with aligned corners, as ``scipy.ndimage.zoom(order=1)`` in the original code. The
    same grid returns the input unchanged (as timm, transformers and DINOv2 do). ``old_grid`` None: a square;
    ``method``: one of :data:`RESAMPLING_METHODS`; ``scale_factor``: for the torch
    methods, the ``scale_factor`` torch is called with instead of a size (one number or ``(rows, cols)``), as
    DINOv2's original code and older transformers do.

    Example:
    >>> posemb = np.arange(1 + 2 * 2, dtype="float32").reshape(1, 5, 1)  # class token 0, grid [[1, 2], [3, 4]]
    >>> resize_position_embedding(posemb, (3, 3))[0, :, 0].tolist()
    [0.0, 1.0, 1.5, 2.0, 2.0, 2.5, 3.0, 3.0, 3.5, 4.0]
    >>> resize_position_embedding(posemb, (1, 1), method="bicubic_torch")[0, :, 0].tolist()
    [0.0, 2.5]
    """
    check_method(method, scale_factor)
    posemb = np.asarray(posemb)
    prefix, grid = posemb[:, :num_prefix_tokens], posemb[0, num_prefix_tokens:]
    if old_grid is None:
        side = math.isqrt(grid.shape[0])
        if side * side != grid.shape[0]:
            raise CheckpointError(
                f"Cannot infer the position-embedding grid: {grid.shape[0]} positions is not a square. "
                "Pass old_grid=(rows, cols)."
            )
        old_grid = (side, side)
    gh, gw = old_grid
    nh, nw = new_grid
    grid = grid.reshape(gh, gw, -1).astype(np.float64)
    if (gh, gw) != (nh, nw):
        grid = resize_grid(grid, (nh, nw), xp=np, method=method, scale_factor=scale_factor)
    grid = grid.reshape(1, nh * nw, -1).astype(posemb.dtype)
    return np.concatenate([prefix, grid], axis=1)

# FlexiViT's pseudo-inverse resize (Beyer et al., 2023). A patch ``x`` of ``P x P`` pixels, resized to ``P' x P'``, is
# ``B x``, where ``B`` is the ``(P'^2, P^2)`` matrix of the bilinear resize big_vision applies to images
# (``tf.image.resize(method="bilinear")``: half-pixel centres, no antialiasing; the ``"bilinear_torch"`` rule above,
# bit for bit). A kernel ``w`` moves to the new patch size as the ``w'`` that gives the same token on the resized
# patch, in the least-squares sense over all patches (Sec. 3.4 of the FlexiViT paper):
# ``w' = argmin ||<x, w> - <B x, w'>|| = pinv(B^T) w``. Growing the patch, ``B`` has full column rank and
# ``<B x, w'> = <x, w>`` for every patch (a test); shrinking it, ``w'`` is the least-squares solution. Each input
# channel and output unit is resampled alike, in float64.


def resize_matrix(new_hw, old_hw):
    """``(nh * nw, oh * ow)``: the bilinear resize of a row-major flattened ``(oh, ow)`` patch to ``(nh, nw)``, float64."""
    rows, cols = (interpolation_matrix(n, o, np, "float64", method="bilinear_torch") for n, o in zip(new_hw, old_hw))
    return np.kron(rows, cols)


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
