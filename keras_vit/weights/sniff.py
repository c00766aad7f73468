"""Which kind of file a checkpoint path holds, told by its first bytes rather than its name.

A zip archive is a keras_vit ``.keras`` model when it holds the entries
``model.save`` writes (:func:`keras_vit.weights.keras_file.is_keras_archive`),
a PyTorch archive (refused) when it holds a ``data.pkl``, else an ``.npz``; a
``.safetensors`` file starts with the 8-byte little-endian size of its JSON
header and ``{``. Pickle files are refused by name and by their first byte
(:mod:`keras_vit.weights.pickles`).
"""

import os
import struct
import zipfile

from keras_vit.errors import CheckpointError
from keras_vit.weights import keras_file
from keras_vit.weights.pickles import PICKLE_SUFFIXES, refuse_pickle


def sniff(path):
    """``"npz"``, ``"keras"``, ``"safetensors"``, or a ``CheckpointError`` naming the file and what it really is."""
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
