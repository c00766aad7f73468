"""keras_vit: the Vision Transformer (Dosovitskiy et al., 2020) for Keras 3.

Importing the package only defines names: every public name is imported from
its module on first use (PEP 562), so ``import keras_vit`` changes nothing in
the process (no environment variables, no logging, no TensorFlow, matplotlib or
tf.data) and works on the JAX and PyTorch Keras backends.

Example:
>>> import keras_vit
>>> keras_vit.decode_variant("B/16")["num_layers"]
12
"""

import importlib

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    "keras_vit.checkpoints": ("CheckpointError", "LoadReport", "load_checkpoint", "read_checkpoint", "resize_position_embedding"),
    "keras_vit.configs": ("count_params", "decode_variant"),
    "keras_vit.layers": ("PatchEncoder", "Patches", "SelfAttention", "StochasticDepth", "TokenPooling", "TransformerBlock"),
    "keras_vit.models": ("ViT", "ViTB16", "ViTB32", "ViTH14", "ViTL16", "ViTL32", "ViTS16", "ViTS32", "ViTTi16"),
    "keras_vit.attention": (
        "attention_model",
        "attention_rollout",
        "attention_weights",
        "mean_attention_distance",
        "position_embedding_similarity",
        "rollout_map",
    ),
    "keras_vit.features": ("feature_model", "forward_features"),
    "keras_vit.inference": ("decode_predictions", "load_image", "load_predictor", "predict", "preprocess_input"),
    "keras_vit.labels": ("imagenet_labels",),
    "keras_vit.hybrid": ("HybridViT", "R26ViTS32", "count_hybrid_params", "R50ViTB16", "R50ViTL32", "ResidualUnit", "StdConv2D"),
    "keras_vit.export": ("ExportError", "ExportVerificationError", "VerificationReport", "export_model"),
    "keras_vit.data": ("ImageDataset", "load_dataset", "load_image_folder", "load_mnist", "load_tfds", "make_pipeline"),
    "keras_vit.training": (
        "Backup",
        "LayerDecayAdamW",
        "LayerDecaySGD",
        "build_optimizer",
        "fit_resumable",
        "freeze",
        "layer_decay_multipliers",
        "set_precision",
        "warmup_cosine",
    ),
    "keras_vit.distribute": ("DistributedTrainer",),
    "keras_vit.recipes": ("conv_stem_vit",),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'keras_vit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
