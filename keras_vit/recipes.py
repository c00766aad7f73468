"""Named models and training recipes for ``keras-vit train``, and the main job's model.

``--model`` accepts a paper variant (``"B/16"``, ``"Ti/16"``...), the hybrid
``"R50+B/16"`` (and the other hybrids of :mod:`keras_vit.hybrid`), or one of the small
named configurations below, which train on a laptop CPU:

* ``mnist`` -- the main job's model: a ViT (4 blocks, width 64, 4 heads,
  MLP 128) whose patches are cut from a two-layer convolutional stem
  (28x28x32, then 14x14x64; 2x2 patches -> 49 tokens), the paper's hybrid
  remedy for small data at toy scale (174k parameters).
* ``tiny`` -- a plain ViT (patches straight from pixels), same width/depth.
* ``micro`` -- a two-block plain ViT on 7x7 patches, for tests and smoke runs.

Each named model has a recipe (epochs, batch size, learning rate...) that the
command uses unless a flag overrides it. :func:`mnist_job` builds the main
job's model and data, for benchmarks.
"""

import keras

from keras_vit import models
from keras_vit.layers import Patches

SMALL_MODELS = {
    "mnist": dict(
        image_size=28, stem_channels=(32, 64), patch_size=2, hidden_size=64, num_layers=4, num_heads=4, mlp_dim=128
    ),
    "tiny": dict(image_size=28, stem_channels=(), patch_size=4, hidden_size=64, num_layers=4, num_heads=4, mlp_dim=128),
    "micro": dict(image_size=28, stem_channels=(), patch_size=7, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64),
}

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


def _hybrid_builders():
    try:
        from keras_vit.hybrid import HYBRID_BUILDERS
    except ImportError:  # the hybrid module is optional
        return {}
    return dict(HYBRID_BUILDERS)


HYBRID_NAMES = tuple(_hybrid_builders()) or ("R50+B/16",)


def conv_stem_vit(
    image_size=28,
    stem_channels=(16, 32),
    patch_size=2,
    hidden_size=64,
    num_layers=4,
    num_heads=4,
    mlp_dim=128,
    num_classes=10,
    dropout=0.0,
    drop_path_rate=0.0,
    classifier_activation="softmax",
    include_preprocessing=True,
    name="vit_conv_stem",
):
    """A ViT whose patches come from a small conv stem (Section 3.1, "Hybrid Architecture").

    The stem is 3x3 convolutions with BatchNorm and GELU, named
    ``stem_conv_{i}``/``stem_norm_{i}``; all but the first have stride 2.
    ``stem_channels=()`` gives a plain ViT. The rest -- patches, Eq. 1
    embedding, encoder, class-token head -- is the standard ViT
    (:func:`keras_vit.models.transformer_from_patches`), so every layer
    name after the stem matches :func:`keras_vit.ViT`.
    """
    if hidden_size % num_heads:
        raise ValueError(f"`hidden_size` must be divisible by `num_heads`. Received: hidden_size={hidden_size}, num_heads={num_heads}")
    inputs, x = models.image_input(image_size, include_preprocessing)
    for i, channels in enumerate(stem_channels):
        x = keras.layers.Conv2D(channels, 3, strides=1 if i == 0 else 2, padding="same", use_bias=False, name=f"stem_conv_{i}")(x)
        x = keras.layers.BatchNormalization(name=f"stem_norm_{i}")(x)
        x = keras.layers.Activation("gelu", name=f"stem_act_{i}")(x)
    patches = Patches(patch_size, name="patches")(x)
    outputs = models.transformer_from_patches(
        patches, hidden_size, num_layers, num_heads, mlp_dim, num_classes, True, "token", None,
        dropout, 0.0, drop_path_rate, classifier_activation,
    )
    return keras.Model(inputs, outputs, name=name)


def model_names():
    return sorted(SMALL_MODELS) + sorted(models.BUILDERS) + list(HYBRID_NAMES)


def default_image_size(model_name):
    if model_name in SMALL_MODELS:
        return SMALL_MODELS[model_name]["image_size"]
    if model_name in HYBRID_NAMES:
        return 224
    return 224


def recipe(model_name, fine_tune=False):
    """The default training settings for ``model_name`` (a copy)."""
    if fine_tune:
        return dict(FINE_TUNE_RECIPE)
    return dict(RECIPES.get(model_name, DEFAULT_RECIPE))


def build_model(model_name, num_classes, image_size=None, weights=None, drop_path_rate=0.0):
    """Build a model by name: a small config, a paper variant or the hybrid.

    ``weights`` (an original ``.npz``) loads a checkpoint for fine-tuning:
    the head is replaced by a zero-initialised one with ``num_classes``
    outputs and the position embeddings are interpolated to ``image_size``.
    """
    image_size = image_size or default_image_size(model_name)
    if model_name in SMALL_MODELS:
        config = dict(SMALL_MODELS[model_name], image_size=image_size)
        if weights is not None:
            if config["stem_channels"]:
                raise ValueError(f"Model {model_name!r} has a conv stem and cannot load an original ViT checkpoint. Received: weights={weights!r}")
            config.pop("stem_channels")
            return models.ViT(num_classes=num_classes, weights=weights, drop_path_rate=drop_path_rate, name=f"vit_{model_name}", **config)
        return conv_stem_vit(num_classes=num_classes, drop_path_rate=drop_path_rate, name=f"vit_{model_name}", **config)
    if model_name in models.BUILDERS:
        return models.BUILDERS[model_name](num_classes=num_classes, image_size=image_size, weights=weights, drop_path_rate=drop_path_rate)
    if model_name in HYBRID_NAMES:
        builder = _hybrid_builders().get(model_name)
        if builder is None:
            raise ValueError(f"The hybrid {model_name!r} is not available in this version of keras_vit (no keras_vit.hybrid)")
        return builder(num_classes=num_classes, image_size=image_size, weights=weights, drop_path_rate=drop_path_rate)
    raise ValueError(f"Unknown model: expected one of {model_names()}. Received: model={model_name!r}")


def mnist_job(seed=0):
    """The main job's model (untrained, uncompiled) and its data: ``(model, ImageDataset, recipe)``.

    For throughput benchmarks: ``make_pipeline(data.train, 28, recipe["batch_size"],
    training=True, augment="digits", num_classes=10, seed=seed, repeat=True)``
    is the input pipeline the main job trains on.
    """
    from keras_vit import data as data_lib

    keras.utils.set_random_seed(seed)
    dataset = data_lib.load_mnist()
    settings = recipe("mnist")
    model = build_model("mnist", num_classes=dataset.num_classes, drop_path_rate=settings["drop_path"])
    return model, dataset, settings
