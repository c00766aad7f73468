"""Pretrained weights: reading checkpoint files, mapping their keys onto a model, resampling position embeddings, the load report.

One job per module:

* :mod:`~keras_vit.weights.npz`: reading ``.npz`` files (arrays, or shapes only) under canonical keys;
* :mod:`~keras_vit.weights.mapping`: checkpoint key -> model variable, for the ViT and the hybrid's ResNet;
* :mod:`~keras_vit.weights.posemb`: position-embedding resampling;
* :mod:`~keras_vit.weights.loader`: the all-or-nothing load and its report;
* :mod:`~keras_vit.weights.presets`: the named original checkpoints, as one table;
* :mod:`~keras_vit.weights.download`: fetching a preset into the Keras cache, verified;
* :mod:`~keras_vit.weights.sources`: ``weights=`` (path, preset tag, ``hf://``) -> a local path.

May import :mod:`keras_vit.layers` (to find the layers a key maps to); never the model builders.
"""

from keras_vit.errors import CheckpointError, DownloadError
from keras_vit.weights.formats import describe
from keras_vit.weights.loader import LoadReport, load_checkpoint, load_into
from keras_vit.weights.mapping import POSEMB_KEY, check_hybrid_stages, targets_of
from keras_vit.weights.npz import canonical_key, checkpoint_shapes, read_checkpoint, representation_size_of
from keras_vit.weights.posemb import resize_position_embedding
from keras_vit.weights.sources import resolve

__all__ = [
    "CheckpointError",
    "DownloadError",
    "describe",
    "LoadReport",
    "POSEMB_KEY",
    "canonical_key",
    "check_hybrid_stages",
    "checkpoint_shapes",
    "load_checkpoint",
    "load_into",
    "read_checkpoint",
    "representation_size_of",
    "resize_position_embedding",
    "resolve",
    "targets_of",
]
