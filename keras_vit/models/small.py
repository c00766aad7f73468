"""Small models for small images: the ViT on a conv stem that the main job trains on MNIST, and tiny plain ViTs.

``SMALL_MODELS`` is data (one entry per name, read by ``keras-vit train --model``);
:func:`conv_stem_vit` builds any of them.
"""

import keras

from keras_vit.layers import Patches
from keras_vit.models import vit

SMALL_MODELS = {
    "mnist": dict(
        image_size=28, stem_channels=(32, 64), patch_size=2, hidden_size=64, num_layers=4, num_heads=4, mlp_dim=128
    ),
    "tiny": dict(image_size=28, stem_channels=(), patch_size=4, hidden_size=64, num_layers=4, num_heads=4, mlp_dim=128),
    "micro": dict(image_size=28, stem_channels=(), patch_size=7, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64),
}


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
    (:func:`keras_vit.models.vit.transformer_from_patches`), so every layer
    name after the stem matches :func:`keras_vit.ViT`.
    """
    if hidden_size % num_heads:
        raise ValueError(f"`hidden_size` must be divisible by `num_heads`. Received: hidden_size={hidden_size}, num_heads={num_heads}")
    inputs, x = vit.image_input(image_size, include_preprocessing)
    for i, channels in enumerate(stem_channels):
        x = keras.layers.Conv2D(channels, 3, strides=1 if i == 0 else 2, padding="same", use_bias=False, name=f"stem_conv_{i}")(x)
        x = keras.layers.BatchNormalization(name=f"stem_norm_{i}")(x)
        x = keras.layers.Activation("gelu", name=f"stem_act_{i}")(x)
    patches = Patches(patch_size, name="patches")(x)
    outputs = vit.transformer_from_patches(
        patches, hidden_size, num_layers, num_heads, mlp_dim, num_classes, True, "token", None,
        dropout, 0.0, drop_path_rate, classifier_activation,
    )
    return keras.Model(inputs, outputs, name=name)
