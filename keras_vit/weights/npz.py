"""Reading the original Google ViT ``.npz`` under canonical keys: arrays, or shapes only (from the array headers).

Reads the files of google-research/vision_transformer (imagenet21k, imagenet21k+imagenet2012 and AugReg releases)
in the original naming (``MultiHeadDotProductAttention_1``, ``LayerNorm_2``, ``MlpBlock_3``), the newer Flax naming
(``..._0``, ``LayerNorm_1``, ``MlpBlock_0``, optional ``params/`` prefix), and files saved with their ``flax.optim``
optimizer (``opt/target/`` prefix); every key is returned in the original naming.
"""

import contextlib
import os
import zipfile

import numpy as np

from keras_vit.errors import CheckpointError
from keras_vit.layers.checks import LAYER_NORM_EPSILON
from keras_vit.weights.declared import declare
from keras_vit.weights.source import CheckpointInfo, Source

QUERY_KERNEL = "Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel"

# newer Flax naming inside an encoder block -> the original naming
_BLOCK_RENAMES = {
    "MultiHeadDotProductAttention_0": "MultiHeadDotProductAttention_1",
    "LayerNorm_1": "LayerNorm_2",
    "MlpBlock_0": "MlpBlock_3",
}


def canonical_key(key):
    """Map a checkpoint key of any supported naming to the original naming (the optimizer's ``opt/state/...``
    moments are dropped by :func:`canonical_arrays` and :func:`npz_arrays`).

    Example:
    >>> canonical_key("params/Transformer/encoderblock_3/MlpBlock_0/Dense_1/bias")
    'Transformer/encoderblock_3/MlpBlock_3/Dense_1/bias'
    """
    for prefix in ("opt/target/", "params/"):
        if key.startswith(prefix):
            key = key[len(prefix):]
    parts = key.split("/")
    if len(parts) > 2 and parts[0] == "Transformer" and parts[1].startswith("encoderblock_"):
        parts[2] = _BLOCK_RENAMES.get(parts[2], parts[2])
    return "/".join(parts)


def _optimizer_state(key):  # the optimizer-state arrays saved beside opt/target/ (not weights)
    return key.startswith("opt/") and not key.startswith("opt/target/")


def _claim(claimed, key, where):
    """``key``'s canonical key, recorded in ``claimed`` (canonical -> original); two keys of one canonical key (a weight
    under two namings: ``head/bias`` and ``params/head/bias``) are refused naming both, never one chosen."""
    canonical = canonical_key(key)
    if canonical in claimed:
        raise CheckpointError(
            f"{where}holds {claimed[canonical]!r} and {key!r}, two names of the one weight {canonical!r}: it would be "
            "whichever was read last. Keep one of them."
        )
    claimed[canonical] = key
    return canonical


@contextlib.contextmanager
def _reading(path):
    """Turn a missing, truncated or corrupt file into a ``CheckpointError`` naming it."""
    if not os.path.isfile(path):
        raise CheckpointError(f"Checkpoint not found: {path!r}")
    try:
        yield
    except CheckpointError:
        raise
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError, zipfile.LargeZipFile, MemoryError) as error:
        raise CheckpointError(
            f"Cannot read checkpoint {path!r}: not a valid .npz file ({type(error).__name__}: {error}). "
            "The file may be truncated or corrupt; download it again."
        ) from error


def canonical_arrays(arrays):
    """``{canonical key: np.ndarray}`` of a dict of arrays whose keys are of any supported naming.

    Example:
    >>> sorted(canonical_arrays({"opt/target/params/cls": np.zeros((1, 1, 8)), "opt/state/step": np.zeros(())}))
    ['cls']
    """
    claimed = {}
    return {_claim(claimed, k, "The arrays' dict "): np.asarray(v) for k, v in arrays.items() if not _optimizer_state(k)}


def npz_arrays(path, shapes_only=False):
    """``{canonical key: np.ndarray}`` of an ``.npz`` file, or ``{canonical key: shape}`` from the array headers
    (``shapes_only``); each entry's header checked before anything is allocated."""
    path = os.fspath(path)
    out, claimed = {}, {}
    with _reading(path), zipfile.ZipFile(path) as archive:
        for member in archive.namelist():
            key = member[: -len(".npy")] if member.endswith(".npy") else member
            if _optimizer_state(key):
                continue
            canonical = _claim(claimed, key, f"Checkpoint {path!r} ")
            out[canonical] = _entry_header(path, archive, member)
            if not shapes_only:
                with archive.open(member) as stream:
                    out[canonical] = np.lib.format.read_array(stream, allow_pickle=False)
    if not out:
        raise CheckpointError(f"Checkpoint {path!r} holds no arrays.")
    return out


def verify_npz(path):
    """Read every member of an ``.npz`` through in blocks (its zip CRC-32 checked at its last byte, its ``.npy``
    header, its data as long as the header's shape), or raise ``CheckpointError`` naming the file and what is wrong.
    """
    path = os.fspath(path)
    with _reading(path), zipfile.ZipFile(path) as archive:
        members = archive.namelist()
        if not members:
            raise CheckpointError(f"Checkpoint {path!r} holds no arrays.")
        for member in members:
            _entry_header(path, archive, member)
            with archive.open(member) as stream:
                while stream.read(1 << 20):
                    pass


_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def declared(shapes, path, layout=True):
    """What an original checkpoint declares (:mod:`keras_vit.weights.declared`): its heads (the attention kernels'
    ``(D, heads, head_dim)``), and with ``layout`` (an ``.npz``, not a dict of arrays from anywhere) the original
    code's LayerNorm epsilon 1e-6.

    Example:
    >>> declared({QUERY_KERNEL: (32, 2, 16)}, "c.npz")["num_heads"].said
    "'Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel' of shape (32, 2, 16) (D, heads=2, head_dim)"
    """
    record = {}
    query = tuple(shapes.get(QUERY_KERNEL, ()))
    if len(query) == 3:
        declare(record, "num_heads", int(query[1]), f"{QUERY_KERNEL!r} of shape {query} (D, heads={query[1]}, head_dim)", path)
    if layout:
        declare(record, "layer_norm_epsilon", LAYER_NORM_EPSILON, f"original layout (LayerNorm epsilon {LAYER_NORM_EPSILON:g})", path)
    if layout and "conv_root/kernel" in shapes:  # a hybrid: its ResNet computes with the original constants
        declare(record, "resnet_norms", "original", "original hybrid layout (weight standardisation (w - mean) / "
                "(std + 1e-5), GroupNorm epsilon 1e-6)", path)
    return record


def _entry_header(path, archive, member):
    """The shape in an archive entry's ``.npy`` header, refused when its data cannot fit the entry's size (a corrupt
    or hostile header can claim 1e13 elements: an error naming the entry, never a ``MemoryError``)."""
    with archive.open(member) as stream:
        version = np.lib.format.read_magic(stream)
        reader = _HEADER_READERS.get(version)
        if reader is None:  # a format version without a public header reader: read the array
            return tuple(np.lib.format.read_array(stream, allow_pickle=False).shape)
        shape, _, dtype = reader(stream)
        offset = stream.tell()
    claimed = int(np.prod(shape, dtype=object)) * dtype.itemsize
    available = archive.getinfo(member).file_size - offset
    if claimed > available and not dtype.hasobject:  # object arrays: refused by read_array (no pickle)
        raise CheckpointError(
            f"Cannot read checkpoint {path!r}: entry {member!r} claims shape {tuple(shape)} of {dtype} "
            f"({claimed:,} bytes) but holds {available:,}. The file is corrupt; download it again."
        )
    return tuple(shape)


class NpzSource(Source):
    """An original ``.npz`` (a zip of NumPy arrays that is no ``.keras`` model), recognised by its first bytes."""

    name = "npz"

    def describe(self, opened, architecture=None):
        shapes = npz_arrays(opened.path, shapes_only=True)
        return CheckpointInfo(path=opened.path, format=self.name, shapes=shapes, declared=declared(shapes, opened.path))

    def arrays(self, opened, architecture=None, input_mean=None, input_std=None):
        return npz_arrays(opened.path)  # the original inputs are keras_vit's [-1, 1]: nothing to fold


SOURCE = NpzSource()
