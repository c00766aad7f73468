"""Position-embedding resampling (Sec. 3.2 of the paper): fine-tuning at another resolution, by the formula a model
built with ``image_size=None`` runs in its graph (:func:`keras_vit.layers.resampling.resize_grid`), here in float64.
"""

import math

import numpy as np

from keras_vit.errors import CheckpointError
from keras_vit.layers.resampling import check_method, resize_grid


def resize_position_embedding(posemb, new_grid, old_grid=None, num_prefix_tokens=1, method="linear_aligned",
                              scale_factor=None):
    """Resample ``(1, prefix + gh*gw, D)`` position embeddings to ``new_grid``, the prefix (class token) positions
    kept; by default bilinearly with aligned corners, as ``scipy.ndimage.zoom(order=1)`` in the original code. The
    same grid returns the input unchanged (as timm, transformers and DINOv2 do). ``old_grid`` None: a square;
    ``method``: one of :data:`keras_vit.layers.resampling.RESAMPLING_METHODS`; ``scale_factor``: for the torch
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
