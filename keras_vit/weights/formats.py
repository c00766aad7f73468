"""The checkpoint dispatcher: a loop over :data:`SOURCES`, the first source that claims a path reads it
(docs/architecture.md, "Adding a weight source"); :func:`describe` gives a :class:`CheckpointInfo`, :func:`read`
the arrays under the original keys.
"""

from keras_vit.errors import CheckpointError
from keras_vit.weights import keras_file, keras_hub, npz, timm, transformers
from keras_vit.weights.opened import Opened
from keras_vit.weights.source import CheckpointInfo, Source  # noqa: F401  (CheckpointInfo: public here)

# the registered sources, asked in this order: the first that claims a path reads it
SOURCES = [keras_hub.SOURCE, npz.SOURCE, keras_file.SOURCE, timm.SOURCE, transformers.SOURCE]


def register(source, first=False):
    """Add a :class:`~keras_vit.weights.source.Source` to :data:`SOURCES` (asked last, or ``first``); returns it.

    Example:
    >>> class Nothing(Source):
    ...     name = "nothing"
    ...     def claims(self, opened):
    ...         return False
    >>> source = register(Nothing())
    >>> SOURCES.remove(source)
    """
    if not isinstance(source, Source):
        raise TypeError(f"register() takes a keras_vit.weights.source.Source. Received: {source!r}")
    SOURCES.insert(0, source) if first else SOURCES.append(source)
    return source


def source_of(path):
    """``(source, opened)``: the first registered source that claims ``path``, and the path as it was looked at.

    Raises:
        CheckpointError: no source reads it: why the file is of no kind keras_vit reads, or the keys of a
            ``.safetensors`` file or folder that no layout recognises.
    """
    opened = Opened(path)
    for source in SOURCES:
        if source.claims(opened):
            return source, opened
    if opened.error is not None:
        raise opened.error
    labels = [source.label for source in SOURCES if source.label]
    sample = ", ".join(sorted(opened.keys())[:5])
    raise CheckpointError(
        f"Checkpoint {opened.path!r} is a .safetensors file but neither {' nor '.join('a ' + label for label in labels)} "
        f"(keys: {sample}, ...)."
    )


def describe(path, architecture=None):
    """A :class:`CheckpointInfo` of a checkpoint file or folder: shapes and settings, no tensor data read.

    Example:
    >>> import os, tempfile
    >>> import numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), "c.npz")
    >>> np.savez(path, cls=np.zeros((1, 1, 8)))
    >>> info = describe(path)
    >>> info.format, info.shapes, info.layer_norm_epsilon
    ('npz', {'cls': (1, 1, 8)}, 1e-06)

    ``architecture`` replaces a timm config.json's (a preset that names timm's quick_gelu registration).
    """
    source, opened = source_of(path)
    return source.describe(opened, architecture)


def read_checkpoint(path, input_mean=None, input_std=None, architecture=None):
    """``{canonical key: np.ndarray}`` of a checkpoint file or folder, or of a dict of arrays (keys of any supported
    naming). A foreign input normalisation is folded into the patch embedding for a model that scales its inputs
    with ``input_mean`` / ``input_std`` (default: keras_vit's [-1, 1]); ``architecture`` as in :func:`describe`.
    Every array is read now: a damaged file fails here with its name, never half-way through a load.

    Example:
    >>> import numpy as np
    >>> read_checkpoint({"params/cls": np.zeros((1, 1, 8))})["cls"].shape
    (1, 1, 8)
    """
    if isinstance(path, dict):
        return npz.canonical_arrays(path)
    source, opened = source_of(path)
    return source.arrays(opened, architecture, input_mean, input_std)


read = read_checkpoint  # the arrays of a file or folder, as describe() is its description


def checkpoint_shapes(path):
    """``{canonical key: shape}`` of a checkpoint (:func:`describe`'s shapes): what a builder peeks at before it builds.

    Example:
    >>> import os, tempfile
    >>> import numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), "c.npz")
    >>> np.savez(path, **{"params/pre_logits/kernel": np.zeros((8, 4))})
    >>> checkpoint_shapes(path)
    {'pre_logits/kernel': (8, 4)}
    """
    return describe(path).shapes
