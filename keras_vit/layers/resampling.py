"""2-D resampling of a grid of position embeddings: one formula for the model's graph and the checkpoint loader.

The original code resamples position embeddings with
``scipy.ndimage.zoom(order=1)``: linear interpolation along each axis with the
first and last samples aligned (``align_corners``). Here it is written as a
matrix product, ``new = Mh @ grid @ Mw^T``, where row ``i`` of ``M`` (``n x o``)
interpolates output sample ``i`` at input coordinate ``i * (o - 1) / (n - 1)``:

    ``M[i, j] = max(0, 1 - |i * (o - 1) - j * (n - 1)| / (n - 1))``

The numerator is an integer, so the weights are exact: at the same size ``M``
is the identity bit for bit, and a dynamic-size model at its native size adds
exactly the stored embeddings. The same function runs on NumPy arrays (the
loader, :func:`keras_vit.weights.resize_position_embedding`, in float64) and on
``keras.ops`` tensors whose sizes are only known when the graph runs
(:class:`keras_vit.layers.PatchEncoder` of a model built with ``image_size=None``).
"""

import keras
import numpy as np
from keras import ops


def _cast(xp, value, dtype):
    return np.asarray(value, dtype) if xp is np else xp.cast(value, dtype)


def interpolation_matrix(new, old, xp=ops, dtype="float32"):
    """``(new, old)`` weights of aligned-corners linear interpolation from ``old`` samples to ``new``.

    Args:
        new: the output size (an int, or a scalar tensor when ``xp`` is ``keras.ops``).
        old: the input size (an int).
        xp: ``numpy`` or ``keras.ops``.
        dtype: the weights' dtype.

    Example:
    >>> interpolation_matrix(3, 2, xp=np).tolist()
    [[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]]
    """
    i = xp.expand_dims(xp.arange(new), 1)
    j = xp.expand_dims(xp.arange(old), 0)
    span = xp.maximum(new - 1, 1)  # one output sample sits on the first input sample
    distance = xp.abs(i * (old - 1) - j * span)  # integers: exact
    return xp.maximum(1.0 - _cast(xp, distance, dtype) / _cast(xp, span, dtype), 0.0)


def resize_grid(grid, size, xp=ops):
    """Resample ``(rows, cols, D)`` to ``(size[0], size[1], D)`` (see the module docstring).

    Args:
        grid: ``(rows, cols, D)`` with static ``rows`` and ``cols``.
        size: ``(new_rows, new_cols)``: ints, or scalar tensors known when the graph runs.
        xp: ``numpy`` or ``keras.ops``; the computation is in ``grid``'s dtype.

    Example:
    >>> grid = np.array([[1.0, 2.0], [3.0, 4.0]])[..., None]
    >>> resize_grid(grid, (3, 3), xp=np)[..., 0].tolist()
    [[1.0, 1.5, 2.0], [2.0, 2.5, 3.0], [3.0, 3.5, 4.0]]
    """
    rows, cols = grid.shape[0], grid.shape[1]
    dtype = str(grid.dtype) if xp is np else keras.backend.standardize_dtype(grid.dtype)
    m_rows = interpolation_matrix(size[0], rows, xp, dtype)
    m_cols = interpolation_matrix(size[1], cols, xp, dtype)
    grid = xp.einsum("ih,hwd->iwd", m_rows, grid)
    return xp.einsum("jw,iwd->ijd", m_cols, grid)
