"""NaFlex's grid rule and patchification: an image at its own aspect ratio under a budget of patches (NumPy, no torch).

A NaFlex model (SigLIP 2's NaFlex, timm's ``naflexvit.py``) does not squash or crop an image to a square: it scales it,
keeping its aspect ratio, to the largest size whose patch grid fits a budget of ``max_patches`` patches, cuts it into
patches, and pads the sequence to the budget with a mask. The rule is timm 1.0.31's ``get_image_size_for_seq``
(``timm/data/naflex_transforms.py``, used by ``ResizeToSequence`` and ``RandomResizedCropToSequence``): a binary
search over the scale ``r`` in ``[1e-6, 100]`` until the interval is narrower than ``eps = 1e-5``, where ``r`` is
feasible when ``ceil(h * r / ph) * ceil(w * r / pw) <= max_patches`` (each side at least one patch); the last
feasible ``r`` gives the size ``(ph * ceil(h * r / ph), pw * ceil(w * r / pw))``. The same Python float arithmetic is
run here, so the grid is timm's for every image size (``tools/check_timm_naflex.py`` compares them).

:func:`patchify` is timm's ``patchify_image`` (channels last within a patch: ``(ph, pw, C)`` flattened, the channel
fastest) and ``NaFlexCollator``'s padding: patches ``(N, ph * pw * C)``, coordinates ``(N, 2)`` as ``(row, col)``, a
validity mask ``(N,)``; rows past the image's patches are zeros, coordinates ``(0, 0)``, invalid. That is the dict a
NaFlex keras_vit model takes (``input_mode="naflex"``), as timm's ``NaFlexVit`` takes it.

Example:
>>> grid_for((100, 200), 16, 32)  # 100 x 200 scaled by 0.64: 64 x 128 pixels, 4 x 8 patches
(4, 8)
>>> image = np.arange(32 * 48 * 3, dtype="float32").reshape(32, 48, 3)
>>> patches, coords, valid = patchify(image, 16, max_patches=8)
>>> patches.shape, coords[:7].tolist(), valid.tolist()
((8, 768), [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2], [0, 0]], [True, True, True, True, True, True, False, False])
"""

import math
import numbers

import numpy as np

SEARCH_EPS = 1e-5  # timm's get_image_size_for_seq default
KEYS = ("patches", "patch_coord", "patch_valid")  # the dict a NaFlex model takes (timm's names)


def _patch_pair(patch_size):
    if isinstance(patch_size, numbers.Integral) and not isinstance(patch_size, bool):
        patch_size = (patch_size, patch_size)
    if (not isinstance(patch_size, (tuple, list)) or len(patch_size) != 2
            or not all(isinstance(p, numbers.Integral) and not isinstance(p, bool) and p > 0 for p in patch_size)):
        raise ValueError(f"`patch_size` must be a positive int or (ph, pw). Received: patch_size={patch_size!r}")
    return int(patch_size[0]), int(patch_size[1])


def _budget(max_patches):
    if isinstance(max_patches, bool) or not isinstance(max_patches, numbers.Integral) or max_patches < 1:
        raise ValueError(f"`max_patches` must be a positive int. Received: max_patches={max_patches!r}")
    return int(max_patches)


def _image_size(image_size):
    if (not isinstance(image_size, (tuple, list)) or len(image_size) != 2
            or not all(isinstance(n, numbers.Integral) and not isinstance(n, bool) and n > 0 for n in image_size)):
        raise ValueError(f"`image_size` must be (height, width) of positive ints. Received: image_size={image_size!r}")
    return int(image_size[0]), int(image_size[1])


def target_size(image_size, patch_size, max_patches, *, max_ratio=None, eps=SEARCH_EPS):
    """``(height, width)`` in pixels an image of ``image_size`` is resized to under the budget (timm's ``target_hw``).

    Args:
        image_size: ``(height, width)`` of the image.
        patch_size: an int or ``(ph, pw)``.
        max_patches: the budget of patches (timm's ``max_seq_len``).
        max_ratio: None, or a cap on the scale (timm's ``max_ratio``: no upsampling past it).
        eps: the binary search's width (timm's ``eps``).

    Returns:
        ``(height, width)``, multiples of the patch size whose grid holds at most ``max_patches`` patches.

    Raises:
        ValueError: a size, patch size or budget that is not positive, or an image the search cannot fit (timm's
            "Binary search failed"), naming the values.
    """
    h, w = _image_size(image_size)
    ph, pw = _patch_pair(patch_size)
    budget = _budget(max_patches)

    def prepare(ratio):  # timm's prepare_target_hw with divisible_by_patch=True
        scaled_h = ph * math.ceil(h * ratio / ph)
        scaled_w = pw * math.ceil(w * ratio / pw)
        return int(max(scaled_h, ph)), int(max(scaled_w, pw))

    def feasible(ratio):
        t_h, t_w = prepare(ratio)
        return (t_h // ph) * (t_w // pw) <= budget

    lb, rb = eps / 10.0, 100.0
    while (rb - lb) >= eps:
        mid = (lb + rb) / 2.0
        if feasible(mid):
            lb = mid
        else:
            rb = mid
    ratio = lb if max_ratio is None else min(lb, max_ratio)
    if ratio <= eps or ratio >= 100.0:
        raise ValueError(
            f"No scale in ({eps}, 100) fits an image of {h}x{w} into {budget} patches of {ph}x{pw} (timm's binary "
            f"search fails the same way). Received: image_size={(h, w)}, patch_size={(ph, pw)}, max_patches={budget}"
        )
    return prepare(ratio)


def grid_for(image_size, patch_size, max_patches, *, max_ratio=None, eps=SEARCH_EPS):
    """``(rows, cols)`` of patches of an image of ``image_size`` under the budget: :func:`target_size` in patches."""
    ph, pw = _patch_pair(patch_size)
    h, w = target_size(image_size, (ph, pw), max_patches, max_ratio=max_ratio, eps=eps)
    return h // ph, w // pw


def patchify(image, patch_size, max_patches):
    """``(patches, coords, valid)`` of one image ``(H, W, C)`` padded to ``max_patches`` (timm's ``patchify_image``).

    The image is cut as it is (resize it to :func:`target_size` first); sides the patches do not divide are padded
    with zeros at the bottom and right, as timm's ``patchify_image(pad=True)``.

    Returns:
        ``patches`` ``(max_patches, ph * pw * C)`` (each patch ``(ph, pw, C)`` flattened, float32), ``coords``
        ``(max_patches, 2)`` int32 ``(row, col)``, ``valid`` ``(max_patches,)`` bool; rows past the image's patches
        are zeros and invalid.

    Raises:
        ValueError: an image that is not ``(H, W, C)``, or one with more patches than ``max_patches``, naming both.
    """
    image = np.asarray(image)
    if image.ndim != 3:
        raise ValueError(f"patchify takes one image (height, width, channels). Received: shape {image.shape}")
    ph, pw = _patch_pair(patch_size)
    budget = _budget(max_patches)
    h, w, c = image.shape
    pad_h, pad_w = -h % ph, -w % pw
    if pad_h or pad_w:
        image = np.pad(image, ((0, pad_h), (0, pad_w), (0, 0)))
    rows, cols = image.shape[0] // ph, image.shape[1] // pw
    if rows * cols > budget:
        raise ValueError(
            f"An image of {h}x{w} makes {rows} x {cols} = {rows * cols} patches of {ph}x{pw}, more than "
            f"max_patches={budget}: resize it to keras_vit.layers.naflex_grid.target_size(...) first."
        )
    cut = image.reshape(rows, ph, cols, pw, c).transpose(0, 2, 1, 3, 4).reshape(rows * cols, ph * pw * c)
    patches = np.zeros((budget, ph * pw * c), np.float32)
    patches[: rows * cols] = cut
    coords = np.zeros((budget, 2), np.int32)
    coords[: rows * cols, 0] = np.repeat(np.arange(rows), cols)
    coords[: rows * cols, 1] = np.tile(np.arange(cols), rows)
    valid = np.zeros((budget,), bool)
    valid[: rows * cols] = True
    return patches, coords, valid


def batch(images, patch_size, max_patches):
    """The NaFlex input dict of a list of images (each ``(H, W, C)``, already at its grid's size): :data:`KEYS`
    stacked, ``patches`` ``(B, max_patches, ph * pw * C)``, ``patch_coord`` ``(B, max_patches, 2)``,
    ``patch_valid`` ``(B, max_patches)`` (timm's ``NaFlexCollator``)."""
    parts = [patchify(image, patch_size, max_patches) for image in images]
    if not parts:
        raise ValueError("batch takes at least one image. Received: no images")
    return {key: np.stack([part[i] for part in parts]) for i, key in enumerate(KEYS)}


def resize_to_budget(image, patch_size, max_patches, *, method="bicubic", antialias=True):
    """``image`` ``(H, W, C)`` resized to :func:`target_size` with ``tf.image.resize`` (float32).

    torchvision's resize (timm's ``ResizeToSequence``) rounds differently: for a comparison with timm, resize once
    and give both models the same pixels.
    """
    import tensorflow as tf  # deferred: this module is NumPy otherwise

    image = np.asarray(image)
    size = target_size(image.shape[:2], patch_size, max_patches)
    if tuple(image.shape[:2]) == size:
        return image.astype(np.float32)
    return tf.image.resize(tf.convert_to_tensor(image, tf.float32), size, method=method, antialias=antialias).numpy()
