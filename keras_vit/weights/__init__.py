"""Pretrained weights: reading checkpoint files, mapping their keys onto a model, resampling position embeddings, the load report.

One job per module, each module's docstring says which; the sources and how to add one: docs/architecture.md.
Importing the package only defines names (PEP 562, as :mod:`keras_vit`): each public name is imported from its
module on first use, so :mod:`keras_vit.weights.imagenet` (which inference reads) loads no Keras.
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
    "keras_vit.layers.resampling": ("resample_patch_embedding", "resize_position_embedding"),
    "keras_vit.weights.sources": ("resolve",),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name):
    module = _MODULE_OF.get(name)
    if module is None:  # a submodule not imported yet: `from keras_vit.weights import npz` imports it
        raise AttributeError(f"module 'keras_vit.weights' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
