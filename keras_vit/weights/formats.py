"""Which checkpoint format a path holds, and reading it into the original layout.

Four formats, told apart by content (not only by the name):

* ``npz``: an original Google ``.npz`` (:mod:`keras_vit.weights.npz`);
* ``timm``: a timm ViT state dict in a ``.safetensors`` file, or a folder with
  ``config.json`` (``"architecture": ...``) and ``model.safetensors`` (a timm
  Hugging Face Hub repository);
* ``transformers``: a folder written by ``save_pretrained`` (``config.json``
  with ``"model_type": "vit"``, ``model.safetensors`` or sharded
  ``model.safetensors.index.json``), or its ``.safetensors`` with the
  ``config.json`` beside it;
* ``keras``: a ``.keras`` model saved by keras_vit (:mod:`keras_vit.weights.keras_file`).

``.safetensors`` are read with the ``safetensors`` package's NumPy API (bfloat16
tensors from the file's own layout, NumPy having no such type; 16-bit tensors are
widened to float32, exactly); pickle
files (``.bin``, ``.pth``, ``.pt``, ``.ckpt``, PyTorch zip archives) are
refused, never unpickled. Every foreign layout is converted by
:mod:`keras_vit.weights.timm` or :mod:`keras_vit.weights.transformers` into the
original keys, so the one loader checks and loads them all. A timm or
transformers model trained on inputs normalised with another mean and standard
deviation than 0.5 gets them folded into the patch embedding (exact: the
embedding is linear), since keras_vit models scale pixels to [-1, 1].
"""

import dataclasses
import json
import os
import struct
import zipfile

import numpy as np

from keras_vit.errors import CheckpointError
from keras_vit.weights import config as config_lib
from keras_vit.weights import keras_file, npz
from keras_vit.weights import timm as timm_layout
from keras_vit.weights import transformers as transformers_layout

PICKLE_SUFFIXES = (".bin", ".pth", ".pt", ".ckpt", ".pkl", ".pickle")
FLOAT_DTYPES = ("BF16", "F16", "F32", "F64")
_LAYOUTS = {timm_layout.FORMAT: timm_layout, transformers_layout.FORMAT: transformers_layout}


@dataclasses.dataclass
class CheckpointInfo:
    """What a checkpoint holds, read without its tensor data.

    Attributes:
        path: the file or folder.
        format: ``"npz"``, ``"timm"``, ``"transformers"`` or ``"keras"``.
        shapes: ``{original key: shape}`` (attention kernels of foreign layouts
            with merged head axes).
        layer_norm_epsilon: the LayerNorm epsilon the weights were trained with.
        num_heads: heads, when the file says (a config), else None.
        class_names: names of the head's outputs carried by the file, or None.
        architecture: timm model name or transformers class, if known.
        tag: the pretrained tag of a timm file (``pretrained_cfg.tag``: ``"augreg2_in21k_ft_in1k"``), if known.
        mean, std: input normalisation of a foreign model (None: [-1, 1]).
        grid: ``(rows, cols)`` of the position embeddings when the file says
            (a ``.keras`` model), else None (a square is assumed).
    """

    path: str
    format: str
    shapes: dict
    layer_norm_epsilon: float = 1e-6
    num_heads: int | None = None
    class_names: list | None = None
    architecture: str | None = None
    tag: str | None = None
    mean: list | None = None
    std: list | None = None
    grid: tuple | None = None


def _refuse_pickle(path, what=None):
    raise CheckpointError(
        f"Checkpoint {path!r} is {what or 'a pickle file (PyTorch .bin/.pth)'}: keras_vit never unpickles weights. "
        "Use the .safetensors file that the same model publishes (model.safetensors on the Hugging Face Hub), "
        "or save one with safetensors.torch.save_file(model.state_dict(), 'model.safetensors')."
    )


def _sniff(path):
    """``"npz"``, ``"keras"``, ``"safetensors"``, or a ``CheckpointError`` naming the file and what it really is."""
    if not os.path.isfile(path):
        raise CheckpointError(f"Checkpoint not found: {path!r}")
    if path.lower().endswith(PICKLE_SUFFIXES):
        _refuse_pickle(path)
    with open(path, "rb") as f:
        head = f.read(16)
    if head.startswith(b"PK"):
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
        except zipfile.BadZipFile as error:
            raise CheckpointError(f"Cannot read checkpoint {path!r}: a damaged zip/.npz archive ({error}).") from error
        if any(name.endswith("data.pkl") for name in names):
            _refuse_pickle(path, "a PyTorch archive (torch.save, pickled)")
        return keras_file.FORMAT if keras_file.is_keras_archive(names) else "npz"
    if head.startswith(b"\x93NUMPY"):
        raise CheckpointError(f"Checkpoint {path!r} is a single NumPy array (.npy), not an .npz checkpoint of named arrays.")
    if len(head) >= 9 and head[8:9] == b"{" and struct.unpack("<Q", head[:8])[0] < os.path.getsize(path):
        return "safetensors"
    if head[:1] == b"\x80":
        _refuse_pickle(path)
    raise CheckpointError(
        f"Checkpoint {path!r} is neither an .npz archive nor a .safetensors file (it starts with {head[:8]!r}). "
        "The file may be truncated or corrupt; download it again."
    )


def _read_json(path):
    """The JSON object in ``path``, or a ``CheckpointError`` naming the file (unreadable, not JSON, not an object)."""
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError) as error:
        raise CheckpointError(f"Cannot read {path!r}: {error}") from error
    return config_lib.json_object(value, path)


def _folder_files(folder):
    """The ``.safetensors`` files of a folder and its ``config.json`` (or None)."""
    config = os.path.join(folder, "config.json")
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        weight_map = config_lib.json_object(_read_json(index).get("weight_map", {}), index, "weight_map")
        files = [os.path.join(folder, shard) for shard in sorted(set(weight_map.values()))]
    elif os.path.isfile(os.path.join(folder, "model.safetensors")):
        files = [os.path.join(folder, "model.safetensors")]
    else:
        files = sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".safetensors"))
    if not files:
        pickles = sorted(n for n in os.listdir(folder) if n.endswith(PICKLE_SUFFIXES))
        if pickles:
            _refuse_pickle(os.path.join(folder, pickles[0]), f"a folder whose only weights are pickle files ({', '.join(pickles)})")
        raise CheckpointError(f"Folder {folder!r} holds no model.safetensors (nor any .safetensors file).")
    return files, (config if os.path.isfile(config) else None)


def _check_index(folder, tensors):
    """The shards of a sharded folder hold exactly the tensors its index maps to them (no mixed-up shard)."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if not os.path.isfile(index):
        return
    weight_map = _read_json(index).get("weight_map", {})
    found = {key: os.path.basename(file) for key, file in tensors.where.items()}
    wrong = sorted(k for k in set(weight_map) | set(found) if found.get(k) != weight_map.get(k))
    if wrong:
        shown = "; ".join(
            f"{k!r}: index says {weight_map.get(k)!r}, found in {repr(found[k]) if k in found else 'no shard'}"
            for k in wrong[:5]
        )
        raise CheckpointError(
            f"{index!r} does not match its shards ({len(wrong)} tensor(s): {shown}"
            f"{' ...' if len(wrong) > 5 else ''}); "
            "the shards and the index come from different downloads. Download the model again."
        )


class _Tensors:
    """The tensors of ``.safetensors`` files: their shapes, or stand-ins, or the data (NumPy API, no torch)."""

    def __init__(self, files):
        from safetensors import SafetensorError, safe_open

        self.files = files
        self.where = {}
        self.shapes = {}
        self.dtypes = {}
        for file in files:
            if not os.path.isfile(file):
                raise CheckpointError(f"Checkpoint not found: {file!r}")
            try:
                with safe_open(file, framework="np") as f:
                    for key in f.keys():
                        part = f.get_slice(key)
                        dtype = part.get_dtype()
                        if dtype not in FLOAT_DTYPES:
                            raise CheckpointError(
                                f"Checkpoint {file!r}: tensor {key!r} has dtype {dtype}; keras_vit reads bfloat16, "
                                "float16, float32 and float64 (save the weights as float32)."
                            )
                        if key in self.where:  # two files of one folder: which one wins would be file order
                            raise CheckpointError(
                                f"Tensor {key!r} is in both {self.where[key]!r} and {file!r}; a model's weights are "
                                "one .safetensors file or the shards of one model.safetensors.index.json. "
                                "Move the other file out of the folder, or pass the file itself."
                            )
                        self.where[key] = file
                        self.dtypes[key] = dtype
                        self.shapes[key] = tuple(part.get_shape())
            except CheckpointError:
                raise
            except (SafetensorError, OSError, ValueError) as error:
                raise CheckpointError(
                    f"Cannot read checkpoint {file!r}: not a valid .safetensors file ({type(error).__name__}: {error}). "
                    "The file may be truncated or corrupt; download it again."
                ) from error
        if not self.shapes:
            raise CheckpointError(f"Checkpoint {files[0]!r} holds no tensors.")

    def stand_ins(self):
        """Zero-stride arrays of the right shapes: the layout converters run on them without reading data."""
        zero = np.zeros((), np.float32)
        return {key: np.broadcast_to(zero, shape) for key, shape in self.shapes.items()}

    def arrays(self):
        """``{key: array}``; 16-bit floats widened to float32 (exactly), so folding and resampling run in float32."""
        from safetensors import SafetensorError, safe_open

        arrays = {}
        for file in self.files:
            try:
                with safe_open(file, framework="np") as f:
                    for key in f.keys():
                        if self.dtypes[key] != "BF16":
                            array = np.asarray(f.get_tensor(key))
                            arrays[key] = array.astype(np.float32) if array.dtype == np.float16 else array
                halves = [k for k, where in self.where.items() if where == file and self.dtypes[k] == "BF16"]
                arrays.update(_bfloat16_tensors(file, halves))
            except (SafetensorError, OSError, ValueError) as error:
                raise CheckpointError(f"Cannot read checkpoint {file!r} ({type(error).__name__}: {error}).") from error
        return arrays


def _bfloat16_tensors(file, keys):
    """The ``BF16`` tensors ``keys`` of a ``.safetensors`` file as float32, read from the file's own layout.

    NumPy has no bfloat16 (safetensors' NumPy API returns one only when ``ml_dtypes`` is
    imported), and bfloat16 is the upper half of a float32: its 16 bits shifted left by 16 are
    the same number as a float32. The layout (an 8-byte little-endian header size, a JSON header
    with each tensor's ``dtype``, ``shape`` and ``data_offsets`` into the data that follows) is
    the one ``safe_open`` has just validated.
    """
    if not keys:
        return {}
    out = {}
    with open(file, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        for key in keys:
            begin, end = header[key]["data_offsets"]
            shape = tuple(header[key]["shape"])
            f.seek(8 + size + begin)
            bits = np.frombuffer(f.read(end - begin), dtype="<u2")
            if bits.size != int(np.prod(shape, dtype=np.int64)):
                raise CheckpointError(f"Checkpoint {file!r}: tensor {key!r} holds {bits.size} values for shape {shape}.")
            out[key] = (bits.astype(np.uint32) << 16).view(np.float32).reshape(shape)
    return out


def _open(path):
    """``(format, _Tensors or None, config dict or None, config path)`` of a checkpoint path."""
    path = os.fspath(path)
    if os.path.isdir(path):
        files, config_path = _folder_files(path)
    else:
        kind = _sniff(path)
        if kind in ("npz", keras_file.FORMAT):
            return kind, None, None, None
        files = [path]
        beside = os.path.join(os.path.dirname(os.path.abspath(path)), "config.json")
        config_path = beside if os.path.isfile(beside) else None
    tensors = _Tensors(files)
    if os.path.isdir(path):
        _check_index(path, tensors)
    config = _read_json(config_path) if config_path else None
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


def _layout_settings(fmt, config, config_path):
    if fmt == timm_layout.FORMAT:
        return timm_layout.settings(config, config_path or "<config>")
    return transformers_layout.settings(config, config_path)


def _preprocessing(path, settings, config_path):
    """The settings with the input mean and std checked: timm's ``pretrained_cfg``, else a transformers
    ``preprocessor_config.json`` next to the weights, if any."""
    where = (config_path, "pretrained_cfg.mean", "pretrained_cfg.std")
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    file = os.path.join(folder, "preprocessor_config.json")
    if settings.get("mean") is None and os.path.isfile(file):
        config = _read_json(file)
        if config.get("do_normalize", True):
            settings["mean"], settings["std"] = config.get("image_mean"), config.get("image_std")
            where = (file, "image_mean", "image_std")
    for value, field in ((settings.get("mean"), where[1]), (settings.get("std"), where[2])):
        if value is None:
            continue
        positive = field == where[2]
        if (
            not isinstance(value, list)
            or len(value) != 3
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v) for v in value)
            or (positive and min(value) <= 0)
        ):
            raise CheckpointError(
                f"{where[0]!r}: {field}={value!r}, expected 3 {'positive ' if positive else ''}numbers, "
                "one per RGB channel."
            )
    return settings


def _convert(fmt, tensors, settings, path):
    converted = _LAYOUTS[fmt].to_original(tensors, path)
    if fmt == timm_layout.FORMAT:
        pool = settings.get("global_pool")
        if pool not in (None, "", "token", "avg") or (pool == "avg" and "cls" in converted):
            raise CheckpointError(
                f"Checkpoint {path!r}: timm global_pool={pool!r} with{'' if 'cls' in converted else 'out'} a class token; "
                "keras_vit pools the class token ('token') or averages the tokens of a model without one ('avg')."
            )
    return converted


def describe(path):
    """A :class:`CheckpointInfo` of a checkpoint file or folder: shapes and settings, no tensor data read.

    Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "c.npz")
    >>> np.savez(path, cls=np.zeros((1, 1, 8)))
    >>> info = describe(path)
    >>> info.format, info.shapes, info.layer_norm_epsilon
    ('npz', {'cls': (1, 1, 8)}, 1e-06)
    """
    path = os.fspath(path)
    fmt, tensors, config, config_path = _open(path)
    if fmt == "npz":
        return CheckpointInfo(path=path, format="npz", shapes=npz.npz_shapes(path))
    if fmt == keras_file.FORMAT:
        arrays, epsilon, class_names, grid = keras_file.contents(path)
        shapes = {key: tuple(array.shape) for key, array in arrays.items()}
        return CheckpointInfo(
            path=path, format=fmt, shapes=shapes, layer_norm_epsilon=epsilon, class_names=class_names, grid=grid,
        )
    settings = _preprocessing(path, _layout_settings(fmt, config, config_path), config_path)
    shapes = {k: tuple(v.shape) for k, v in _convert(fmt, tensors.stand_ins(), settings, path).items()}
    has_bias = any(k.endswith(("attention.attention.query.bias", "attn.qkv.bias")) for k in tensors.shapes)
    config_lib.check_against_weights(settings["expected"], shapes, has_bias, config_path or path)
    _check_heads(settings.get("num_heads"), shapes, config_path or path)
    return CheckpointInfo(
        path=path,
        format=fmt,
        shapes=shapes,
        layer_norm_epsilon=settings["layer_norm_epsilon"],
        num_heads=settings.get("num_heads"),
        class_names=settings.get("class_names"),
        architecture=settings.get("architecture"),
        tag=settings.get("tag"),
        mean=settings.get("mean"),
        std=settings.get("std"),
    )


def _check_heads(num_heads, shapes, path):
    width = shapes.get("embedding/kernel", (None,) * 4)[3]
    if num_heads is not None and width is not None and width % num_heads:
        raise CheckpointError(f"{path!r}: {num_heads} heads do not divide the width {width} of the weights.")


def read(path):
    """``{original key: np.ndarray}`` of any supported checkpoint (see the module docstring).

    Example:
    >>> read("model.safetensors")["embedding/kernel"].shape  # doctest: +SKIP
    (16, 16, 3, 192)
    """
    path = os.fspath(path)
    fmt, tensors, config, config_path = _open(path)
    if fmt == "npz":
        return npz.npz_arrays(path)
    if fmt == keras_file.FORMAT:
        return keras_file.read(path)
    settings = _preprocessing(path, _layout_settings(fmt, config, config_path), config_path)
    arrays = {k: np.asarray(v) for k, v in _convert(fmt, tensors.arrays(), settings, path).items()}
    return fold_normalization(arrays, settings.get("mean"), settings.get("std"))


def fold_normalization(arrays, mean, std):
    """Make a model trained on ``(x / 255 - mean) / std`` inputs take keras_vit's ``x / 127.5 - 1``.

    With ``u = x / 127.5 - 1``, ``(x / 255 - mean) / std = u / (2 std) + (0.5 - mean) / std``: the
    patch embedding's kernel is scaled per input channel and the constant goes into its bias.
    Nothing changes when ``mean`` and ``std`` are 0.5 (or None).

    Example:
    >>> arrays = {"embedding/kernel": np.ones((1, 1, 3, 1)), "embedding/bias": np.zeros(1)}
    >>> out = fold_normalization(arrays, [0.0, 0.0, 0.0], [1.0, 1.0, 1.0])
    >>> out["embedding/kernel"].ravel().tolist(), out["embedding/bias"].tolist()
    ([0.5, 0.5, 0.5], [1.5])
    """
    if mean is None or std is None:
        return arrays
    mean, std = np.asarray(mean, np.float64), np.asarray(std, np.float64)
    if mean.shape != (3,) or std.shape != (3,) or np.any(std <= 0):
        raise CheckpointError(f"Cannot use the input normalisation mean={mean.tolist()}, std={std.tolist()}.")
    if np.allclose(mean, 0.5) and np.allclose(std, 0.5):
        return arrays
    kernel = np.asarray(arrays["embedding/kernel"], np.float64)  # (P, P, C, D)
    out = dict(arrays)
    out["embedding/kernel"] = (kernel / (2.0 * std)[None, None, :, None]).astype(arrays["embedding/kernel"].dtype)
    shift = np.einsum("yxcd,c->d", kernel, (0.5 - mean) / std)
    out["embedding/bias"] = (np.asarray(arrays["embedding/bias"], np.float64) + shift).astype(arrays["embedding/bias"].dtype)
    return out
