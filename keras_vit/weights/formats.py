"""The checkpoint dispatcher: which format a path holds, what it describes, and its arrays in the original layout.

Four formats, told apart by content (not only by the name):

* ``npz``: an original Google ``.npz`` (:mod:`keras_vit.weights.npz`);
* ``timm``: a timm ViT state dict in a ``.safetensors`` file, or a folder with
  ``config.json`` (``"architecture": ...``) and ``model.safetensors`` (a timm
  Hugging Face Hub repository);
* ``transformers``: a folder written by ``save_pretrained`` (``config.json``
  with ``"model_type": "vit"`` or one of the family's, :mod:`keras_vit.weights.transformers`;
  ``model.safetensors`` or sharded ``model.safetensors.index.json``), or its
  ``.safetensors`` with the ``config.json`` beside it;
* ``keras``: a ``.keras`` model saved by keras_vit (:mod:`keras_vit.weights.keras_file`);
* ``keras-hub``: a keras-hub preset folder of ViT (``config.json`` of a ``ViTBackbone``, ``model.weights.h5``,
  a ``ViTImageClassifier``'s ``task.json`` and ``task.weights.h5``: :mod:`keras_vit.weights.keras_hub`), of
  DINOv2 or of SigLIP's or CLIP's image tower (:mod:`keras_vit.weights.keras_hub_family`), or its ``model.weights.h5``.

:func:`describe` returns a :class:`CheckpointInfo` (shapes and settings, no
tensor data), :func:`read` the arrays under the original keys, and
:func:`read_checkpoint` / :func:`checkpoint_shapes` do the same for a path or a
dict of arrays. Every foreign layout is converted by
:mod:`keras_vit.weights.timm` or :mod:`keras_vit.weights.transformers` into the
original keys, so the one loader checks and loads them all.

The readers below this module do one job each, and none imports this one:
:mod:`~keras_vit.weights.sniff` (which kind of file, by its first bytes),
:mod:`~keras_vit.weights.pickles` (pickle files are refused, never unpickled),
:mod:`~keras_vit.weights.safetensors_files` (``.safetensors`` through the
NumPy API, bfloat16 decoded; 16-bit tensors widened to float32, exactly),
:mod:`~keras_vit.weights.shards` (a folder's files and its sharded index),
:mod:`~keras_vit.weights.input_normalization` (a foreign model's input mean and
std folded into the patch embedding, since keras_vit models scale pixels to
[-1, 1]).
"""

import dataclasses
import os

import numpy as np

from keras_vit.errors import CheckpointError
from keras_vit.weights import config as config_lib
from keras_vit.weights import keras_file, keras_hub, npz, shards
from keras_vit.weights import timm as timm_layout
from keras_vit.weights import transformers as transformers_layout
from keras_vit.weights.declared import declare
from keras_vit.weights.input_normalization import fold_normalization, normalization_settings
from keras_vit.weights.safetensors_files import Tensors
from keras_vit.weights.sniff import sniff

_LAYOUTS = {timm_layout.FORMAT: timm_layout, transformers_layout.FORMAT: transformers_layout}


@dataclasses.dataclass
class CheckpointInfo:
    """What a checkpoint holds, read without its tensor data.

    Attributes:
        path: the file or folder.
        format: ``"npz"``, ``"timm"``, ``"transformers"``, ``"keras"`` or ``"keras-hub"``.
        shapes: ``{original key: shape}`` (attention kernels of foreign layouts
            with merged head axes).
        declared: what the file declares about its architecture, ``{field: Declaration}``
            (:mod:`keras_vit.weights.declared`), compared with the model's before a load.
        layer_norm_epsilon: the LayerNorm epsilon the weights were trained with (declared), or None.
        num_heads: heads, when the file says (an ``.npz``'s kernels, a config), else None.
        class_names: names of the head's outputs carried by the file, or None.
        architecture: timm model name or transformers class, if known.
        tag: the pretrained tag of a timm file (``pretrained_cfg.tag``: ``"augreg2_in21k_ft_in1k"``), if known.
        mean, std: input normalisation of a foreign model (None: [-1, 1]).
        grid: ``(rows, cols)`` of the position embeddings when the file says
            (a ``.keras`` model), else None (a square is assumed).
        skipped: ``{keys: reason}`` of the tensors a reader left out on purpose (a CLIP repository's text
            tower, MAE's decoder), for the load report.
        position_resampling: the layout's rule for resampling its position embeddings (timm's
            ``"bicubic_torch_antialias"``, transformers' ``"bicubic_torch"``), or None (the model's).
        classifier_activation: ``(activation, where it is said)`` when the source declares its head's
            activation (keras-hub's ``task.json``; None: logits), else ``()``: :func:`keras_vit.from_pretrained`
            builds the source's own head with it unless ``classifier_activation`` is given.
        notes: what the load report should say about the reading: sentences (where the input normalisation
            comes from) and ``"key: what the conversion did"`` (a zero bias standing in, a head read as a projection).
    """

    path: str
    format: str
    shapes: dict
    declared: dict = dataclasses.field(default_factory=dict)
    class_names: list | None = None
    architecture: str | None = None
    tag: str | None = None
    mean: list | None = None
    std: list | None = None
    grid: tuple | None = None
    skipped: dict = dataclasses.field(default_factory=dict)
    position_resampling: str | None = None
    notes: list = dataclasses.field(default_factory=list)
    classifier_activation: tuple = ()

    @property
    def layer_norm_epsilon(self):
        return self.declared["layer_norm_epsilon"].value if "layer_norm_epsilon" in self.declared else None

    @property
    def num_heads(self):
        return self.declared["num_heads"].value if "num_heads" in self.declared else None


def _open(path):
    """``(format, Tensors or None, config dict or None, config path)`` of a checkpoint path."""
    path = os.fspath(path)
    if keras_hub_folder(path):
        return keras_hub.FORMAT, None, None, None
    if os.path.isdir(path):
        files, config_path = shards.folder_files(path)
    else:
        kind = sniff(path)
        if kind in ("npz", keras_file.FORMAT):
            return kind, None, None, None
        files = [path]
        beside = os.path.join(os.path.dirname(os.path.abspath(path)), "config.json")
        config_path = beside if os.path.isfile(beside) else None
    tensors = Tensors(files)
    if os.path.isdir(path):
        shards.check_index(path, tensors)
    config = config_lib.read_json(config_path) if config_path else None
    if timm_layout.matches(tensors.shapes):
        return timm_layout.FORMAT, tensors, config if (config or {}).get("architecture") else None, config_path
    if transformers_layout.matches(tensors.shapes):
        if config is None:
            raise CheckpointError(
                f"Checkpoint {path!r} is a transformers ViT but has no config.json beside it: keras_vit needs its "
                "num_attention_heads and layer_norm_eps. Load the folder written by save_pretrained."
            )
        return transformers_layout.FORMAT, tensors, config, config_path
    sample = ", ".join(sorted(tensors.shapes)[:5])
    raise CheckpointError(
        f"Checkpoint {path!r} is a .safetensors file but neither a timm ViT nor a transformers ViT "
        f"(keys: {sample}, ...)."
    )


def keras_hub_folder(path):
    """The keras-hub preset folder ``path`` is or whose ``.weights.h5`` it is, else None."""
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    if (os.path.isdir(path) or path.endswith(".weights.h5")) and keras_hub.is_preset(folder):
        return folder
    return None


def _describe_keras_hub(path):
    folder = keras_hub_folder(path)
    settings = keras_hub.settings(folder)
    shapes = keras_hub.shapes(folder, settings)
    expected = list(settings["expected"])
    if settings["task"] is not None:
        expected.append(("num_classes", f"task.json config.num_classes={settings['task']['num_classes']!r}", settings["task"]["num_classes"]))
    config_lib.check_against_weights(expected, shapes, settings["flags"]["use_mha_bias"], os.path.join(folder, "config.json"))
    _check_heads(settings["num_heads"], shapes, os.path.join(folder, "config.json"))
    return CheckpointInfo(
        path=folder, format=keras_hub.FORMAT, shapes=shapes, declared=settings["declared"],
        grid=_declared_grid(settings["expected"], shapes), class_names=settings["class_names"],
        architecture=settings["architecture"], mean=settings["mean"], std=settings["std"], notes=settings["notes"],
        skipped=settings.get("skipped") or {}, position_resampling=settings.get("position_resampling"),
        classifier_activation=_task_activation(settings["task"]),
    )


def _task_activation(task):
    """``(activation or None for logits, said)`` of a keras-hub ``task.json``, or ``()`` without one."""
    if task is None:
        return ()
    activation = None if task["activation"] in (None, "linear") else task["activation"]
    return activation, f"task.json config.activation={task['activation']!r}"


def _layout_settings(fmt, config, config_path, path, tensors=None, architecture=None):
    if fmt == timm_layout.FORMAT:
        return timm_layout.settings(config, config_path or "<config>", weights=path, tensors=tensors, architecture=architecture)
    return transformers_layout.settings(config, config_path)


def _convert(fmt, tensors, settings, path):
    if fmt == transformers_layout.FORMAT:  # the model_type picks the layout; skipped keys go to settings["skipped"]
        return transformers_layout.to_original(tensors, path, settings)
    if fmt == timm_layout.FORMAT:
        return timm_layout.to_original(tensors, path, settings)
    return _LAYOUTS[fmt].to_original(tensors, path)


def describe(path, architecture=None):
    """A :class:`CheckpointInfo` of a checkpoint file or folder: shapes and settings, no tensor data read.

    Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "c.npz")
    >>> np.savez(path, cls=np.zeros((1, 1, 8)))
    >>> info = describe(path)
    >>> info.format, info.shapes, info.layer_norm_epsilon
    ('npz', {'cls': (1, 1, 8)}, 1e-06)

    ``architecture`` replaces a timm config.json's (a preset that names timm's quick_gelu registration).
    """
    path = os.fspath(path)
    fmt, tensors, config, config_path = _open(path)
    if fmt == keras_hub.FORMAT:
        return _describe_keras_hub(path)
    if fmt == "npz":
        shapes = npz.npz_shapes(path)
        return CheckpointInfo(path=path, format="npz", shapes=shapes, declared=npz.declared(shapes, path))
    if fmt == keras_file.FORMAT:
        arrays, config, class_names = keras_file.contents(path)
        shapes = {key: tuple(array.shape) for key, array in arrays.items()}
        return CheckpointInfo(
            path=path, format=fmt, shapes=shapes, declared=keras_file.declared(config, path), class_names=class_names,
            grid=config.grid,
        )
    settings = normalization_settings(path, _layout_settings(fmt, config, config_path, path, tensors, architecture), config_path)
    shapes = {k: tuple(v.shape) for k, v in _convert(fmt, tensors.stand_ins(), settings, path).items()}
    has_bias = any(k.endswith(("attention.attention.query.bias", "attn.qkv.bias", "self_attn.q_proj.bias")) for k in tensors.shapes)
    declared_prefix = settings["declared"].get("prefix_positions")
    prefix = None if declared_prefix is None else (("cls" in shapes) + ("dist" in shapes)) * bool(declared_prefix.value)
    config_lib.check_against_weights(settings["expected"], shapes, has_bias, config_path or path, prefix)
    _check_heads(settings.get("num_heads"), shapes, config_path or path)
    record = dict(settings["declared"])
    if not has_bias:  # zeros stand in for the biases in the shapes; the model must not have other ones
        declare(record, "qkv_bias", False, "no query/key/value bias tensors (qkv_bias=False)", path)
    return CheckpointInfo(
        path=path,
        format=fmt,
        shapes=shapes,
        declared=record,
        grid=_declared_grid(settings["expected"], shapes),
        class_names=settings.get("class_names"),
        architecture=settings.get("architecture"),
        tag=settings.get("tag"),
        mean=settings.get("mean"),
        std=settings.get("std"),
        skipped=settings.get("skipped") or {},
        position_resampling=settings.get("position_resampling"),
        notes=list(settings.get("notes") or []),
    )


def _declared_grid(expected, shapes):
    """``(rows, cols)`` of the position embeddings from the image size a config states (checked against them), or None."""
    kernel = shapes.get("embedding/kernel")
    sizes = [value for quantity, _, value in expected if quantity == "image_size"]
    if not sizes or kernel is None or len(kernel) != 4:
        return None
    return sizes[0][0] // kernel[0], sizes[0][1] // kernel[1]


def _check_heads(num_heads, shapes, path):
    width = shapes.get("embedding/kernel", (None,) * 4)[3]
    if num_heads is not None and width is not None and width % num_heads:
        raise CheckpointError(f"{path!r}: {num_heads} heads do not divide the width {width} of the weights.")


def read(path, input_mean=None, input_std=None, architecture=None):
    """``{original key: np.ndarray}`` of any supported checkpoint (see the module docstring).

    A foreign model's input normalisation is folded into the patch embedding for a model that scales
    its inputs with ``input_mean`` / ``input_std`` (default: keras_vit's [-1, 1]); ``architecture``
    as in :func:`describe`.

    Example:
    >>> read("model.safetensors")["embedding/kernel"].shape  # doctest: +SKIP
    (16, 16, 3, 192)
    """
    path = os.fspath(path)
    fmt, tensors, config, config_path = _open(path)
    if fmt == keras_hub.FORMAT:
        folder = keras_hub_folder(path)
        settings = keras_hub.settings(folder)
        arrays = keras_hub.arrays(folder, settings)
        return fold_normalization(arrays, settings["mean"], settings["std"], input_mean, input_std)
    if fmt == "npz":
        return npz.npz_arrays(path)
    if fmt == keras_file.FORMAT:
        return keras_file.read(path)
    settings = normalization_settings(path, _layout_settings(fmt, config, config_path, path, tensors, architecture), config_path)
    arrays = {k: np.asarray(v) for k, v in _convert(fmt, tensors.arrays(), settings, path).items()}
    return fold_normalization(arrays, settings.get("mean"), settings.get("std"), input_mean, input_std)


def read_checkpoint(path, input_mean=None, input_std=None, architecture=None):
    """Read a checkpoint into ``{canonical key: np.ndarray}``.

    An ``.npz`` is opened with ``allow_pickle=False``; a timm or transformers
    ``.safetensors`` file or folder is converted to the original layout
    (:func:`read`, which also takes ``input_mean``, ``input_std``, ``architecture``); pickle files are refused. Every array is
    read now, so a truncated or corrupt file fails here with its name, never
    half-way through a load.

    Args:
        path: a checkpoint file or folder, or a dict of arrays (keys of any supported naming).

    Example:
    >>> read_checkpoint({"params/cls": np.zeros((1, 1, 8))})["cls"].shape
    (1, 1, 8)
    """
    if isinstance(path, dict):
        return npz.canonical_arrays(path)
    return read(path, input_mean, input_std, architecture)


def checkpoint_shapes(path):
    """``{canonical key: shape}`` of a checkpoint (any format :func:`read_checkpoint` reads): the data is not read.

    What a builder peeks at before it builds (the pre-logits width, the hybrid's
    stages); :func:`read_checkpoint` reads the arrays when they are loaded.
    :func:`describe` returns these shapes with the
    file's settings (LayerNorm epsilon, heads, class names).

    Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "c.npz")
    >>> np.savez(path, **{"params/pre_logits/kernel": np.zeros((8, 4))})
    >>> checkpoint_shapes(path)
    {'pre_logits/kernel': (8, 4)}
    """
    return describe(path).shapes
