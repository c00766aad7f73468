"""Small models for small images: the ViT on a conv stem that the main job trains on MNIST, and tiny plain ViTs.

Their named configurations are ``SMALL_MODELS`` in :mod:`keras_vit.models.variants`
(read by ``keras-vit train --model``); :func:`conv_stem_vit` builds any of them.
"""

import keras

from keras_vit.models import vit
from keras_vit.models.arguments import positive_ints, positive_pair, stored_image_size, validate_top, validate_transformer
from keras_vit.models.variants import SMALL_MODELS  # noqa: F401  (importable from here, as before the registry)


def conv_stem_vit(
    image_size=28,
    stem_channels=(16, 32),
    *,
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
    native_image_size=None,
    name="vit_conv_stem",
):
    """A ViT whose patches come from a small conv stem (Section 3.1, "Hybrid Architecture").

    The stem is 3x3 convolutions with BatchNorm and GELU, named
    ``stem_conv_{i}``/``stem_norm_{i}``; all but the first have stride 2.
    ``stem_channels=()`` gives a plain ViT. The rest -- patches, Eq. 1
    embedding, encoder, class-token head -- is the standard ViT
    (:func:`keras_vit.models.vit.transformer_from_patches`), so every layer
    name after the stem matches :func:`keras_vit.ViT`. ``image_size=None`` takes
    any size (position embeddings stored for ``native_image_size``, default 28),
    as :func:`keras_vit.ViT` does.

    Example:
    >>> from keras_vit.models.variants import SMALL_MODELS
    >>> model = conv_stem_vit(num_classes=10, **SMALL_MODELS["mnist"])
    >>> model.get_layer("patch_encoder").num_patches, model.output_shape
    (49, (None, 10))
    """
    size, argument = stored_image_size(image_size, native_image_size, default=28)
    positive_pair(size, argument)
    positive_pair(patch_size, "patch_size")
    positive_ints(stem_channels, "stem_channels")
    validate_transformer(hidden_size, num_layers, num_heads, mlp_dim)
    validate_top(num_classes, True, "token", classifier_activation)
    inputs, x = vit.image_input(image_size, include_preprocessing)
    for i, channels in enumerate(stem_channels):
        x = keras.layers.Conv2D(channels, 3, strides=1 if i == 0 else 2, padding="same", use_bias=False, name=f"stem_conv_{i}")(x)
        x = keras.layers.BatchNormalization(name=f"stem_norm_{i}")(x)
        x = keras.layers.Activation("gelu", name=f"stem_act_{i}")(x)
    patches, grid = vit.cut_patches(x, patch_size, size, stride=2 ** max(len(stem_channels) - 1, 0))
    outputs = vit.transformer_from_patches(
        patches,
        grid_size=grid,
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_heads=num_heads,
        mlp_dim=mlp_dim,
        num_classes=num_classes,
        include_top=True,
        pooling="token",
        representation_size=None,
        dropout=dropout,
        attention_dropout=0.0,
        drop_path_rate=drop_path_rate,
        classifier_activation=classifier_activation,
    )
    return keras.Model(inputs, outputs, name=name)
