"""2-D rotary position embeddings (RoPE) of the attention's queries and keys, as Heo et al.'s RoPE-ViT and timm's
``RotaryEmbeddingCat`` / ``RotaryEmbeddingMixed`` (``timm/layers/pos_embed_sincos.py``) compute them.

Each patch has two coordinates on the grid, ``(c0, c1)``: ``(column, row)`` for ``grid_indexing="xy"`` (timm's
``rope_grid_indexing='xy'``, RoPE-ViT's), ``(row, column)`` for ``"ij"``, plus ``grid_offset``. A head of ``hd``
channels is rotated in ``hd / 2`` pairs, pair ``j`` by the angle ``theta_j``:

* ``"axial"`` (timm's ``rope_type='cat'``, RoPE-Axial): ``theta = [c0 * b, c1 * b]`` with the ``hd / 4`` fixed
  frequencies ``b_i = temperature ** (-i / (hd / 4))``;
* ``"dinov3"`` (``rope_type='dinov3'``, timm's ``RotaryEmbeddingDinoV3``, DINOv3's ``RopePositionEmbedding``): the
  axial layout on centred, normalised coordinates ``c = 2 (i + 0.5 + grid_offset) / n - 1`` (``n`` the grid's size on
  that axis, so ``c`` lies in ``[-1, 1]`` at every resolution) with the periods ``temperature ** (4 i / hd)``:
  ``theta = 2 pi [c0 / period, c1 / period]``; DINOv3's training-time coordinate shift, jitter and rescale are not
  part of inference;
* a ``reference_grid`` ``(ref_rows, ref_cols)`` (axial only; timm's ``ref_feat_shape``, EVA-02's ``(16, 16)``) scales
  each coordinate to that grid before the frequencies: ``c = (i + grid_offset) / n * ref`` (``n`` the grid's size on
  that axis), so a model fine-tuned at another resolution turns its pairs by the angles of the grid it was
  pre-trained on;
* ``"mixed"`` (``rope_type='mixed'``, RoPE-Mixed): ``theta = c0 * f_x + c1 * f_y`` with learnable frequencies
  ``f`` of shape ``(2, heads, hd / 2)`` per layer (timm keeps all layers' in one ``rope.freqs``
  ``(2, depth, heads, hd / 2)``), initialised as timm's ``init_random_2d_freqs`` (magnitudes
  ``temperature ** (-4i / hd)`` in a random direction per head).

timm rotates the interleaved pairs ``(x[2j], x[2j + 1])`` (``rotate_half=False``) for ``"axial"`` and ``"mixed"``;
``"dinov3"`` rotates the halves ``(x[j], x[j + hd / 2])`` (``rotate_half=True``), keras_vit's own order, so its
channels stay where they are (:func:`interleaved`). The attention scores need only
``q . k``, which is the same when the channels of ``q`` and ``k`` are permuted alike: keras_vit moves the pairs'
first members to the first half of each head and the second members to the second half (:func:`deinterleave`,
folded into the query and key kernels where it can be), then rotates halves with slices, never a tensor of rank 5.
The prefix tokens (class, distillation, registers) are not rotated: their angles are zero.

Example:
>>> spec = check_spec({"kind": "axial", "grid": (2, 3), "num_prefix_tokens": 1})
>>> cos, sin = axial_tables(spec, head_dim=8)
>>> cos.shape, float(cos[0].min()), float(sin[0].max())  # 1 + 2 x 3 tokens, hd / 2 angles; the class token: none
((7, 4), 1.0, 0.0)
"""

import math

import keras
import numpy as np
from keras import ops

KINDS = ("axial", "mixed", "dinov3")
GRID_INDEXINGS = ("ij", "xy")
# RoPE-ViT's (timm's rope_temperature of its *_rope_* models) and DINOv3's
DEFAULT_TEMPERATURE = {"axial": 100.0, "mixed": 10.0, "dinov3": 100.0}


def check_spec(spec):
    """A layer's ``rope`` argument checked: ``{"kind", "grid", "temperature", "grid_indexing", "grid_offset",
    "num_prefix_tokens"}`` (the missing ones at their defaults), or None for no RoPE."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise ValueError(f"`rope` must be None or a dict. Received: rope={spec!r}")
    unknown = sorted(set(spec) - {"kind", "grid", "temperature", "grid_indexing", "grid_offset", "num_prefix_tokens",
                                  "reference_grid"})
    if unknown:
        raise ValueError(f"Unknown `rope` keys {unknown}. Received: rope={spec!r}")
    kind = spec.get("kind")
    if kind not in KINDS:
        raise ValueError(f"`rope['kind']` must be one of {KINDS}. Received: {kind!r}")
    grid = spec.get("grid")
    if grid is None or len(grid) != 2 or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in grid):
        raise ValueError(f"`rope['grid']` must be (rows, cols) of positive ints. Received: {grid!r}")
    temperature = spec.get("temperature", DEFAULT_TEMPERATURE[kind])
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"`rope['temperature']` must be a positive number. Received: {temperature!r}")
    indexing = spec.get("grid_indexing", "xy")
    if indexing not in GRID_INDEXINGS:
        raise ValueError(f"`rope['grid_indexing']` must be one of {GRID_INDEXINGS}. Received: {indexing!r}")
    offset = spec.get("grid_offset", 0.0)
    if isinstance(offset, bool) or not isinstance(offset, (int, float)) or not math.isfinite(offset):
        raise ValueError(f"`rope['grid_offset']` must be a finite number. Received: {offset!r}")
    prefix = spec.get("num_prefix_tokens", 0)
    if isinstance(prefix, bool) or not isinstance(prefix, int) or prefix < 0:
        raise ValueError(f"`rope['num_prefix_tokens']` must be an int >= 0. Received: {prefix!r}")
    out = {"kind": kind, "grid": (int(grid[0]), int(grid[1])), "temperature": float(temperature),
           "grid_indexing": indexing, "grid_offset": float(offset), "num_prefix_tokens": prefix}
    reference = spec.get("reference_grid")
    if reference is not None:  # kept only when set: the saved specs of models without one are unchanged
        if kind != "axial":
            raise ValueError(f"`rope['reference_grid']` is read only with kind 'axial' (timm's ref_feat_shape of "
                             f"RotaryEmbeddingCat). Received: kind={kind!r}, reference_grid={reference!r}")
        if len(reference) != 2 or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in reference):
            raise ValueError(f"`rope['reference_grid']` must be (rows, cols) of positive ints. Received: {reference!r}")
        out["reference_grid"] = (int(reference[0]), int(reference[1]))
    return out


def interleaved(spec):
    """Whether the rotated pairs are interleaved channels (RoPE-ViT's; de-interleaved by keras_vit) or halves (DINOv3's)."""
    return spec["kind"] != "dinov3"


def coordinates(spec):
    """``(c0, c1)``: float64 arrays of the patches' coordinates in row-major order (timm's ``_build_grid``:
    ``grid_type='index'`` (with ``ref_feat_shape``: scaled to ``reference_grid``), or ``'centered'`` with ``normalize_coords='separate'`` for ``"dinov3"``)."""
    rows, cols = spec["grid"]
    row, col = np.meshgrid(np.arange(rows, dtype=np.float64), np.arange(cols, dtype=np.float64), indexing="ij")
    row, col = row.ravel() + spec["grid_offset"], col.ravel() + spec["grid_offset"]
    if spec.get("reference_grid") is not None:  # timm's _build_grid: t / feat_shape * ref_feat_shape, per axis
        row, col = row / rows * spec["reference_grid"][0], col / cols * spec["reference_grid"][1]
    if spec["kind"] == "dinov3":
        row, col = 2.0 * (row + 0.5) / rows - 1.0, 2.0 * (col + 0.5) / cols - 1.0
    return (col, row) if spec["grid_indexing"] == "xy" else (row, col)


def axial_tables(spec, head_dim):
    """``(cos, sin)``: float32 ``(prefix + rows * cols, head_dim / 2)`` of the axial (or DINOv3's) angles (prefix
    rows: angle 0)."""
    bands = spec["temperature"] ** -(np.arange(head_dim // 4, dtype=np.float64) / (head_dim // 4))
    if spec["kind"] == "dinov3":
        bands = 2.0 * np.pi * bands  # 2 pi / period, period = temperature ** (4 i / head_dim)
    c0, c1 = coordinates(spec)
    angles = np.concatenate([c0[:, None] * bands, c1[:, None] * bands], axis=1)
    angles = np.concatenate([np.zeros((spec["num_prefix_tokens"], head_dim // 2)), angles])
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def mixed_tables(spec, frequencies):
    """``(cos, sin)`` ``(heads, prefix + rows * cols, head_dim / 2)`` of the learnable ``frequencies``
    ``(2, heads, head_dim / 2)`` (a weight), in float32; the prefix tokens' angles are 0."""
    c0, c1 = (ops.convert_to_tensor(c.astype(np.float32)[None, :, None]) for c in coordinates(spec))
    frequencies = ops.cast(frequencies, "float32")
    angles = c0 * ops.expand_dims(frequencies[0], 1) + c1 * ops.expand_dims(frequencies[1], 1)  # (heads, N, hd / 2)
    if spec["num_prefix_tokens"]:
        heads, half = frequencies.shape[1], frequencies.shape[2]
        angles = ops.concatenate([ops.zeros((heads, spec["num_prefix_tokens"], half), "float32"), angles], axis=1)
    return ops.cos(angles), ops.sin(angles)


def mixed_initializer(temperature):
    """timm's ``init_random_2d_freqs`` for one layer: ``(2, heads, head_dim / 2)``, a random direction per head."""

    def initialize(shape, dtype=None):
        _, heads, half = shape
        magnitude = temperature ** -(np.arange(0, 2 * half, 4, dtype=np.float64) / (2 * half))  # hd / 4 values
        angle = np.asarray(keras.ops.convert_to_numpy(keras.random.uniform((heads, 1))), np.float64) * 2 * np.pi
        fx = np.concatenate([magnitude * np.cos(angle), magnitude * np.cos(angle + np.pi / 2)], axis=-1)
        fy = np.concatenate([magnitude * np.sin(angle), magnitude * np.sin(angle + np.pi / 2)], axis=-1)
        return ops.convert_to_tensor(np.stack([fx, fy]).astype(np.float32), dtype=dtype)

    return initialize


def deinterleave_permutation(head_dim):
    """The channel order of a head that puts the pairs' first members first: ``[0, 2, 4, ..., 1, 3, 5, ...]``."""
    return np.concatenate([np.arange(0, head_dim, 2), np.arange(1, head_dim, 2)])


def deinterleave(t):
    """``t`` ``(..., head_dim)`` in :func:`deinterleave_permutation`'s order, by two strided slices (rank kept)."""
    return ops.concatenate([t[..., 0::2], t[..., 1::2]], axis=-1)


def rotate(t, cos, sin):
    """Rotate ``t`` ``(..., head_dim)``, de-interleaved, by the angles whose ``cos`` and ``sin`` ``(..., head_dim / 2)``
    broadcast against its halves: ``[t1 cos - t2 sin, t2 cos + t1 sin]``."""
    half = t.shape[-1] // 2
    first, second = t[..., :half], t[..., half:]
    return ops.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)
