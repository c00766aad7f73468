"""Independent NumPy references of torch's bicubic resampling, as loops over output pixels and their taps.

torch cannot be imported in the test environment, so these are transcribed from the C++ it runs, and share
no code with keras_vit.layers.resampling (which builds dense matrices instead of windows of taps):

* :func:`torch_bicubic`: ``F.interpolate(mode="bicubic", align_corners=False, antialias=False)`` on CPU:
  ``aten/src/ATen/native/UpSample.h`` (``area_pixel_compute_scale``, ``compute_scales_value``,
  ``area_pixel_compute_source_index`` with ``cubic=true``, ``guard_index_and_lambda``,
  ``get_cubic_upsample_coefficients`` from ``cubic_convolution1/2`` with ``A = -0.75``) and
  ``aten/src/ATen/native/cpu/UpSampleKernel.cpp`` (``HelperInterpCubic::compute_indices_weights``: taps
  ``index - 1 .. index + 2`` clamped to ``[0, size - 1]``; ``upsample_generic_Nd_kernel_impl`` sums the
  4 x 4 taps of each output pixel).
* :func:`torch_bicubic_antialias`: the same call with ``antialias=True``: ``UpSampleKernel.cpp``
  (``HelperInterpBase::_compute_indices_min_size_weights_aa`` with ``HelperInterpCubic::aa_filter``,
  ``A = -0.5``; ``separable_upsample_generic_Nd_kernel_impl``: the last axis first, then the other, an
  axis of the same size left as it is), itself taken from Pillow's ``src/libImaging/Resample.c``
  (``precompute_coeffs``, ``bicubic_filter``, ``ImagingResampleInner``).
* :func:`torch_bilinear`: ``F.interpolate(mode="bilinear", antialias=False)`` with ``align_corners`` False or True on
  CPU: ``UpSample.h`` (``area_pixel_compute_scale``: ``(in - 1) / (out - 1)`` aligned, 0 for one output sample;
  ``area_pixel_compute_source_index`` with ``cubic=false``: ``scale * i`` aligned, else ``scale * (i + 0.5) - 0.5``
  floored at 0; ``compute_source_index_and_lambda``: a copy at the same size, else ``guard_index_and_lambda`` and
  the second tap ``index + 1`` only below ``size - 1``) and ``UpSampleKernel.cpp`` (``HelperInterpLinear``: each
  output pixel the sum of its 2 x 2 taps).
"""

import math

import numpy as np


def _scale(input_size, output_size, scale_factor):
    """``area_pixel_compute_scale(align_corners=false)`` -> ``compute_scales_value``."""
    if scale_factor is not None and scale_factor > 0:
        return 1.0 / scale_factor
    return input_size / output_size


def _cubic_convolution1(x, a):
    return ((a + 2) * x - (a + 3)) * x * x + 1


def _cubic_convolution2(x, a):
    return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a


def _cubic_taps(input_size, output_size, scale_factor):
    """Per output index: ``[(input index, weight)] * 4`` (``HelperInterpCubic::compute_indices_weights``)."""
    scale = _scale(input_size, output_size, scale_factor)
    taps = []
    for i in range(output_size):
        real = scale * (i + 0.5) - 0.5  # area_pixel_compute_source_index, cubic: negative kept
        index = min(math.floor(real), input_size - 1)  # guard_index_and_lambda
        t = min(max(real - index, 0.0), 1.0)
        a = -0.75  # get_cubic_upsample_coefficients
        coeffs = [_cubic_convolution2(t + 1.0, a), _cubic_convolution1(t, a),
                  _cubic_convolution1(1.0 - t, a), _cubic_convolution2(2.0 - t, a)]
        taps.append([(max(min(index + j - 1, input_size - 1), 0), coeffs[j]) for j in range(4)])
    return taps


def torch_bicubic(image, size, scale_factor=(None, None)):
    """``(H, W)`` -> ``size``: each output pixel the sum of its 4 x 4 clamped taps."""
    rows = _cubic_taps(image.shape[0], size[0], scale_factor[0])
    cols = _cubic_taps(image.shape[1], size[1], scale_factor[1])
    out = np.zeros(size)
    for y in range(size[0]):
        for x in range(size[1]):
            out[y, x] = sum(wy * sum(wx * image[iy, ix] for ix, wx in cols[x]) for iy, wy in rows[y])
    return out


def _bicubic_filter(x):
    """Pillow's ``bicubic_filter`` (torch's ``HelperInterpCubic::aa_filter``): ``a = -0.5``."""
    a = -0.5
    x = abs(x)
    if x < 1.0:
        return _cubic_convolution1(x, a)
    if x < 2.0:
        return _cubic_convolution2(x, a)
    return 0.0


def _antialias_taps(input_size, output_size, scale_factor):
    """Per output index: ``(xmin, weights)`` (``_compute_indices_min_size_weights_aa``, Pillow ``precompute_coeffs``)."""
    scale = _scale(input_size, output_size, scale_factor)
    support = 2.0 * scale if scale >= 1.0 else 2.0  # interp_size * 0.5, times the scale when downsampling
    max_interp_size = math.ceil(support) * 2 + 1
    invscale = 1.0 / scale if scale >= 1.0 else 1.0
    taps = []
    for i in range(output_size):
        center = scale * (i + 0.5)
        xmin = max(int(center - support + 0.5), 0)  # C casts truncate toward zero, as int()
        xsize = min(int(center + support + 0.5), input_size) - xmin
        xsize = min(max(xsize, 0), max_interp_size)
        weights = [_bicubic_filter((j + xmin - center + 0.5) * invscale) for j in range(xsize)]
        total = sum(weights)
        if total != 0.0:
            weights = [w / total for w in weights]
        taps.append((xmin, weights))
    return taps


def _antialias_pass(image, output_size, scale_factor):
    """Resample the last axis of ``image`` (one of ``basic_loop_aa_horizontal`` / ``_vertical``)."""
    taps = _antialias_taps(image.shape[-1], output_size, scale_factor)
    out = np.zeros(image.shape[:-1] + (output_size,))
    for y in range(image.shape[0]):
        for x, (xmin, weights) in enumerate(taps):
            out[y, x] = sum(w * image[y, xmin + j] for j, w in enumerate(weights))
    return out


def torch_bicubic_antialias(image, size, scale_factor=(None, None)):
    """``(H, W)`` -> ``size``: the columns (last axis) first, then the rows; an axis of the same size is kept."""
    out = np.asarray(image, dtype=np.float64)
    if size[1] != out.shape[1]:
        out = _antialias_pass(out, size[1], scale_factor[1])
    if size[0] != out.shape[0]:
        out = _antialias_pass(out.T, size[0], scale_factor[0]).T
    return out


def _linear_taps(input_size, output_size, scale_factor, align_corners, real_type=float):
    """Per output index: ``[(input index, weight)] * 2`` (``compute_source_index_and_lambda``); ``real_type``
    ``np.float32``: the scale and the source coordinate rounded as torch's ``opmath_t`` of a float32 tensor."""
    if align_corners:
        scale = real_type(input_size - 1) / real_type(output_size - 1) if output_size > 1 else real_type(0.0)
    else:
        scale = real_type(_scale(input_size, output_size, scale_factor))
    taps = []
    for i in range(output_size):
        if output_size == input_size:  # "scale_factor = 1, simply copy"
            taps.append([(i, 1.0), (i, 0.0)])
            continue
        real = scale * real_type(i) if align_corners else max(scale * (real_type(i) + real_type(0.5)) - real_type(0.5), 0.0)
        index = min(math.floor(real), input_size - 1)  # guard_index_and_lambda
        lambda1 = float(min(max(real - real_type(index), 0.0), 1.0))
        second = index + (1 if index < input_size - 1 else 0)
        taps.append([(index, 1.0 - lambda1), (second, lambda1)])
    return taps


def torch_bilinear(image, size, scale_factor=(None, None), align_corners=False, real_type=float):
    """``(H, W)`` -> ``size``: each output pixel the sum of its 2 x 2 taps (their weights in ``real_type``)."""
    rows = _linear_taps(image.shape[0], size[0], scale_factor[0], align_corners, real_type)
    cols = _linear_taps(image.shape[1], size[1], scale_factor[1], align_corners, real_type)
    out = np.zeros(size)
    for y in range(size[0]):
        for x in range(size[1]):
            out[y, x] = sum(wy * sum(wx * image[iy, ix] for ix, wx in cols[x]) for iy, wy in rows[y])
    return out


def torch_bilinear_aligned(image, size):
    """:func:`torch_bilinear` with ``align_corners=True``."""
    return torch_bilinear(image, size, align_corners=True)
