"""Reading ``.safetensors`` files with the ``safetensors`` package's NumPy API (no torch): shapes, stand-ins, arrays.

Only float tensors are read (:data:`FLOAT_DTYPES`). NumPy has no bfloat16, so
``BF16`` tensors are decoded from the file's own layout
(:func:`bfloat16_tensors`); 16-bit tensors are widened to float32, exactly.
Several files (the shards of one folder) read as one set of tensors, and a key
found in two of them is refused.
"""

import json
import os
import struct

import numpy as np
from safetensors import SafetensorError, safe_open

from keras_vit.errors import CheckpointError

FLOAT_DTYPES = ("BF16", "F16", "F32", "F64")


class Tensors:
    """The tensors of ``.safetensors`` files: their shapes, or stand-ins, or the data (NumPy API, no torch)."""

    def __init__(self, files):
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

    def array(self, key):
        """One tensor as float32 (e.g. a bias a reader decides by), without reading the others."""
        file = self.where[key]
        if self.dtypes[key] == "BF16":
            return bfloat16_tensors(file, [key])[key]
        try:
            with safe_open(file, framework="np") as f:
                return np.asarray(f.get_tensor(key), np.float32)
        except (SafetensorError, OSError, ValueError) as error:
            raise CheckpointError(f"Cannot read checkpoint {file!r} ({type(error).__name__}: {error}).") from error

    def arrays(self):
        """``{key: array}``; 16-bit floats widened to float32 (exactly), so folding and resampling run in float32."""
        arrays = {}
        for file in self.files:
            try:
                with safe_open(file, framework="np") as f:
                    for key in f.keys():
                        if self.dtypes[key] != "BF16":
                            array = np.asarray(f.get_tensor(key))
                            arrays[key] = array.astype(np.float32) if array.dtype == np.float16 else array
                halves = [k for k, where in self.where.items() if where == file and self.dtypes[k] == "BF16"]
                arrays.update(bfloat16_tensors(file, halves))
            except (SafetensorError, OSError, ValueError) as error:
                raise CheckpointError(f"Cannot read checkpoint {file!r} ({type(error).__name__}: {error}).") from error
        return arrays


def bfloat16_tensors(file, keys):
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
