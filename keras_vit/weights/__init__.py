"""Pretrained weights: reading checkpoint files, mapping their keys onto a model, resampling position embeddings, the load report.

One job per module:

* :mod:`~keras_vit.weights.formats`: the dispatcher: which format a path holds, :func:`describe`, :func:`read_checkpoint`;
* :mod:`~keras_vit.weights.npz`: reading ``.npz`` files (arrays, or shapes only) under canonical keys;
* :mod:`~keras_vit.weights.timm`, :mod:`~keras_vit.weights.transformers`: a foreign state dict -> the original keys;
* :mod:`~keras_vit.weights.keras_file`: a keras_vit ``.keras`` model as a checkpoint;
* :mod:`~keras_vit.weights.config`: the fields of a ``config.json``, type-checked and checked against the weights;
* :mod:`~keras_vit.weights.sniff`, :mod:`~keras_vit.weights.pickles`: which kind of file a path is; pickles refused;
* :mod:`~keras_vit.weights.safetensors_files`, :mod:`~keras_vit.weights.shards`: ``.safetensors`` files, a folder's shards;
* :mod:`~keras_vit.weights.input_normalization`: a foreign model's input mean/std folded into the patch embedding;
* :mod:`~keras_vit.weights.architecture`: the architecture a checkpoint's shapes describe;
* :mod:`~keras_vit.weights.mapping`: checkpoint key -> model variable, for the ViT and the hybrid's ResNet;
* :mod:`~keras_vit.weights.posemb`: position-embedding resampling;
* :mod:`~keras_vit.weights.patchemb`: patch-kernel resampling to another patch size (FlexiViT);
* :mod:`~keras_vit.weights.loader`: the all-or-nothing load and its report;
* :mod:`~keras_vit.weights.presets`: the named original checkpoints, as one table;
* :mod:`~keras_vit.weights.download`: fetching a preset into the Keras cache, verified;
* :mod:`~keras_vit.weights.sources`: ``weights=`` (path, preset tag, ``hf://``) -> a local path;
* :mod:`~keras_vit.weights.hub`: ``hf://`` repositories through ``huggingface_hub``.

The exception classes live in :mod:`keras_vit.errors`.

May import :mod:`keras_vit.layers` (to find the layers a key maps to); never the model builders.
"""

from keras_vit.errors import CheckpointError, DownloadError
from keras_vit.weights.architecture import representation_size_of
from keras_vit.weights.formats import checkpoint_shapes, describe, read_checkpoint
from keras_vit.weights.loader import LoadReport, load_checkpoint, load_into
from keras_vit.weights.mapping import POSEMB_KEY, check_hybrid_stages, targets_of
from keras_vit.weights.npz import canonical_key
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
