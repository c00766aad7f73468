"""NaFlex's grid rules and patchification: an image at its own aspect ratio under a budget of patches (NumPy, no torch).

A NaFlex model (SigLIP 2's NaFlex, timm's ``naflexvit.py``) does not squash or crop an image to a square: it scales it,
keeping its aspect ratio, to the largest size whose patch grid fits a budget of ``max_patches`` patches, cuts it into
patches, and pads the sequence to the budget with a mask. Each source writes that search itself; :data:`GRID_RULES`
names them, and a model's ``ViTConfig.grid_rule`` says which one its weights were trained with:

* ``"timm"``: timm 1.0.31's ``get_image_size_for_seq`` (``timm/data/naflex_transforms.py``, used by
  ``ResizeToSequence`` and ``RandomResizedCropToSequence``; images resized bicubic with antialiasing);
* ``"siglip2"``: transformers 5.24's ``get_image_size_for_max_num_patches``
  (``models/siglip2/image_processing_siglip2.py``; images resized bilinear with antialiasing).

Both run a binary search over the scale ``r`` in ``[1e-6, 100]`` until the interval is narrower than ``eps = 1e-5``,
where ``r`` is feasible when ``ceil(h * r / ph) * ceil(w * r / pw) <= max_patches`` (each side at least one
patch); the last feasible ``r`` gives the size ``(ph * ceil(h * r / ph), pw * ceil(w * r / pw))``. They differ past
that: timm refuses a search that ends at ``r <= eps`` (an image so long that only a scale under ``1e-5`` fits) and
takes a ``max_ratio`` cap; SigLIP 2 takes no cap and keeps the last feasible scale however small, down to the
search's start ``1e-6``, whose grid it does not check (a 1 x 20,000,000 image gets 1 x 2 patches under a budget of 1;
keras_vit refuses that size, by name). The same Python float arithmetic is run here, so each grid is its source's
for every image size (``tools/check_timm_naflex.py``, ``tools/check_transformers_naflex.py`` compare them).

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
from typing import NamedTuple

import numpy as np

SEARCH_EPS = 1e-5  # timm's get_image_size_for_seq and transformers' get_image_size_for_max_num_patches default
KEYS = ("patches", "patch_coord", "patch_valid")  # the dict a NaFlex model takes (timm's names)


class GridRule(NamedTuple):
    """One source's grid rule. ``written``: where; ``resize`` / ``antialias``: how its processor resizes an image to
    the size (``tf.image.resize``'s method); ``strict``: the search refuses to end at ``r <= eps`` and takes
    ``max_ratio`` (timm), else it keeps the last feasible scale, checked here against the budget (SigLIP 2)."""

    name: str
    written: str
    resize: str
    antialias: bool
    strict: bool


GRID_RULES = {
    "timm": GridRule("timm", "timm 1.0.31 timm/data/naflex_transforms.py get_image_size_for_seq", "bicubic", True, True),
    "siglip2": GridRule("siglip2", "transformers 5.24 models/siglip2/image_processing_siglip2.py "
                        "get_image_size_for_max_num_patches", "bilinear", True, False),
}


def grid_rule(name):
    """The :class:`GridRule` named ``name`` (a key of :data:`GRID_RULES`), or a ``ValueError`` naming the rules."""
    if name not in GRID_RULES:
        raise ValueError(f"Unknown NaFlex grid rule: expected one of {tuple(GRID_RULES)}. Received: rule={name!r}")
    return GRID_RULES[name]


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


def target_size(image_size, patch_size, max_patches, *, rule="timm", max_ratio=None, eps=SEARCH_EPS):
    """``(height, width)`` in pixels an image of ``image_size`` is resized to under the budget by ``rule``.

    Args:
        image_size: ``(height, width)`` of the image.
        patch_size: an int or ``(ph, pw)`` (``"siglip2"``: one square patch size, as its processor takes).
        max_patches: the budget of patches (timm's ``max_seq_len``, SigLIP 2's ``max_num_patches``).
        rule: a key of :data:`GRID_RULES`: ``"timm"`` or ``"siglip2"``.
        max_ratio: None, or a cap on the scale (timm's ``max_ratio``: no upsampling past it; ``"timm"`` only).
        eps: the binary search's width (both sources' ``eps``).

    Returns:
        ``(height, width)``, multiples of the patch size whose grid holds at most ``max_patches`` patches.

    Raises:
        ValueError: a size, patch size, budget or rule that is not one, an image the search cannot fit (timm's
            "Binary search failed"; SigLIP 2's size past the budget), naming the values.

    Example:
    >>> target_size((360, 640), 16, 256), target_size((360, 640), 16, 256, rule="siglip2")
    ((192, 336), (192, 336))
    """
    h, w = _image_size(image_size)
    ph, pw = _patch_pair(patch_size)
    budget = _budget(max_patches)
    chosen = grid_rule(rule)
    if not chosen.strict and (max_ratio is not None or ph != pw):
        raise ValueError(f"SigLIP 2's grid rule takes one square patch size and no max_ratio (its processor has none). "
                         f"Received: rule={rule!r}, patch_size={(ph, pw)}, max_ratio={max_ratio!r}")

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
    if not chosen.strict:  # SigLIP 2: the last feasible scale, however small; its grid is not checked there
        t_h, t_w = prepare(lb)
        if (t_h // ph) * (t_w // pw) > budget:
            raise ValueError(
                f"SigLIP 2's grid rule gives an image of {h}x{w} a size of {t_h}x{t_w}: {t_h // ph} x {t_w // pw} "
                f"patches of {ph}x{pw}, more than max_patches={budget} (its processor would write a sequence past "
                f"the budget). Received: image_size={(h, w)}, max_patches={budget}"
            )
        return t_h, t_w
    ratio = lb if max_ratio is None else min(lb, max_ratio)
    if ratio <= eps or ratio >= 100.0:
        raise ValueError(
            f"No scale in ({eps}, 100) fits an image of {h}x{w} into {budget} patches of {ph}x{pw} (timm's binary "
            f"search fails the same way). Received: image_size={(h, w)}, patch_size={(ph, pw)}, max_patches={budget}"
        )
    return prepare(ratio)


def grid_for(image_size, patch_size, max_patches, *, rule="timm", max_ratio=None, eps=SEARCH_EPS):
    """``(rows, cols)`` of patches of an image of ``image_size`` under the budget: :func:`target_size` in patches."""
    ph, pw = _patch_pair(patch_size)
    h, w = target_size(image_size, (ph, pw), max_patches, rule=rule, max_ratio=max_ratio, eps=eps)
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


def resize_to_budget(image, patch_size, max_patches, *, rule="timm", method=None, antialias=None):
    """``image`` ``(H, W, C)`` resized to :func:`target_size` of ``rule`` with ``tf.image.resize`` (float32), by the
    rule's own resize unless ``method`` / ``antialias`` say otherwise (timm bicubic, SigLIP 2 bilinear, antialiased).

    torchvision's resize (timm's ``ResizeToSequence``, SigLIP 2's processor on uint8 images) rounds differently: for a
    comparison with either, resize once and give both models the same pixels.
    """
    import tensorflow as tf  # deferred: this module is NumPy otherwise

    chosen = grid_rule(rule)
    method = chosen.resize if method is None else method
    antialias = chosen.antialias if antialias is None else antialias
    image = np.asarray(image)
    size = target_size(image.shape[:2], patch_size, max_patches, rule=rule)
    if tuple(image.shape[:2]) == size:
        return image.astype(np.float32)
    return tf.image.resize(tf.convert_to_tensor(image, tf.float32), size, method=method, antialias=antialias).numpy()
