"""keras-hub's ViT-family backbones as rows of data (:class:`Family`), and the one reader of them all.

A family module holds one row, which states only the switches that differ from the paper's
(:data:`keras_vit.architecture.family.PAPER`). Its key layout maps the variable paths Keras 3's ``save_weights`` gives
the layers (the rules in :mod:`keras_vit.weights.keras_hub.preset`; checked against keras-hub 0.32's
``save_to_preset`` by ``benchmarks/keras_hub_presets.py``).
"""

import os
import re
from typing import Callable, NamedTuple

import numpy as np

from keras_vit.architecture.family import PAPER
from keras_vit.errors import CheckpointError
from keras_vit.layers.resampling import resize_position_embedding
from keras_vit.weights import config as config_lib
from keras_vit.weights.conventions import MASK, counted, joined, renamed
from keras_vit.weights.declared import activation, declare
from keras_vit.weights.keras_hub import preset as preset_files
from keras_vit.weights.mapping import ATT, POSEMB_KEY
from keras_vit.weights.source import Reading

POSITION_IDS = "position_ids"  # the Embedding's indices: the table is gathered by them, as keras-hub does
TEXT = "the text tower (keras_vit loads the image tower of a keras-hub {} preset)"
# every family's sizes: {ViTConfig field: (config field, default: None when the config must name it)}
SIZES = {"hidden_size": ("hidden_dim", None), "num_layers": ("num_layers", None), "num_heads": ("num_heads", None),
         "mlp_dim": ("intermediate_dim", None)}
# the paper's switches a row does not state, and how their "read from" text says them
_PAPER_SAID = {"class_token": "a class token", "pooling": "the class token", "qkv_bias": "attention with biases"}


class Family(NamedTuple):
    """One keras-hub backbone class. ``vision``: the class of ``config.vision_encoder`` whose ``config`` holds the
    fields (a two-tower model), else None; that class, else the backbone, is named in the "read from" texts of the
    switches its code fixes; ``fields``: read from that config; ``switches``: ``{field: (value, said)}`` fixed by
    keras-hub's code where they differ from the paper's; ``keys(read, depth)``: ``Keys`` of the weights;
    ``special(read, found)``: what the table cannot say (computed sizes, refusals, notes), returning None or
    ``(position resampling or None, the image size to check)``; ``task``: the task class whose head is not loaded,
    with ``task_reason(task config, path)``."""

    backbone: str
    converter: str
    normalization: tuple
    fields: dict
    switches: dict
    keys: Callable
    vision: str | None = None
    special: Callable | None = None
    task: str | None = None
    task_reason: Callable | None = None


class Keys(NamedTuple):
    """:attr:`Reading.layout` of a preset, where its weights lie: ``table`` ``{h5 dataset: canonical key}``, ``skip``
    ``{regex: reason}``, ``named`` ``{default group path: (layer name, reason to skip or None)}`` of groups found by
    the name Keras stored, ``zeros`` ``{canonical key: shape}`` with no weights (zeros stand in), ``joined``
    ``{canonical key: (part keys)}`` of a weight stored in parts (DINOv3's gated MLP: ``[gate; up]``), joined on the
    last axis; ``task``: the :class:`Keys` of the ``task.weights.h5`` whose head is loaded (a
    ``ViTImageClassifier``'s); the position table's resampling ``(table grid, image grid, method, said)`` or None, why
    a task's head is skipped (or None), and how errors name the model and its files (default: the backbone class and
    ``config.json``)."""

    table: dict
    skip: dict = {}
    named: dict = {}
    zeros: dict = {}
    joined: dict = {}
    task: object = None
    position: tuple | None = None
    task_skipped: str | None = None
    label: tuple = ()


def mha(group, key, bias=True):
    """Keras ``MultiHeadAttention``'s four ``EinsumDense`` (kernels ``(D, heads, hd)``, ``(heads, hd, D)``; biases
    unless ``use_bias=False``; ``bias`` may say it per part: ``{"query": True, ..., "out": False}``)."""
    bias = bias if isinstance(bias, dict) else dict.fromkeys(("query", "key", "value", "out"), bias)
    return {f"{group}/{dense}_dense/vars/{i}": f"{key}/{part}/{kind}"
            for dense, part in (("query", "query"), ("key", "key"), ("value", "value"), ("output", "out"))
            for i, kind in enumerate(("kernel", "bias") if bias[part] else ("kernel",))}


def pair(group, key, names=("scale", "bias")):
    """A layer's two variables (a LayerNorm's gamma and beta; ``("kernel", "bias")`` of a Dense)."""
    return {f"{group}/vars/{i}": f"{key}/{name}" for i, name in enumerate(names)}


def dense(group, key, bias=True):
    return pair(group, key, ("kernel", "bias") if bias else ("kernel",))


def encoder(prefix, depth, norms, attention, mlp, scales=(), bias=True, mlp_bias=True):
    """The table of ``depth`` blocks (``prefix`` of their list): the two LayerNorms, the attention's ``mha``
    (``bias`` as :func:`mha` takes it), the LayerScales, then the MLP's two ``Dense`` (or ``{Dense: its name in
    MlpBlock_3}``: a gated MLP's three), each named inside a block."""
    table, mlp = {}, mlp if isinstance(mlp, dict) else dict(zip(mlp, ("Dense_0", "Dense_1")))
    for i in range(depth):
        layer, key = preset_files.block(prefix, i), f"Transformer/encoderblock_{i}"
        table.update({**pair(f"{layer}/{norms[0]}", f"{key}/LayerNorm_0"), **pair(f"{layer}/{norms[1]}", f"{key}/LayerNorm_2"),
                      **mha(f"{layer}/{attention}", f"{key}/{ATT}", bias),
                      **{f"{layer}/{scale}/vars/0": f"{key}/LayerScale_{n}/gamma" for scale, n in zip(scales, (1, 3))}})
        for group, name in mlp.items():
            table.update(dense(f"{layer}/{group}", f"{key}/MlpBlock_3/{name}", mlp_bias))
    return table


def tokens(read, group, registers):
    """``(table, skip, n)`` of a DINO embedding's own ``n`` variables in creation order: the class token, the mask
    token (skipped; none with ``use_mask_token=False``), the registers (none where ``num_register_tokens``, default
    ``registers``, is 0)."""
    registers = read.config.get("num_register_tokens", registers) != 0
    names = ["cls"] + ["mask"] * read.flag("use_mask_token", True) + ["reg"] * registers
    return ({f"{group}/vars/{i}": name for i, name in enumerate(names) if name != "mask"},
            {f"^{group}/vars/{i}$": MASK for i, name in enumerate(names) if name == "mask"}, len(names))


# the fields keras-hub writes that change nothing keras_vit computes: read by no row, never refused
INERT = {"name", "trainable", "dtype", "dropout_rate", "attention_dropout", "drop_path_rate", "dropout"}


class Recorded(dict):
    """A config object that remembers which fields were looked up (``get``, ``[]``, ``in``): what was never read
    is refused by :meth:`Reader.refuse_unread`, not ignored."""

    def __init__(self, config):
        super().__init__(config)
        self.seen = set()

    def get(self, field, default=None):
        self.seen.add(field)
        return super().get(field, default)

    def __getitem__(self, field):
        self.seen.add(field)
        return super().__getitem__(field)

    def __contains__(self, field):
        self.seen.add(field)
        return super().__contains__(field)

    def unread(self, skip=()):
        return [field for field in self if field not in self.seen and field not in INERT and field not in skip]


def refuse_unread(path, architecture, parts):
    """A ``CheckpointError`` naming the fields of ``parts`` (``[(where, Recorded config, fields read elsewhere)]``)
    that nothing looked at: a field keras-hub 0.32's ``architecture`` does not write (a later keras-hub's switch, a
    hand-written one) may change the output, which keras_vit would not compute."""
    unread = [f"{where}{field}={config[field]!r}" for where, config, skip in parts for field in config.unread(skip)]
    if unread:
        raise CheckpointError(
            f"{path!r}: {', '.join(unread)}: no field keras_vit reads for a {architecture} (keras-hub 0.32's writes "
            "none such); what it changes is not known, so the preset is refused rather than loaded without it.")


def pyramid_norm(read, found):
    """DINOv2's and DINOv3's ``apply_layernorm`` (read, said in a note when true): it normalises keras-hub's
    ``pyramid_outputs``, never the backbone's output."""
    if read.flag("apply_layernorm", False):
        found.notes.append("config.apply_layernorm=true normalises keras-hub's pyramid_outputs (its intermediate "
                           "features); the backbone's output, which keras_vit loads, is the same either way")


class Reader(config_lib.Fields):
    """The fields of one keras-hub object's ``config`` (:class:`~keras_vit.weights.config.Fields`; ``top``: the
    backbone's own config, around a two-tower model's vision one; a family's ``patch`` and ``image`` sizes, once
    read). Every field is looked up through it: :meth:`refuse_unread` refuses what no reader looked at."""

    def __init__(self, config, path, where, top=None):
        config = config if isinstance(config, Recorded) else Recorded(config)
        super().__init__(config, path, where, whose="keras-hub's", required="a keras-hub backbone's config")
        self.top = config if top is None else top
        if config.get("data_format", "channels_last") not in (None, "channels_last"):
            raise CheckpointError(f"{path!r}: {where}data_format={config.get('data_format')!r}; keras_vit models take "
                                  "channels_last images.")

    def refuse_unread(self, architecture, backbone=None):
        """:func:`refuse_unread` of this config (``architecture``'s) and of ``top``'s (a two-tower ``backbone``'s,
        its towers aside)."""
        if self.top is not self.config:
            refuse_unread(self.path, backbone, [("config.", self.top, ("vision_encoder", "text_encoder"))])
        refuse_unread(self.path, architecture, [(self.where, self.config, ())])

    def shape(self, field, default=None):
        shape = self.config.get(field, default)
        if (not isinstance(shape, (list, tuple)) or len(shape) not in (2, 3)
                or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in shape)):
            raise CheckpointError(f"{self.path!r}: {self.where}{field}={shape!r}, expected [height, width, channels].")
        return tuple(shape)

    def field(self, field, source, default):
        """``(value in ViTConfig's terms, said)`` of ``field`` read from config field ``source``, of its ``default``'s
        type: a flag, a float, an integer count that may be 0 (``config.number`` takes positive numbers only), else a
        positive integer."""
        raw = value = self.config.get(source, default)
        if field == "mlp_activation":
            value = "gelu_tanh" if raw == "gelu_approximate" else activation(raw)  # keras-hub's name for tanh GELU
        elif isinstance(default, bool):
            raw = self.flag(source, default)
            value = ("glu" if raw else "mlp") if field == "mlp_type" else raw
        elif not (type(default) is int and type(raw) is int and raw == 0):
            raw = value = self.number(source, default, integer=not isinstance(default, float))
        return value, self.said(source, raw)


def reading(family, preset, config, path):
    """The :class:`~keras_vit.weights.source.Reading` of a family backbone's ``config.json`` (``config``: its ``config``;
    ``preset``: its folder's other files, or None).

    Example:
    >>> from keras_vit.weights.keras_hub import dinov2
    >>> found = reading(dinov2.FAMILY, None, {"patch_size": 8, "num_layers": 1, "hidden_dim": 16, "num_heads": 2,
    ...     "intermediate_dim": 32, "num_register_tokens": 4, "image_shape": [32, 32, 3],
    ...     "position_embedding_shape": [32, 32, 3]}, "config.json")
    >>> [(f, found.declared[f].value) for f in ("num_register_tokens", "layer_scale_init", "mlp_activation", "pre_norm")]
    [('num_register_tokens', 4), ('layer_scale_init', 1.0), ('mlp_activation', 'gelu'), ('pre_norm', False)]
    >>> found.declared["num_register_tokens"].said, found.position_resampling
    ('config.num_register_tokens=4', 'bicubic_tf')
    """
    read = Reader(config, path, "config.")
    if family.vision is not None:
        where = "config.vision_encoder.config."
        encoder = config_lib.json_object(read.config.get("vision_encoder"), path, "config.vision_encoder")
        read = Reader(config_lib.json_object(encoder.get("config"), path, "config.vision_encoder.config"), path, where,
                      read.config)
        if encoder.get("class_name") != family.vision:
            raise CheckpointError(f"{path!r}: config.vision_encoder is a {encoder.get('class_name')!r}; a {family.backbone} has a {family.vision}.")
    # a fixed-size model in keras-hub: transformers' rule for another size (DINOv2's special says keras-hub's)
    found = Reading(architecture=family.backbone, position_resampling="bicubic_torch")
    width, depth, heads = read.number("hidden_dim"), read.number("num_layers"), read.number("num_heads")
    read.patch = config_lib.size_pair(read.config.get("patch_size"), path, read.where + "patch_size")
    read.image = read.shape("image_shape")
    if width % heads:
        raise CheckpointError(f"{path!r}: {read.where}num_heads={heads} does not divide {read.where}hidden_dim={width}.")
    special = family.special(read, found) if family.special else None  # declares first: its fields win
    for field, (source, default) in {**SIZES, **family.fields}.items():
        declare(found.declared, field, *read.field(field, source, default), path)
    for field, (value, said) in family.switches.items():
        declare(found.declared, field, value, said, path)
    for field, value in {**PAPER, "class_token": True, "pooling": "token"}.items():
        if field not in ("input_mean", "input_std", "position_resampling"):
            declare(found.declared, field, value, f"{family.vision or family.backbone}: " + _PAPER_SAID.get(field, f"{field}={value!r} (the paper's)"), path)
    mlp, token = found.declared["mlp_dim"], found.declared["class_token"]
    glu = found.declared["mlp_type"].value == "glu"  # the weights' weights_in has both halves
    found.expected = [("hidden_size", read.said("hidden_dim", width), width), ("num_layers", read.said("num_layers", depth), depth),
                      ("patch_size", read.said("patch_size", read.config.get("patch_size")), read.patch),
                      ("num_channels", f"{read.where}image_shape={list(read.image)!r}", read.image[-1] if len(read.image) == 3 else 3),
                      ("mlp_dim", mlp.said, 2 * mlp.value if glu else mlp.value), ("class_token", token.said, token.value),
                      special[1] if special else ("image_size", read.said("image_shape", list(read.image)), read.image[:2])]
    found.layout = family.keys(read, depth)._replace(position=special and special[0])
    read.refuse_unread(family.vision or family.backbone, family.backbone)
    if preset is not None:
        found.layout = found.layout._replace(task_skipped=_task_skipped(family, preset))
        preset.normalization(found, family.converter, family.normalization)
    return found


def _task_skipped(family, preset):
    """Why a ``task.json`` beside the backbone is not loaded (its head), or None without one."""
    path = preset.file("task.json")
    if not os.path.isfile(path):
        return None
    if family.task is not None:
        task, path = preset.object("task.json", family.task)
        return family.task_reason(task, path)
    return (f"task.json's {preset.class_name('task.json')!r} is no task keras_vit reads for a {family.backbone}: the backbone is "
            "loaded (include_top=False), its task's head is not")


def resolve(keys, names):
    """``(table, skip)`` of ``keys``, each group of ``keys.named`` (``{default path: (layer name, reason to skip or
    None)}``) where ``names`` (``{group path: the name Keras stored}``) puts it.

    Example:
    >>> keys = Keys({"layers/dense/vars/0": "projection/kernel"},
    ...             named={"layers/dense/vars": ("vision_projection", None), "layers/dense_1/vars": ("text_projection", "text")})
    >>> resolve(keys, {"layers/dense/vars": "text_projection", "layers/dense_1/vars": "vision_projection"})
    ({'layers/dense_1/vars/0': 'projection/kernel'}, {'^layers/dense/vars/': 'text'})
    """
    where = {name: group for group, name in names.items()}
    skip, moved = dict(keys.skip), {}
    for default, (name, reason) in keys.named.items():
        actual = where.get(name, default)
        if reason is None:
            moved[default] = actual
        else:
            skip[f"^{re.escape(actual)}/"] = reason
    table = {}  # in one pass: two loaded groups that swapped places are not renamed twice
    for path, key in keys.table.items():
        group, _, leaf = path.rpartition("/")
        table[f"{moved[group]}/{leaf}" if group in moved else path] = key
    return table, skip


def locate(preset, parts, architecture, what="config.json"):
    """``({canonical key: (file, dataset path)}, {label: (count, reason)})`` of ``parts``, ``[(files, Keys)]``: each
    table (its groups where Keras put them: :func:`resolve`) found whole in its files, with nothing left over but
    what is skipped on purpose (counted per pattern, for the load report)."""
    out, skipped = {}, {}
    for files, keys in parts:
        datasets, names = preset_files.contents(files)
        table, skip = resolve(keys, names)
        found, _, extra = renamed(datasets, table.get, skip, _label, skipped)
        out.update({key: (datasets[name][0], name) for name, key in found.items()})
        missing = [name for name in table if name not in datasets]
        if missing:
            shown = os.path.basename(files[0]) if len(files) == 1 else "the shards of " + preset_files.SHARDED_WEIGHTS_FILE
            raise CheckpointError(
                f"keras-hub preset {preset.folder!r}: {shown} has no {missing[0]!r} ({table[missing[0]]} in the "
                f"original layout){f' and {len(missing) - 1} more' if len(missing) > 1 else ''}; the file does not match "
                f"its {what}.")
        if extra:
            raise CheckpointError(f"keras-hub preset {preset.folder!r} has {len(extra)} weight(s) a {architecture} of its "
                                  f"{what} does not have: {', '.join(sorted(extra)[:8])}")
    return out, skipped


def _label(match, name):  # a skipped dataset counted under its pattern: ^a/b$ as a/b, ^a/ as a/*
    return match.re.pattern.strip("^$") + ("" if match.re.pattern.endswith("$") else "*")


def plan(preset, found):
    """``{canonical key: (file, dataset path)}`` of a preset's weights (and of its task's head, where it is loaded);
    ``found.skipped`` gets ``{what: reason}`` of the weights left out on purpose (a text tower, a buffer, a task's head)."""
    keys, task_file = found.layout, preset.file(preset_files.TASK_WEIGHTS_FILE)
    parts = [(preset.weight_files(), keys)]
    if keys.task is not None:
        if not os.path.isfile(task_file):
            raise CheckpointError(f"keras-hub preset {preset.folder!r} has {preset_files.TASK_FILE} but no "
                                  f"{preset_files.TASK_WEIGHTS_FILE}.")
        parts.append(([task_file], keys.task))
    out, skipped = locate(preset, parts, *(keys.label or (found.architecture,)))
    found.skipped = counted(skipped)
    if keys.task_skipped:  # a task's head keras_vit cannot compute: named in the report, not loaded
        n = len(preset_files.contents([task_file])[0]) if os.path.isfile(task_file) else 0
        found.skipped[f"head (task.weights.h5, {n} tensor{'s' if n != 1 else ''})"] = keys.task_skipped
    return out


def _position_ids(preset, found, ids, rows):
    """The stored ``position_ids`` checked to index ``rows`` table rows (a note when not ``0..rows-1``)."""
    ids = np.asarray(ids).reshape(-1)
    if ids.shape[0] != rows or ids.min() < 0 or ids.max() >= rows:
        raise CheckpointError(f"keras-hub preset {preset.folder!r}: position_ids {ids.tolist()[:8]}... do not index the {rows} rows "
                              "of the position embedding table one by one.")
    if not np.array_equal(ids, np.arange(rows)) and not any(n.startswith("position_ids") for n in found.notes):
        found.notes.append(f"position_ids are not 0..{rows - 1} but {ids.tolist()[:8]}...: the position embeddings are "
                           "the table's rows at those indices, as keras-hub computes")
    return ids


def _array(found, key, array):
    """A family weight in the original layout: CLIP's ``(D,)`` class token, an ``Embedding``'s ``(N, D)`` table,
    DINOv2's table checked against ``position_embedding_shape`` and resampled to ``image_shape`` as keras-hub does."""
    position = found.layout.position
    if key == "cls" and array.ndim == 1:
        return array[None, None]
    if key != POSEMB_KEY:
        return array
    array = array[None] if array.ndim == 2 else array
    if position is not None:
        (rows, cols), new, method, said = position
        if array.ndim != 3 or array.shape[1] != 1 + rows * cols:
            raise CheckpointError(f"{found.declared['num_layers'].origin!r}: config.json says {said} ({rows} x {cols} "
                                  f"patches) but the weights' position_embeddings have shape {array.shape}.")
        array = resize_position_embedding(array.astype(np.float64), new, (rows, cols), num_prefix_tokens=1,
                                          method=method).astype(array.dtype)
    return array


def arrays(preset, found, stand_ins=False):
    """``{original key: np.ndarray}`` of a preset, every array read now; ``stand_ins``: zeros of the stored
    shapes instead (only the ``position_ids``, a few integers, are read)."""
    where = plan(preset, found)
    out = preset_files.arrays(where, stand_ins)
    out.update(preset_files.arrays({k: v for k, v in where.items() if k == POSITION_IDS}))  # a few integers
    ids = out.pop(POSITION_IDS, None)
    if ids is not None:  # an Embedding read at its stored indices (keras-hub's CLIP and SigLIP)
        out[POSEMB_KEY] = out[POSEMB_KEY][_position_ids(preset, found, ids, out[POSEMB_KEY].shape[0])]
    out = {key: _array(found, key, array) for key, array in out.items()}
    for key, parts in found.layout.joined.items():
        out[key] = joined([out.pop(part) for part in parts], axis=-1)
    return {**out, **{key: np.zeros(shape, np.float32) for key, shape in found.layout.zeros.items()}}
