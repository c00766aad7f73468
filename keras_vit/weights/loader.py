"""Loading a checkpoint into a built keras_vit model, all or nothing, with a report (:func:`load_checkpoint`):
position embeddings resampled to the model's grid, the patch kernel to its patch size (FlexiViT), a head of
another size left at zero (the paper's fine-tuning).
"""

import contextlib
import dataclasses
import logging
import os
import re

import numpy as np

from keras_vit.architecture.model import config_of
from keras_vit.architecture.state import require_float
from keras_vit.errors import CheckpointError
from keras_vit.layers.resampling import resample_patch_embedding, resize_position_embedding
from keras_vit.weights import declared, formats, npz
from keras_vit.weights.architecture import grid_of
from keras_vit.weights.formats import read_checkpoint
from keras_vit.weights.mapping import CLASSIFIER_KEYS, PATCH_KERNEL_KEY, POSEMB_KEY, keras_targets, targets_of

logger = logging.getLogger("keras_vit")


@dataclasses.dataclass
class LoadReport:
    """What a checkpoint load did.

    Attributes:
        path: the file that was read.
        loaded: checkpoint keys written into the model.
        unused: checkpoint keys the model has no place for.
        resized: key -> (checkpoint shape, model shape) for interpolated tensors.
        skipped: key -> reason, for tensors left out on purpose (a new head, a CLIP repository's text tower).
        notes: what the reading of the file did and where its settings come from (the input normalisation,
            a zero bias standing in for one the layout lacks, a head read as a projection).
    """

    path: str = ""
    format: str = ""
    source: str = ""
    loaded: list = dataclasses.field(default_factory=list)
    unused: list = dataclasses.field(default_factory=list)
    resized: dict = dataclasses.field(default_factory=dict)
    skipped: dict = dataclasses.field(default_factory=dict)
    notes: list = dataclasses.field(default_factory=list)

    def __str__(self):
        origin = f"{self.source} ({self.path})" if self.source and self.source != self.path else self.path
        lines = [f"Loaded {len(self.loaded)} tensors from {origin}" + (f" [{self.format}]" if self.format else "")]
        lines += [f"  resized {k}: {a} -> {b}" for k, (a, b) in self.resized.items()]
        lines += [f"  skipped {k}: {why}" for k, why in self.skipped.items()]
        lines += [f"  note: {note}" for note in self.notes]
        if self.unused:
            lines.append(f"  unused keys ({len(self.unused)}): {', '.join(self.unused)}")
        return "\n".join(lines)


def load_checkpoint(model, checkpoint, strict=True, source=None, *, info=None):
    """Load a checkpoint (a path, or a dict of arrays) into a keras_vit model; returns a :class:`LoadReport`.

    Args:
        strict: raise on checkpoint keys the model does not use (besides the
            head and pre-logits, which a model without a top has no place for).
        source: where the checkpoint came from (``hf://...``, a preset), for the report.
        info: the checkpoint's :class:`~keras_vit.weights.formats.CheckpointInfo` when the caller has read
            it already (a builder, :func:`keras_vit.from_pretrained`), so the file is not described twice.

    Raises:
        CheckpointError: the file declares an architecture the model does not have (every difference named:
            :mod:`keras_vit.weights.declared`), a key the model needs is missing, a tensor has a shape that cannot
            be mapped (the key and both shapes named), a dtype that is not a real number, or NaN/infinite values.
            Nothing is written into the model in that case.
        ValueError: the model is quantized or has LoRA enabled (:func:`keras_vit.architecture.state.require_float`:
            float weights would become zeros in integer kernels, or sit under old LoRA factors).

    Example:
    >>> import keras_vit
    >>> from keras_vit.weights.mapping import targets_of
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1,
    ...                       num_heads=4, mlp_dim=64, num_classes=5)
    >>> arrays = {key: np.full(target.shape, 0.5) for key, target in targets_of(model).items()}
    >>> arrays["head/kernel"] = np.zeros((32, 1000))  # an ImageNet head: skipped, left at zero
    >>> print(load_checkpoint(model, arrays))
    Loaded 23 tensors from <arrays>
      skipped head/kernel: checkpoint shape (32, 1000) != model shape (32, 5); new head zero-initialised (fine-tuning)
    """
    config = config_of(model)
    require_float(model, "load weights into", "load the weights into")
    report = LoadReport(path="<arrays>" if isinstance(checkpoint, dict) else os.fspath(checkpoint))
    grid = None  # of the checkpoint's position embeddings: a square unless the file says
    if isinstance(checkpoint, dict):
        arrays = read_checkpoint(checkpoint)
        record = npz.declared({k: a.shape for k, a in arrays.items()}, report.path, layout=False)
    else:
        info = info or formats.describe(checkpoint)
        if info.naflex is not None and config.input_mode == "naflex":  # SigLIP 2 into a NaFlex model: its grid rule
            info = info.as_naflex()
            if config.position_resampling != info.position_resampling:  # resampled per image as the model runs
                raise CheckpointError(
                    f"{os.fspath(checkpoint)!r}: its NaFlex model resamples the position table to each image's grid by "
                    f"{info.position_resampling!r}; model {model.name!r} has position_resampling="
                    f"{config.position_resampling!r}. Build it with position_resampling={info.position_resampling!r}, "
                    "or use keras_vit.from_pretrained(..., max_patches=N)."
                )
        report.format = info.format
        report.notes = list(info.notes)
        grid = info.grid
        record = info.declared
        report.skipped.update(info.skipped)
        # a foreign model's input mean and std are folded into the patch embedding where the model's differ
        arrays = read_checkpoint(checkpoint, config.input_mean, config.input_std, info.architecture)
    declared.check(record, config, report.path, model.name)  # heads, epsilon, activation...: all at once
    report.source = str(source) if source is not None else report.path
    targets = targets_of(model)
    if report.format == "keras":  # a .keras source also carries the weights of a conv stem
        targets.update(keras_targets(model, targets))

    values = {}
    missing = []
    for key, target in targets.items():
        if key not in arrays:
            if key in CLASSIFIER_KEYS and not any(k in arrays for k in CLASSIFIER_KEYS):  # half a head: a damaged file
                report.skipped[key] = "not in the checkpoint; head left at its zero initialisation"
                values[key] = np.zeros(tuple(target.variable.shape), dtype=np.float32)
                continue
            missing.append(f"{key} (model expects {target.shape})")
            continue
        array = arrays[key]
        _check_values(report.path, key, array)
        if key == POSEMB_KEY and grid is None and array.ndim == 3:  # a file that states no grid: as infer reads it,
            with contextlib.suppress(CheckpointError):  # the square of its positions (a 2 x 8 model resamples 4 x 4)
                grid = grid_of(array.shape[1] - (target.shape[1] - int(np.prod(config.grid))), None, report.path)
        if key == POSEMB_KEY and (array.shape != target.shape or (grid is not None and tuple(grid) != config.grid)):
            array = _fit_position_embedding(model, config, array, target, report, grid)
        elif key == PATCH_KERNEL_KEY and array.shape != target.shape and array.ndim == 4 and array.shape[2:] == target.shape[2:]:
            report.resized[key] = (array.shape, target.shape)  # only another patch size (FlexiViT)
            array = resample_patch_embedding(array, target.shape[:2])
        elif key in CLASSIFIER_KEYS and array.shape != target.shape:
            if array.shape[-1:] == target.shape[-1:]:  # the same classes on other features: not a new head
                raise CheckpointError(f"Checkpoint {report.path!r}: its {key} {array.shape} classifies {array.shape[-1]} "
                                      f"classes from {array.shape[0]} features, but model {model.name!r} gives its head "
                                      f"{target.shape[0]} (pooling={config.pooling!r}): the file's head was trained on "
                                      f"other features. {_OWN_HEAD}")
            report.skipped[key] = (
                f"checkpoint shape {array.shape} != model shape {target.shape}; "
                "new head zero-initialised (fine-tuning)"
            )
            values[key] = np.zeros(target.shape, dtype=np.float32)
            continue
        if not target.accepts(array.shape):
            if key == "reg" and array.ndim == 3 and array.shape[2] == target.shape[2]:  # the field, not the key
                raise CheckpointError(
                    f"Checkpoint {report.path!r} has {array.shape[1]} register tokens ('reg' {array.shape}) but model "
                    f"{model.name!r} has num_register_tokens={target.shape[1]}: build it with "
                    f"num_register_tokens={array.shape[1]}."
                )
            raise _mismatch(model, key, array, target)
        values[key] = target.convert(array)
        report.loaded.append(key)
    if missing:
        raise CheckpointError(
            f"Checkpoint {report.path!r} lacks {len(missing)} key(s) that model {model.name!r} needs: "
            + "; ".join(missing[:10])
            + (" ..." if len(missing) > 10 else "")
        )
    empty_registers = {"reg"} if "reg" in arrays and np.size(arrays["reg"]) == 0 else set()  # (1, 0, width): none
    report.unused = sorted(set(arrays) - set(targets) - empty_registers)
    unused_pre_logits = [k for k in report.unused if k.startswith("pre_logits/")]
    if unused_pre_logits and "head/kernel" in report.loaded:  # the head would read raw features, not tanh(pre-logits)
        raise CheckpointError(
            f"Checkpoint {report.path!r}: its head reads its pre-logits layer ({', '.join(unused_pre_logits)}: dense "
            f"+ tanh), which model {model.name!r} has not (representation_size=None). {_OWN_HEAD}"
        )
    tolerated = [k for k in report.unused if re.match(r"^(head|head_dist|pre_logits)/", k)]  # a head not built
    if not config.include_top:  # what acts on a pooled vector the model does not make: its pooling's own weights
        unbuilt = ("MAPHead_0/",) if config.pooling != "map" else ()
        unbuilt += ("fc_norm/", "projection/") if config.pooling in declared.TOKEN_OUTPUTS else ()
        skipped = [k for k in report.unused if k.startswith(unbuilt)] if unbuilt else []
        tolerated += skipped
        report.skipped.update({k: f"not used by pooling={config.pooling!r} without a head" for k in skipped})
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


_OWN_HEAD = ("Build the model as the file's source describes it (its pooling, representation_size: "
             "keras_vit.from_pretrained(path) does), or with another number of classes (a new head) or include_top=False.")


def load_into(model, path, source=None, *, info=None):
    """What a builder's ``weights=path`` does once its model is built: load, and keep the :class:`LoadReport` on
    the model as ``model.load_report`` (the one place that sets it; a model built without ``weights`` has none).

    Example:
    >>> model = keras_vit.ViTB16(weights="ViT-B_16.npz")  # doctest: +SKIP
    >>> print(model.load_report)  # doctest: +SKIP
    Loaded 200 tensors from ViT-B_16.npz
    """
    model.load_report = load_checkpoint(model, path, source=source, info=info)
    return model.load_report


def _check_values(path, key, array):
    """Refuse a tensor that is not real numbers (bool, complex, string, object) or holds NaN or infinity."""
    if not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):  # bool is neither
        raise CheckpointError(
            f"Checkpoint {path!r}: key {key!r} has dtype {array.dtype} (shape {array.shape}); "
            "weights must be real numbers (float or int)."
        )
    bad = array.size - int(np.count_nonzero(np.isfinite(array)))
    if bad:
        raise CheckpointError(
            f"Checkpoint {path!r}: key {key!r} holds {bad} NaN or infinite value(s) of {array.size}; "
            "the file is corrupt or comes from a diverged run."
        )


def _mismatch(model, key, array, target):
    return CheckpointError(f"Shape mismatch for checkpoint key {key!r}: checkpoint has {array.shape}, "
                           f"model {model.name!r} expects {target.shape}.")


def _fit_position_embedding(model, config, array, target, report, grid=None):
    prefix = target.shape[1] - int(np.prod(config.grid))
    if array.ndim != 3 or array.shape[0] != 1 or array.shape[2] != target.shape[2] or prefix < 0:
        raise _mismatch(model, POSEMB_KEY, array, target)
    resized = resize_position_embedding(array, config.grid, grid, num_prefix_tokens=prefix,
                                        method=config.position_resampling)
    report.resized[POSEMB_KEY] = (array.shape, target.shape)
    return resized
