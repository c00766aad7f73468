"""Pretrained weights: reading checkpoint files, mapping their keys onto a model, resampling position embeddings, the load report.

One job per module:

* :mod:`~keras_vit.weights.formats`: the dispatcher: which format a path holds, :func:`describe`, :func:`read_checkpoint`;
* :mod:`~keras_vit.weights.npz`: reading ``.npz`` files (arrays, or shapes only) under canonical keys;
* :mod:`~keras_vit.weights.timm`, :mod:`~keras_vit.weights.transformers`: a foreign state dict -> the original keys;
* :mod:`~keras_vit.weights.keras_file`: a keras_vit ``.keras`` model as a checkpoint;
* :mod:`~keras_vit.weights.config`: the fields of a ``config.json``, type-checked and checked against the weights;
* :mod:`~keras_vit.weights.declared`: what a checkpoint declares (heads, epsilon, activation...), compared with a model's config;
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
* :mod:`~keras_vit.weights.hub`: ``hf://`` repositories through ``huggingface_hub``;
* :mod:`~keras_vit.weights.imagenet`: the ImageNet-1k / -21k class lists of the pretrained heads.

The exception classes live in :mod:`keras_vit.errors`.

Reads a model's architecture from its ``vit_config``. What it may import is the floors' contract (``[importlinter]`` in setup.cfg, docs/architecture.md), checked by ``make test``.
Importing the package only defines names (PEP 562, as :mod:`keras_vit`): each public name is
imported from its module on first use, so :mod:`keras_vit.weights.imagenet` (which inference
reads) loads no Keras.
"""

import importlib

# public name -> the module that defines it
_EXPORTS = {
    "keras_vit.errors": ("CheckpointError", "DownloadError"),
    "keras_vit.weights.architecture": ("representation_size_of",),
    "keras_vit.weights.formats": ("checkpoint_shapes", "describe", "read_checkpoint"),
    "keras_vit.weights.loader": ("LoadReport", "load_checkpoint", "load_into"),
    "keras_vit.weights.mapping": ("POSEMB_KEY", "check_hybrid_stages", "targets_of"),
    "keras_vit.weights.npz": ("canonical_key",),
    "keras_vit.weights.posemb": ("resize_position_embedding",),
    "keras_vit.weights.sources": ("resolve",),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

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


def __getattr__(name):
    module = _MODULE_OF.get(name)
    if module is None:  # a submodule not imported yet: `from keras_vit.weights import hub` imports it
        raise AttributeError(f"module 'keras_vit.weights' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
