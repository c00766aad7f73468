"""Load the original Google ViT ``.npz`` checkpoints into keras_vit models.

Reads the files of google-research/vision_transformer (imagenet21k,
imagenet21k+imagenet2012 and AugReg releases), in both the original naming
(``MultiHeadDotProductAttention_1``, ``LayerNorm_2``, ``MlpBlock_3``) and the
newer Flax naming (``..._0``, ``LayerNorm_1``, ``MlpBlock_0``, optional
``params/`` prefix). Position embeddings are resampled in 2-D when the grid
changes; a head of another size is skipped and left at zero (the paper's
fine-tuning rule). Everything is checked before any weight is written, so a
failed load leaves the model as it was.
"""

import dataclasses
import logging
import math
import os
import re
import zipfile

import numpy as np

from keras_vit.layers import PatchEncoder, Patches, TransformerBlock

logger = logging.getLogger("keras_vit")

POSEMB_KEY = "Transformer/posembed_input/pos_embedding"
HEAD_KEYS = ("head/kernel", "head/bias")

# newer Flax naming inside an encoder block -> the original naming
_BLOCK_RENAMES = {
    "MultiHeadDotProductAttention_0": "MultiHeadDotProductAttention_1",
    "LayerNorm_1": "LayerNorm_2",
    "MlpBlock_0": "MlpBlock_3",
}


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or does not fit the model."""


@dataclasses.dataclass
class LoadReport:
    """What a checkpoint load did.

    Attributes:
        path: the file that was read.
        loaded: checkpoint keys written into the model.
        unused: checkpoint keys the model has no place for.
        resized: key -> (checkpoint shape, model shape) for interpolated tensors.
        skipped: key -> reason, for tensors left out on purpose (a new head).
    """

    path: str = ""
    loaded: list = dataclasses.field(default_factory=list)
    unused: list = dataclasses.field(default_factory=list)
    resized: dict = dataclasses.field(default_factory=dict)
    skipped: dict = dataclasses.field(default_factory=dict)

    def __str__(self):
        lines = [f"Loaded {len(self.loaded)} tensors from {self.path}"]
        lines += [f"  resized {k}: {a} -> {b}" for k, (a, b) in self.resized.items()]
        lines += [f"  skipped {k}: {why}" for k, why in self.skipped.items()]
        if self.unused:
            lines.append(f"  unused keys ({len(self.unused)}): {', '.join(self.unused)}")
        return "\n".join(lines)


def canonical_key(key):
    """Map a checkpoint key of any supported naming to the original naming.

    Handles the Flax ``params/`` prefix and the ``opt/target/`` prefix of files
    saved with their ``flax.optim`` optimizer (``opt/state/...`` keys, the
    optimizer's moments, are dropped by :func:`read_checkpoint`).
    """
    for prefix in ("opt/target/", "params/"):
        if key.startswith(prefix):
            key = key[len(prefix):]
    parts = key.split("/")
    if len(parts) > 2 and parts[0] == "Transformer" and parts[1].startswith("encoderblock_"):
        parts[2] = _BLOCK_RENAMES.get(parts[2], parts[2])
    return "/".join(parts)


def _optimizer_state(key):
    """True for the optimizer-state arrays saved beside ``opt/target/`` (not weights)."""
    return key.startswith("opt/") and not key.startswith("opt/target/")


def read_checkpoint(path):
    """Read an ``.npz`` checkpoint into ``{canonical key: np.ndarray}``.

    Opened with ``allow_pickle=False``; every array is read now, so a truncated
    or corrupt file fails here with its name, never half-way through a load.
    """
    if isinstance(path, dict):
        return {canonical_key(k): np.asarray(v) for k, v in path.items() if not _optimizer_state(k)}
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise CheckpointError(f"Checkpoint not found: {path!r}")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {canonical_key(k): np.asarray(data[k]) for k in data.files if not _optimizer_state(k)}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError, zipfile.LargeZipFile) as error:
        raise CheckpointError(
            f"Cannot read checkpoint {path!r}: not a valid .npz file ({type(error).__name__}: {error}). "
            "The file may be truncated or corrupt; download it again."
        ) from error
    if not arrays:
        raise CheckpointError(f"Checkpoint {path!r} holds no arrays.")
    return arrays


def representation_size_of(checkpoint):
    """Width of the pre-logits layer stored in a checkpoint, or None."""
    kernel = checkpoint.get("pre_logits/kernel")
    return None if kernel is None else int(kernel.shape[-1])


@dataclasses.dataclass
class Target:
    """Where a checkpoint tensor goes: a variable and the expected file shape."""

    variable: object
    shape: tuple  # shape expected in the checkpoint

    def accepts(self, shape):
        """Whether a checkpoint tensor of this shape fits (subclasses accept other layouts)."""
        return tuple(shape) == tuple(self.shape)

    def convert(self, array):
        return np.reshape(array, tuple(self.variable.shape))


_TARGET_FUNCTIONS = []


def register_targets(function):
    """Register ``function(model) -> {key: Target}`` for a family of layers (the hybrid's backbone)."""
    _TARGET_FUNCTIONS.append(function)
    return function


def _dense(prefix, dense, targets, kernel_shape=None):
    targets[f"{prefix}/kernel"] = Target(dense.kernel, tuple(kernel_shape or dense.kernel.shape))
    targets[f"{prefix}/bias"] = Target(dense.bias, tuple(dense.bias.shape))


def _norm(prefix, norm, targets):
    targets[f"{prefix}/scale"] = Target(norm.gamma, tuple(norm.gamma.shape))
    targets[f"{prefix}/bias"] = Target(norm.beta, tuple(norm.beta.shape))


def _layers_of(model, cls):
    return [layer for layer in model.layers if isinstance(layer, cls)]


@register_targets
def vit_targets(model):
    """Checkpoint keys of the embedding, encoder and head of a ViT model."""
    targets = {}
    encoders = _layers_of(model, PatchEncoder)
    if len(encoders) != 1:
        raise CheckpointError(f"Expected one PatchEncoder in model {model.name!r}, found {len(encoders)}.")
    encoder = encoders[0]
    patches = _layers_of(model, Patches)[0]
    ph, pw = patches._ph, patches._pw
    channels = encoder.projection.kernel.shape[0] // (ph * pw)
    _dense("embedding", encoder.projection, targets, (ph, pw, channels, encoder.hidden_size))
    if encoder.class_token:
        targets["cls"] = Target(encoder.cls, tuple(encoder.cls.shape))
    targets[POSEMB_KEY] = Target(encoder.position_embedding, tuple(encoder.position_embedding.shape))
    blocks = [layer for layer in model.layers if isinstance(layer, TransformerBlock)]
    for i, block in enumerate(blocks):
        prefix = f"Transformer/encoderblock_{i}"
        _norm(f"{prefix}/LayerNorm_0", block.norm1, targets)
        attention = f"{prefix}/MultiHeadDotProductAttention_1"
        for name, dense in (
            ("query", block.attention._query_dense),
            ("key", block.attention._key_dense),
            ("value", block.attention._value_dense),
            ("out", block.attention._output_dense),
        ):
            _dense(f"{attention}/{name}", dense, targets)
        _norm(f"{prefix}/LayerNorm_2", block.norm2, targets)
        _dense(f"{prefix}/MlpBlock_3/Dense_0", block.mlp_dense_1, targets)
        _dense(f"{prefix}/MlpBlock_3/Dense_1", block.mlp_dense_2, targets)
    _norm("Transformer/encoder_norm", model.get_layer("encoder_norm"), targets)
    for name in ("pre_logits", "head"):
        try:
            _dense(name, model.get_layer(name), targets)
        except ValueError:  # no such layer: include_top=False or no pre-logits
            pass
    return targets


def model_grid(model):
    """``(rows, cols)`` of the patch grid the model's position embeddings cover."""
    patches = _layers_of(model, Patches)[0]
    return patches.grid_size(patches.input.shape)


def resize_position_embedding(posemb, new_grid, old_grid=None, num_prefix_tokens=1):
    """Resample ``(1, prefix + gh*gw, D)`` position embeddings to ``new_grid``.

    The prefix (class token) positions are kept as they are; the grid is
    resampled by bilinear interpolation with aligned corners, as
    ``scipy.ndimage.zoom(order=1)`` does in the original code. Resizing to the
    same grid returns the input unchanged.

    Args:
        posemb: array ``(1, tokens, D)``.
        new_grid: ``(rows, cols)`` of the target grid.
        old_grid: ``(rows, cols)`` of the source grid; inferred as a square.
        num_prefix_tokens: leading tokens that are not on the grid.
    """
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
        grid = _interpolate_axis(_interpolate_axis(grid, nh, axis=0), nw, axis=1)
    grid = grid.reshape(1, nh * nw, -1).astype(posemb.dtype)
    return np.concatenate([prefix, grid], axis=1)


def _interpolate_axis(values, size, axis):
    """Linear interpolation along one axis, end points aligned."""
    old = values.shape[axis]
    if old == size:
        return values
    coords = np.linspace(0.0, old - 1.0, size) if size > 1 else np.zeros(1)
    low = np.floor(coords).astype(int)
    high = np.minimum(low + 1, old - 1)
    frac = (coords - low).reshape([-1 if a == axis else 1 for a in range(values.ndim)])
    return np.take(values, low, axis=axis) * (1 - frac) + np.take(values, high, axis=axis) * frac


def load_checkpoint(model, checkpoint, strict=True):
    """Load an original ViT checkpoint into a keras_vit model.

    Args:
        model: a model built by ``keras_vit`` (plain or hybrid).
        checkpoint: a path to an ``.npz`` file, or a dict of arrays.
        strict: raise on checkpoint keys the model does not use (besides the
            head and pre-logits, which a model without a top has no place for).

    Returns:
        A :class:`LoadReport`.

    Raises:
        CheckpointError: a key the model needs is missing, or a tensor has a
            shape that cannot be mapped; the message names the key and both
            shapes. Nothing is written into the model in that case.
    """
    arrays = read_checkpoint(checkpoint)
    report = LoadReport(path="<arrays>" if isinstance(checkpoint, dict) else os.fspath(checkpoint))
    targets = {}
    for function in _TARGET_FUNCTIONS:
        targets.update(function(model) or {})

    values = {}
    missing = []
    for key, target in targets.items():
        if key not in arrays:
            if key in HEAD_KEYS:
                report.skipped[key] = "not in the checkpoint; head left at its zero initialisation"
                values[key] = np.zeros(tuple(target.variable.shape), dtype=np.float32)
                continue
            missing.append(f"{key} (model expects {target.shape})")
            continue
        array = arrays[key]
        if key == POSEMB_KEY and array.shape != target.shape:
            array = _fit_position_embedding(model, key, array, target, report)
        elif key in HEAD_KEYS and array.shape != target.shape:
            report.skipped[key] = (
                f"checkpoint shape {array.shape} != model shape {target.shape}; "
                "new head zero-initialised (fine-tuning)"
            )
            values[key] = np.zeros(target.shape, dtype=np.float32)
            continue
        elif not target.accepts(array.shape):
            raise CheckpointError(
                f"Shape mismatch for checkpoint key {key!r}: checkpoint has {array.shape}, "
                f"model {model.name!r} expects {target.shape}."
            )
        values[key] = target.convert(array)
        report.loaded.append(key)
    if missing:
        raise CheckpointError(
            f"Checkpoint {report.path!r} lacks {len(missing)} key(s) that model {model.name!r} needs: "
            + "; ".join(missing[:10])
            + (" ..." if len(missing) > 10 else "")
        )
    report.unused = sorted(set(arrays) - set(targets))
    tolerated = [k for k in report.unused if re.match(r"^(head|pre_logits)/", k)]
    if strict and len(report.unused) > len(tolerated):
        extra = [k for k in report.unused if k not in tolerated]
        raise CheckpointError(
            f"Checkpoint {report.path!r} has {len(extra)} key(s) that model {model.name!r} has no place for "
            f"(a different architecture?): {', '.join(extra[:10])}"
        )
    for key, value in values.items():
        variable = targets[key].variable
        variable.assign(value.astype(variable.dtype))
    logger.info("%s", report)
    return report


def _fit_position_embedding(model, key, array, target, report):
    prefix = target.shape[1] - int(np.prod(model_grid(model)))
    if array.ndim != 3 or array.shape[0] != 1 or array.shape[2] != target.shape[2] or prefix < 0:
        raise CheckpointError(
            f"Shape mismatch for checkpoint key {key!r}: checkpoint has {array.shape}, "
            f"model {model.name!r} expects {target.shape}."
        )
    resized = resize_position_embedding(array, model_grid(model), num_prefix_tokens=prefix)
    report.resized[key] = (array.shape, target.shape)
    return resized
