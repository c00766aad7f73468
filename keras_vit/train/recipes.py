"""Named models and training recipes for ``keras-vit train``, and the main job's model.

``--model`` accepts a paper variant (``"B/16"``, ``"Ti/16"``...), the hybrid
``"R50+B/16"`` (and the other hybrids of :mod:`keras_vit.models.hybrid`), or one of the small
named configurations below, which train on a laptop CPU:

* ``mnist`` -- the main job's model: a ViT (4 blocks, width 64, 4 heads,
  MLP 128) whose patches are cut from a two-layer convolutional stem
  (28x28x32, then 14x14x64; 2x2 patches -> 49 tokens), the paper's hybrid
  remedy for small data at toy scale (174k parameters).
* ``tiny`` -- a plain ViT (patches straight from pixels), same width/depth.
* ``micro`` -- a two-block plain ViT on 7x7 patches, for tests and smoke runs.

``pretrained`` (what ``--weights`` without ``--model`` means) is the architecture of the weights
themselves (:func:`keras_vit.from_pretrained`): for a keras_vit ``.keras`` model, every switch of the
ViT family it was saved with (registers, LayerScale, MAP pooling, a projection...), with a new
zero-initialised head on the pooled vector (on the projection, for CLIP-like models).

Each named model has a recipe (epochs, batch size, learning rate...) that the
command uses unless a flag overrides it. :func:`mnist_job` builds the main
job's model and data, for benchmarks.
"""

import keras

from keras_vit import weights as weights_lib
from keras_vit.weights import architecture as source_architecture
from keras_vit.models import vit as models
from keras_vit.models import pretrained
from keras_vit.models.hybrid import HYBRID_BUILDERS
from keras_vit.models.lora import HEADS
from keras_vit.models.small import conv_stem_vit
from keras_vit.architecture.variants import SMALL_MODELS

# defaults of `keras-vit train` per model; flags override each field
RECIPES = {
    "mnist": dict(epochs=30, batch_size=64, lr=2e-3, warmup_epochs=2, weight_decay=0.05, label_smoothing=0.1,
                  optimizer="adamw", drop_path=0.1, jit=True),
    "tiny": dict(epochs=30, batch_size=128, lr=2e-3, warmup_epochs=2, weight_decay=0.05, label_smoothing=0.1,
                 optimizer="adamw", drop_path=0.1, jit=True),
}
DEFAULT_RECIPE = dict(epochs=10, batch_size=64, lr=1e-3, warmup_epochs=1, weight_decay=0.05, label_smoothing=0.1,
                      optimizer="adamw", drop_path=0.1, jit=False)
# the paper's fine-tuning: SGD with momentum 0.9, no weight decay, clip at 1
FINE_TUNE_RECIPE = dict(epochs=5, batch_size=64, lr=0.01, warmup_epochs=1, weight_decay=0.0, label_smoothing=0.0,
                        optimizer="sgd", drop_path=0.0, jit=False)


from keras_vit.train.choices import PRETRAINED, model_names  # noqa: E402,F401  (Keras-free, for the CLI's --help)


def default_image_size(model_name, weights=None):
    """The input size a model trains at by default: a small model's own, the source's for ``pretrained``, else 224."""
    if model_name in SMALL_MODELS:
        return SMALL_MODELS[model_name]["image_size"]
    if model_name == PRETRAINED:
        return source_image_size(weights)
    return 224


def source_image_size(weights):
    """The side of the square images the model of ``weights`` was saved for (``pretrained``'s default size)."""
    if weights is None:
        raise ValueError(f"model={PRETRAINED!r} is the architecture of the weights: give weights (--weights SOURCE).")
    path, _ = pretrained.locate(weights)
    info = weights_lib.describe(path)
    saved = pretrained.saved_config(path, info)
    if saved is not None:
        h, w = saved.native_image_size
    else:
        size = source_architecture.infer(info, str(weights))["image_size"]
        h, w = (size, size) if isinstance(size, int) else size
    if h != w:
        raise ValueError(f"{str(weights)!r} was saved for {h}x{w} images; training takes square ones: give an image size (--image-size).")
    return h


def recipe(model_name, fine_tune=False):
    """The default training settings for ``model_name`` (a copy)."""
    if fine_tune:
        return dict(FINE_TUNE_RECIPE)
    return dict(RECIPES.get(model_name, DEFAULT_RECIPE))


def build_model(model_name, num_classes, image_size=None, *, weights=None, drop_path_rate=0.0, naflex=False):
    """Build a model by name: a small config, a paper variant or the hybrid.

    ``naflex=True`` builds the model's NaFlex form (``input_mode="naflex"``, any number of patches: its position
    table stored for ``image_size``), which takes each image at its own aspect ratio
    (:mod:`keras_vit.train.naflex_data`); a model with a conv stem, or a hybrid, has none (refused by name), and
    ``pretrained`` weights must be of a NaFlex model already.

    ``weights`` (any source a builder takes: an original ``.npz``, a preset
    tag, ``hf://``, a timm or transformers checkpoint, or a ``.keras`` model saved by
    keras_vit) loads a checkpoint for fine-tuning: the head is a zero-initialised
    one with ``num_classes`` outputs whatever head the source had (the paper's
    fine-tuning; a head of the same number of classes too, whose classes are not
    the new data's), the position embeddings are interpolated to ``image_size``
    whatever resolution the source had. A model with a conv stem loads ``.keras``
    sources only (the other formats have no place for the stem's weights).
    """
    model = _build(model_name, num_classes, image_size, weights=weights, drop_path_rate=drop_path_rate, naflex=naflex)
    if weights is not None:
        for head in (layer for layer in model.layers if layer.name in HEADS):  # a distilled model's two
            for variable in head.weights:
                variable.assign(keras.ops.zeros(variable.shape, variable.dtype))
        report = getattr(model, "load_report", None)
        if report is not None and {"head/kernel", "head_dist/kernel"} & set(report.loaded):  # a skipped one says so
            report.notes.append("head: the checkpoint's zeroed for the new classes (fine-tuning)")
    return model


def _build(model_name, num_classes, image_size, *, weights, drop_path_rate, naflex):
    if model_name == PRETRAINED:
        if weights is None:
            source_image_size(None)  # the error: pretrained needs weights
        model = pretrained.from_pretrained(
            weights, num_classes=num_classes, image_size=image_size, include_top=True, classifier_activation="softmax",
            drop_path_rate=drop_path_rate,
        )
        if naflex and model.vit_config.input_mode != "naflex":
            raise ValueError(f"--naflex trains a NaFlex model: the weights {str(weights)!r} are of a model of "
                             f"input_mode={model.vit_config.input_mode!r}. Received: weights={weights!r}")
        return model
    image_size = image_size or default_image_size(model_name)
    if naflex:
        return _naflex_model(model_name, num_classes, image_size, weights=weights, drop_path_rate=drop_path_rate)
    if model_name in SMALL_MODELS:
        config = dict(SMALL_MODELS[model_name], image_size=image_size)
        if weights is not None and config["stem_channels"]:
            path = weights_lib.resolve(weights)
            if weights_lib.describe(path).format != "keras":
                raise ValueError(
                    f"Model {model_name!r} has a conv stem and cannot load an original ViT checkpoint "
                    f"(a .keras model of the same layers can). Received: weights={weights!r}"
                )
            model = conv_stem_vit(num_classes=num_classes, drop_path_rate=drop_path_rate, name=f"vit_{model_name}", **config)
            weights_lib.load_into(model, path)
            return model
        if weights is not None:
            config.pop("stem_channels")
            return models.ViT(num_classes=num_classes, weights=weights, drop_path_rate=drop_path_rate, name=f"vit_{model_name}", **config)
        return conv_stem_vit(num_classes=num_classes, drop_path_rate=drop_path_rate, name=f"vit_{model_name}", **config)
    if model_name in models.BUILDERS:
        return models.BUILDERS[model_name](num_classes=num_classes, image_size=image_size, weights=weights, drop_path_rate=drop_path_rate)
    if model_name in HYBRID_BUILDERS:
        return HYBRID_BUILDERS[model_name](num_classes=num_classes, image_size=image_size, weights=weights, drop_path_rate=drop_path_rate)
    raise ValueError(f"Unknown model: expected one of {model_names()}. Received: model={model_name!r}")


def _naflex_model(model_name, num_classes, image_size, *, weights, drop_path_rate):
    """The NaFlex form of a small model without a stem or of a paper variant (its table stored for ``image_size``)."""
    fields = dict(num_classes=num_classes, image_size=image_size, weights=weights, drop_path_rate=drop_path_rate,
                  input_mode="naflex", max_patches=None)
    if model_name in SMALL_MODELS and not SMALL_MODELS[model_name]["stem_channels"]:
        config = {k: v for k, v in SMALL_MODELS[model_name].items() if k not in ("stem_channels", "image_size")}
        return models.ViT(name=f"vit_{model_name}", **config, **fields)
    if model_name in models.BUILDERS:
        return models.BUILDERS[model_name](**fields)
    raise ValueError(f"Model {model_name!r} has no NaFlex form (a conv stem or a hybrid cuts its own patches): "
                     f"--naflex takes a plain ViT, e.g. micro, tiny or a paper variant. Received: model={model_name!r}")


def mnist_job(seed=0):
    """The main job's model (untrained, uncompiled) and its data: ``(model, ImageDataset, recipe)``.

    For throughput benchmarks: ``make_pipeline(data.train, 28, recipe["batch_size"],
    training=True, augment="digits", num_classes=10, seed=seed, repeat=True)``
    is the input pipeline the main job trains on.
    """
    # deferred: tf.data, i.e. TensorFlow, which `keras-vit` builds its parser without (it reads this module) on any backend
    from keras_vit.train import data as data_lib

    keras.utils.set_random_seed(seed)
    dataset = data_lib.load_mnist()
    settings = recipe("mnist")
    model = build_model("mnist", num_classes=dataset.num_classes, drop_path_rate=settings["drop_path"])
    return model, dataset, settings
