"""Pretrained weights: reading checkpoint files, mapping their keys onto a model, resampling position embeddings, the load report.

One job per module, each module's docstring says which; the sources and how to add one: docs/architecture.md.
Importing the package only defines names (PEP 562, as :mod:`keras_vit`): each public name is imported from its
module on first use, so :mod:`keras_vit.weights.imagenet` (which inference reads) loads no Keras.
"""

from keras_vit.lazy import lazy_exports

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
__getattr__, __dir__, __all__ = lazy_exports(globals(), _EXPORTS)
