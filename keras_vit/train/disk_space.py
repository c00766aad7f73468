"""Weights files written only where they fit: the space check before HDF5 writes, and the atomic weights save.

HDF5 does not fail cleanly on a full disk: pages of errors, then a
segmentation fault when the half-written file is closed. So the space a
weights file needs is checked before it is written (:func:`check_space`), and
:func:`save_weights` writes through a temporary file and ``os.replace``.
"""

import errno
import os
import shutil

import numpy as np

from keras_vit.saving import atomic_write


def check_space(path, model):
    """Raise ``OSError(ENOSPC)`` naming ``path`` when its disk cannot hold the model's weights and optimizer state.

    The space needed is the bytes of every variable plus 10 %, and 2 KiB of
    structure per variable.
    """
    variables = list(model.weights) + (list(model.optimizer.variables) if model.optimizer is not None else [])
    need = 1.1 * sum(int(np.prod(v.shape)) * _itemsize(v.dtype) for v in variables) + 2048 * len(variables)
    free = shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free
    if free < need:
        raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)}: {free:,} bytes free, about {int(need):,} needed", path)


def _itemsize(dtype):
    try:
        return np.dtype(dtype).itemsize
    except TypeError:  # bfloat16 and other types NumPy does not name
        return 4


def save_weights(model, path):
    """``model.save_weights(path)`` atomically, after :func:`check_space`."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    check_space(path, model)
    atomic_write(path, lambda tmp: model.save_weights(tmp, overwrite=True))
