"""NaFlex's grid rule and patchification in TensorFlow ops: the same rule as :mod:`keras_vit.layers.naflex_grid`, in a graph.

A NaFlex model (``ViTConfig(input_mode="naflex")``) takes the dict ``{patches, patch_coord, patch_valid}`` of each
image at its own aspect ratio under a budget of ``max_patches`` patches. The training pipeline (``tf.data``), the
SavedModel's ``serving_bytes`` signature and ``keras-vit predict`` build that dict here, so an image gets the same
grid, pixels and patches on every path:

* :func:`target_size`: the model's grid rule (``ViTConfig.grid_rule``: timm's ``get_image_size_for_seq`` or SigLIP
  2's ``get_image_size_for_max_num_patches``, the binary search of :func:`keras_vit.layers.naflex_grid.target_size`)
  in float64 TensorFlow ops: the same IEEE arithmetic, so the same size for every image
  (``tests/inference/test_naflex_input.py`` checks both rules against the NumPy ones);
* :func:`patchify`: an image whose sides the patch size divides cut into ``(rows * cols, ph * pw * 3)`` patches
  (channels fastest within a patch, as :func:`keras_vit.layers.naflex_grid.patchify`), padded to the budget with
  zero patches, coordinates ``(0, 0)`` and ``False``;
* :func:`image_to_patches`: resized to :func:`target_size` by the one resize rule
  (:func:`keras_vit.inference.decoding.resize`, bilinear with antialiasing, as every other path resizes), then
  :func:`patchify`;
* :func:`batch`: a list of images of any sizes as the model's input dict (NumPy), for ``predict`` and the exports'
  verification.

Example:
>>> import tensorflow as tf
>>> [int(v) for v in target_size(100, 200, (16, 16), 32)]  # as keras_vit.layers.naflex_grid.grid_for: 4 x 8 patches
[64, 128]
>>> [int(v) for v in target_size(1, 1_000_000, 4, 2, rule="siglip2")]  # a scale under 1e-5: timm's rule refuses it
[4, 8]
>>> parts = image_to_patches(tf.zeros((30, 90, 3)), (8, 8), 12)
>>> [tuple(part.shape) for part in parts], int(tf.reduce_sum(tf.cast(parts[2], tf.int32)))
([(12, 192), (12, 2), (12,)], 12)
"""

import numpy as np

from keras_vit.inference import decoding
from keras_vit.layers.naflex_grid import KEYS, SEARCH_EPS, _budget, _patch_pair, grid_rule


def target_size(height, width, patch_size, max_patches, eps=SEARCH_EPS, *, rule="timm"):
    """``(height, width)`` int32 an image of ``height x width`` is resized to under the budget by ``rule`` (in a graph).

    The binary search of :func:`keras_vit.layers.naflex_grid.target_size` of ``rule`` (``"timm"``: timm's
    ``get_image_size_for_seq``; ``"siglip2"``: SigLIP 2's ``get_image_size_for_max_num_patches``, the last feasible
    scale however small) in float64 ops, element by element: ``height``, ``width`` and ``max_patches`` (an int, or a
    tensor: a budget drawn per batch) broadcast together. An image the search cannot fit (timm: no scale over
    ``eps``; SigLIP 2: a grid past the budget) fails with ``InvalidArgumentError``.
    """
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends

    ph, pw = _patch_pair(patch_size)
    strict = grid_rule(rule).strict
    if not strict and ph != pw:
        raise ValueError(f"SigLIP 2's grid rule takes one square patch size (its processor has one). "
                         f"Received: rule={rule!r}, patch_size={(ph, pw)}")
    if isinstance(max_patches, (int, np.integer)):
        _budget(max_patches)
    budget = tf.cast(max_patches, tf.float64)
    h = tf.cast(height, tf.float64)
    w = tf.cast(width, tf.float64)

    def prepare(ratio):  # timm's prepare_target_hw(divisible_by_patch=True): Python's float arithmetic, in float64
        t_h = tf.maximum(ph * tf.math.ceil(h * ratio / ph), float(ph))
        t_w = tf.maximum(pw * tf.math.ceil(w * ratio / pw), float(pw))
        return t_h, t_w

    def body(lb, rb):  # each element's own search: its interval narrows until it is narrower than eps
        mid = (lb + rb) / 2.0
        t_h, t_w = prepare(mid)
        fits = tf.math.floordiv(t_h, float(ph)) * tf.math.floordiv(t_w, float(pw)) <= budget
        active = (rb - lb) >= eps
        return tf.where(active & fits, mid, lb), tf.where(active & ~fits, mid, rb)

    shape = tf.shape(h * w * budget)
    start = (tf.fill(shape, tf.constant(eps / 10.0, tf.float64)), tf.fill(shape, tf.constant(100.0, tf.float64)))
    lb, _ = tf.while_loop(lambda lb, rb: tf.reduce_any((rb - lb) >= eps), body, start)
    if strict:  # timm: a search that ends at a scale <= eps (or at 100) fails
        message = f"No scale fits the image into max_patches patches of {ph}x{pw}. Received: (height, width) ="
        check = tf.debugging.Assert(tf.reduce_all((lb > eps) & (lb < 100.0)), [message, height, width])
        with tf.control_dependencies([check]):
            t_h, t_w = prepare(lb)
    else:  # SigLIP 2: the last feasible scale, however small; its grid checked against the budget here
        t_h, t_w = prepare(lb)
        fits = tf.math.floordiv(t_h, float(ph)) * tf.math.floordiv(t_w, float(pw)) <= budget
        message = (f"SigLIP 2's grid rule gives the image more than max_patches patches of {ph}x{pw} (its processor "
                   f"would write a sequence past the budget). Received: (height, width), max_patches =")
        check = tf.debugging.Assert(tf.reduce_all(fits), [message, height, width, max_patches])
        with tf.control_dependencies([check]):
            t_h, t_w = tf.identity(t_h), tf.identity(t_w)
    return tf.cast(t_h, tf.int32), tf.cast(t_w, tf.int32)


def patchify(image, patch_size, max_patches):
    """``(patches, coords, valid)`` of one image ``(H, W, C)`` whose sides the patch size divides, padded to the budget.

    ``patches`` ``(max_patches, ph * pw * C)`` float32 (as the image's dtype is cast), ``coords``
    ``(max_patches, 2)`` int32 ``(row, col)``, ``valid`` ``(max_patches,)`` bool: the patches of
    :func:`keras_vit.layers.naflex_grid.patchify`. An image of more patches than the budget fails with
    ``InvalidArgumentError``.
    """
    import tensorflow as tf  # deferred: TensorFlow, as above

    ph, pw = _patch_pair(patch_size)
    static = isinstance(max_patches, (int, np.integer))
    budget = _budget(max_patches) if static else tf.cast(max_patches, tf.int32)
    image = tf.cast(image, tf.float32)
    shape = tf.shape(image)
    rows, cols, channels = shape[0] // ph, shape[1] // pw, image.shape[-1]
    if channels is None:
        raise ValueError(f"patchify needs the image's number of channels. Received: shape {image.shape}")
    count = rows * cols
    message = f"The image's patches of {ph}x{pw} must divide it and number at most max_patches. Received: shape, max_patches ="
    check = tf.debugging.Assert(
        tf.logical_and(tf.logical_and(shape[0] % ph == 0, shape[1] % pw == 0), count <= budget), [message, shape, budget])
    with tf.control_dependencies([check]):
        cut = tf.reshape(image, (rows, ph, cols, pw, channels))
    cut = tf.reshape(tf.transpose(cut, (0, 2, 1, 3, 4)), (count, ph * pw * channels))
    patches = tf.pad(cut, [[0, budget - count], [0, 0]])
    index = tf.range(budget)
    valid = index < count
    coords = tf.where(valid[:, None], tf.stack([index // cols, index % cols], axis=-1), 0)
    n = budget if static else None
    patches = tf.ensure_shape(patches, (n, ph * pw * channels))
    return patches, tf.ensure_shape(tf.cast(coords, tf.int32), (n, 2)), tf.ensure_shape(valid, (n,))


def resize_to_budget(image, patch_size, max_patches, rule="timm"):
    """``image`` ``(H, W, C)`` as float32 resized to :func:`target_size` of ``rule`` by the one resize rule (unchanged
    at that size)."""
    import tensorflow as tf  # deferred: TensorFlow, as above

    shape = tf.shape(image)
    size = target_size(shape[0], shape[1], patch_size, max_patches, rule=rule)
    same = tf.logical_and(tf.equal(size[0], shape[0]), tf.equal(size[1], shape[1]))
    resized = tf.cond(same, lambda: tf.cast(image, tf.float32), lambda: decoding.resize(image, size))
    return tf.ensure_shape(resized, (None, None, image.shape[-1]))


def image_to_patches(image, patch_size, max_patches, rule="timm"):
    """One image of any size ``(H, W, 3)`` to its ``(patches, coords, valid)`` under the budget: resized by the grid
    rule ``rule`` (a key of :data:`keras_vit.layers.naflex_grid.GRID_RULES`), then cut."""
    return patchify(resize_to_budget(image, patch_size, max_patches, rule), patch_size, max_patches)


def as_dict(parts):
    """``(patches, coords, valid)`` as the model's input dict (:data:`keras_vit.layers.naflex_grid.KEYS`)."""
    return dict(zip(KEYS, parts))


_EAGER = {}


def _eager(patch_size, max_patches, rule):
    import tensorflow as tf  # deferred: TensorFlow, as above

    key = (_patch_pair(patch_size), _budget(max_patches), grid_rule(rule).name)
    if key not in _EAGER:
        _EAGER[key] = tf.function(lambda image: image_to_patches(image, *key), reduce_retracing=True)
    return _EAGER[key]


def batch(images, patch_size, max_patches, rule="timm"):
    """The NaFlex input dict (NumPy) of a list of images ``(H, W, 3)`` of any sizes, each resized under the budget by
    the grid rule ``rule`` (``"timm"`` or ``"siglip2"``: the model's ``ViTConfig.grid_rule``).

    Example:
    >>> parts = batch([np.zeros((20, 20, 3)), np.zeros((10, 40, 3))], 4, 16)
    >>> parts["patches"].shape, parts["patch_valid"].sum(axis=1).tolist()
    ((2, 16, 48), [16, 16])
    """
    if not len(images):
        raise ValueError("batch takes at least one image. Received: no images")
    run = _eager(patch_size, max_patches, rule)
    parts = [[t.numpy() for t in run(np.asarray(image, np.float32))] for image in images]
    return {key: np.stack([part[i] for part in parts]) for i, key in enumerate(KEYS)}
