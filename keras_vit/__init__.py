"""keras_vit: the Vision Transformer (Dosovitskiy et al., 2020) for Keras 3.

Importing the package only defines names: every public name is imported from
its module on first use (PEP 562), so ``import keras_vit`` changes nothing in
the process (no environment variables, no logging, no TensorFlow, matplotlib or
tf.data) and works on the JAX and PyTorch Keras backends. One thing waits for
Keras: ``keras.saving.load_model`` finds a saved keras_vit class only among the
classes registered with Keras (it imports a class's module itself only for
Keras' own packages), so the modules that register them (:data:`_REGISTERING`)
are imported as soon as Keras is: at once if it already is, else right after
``import keras``.

Example:
>>> import keras_vit
>>> keras_vit.decode_variant("B/16")["num_layers"]
12
"""

import importlib
import importlib.util
import sys
import warnings

from keras_vit.lazy import lazy_exports

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    "keras_vit.layers": ("PatchEncoder", "Patches", "SelfAttention", "StochasticDepth", "TokenPooling", "TransformerBlock"),
    "keras_vit.layers.resnet": ("ResidualUnit", "StdConv2D"),
    "keras_vit.models.hybrid": ("HybridViT", "R26ViTS32", "R50ViTB16", "R50ViTL32"),
    "keras_vit.architecture.params": ("count_hybrid_params", "count_params"),
    "keras_vit.architecture.variants": ("decode_variant",),
    "keras_vit.architecture.config": ("ViTConfig",),
    "keras_vit.architecture.model": ("VisionTransformer",),
    "keras_vit.models.build": ("build_model",),
    "keras_vit.models.vit": ("ViT", "ViTB16", "ViTB32", "ViTH14", "ViTL16", "ViTL32", "ViTS16", "ViTS32", "ViTTi16"),
    "keras_vit.models.small": ("conv_stem_vit",),
    "keras_vit.models.pretrained": ("from_pretrained",),
    "keras_vit.models.resize": ("native_image_size", "resize_model"),
    "keras_vit.models.lora": ("enable_lora", "merge_lora"),
    "keras_vit.errors": ("CheckpointError",),
    "keras_vit.weights.imagenet": ("imagenet_labels",),
    "keras_vit.weights": ("LoadReport", "load_checkpoint", "read_checkpoint", "resize_position_embedding"),
    "keras_vit.train.data": ("ImageDataset", "load_dataset", "load_image_folder", "load_mnist", "load_tfds", "make_pipeline"),
    "keras_vit.train.optimizers": ("LayerDecayAdamW", "LayerDecaySGD", "build_optimizer", "layer_decay_multipliers", "warmup_cosine"),
    "keras_vit.train.backup": ("Backup",),
    "keras_vit.train.resumable": ("fit_resumable",),
    "keras_vit.train.model_setup": ("freeze", "set_precision"),
    "keras_vit.train.config": ("TrainConfig",),
    "keras_vit.train.distribute": ("DistributedTrainer",),
    "keras_vit.inspect.attention": (
        "attention_model",
        "attention_rollout",
        "attention_weights",
        "mean_attention_distance",
        "position_embedding_similarity",
        "rollout_map",
    ),
    "keras_vit.inspect.features": ("feature_model", "forward_features", "forward_intermediates", "intermediates_model"),
    "keras_vit.inference.images": ("load_image",),
    "keras_vit.inference.predictors": ("decode_predictions", "load_predictor", "predict", "preprocess_input"),
    "keras_vit.saving": ("load_model", "save_model"),
    "keras_vit.export": ("ExportError", "ExportVerificationError", "VerificationReport", "export_model", "gpu_delegate_report"),
}
__getattr__, __dir__, __all__ = lazy_exports(globals(), _EXPORTS)


# the modules whose classes a saved model holds, registered with Keras (keras.saving.register_keras_serializable)
# (and a compiled one's optimizer: build_optimizer's LayerDecayAdamW / AccumulatingSGD..., keras_vit.train.optimizers)
_REGISTERING = ("keras_vit.layers", "keras_vit.architecture.model", "keras_vit.inspect.features", "keras_vit.train.optimizers")


def _initializing():
    """keras_vit modules being imported right now (``import keras`` ran inside one of them): not yet importable whole."""
    return [name for name, module in list(sys.modules.items())
            if name.startswith("keras_vit.") and getattr(getattr(module, "__spec__", None), "_initializing", False)]


class _AfterImport:
    """A meta-path finder that registers at the first import after keras_vit's own imports have finished, once."""

    def find_spec(self, fullname, path=None, target=None):
        if not _initializing():
            sys.meta_path.remove(self)
            _register_with_keras()
            module = sys.modules.get(fullname)
            if module is not None:  # the registration imported it: loading it again would make a second copy
                # (the import system then loads the spec of the module in sys.modules: this one, until loaded)
                module.__spec__ = importlib.util.spec_from_loader(fullname, _Imported(module))
                return module.__spec__
        return None


class _Imported:
    """The loader of a module that is already in ``sys.modules``: the import returns it as it is."""

    def __init__(self, module):
        self.module, self.spec = module, module.__spec__  # the module's own spec, put back once loaded

    def create_module(self, spec):
        return self.module

    def exec_module(self, module):
        module.__spec__ = self.spec  # the import machinery set it to the new spec; keep the module's own


def _register_with_keras():
    if _initializing():  # `import keras` inside a keras_vit module: register once that import chain has finished
        if not any(isinstance(finder, _AfterImport) for finder in sys.meta_path):
            sys.meta_path.insert(0, _AfterImport())
        return
    try:
        for module in _REGISTERING:
            importlib.import_module(module)
    except Exception as error:  # `import keras` must not fail for keras_vit; keras_vit's own use raises it again
        warnings.warn(f"keras_vit could not register its classes with Keras ({type(error).__name__}: {error})", stacklevel=2)


class _AfterKeras:
    """A meta-path finder that runs :func:`_register_with_keras` right after ``import keras``, once."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "keras":
            return None
        sys.meta_path.remove(self)
        found = importlib.util.find_spec(fullname)
        if found is None or found.loader is None:
            return found
        exec_module = found.loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            _register_with_keras()

        found.loader.exec_module = exec_then_register
        return found


if sys.modules.get("keras") is not None:
    _register_with_keras()
elif not any(isinstance(finder, _AfterKeras) for finder in sys.meta_path):
    sys.meta_path.insert(0, _AfterKeras())
