"""A checkpoint path looked at once for every source that is asked about it (:class:`Opened`): its kind told by its
first bytes (:func:`sniff`), pickle files refused unread (:func:`refuse_pickle`), a ``save_pretrained`` folder's
``.safetensors`` files and shard index (:func:`folder_files`, :func:`check_index`), their tensors (:class:`Tensors`).
"""

import os
import struct
import zipfile

import ml_dtypes  # registers bfloat16 with NumPy, which safetensors' NumPy API needs to return a BF16 tensor
import numpy as np
from safetensors import SafetensorError, safe_open

from keras_vit.errors import CheckpointError
from keras_vit.weights import config as config_lib
from keras_vit.weights import keras_file

PICKLE_SUFFIXES = (".bin", ".pth", ".pt", ".ckpt", ".pkl", ".pickle")
FLOAT_DTYPES = ("BF16", "F16", "F32", "F64")
# torch's BatchNorm saves its training-step counter beside its weights (an integer): read by no layer
BATCH_COUNTER = "num_batches_tracked"
INDEX_FILE = "model.safetensors.index.json"  # a sharded folder's map of tensor name -> shard file
WHOLE_FILE = "model.safetensors"  # a folder's unsharded weights, read before any index (transformers' order)


def refuse_pickle(path, what=None):
    """Raise the ``CheckpointError`` that refuses ``path``: ``what`` it is (default: a pickle file) and what to use instead."""
    raise CheckpointError(
        f"Checkpoint {path!r} is {what or 'a pickle file (PyTorch .bin/.pth)'}: keras_vit never unpickles weights. "
        "Use the .safetensors file that the same model publishes (model.safetensors on the Hugging Face Hub), "
        "or save one with safetensors.torch.save_file(model.state_dict(), 'model.safetensors')."
    )


def sniff(path):
    """``"npz"``, ``"keras"``, ``"safetensors"``, or a ``CheckpointError`` naming the file and what it really is: a
    zip archive is a ``.keras`` model when it holds the entries ``model.save`` writes, a PyTorch archive (refused)
    when it holds a ``data.pkl``, else an ``.npz``; a ``.safetensors`` file starts with the 8-byte little-endian
    size of its JSON header and ``{``; pickles (refused) by their suffix or first byte, since unpickling runs code."""
    if not os.path.isfile(path):
        raise CheckpointError(f"Checkpoint not found: {path!r}")
    if path.lower().endswith(PICKLE_SUFFIXES):
        refuse_pickle(path)
    with open(path, "rb") as f:
        head = f.read(16)
    if head.startswith(b"PK"):
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
        except zipfile.BadZipFile as error:
            raise CheckpointError(f"Cannot read checkpoint {path!r}: a damaged zip/.npz archive ({error}).") from error
        if any(name.endswith("data.pkl") for name in names):
            refuse_pickle(path, "a PyTorch archive (torch.save, pickled)")
        return keras_file.FORMAT if keras_file.is_keras_archive(names) else "npz"
    if head.startswith(b"\x93NUMPY"):
        raise CheckpointError(f"Checkpoint {path!r} is a single NumPy array (.npy), not an .npz checkpoint of named arrays.")
    if len(head) >= 9 and head[8:9] == b"{" and struct.unpack("<Q", head[:8])[0] < os.path.getsize(path):
        return "safetensors"
    if head[:1] == b"\x80":
        refuse_pickle(path)
    raise CheckpointError(
        f"Checkpoint {path!r} is neither an .npz archive nor a .safetensors file (it starts with {head[:8]!r}). "
        "The file may be truncated or corrupt; download it again."
    )


def folder_files(folder):
    """The ``.safetensors`` files of a folder (``model.safetensors``, else the shards its index lists: transformers'
    order, so a folder holding both gives the weights transformers loads) and its ``config.json`` (or None)."""
    config = os.path.join(folder, "config.json")
    index = os.path.join(folder, INDEX_FILE)
    if os.path.isfile(os.path.join(folder, WHOLE_FILE)):
        files = [os.path.join(folder, WHOLE_FILE)]
    elif os.path.isfile(index):
        files = [os.path.join(folder, shard) for shard in sorted(set(read_index(index).values()))]
    else:
        files = sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".safetensors"))
    if not files:
        pickles = sorted(n for n in os.listdir(folder) if n.endswith(PICKLE_SUFFIXES))
        if pickles:
            refuse_pickle(os.path.join(folder, pickles[0]), f"a folder whose only weights are pickle files ({', '.join(pickles)})")
        presets = sorted(n for n in os.listdir(folder) if n.endswith(".weights.h5"))
        if presets:  # a keras-hub preset whose config.json does not say so
            raise CheckpointError(
                f"Folder {folder!r} holds {', '.join(presets)} and no .safetensors file, as a keras-hub preset does, "
                "but its config.json has no 'registered_name' starting with 'keras_hub>' (keras-hub's save_to_preset "
                "writes one, e.g. 'keras_hub>ViTBackbone'), so it is read as no preset. Fix config.json, or save the "
                "preset again with save_to_preset."
            )
        raise CheckpointError(f"Folder {folder!r} holds no model.safetensors (nor any .safetensors file).")
    return files, (config if os.path.isfile(config) else None)


def _refuse_a_shard(path):
    """A ``.safetensors`` file that the sharded index beside it lists holds part of a model: refused, naming the folder."""
    folder = os.path.dirname(os.path.abspath(path))
    index = os.path.join(folder, INDEX_FILE)
    if os.path.basename(path) == WHOLE_FILE or not os.path.isfile(index):
        return  # a whole model's file (folder_files reads it before any index)
    try:
        shards = set(read_index(index).values())
    except CheckpointError:  # an index that cannot be read says nothing of this file, which is read as it is
        return
    if os.path.basename(path) in shards:
        raise CheckpointError(f"{path!r} is one shard of the model that {index!r} lists; load the folder {folder!r}, "
                              "which reads every shard.")


def read_index(index):
    """The ``weight_map`` of a sharded index, checked: a JSON object of tensor name -> shard file in the folder.

    Every value must be the name of a file beside the index (a relative path that stays inside the
    folder: no absolute path, no ``..``); an index that is not of that shape is refused naming the
    file and the key, before any shard is opened.

    Example:
    >>> import json, os, tempfile
    >>> index = os.path.join(tempfile.mkdtemp(), "model.safetensors.index.json")
    >>> with open(index, "w") as f:
    ...     json.dump({"weight_map": {"x": 3}}, f)
    >>> read_index(index)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    keras_vit.errors.CheckpointError: '...index.json': weight_map['x']=3, expected the name of a shard file (a string).
    """
    content = config_lib.read_json(index)
    if "weight_map" not in content:
        raise CheckpointError(f"{index!r} has no weight_map (tensor name -> shard file); the index is damaged.")
    weight_map = config_lib.json_object(content["weight_map"], index, "weight_map")
    for key, shard in weight_map.items():
        if not isinstance(shard, str) or not shard:
            raise CheckpointError(
                f"{index!r}: weight_map[{key!r}]={shard!r}, expected the name of a shard file (a string)."
            )
        normal = os.path.normpath(shard)
        if os.path.isabs(shard) or normal == ".." or normal.startswith(".." + os.sep) or normal == "." or "\0" in shard:
            raise CheckpointError(
                f"{index!r}: weight_map[{key!r}]={shard!r} is not a file inside the folder of the index "
                "(an absolute path or one that leaves it with '..'); shards are named relative to the folder."
            )
    return weight_map


def check_index(folder, tensors):
    """The shards of a sharded folder hold exactly the tensors its index maps to them (no mixed-up shard)."""
    index = os.path.join(folder, INDEX_FILE)
    if not os.path.isfile(index) or os.path.isfile(os.path.join(folder, WHOLE_FILE)):
        return  # not sharded, or model.safetensors read instead of the shards (folder_files)
    weight_map = {key: file for key, file in read_index(index).items() if key.rpartition(".")[2] != BATCH_COUNTER}
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


class Tensors:
    """The tensors of ``.safetensors`` files: their shapes, or stand-ins, or the data (NumPy API, no torch); float
    dtypes only (:data:`FLOAT_DTYPES`), a key found in two files refused."""

    def __init__(self, files):
        self.where = {}
        self.shapes = {}
        for file in files:
            if not os.path.isfile(file):
                raise CheckpointError(f"Checkpoint not found: {file!r}")
            try:
                with safe_open(file, framework="np") as f:
                    for key in f.keys():
                        part = f.get_slice(key)
                        dtype = part.get_dtype()
                        if key.rpartition(".")[2] == BATCH_COUNTER and dtype.startswith(("I", "U")):
                            continue  # torch BatchNorm's step counter: no weight, never computed with
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

    def array(self, key):
        """One tensor (e.g. a bias a reader decides by), without reading the others; 16-bit floats widened to float32
        (exactly), so folding and resampling run in float32."""
        file = self.where[key]
        try:
            with safe_open(file, framework="np") as f:
                array = np.asarray(f.get_tensor(key))
        except (SafetensorError, OSError, ValueError) as error:
            raise CheckpointError(f"Cannot read checkpoint {file!r} ({type(error).__name__}: {error}).") from error
        return array.astype(np.float32) if array.dtype in (np.float16, ml_dtypes.bfloat16) else array

    def arrays(self):
        """``{key: array}`` of every tensor (:meth:`array`)."""
        return {key: self.array(key) for key in self.shapes}


class Opened:
    """A path and what was read of it so far.

    Example:
    >>> import os, tempfile
    >>> Opened(tempfile.mkdtemp()).kind
    'folder'
    >>> Opened(os.path.join(tempfile.mkdtemp(), "none.npz")).kind is None  # sniff's error, kept for the end
    True
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        self.error = None  # why sniff said no file kind, raised when no source claims the path
        self._state_dict = None
        if os.path.basename(self.path) == INDEX_FILE and os.path.isfile(self.path):
            self.path = os.path.dirname(os.path.abspath(self.path))  # a sharded index: its folder's weights
        if os.path.isdir(self.path):
            self.kind = "folder"
            return
        try:
            self.kind = sniff(self.path)
        except CheckpointError as error:
            self.kind, self.error = None, error

    def state_dict(self):
        """``(Tensors, config dict or None, config path or None)`` of a ``.safetensors`` file (its ``config.json``
        beside it) or folder (``model.safetensors`` or its shards, checked against their index), read once."""
        if self._state_dict is None:
            if self.kind == "folder":
                files, config_path = folder_files(self.path)
            elif self.kind == "safetensors":
                files = [self.path]
                _refuse_a_shard(self.path)
                beside = os.path.join(os.path.dirname(os.path.abspath(self.path)), "config.json")
                config_path = beside if os.path.isfile(beside) else None
            else:
                raise CheckpointError(f"Checkpoint {self.path!r} is no .safetensors file or folder.")
            tensors = Tensors(files)
            if self.kind == "folder":
                check_index(self.path, tensors)
            config = config_lib.read_json(config_path) if config_path else None
            self._state_dict = tensors, config, config_path
        return self._state_dict

    def keys(self):
        """The tensor names of a ``.safetensors`` file or folder, else ``()`` (nothing read for other kinds)."""
        if self.kind not in ("folder", "safetensors"):
            return ()
        return self.state_dict()[0].shapes
