"""A checkpoint path looked at once for every source that is asked about it (:class:`Opened`).
"""

import os

from keras_vit.errors import CheckpointError
from keras_vit.weights import config as config_lib
from keras_vit.weights import shards
from keras_vit.weights.safetensors_files import Tensors
from keras_vit.weights.sniff import sniff


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
                files, config_path = shards.folder_files(self.path)
            elif self.kind == "safetensors":
                files = [self.path]
                beside = os.path.join(os.path.dirname(os.path.abspath(self.path)), "config.json")
                config_path = beside if os.path.isfile(beside) else None
            else:
                raise CheckpointError(f"Checkpoint {self.path!r} is no .safetensors file or folder.")
            tensors = Tensors(files)
            if self.kind == "folder":
                shards.check_index(self.path, tensors)
            config = config_lib.read_json(config_path) if config_path else None
            self._state_dict = tensors, config, config_path
        return self._state_dict

    def keys(self):
        """The tensor names of a ``.safetensors`` file or folder, else ``()`` (nothing read for other kinds)."""
        if self.kind not in ("folder", "safetensors"):
            return ()
        return self.state_dict()[0].shapes
