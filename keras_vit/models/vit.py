"""Functional ViT models: one generic builder, thin wrappers per variant.

``ViT(...)`` takes any architecture; ``ViTB16(...)`` and friends look their
sizes up in :mod:`keras_vit.models.variants`. The arguments follow
``keras.applications``.
"""

import os

import keras

from keras_vit.weights import checkpoints
from keras_vit.models import variants as configs
from keras_vit.layers import LAYER_NORM_EPSILON, PatchEncoder, Patches, TokenPooling, TransformerBlock

POOLING_MODES = ("token", "gap")


def image_size_pair(image_size):
    """``224 -> (224, 224)``; validates an ``(h, w)`` pair."""
    if isinstance(image_size, int) and not isinstance(image_size, bool):
        pair = (image_size, image_size)
    else:
        try:
            pair = tuple(int(v) for v in image_size)
        except TypeError:
            pair = ()
        if len(pair) != 2:
            raise ValueError(f"`image_size` must be an int or (height, width). Received: image_size={image_size!r}")
    if min(pair) < 1:
        raise ValueError(f"`image_size` must be positive. Received: image_size={image_size!r}")
    return pair


def validate_top(num_classes, include_top, pooling, classifier_activation):
    """Check the head arguments shared by every builder, before building."""
    if pooling not in POOLING_MODES and not (pooling is None and not include_top):
        allowed = POOLING_MODES + ((None,) if not include_top else ())
        raise ValueError(f"Unknown pooling type: expected one of {allowed}. Received: pooling={pooling!r}")
    if include_top and (not isinstance(num_classes, int) or num_classes < 1):
        raise ValueError(f"`num_classes` must be a positive int when include_top=True. Received: num_classes={num_classes!r}")
    if classifier_activation is not None:
        keras.activations.get(classifier_activation)  # raises on an unknown name


def validate_weights(weights):
    if weights is not None and not os.path.isfile(os.fspath(weights)):
        raise ValueError(
            "`weights` must be None or the path to an original ViT .npz checkpoint. "
            f"Received: weights={weights!r} (no such file)"
        )


def encoder(
    x,
    num_layers,
    num_heads,
    mlp_dim,
    dropout=0.0,
    attention_dropout=0.0,
    drop_path_rate=0.0,
):
    """Stack ``num_layers`` blocks (names ``transformer_block_{i}``) and the final norm.

    Stochastic depth grows linearly with depth from 0 to ``drop_path_rate``.
    """
    for i in range(num_layers):
        rate = drop_path_rate * i / max(num_layers - 1, 1)
        x = TransformerBlock(
            num_heads=num_heads,
            mlp_dim=mlp_dim,
            dropout=dropout,
            attention_dropout=attention_dropout,
            drop_path=rate,
            name=f"transformer_block_{i}",
        )(x)
    return keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, name="encoder_norm")(x)


def head(x, num_classes, include_top, pooling, representation_size, classifier_activation):
    """Pool the encoded tokens, optional pre-logits (tanh), then the zero-initialised head."""
    if pooling is None:
        return x
    x = TokenPooling(pooling, name="pool")(x)
    if representation_size:
        x = keras.layers.Dense(representation_size, activation="tanh", name="pre_logits")(x)
    if not include_top:
        return x
    x = keras.layers.Dense(num_classes, kernel_initializer="zeros", name="head")(x)
    if classifier_activation is not None:
        x = keras.layers.Activation(classifier_activation, dtype="float32", name="predictions")(x)
    return x


def transformer_from_patches(
    patches,
    hidden_size,
    num_layers,
    num_heads,
    mlp_dim,
    num_classes,
    include_top,
    pooling,
    representation_size,
    dropout,
    attention_dropout,
    drop_path_rate,
    classifier_activation,
):
    """Patch sequence -> Eq. 1 embedding -> encoder -> head. Shared with the hybrid."""
    x = PatchEncoder(
        num_patches=patches.shape[1],
        hidden_size=hidden_size,
        class_token=pooling != "gap",
        dropout=dropout,
        name="patch_encoder",
    )(patches)
    x = encoder(x, num_layers, num_heads, mlp_dim, dropout, attention_dropout, drop_path_rate)
    return head(x, num_classes, include_top, pooling, representation_size, classifier_activation)


def image_input(image_size, include_preprocessing, input_tensor=None):
    """Model input, plus the [0, 255] -> [-1, 1] scaling of the original ViT."""
    h, w = image_size_pair(image_size)
    if input_tensor is not None:
        inputs = input_tensor
    else:
        inputs = keras.Input(shape=(h, w, 3), name="images")
    x = inputs
    if include_preprocessing:
        x = keras.layers.Rescaling(scale=1.0 / 127.5, offset=-1.0, name="preprocessing")(x)
    return inputs, x


def ViT(
    image_size=224,
    patch_size=16,
    hidden_size=768,
    num_layers=12,
    num_heads=12,
    mlp_dim=3072,
    num_classes=1000,
    include_top=True,
    weights=None,
    pooling="token",
    representation_size=None,
    dropout=0.0,
    attention_dropout=0.0,
    drop_path_rate=0.0,
    classifier_activation="softmax",
    include_preprocessing=True,
    input_tensor=None,
    name="vit",
):
    """Build a Vision Transformer (Dosovitskiy et al., 2020) of any size.

    Args:
        image_size: int or ``(height, width)``; each divisible by the patch size.
        patch_size: int or ``(ph, pw)``.
        hidden_size, num_layers, num_heads, mlp_dim: the Transformer's shape.
        num_classes: classes of the head (used when ``include_top``).
        include_top: add the classification head. Without it the model returns
            the pooled representation, or every token with ``pooling=None``.
        weights: None (random init) or the path to an original Google ``.npz``
            checkpoint. A pre-logits layer present in the file is added
            automatically; position embeddings are interpolated to
            ``image_size``; a head of another size is skipped and left at zero.
        pooling: ``"token"`` (class token, the paper's default), ``"gap"``
            (mean of the tokens, no class token) or None (``include_top=False``
            only: return the token sequence).
        representation_size: width of the optional tanh pre-logits layer.
        dropout, attention_dropout, drop_path_rate: regularisation rates.
        classifier_activation: activation of the head; None returns logits.
        include_preprocessing: inputs are RGB in [0, 255] and the model scales
            them to [-1, 1]; if False, feed [-1, 1] pixels yourself.
        input_tensor: optional Keras tensor to use as the model input.
        name: model name.

    Returns:
        A functional ``keras.Model``. A loaded checkpoint's report is kept on
        ``model.load_report``.

    Example:
    >>> model = ViT(image_size=32, patch_size=8, hidden_size=64, num_layers=2,
    ...             num_heads=4, mlp_dim=128, num_classes=10)
    >>> model.output_shape
    (None, 10)
    """
    h, w = image_size_pair(image_size)
    ph, pw = (patch_size, patch_size) if isinstance(patch_size, int) else tuple(patch_size)
    if h % ph or w % pw:
        raise ValueError(
            "The image size must be divisible by the patch size. "
            f"Received: image_size={image_size}, patch_size={patch_size}"
        )
    if hidden_size % num_heads:
        raise ValueError(
            "`hidden_size` must be divisible by `num_heads`. "
            f"Received: hidden_size={hidden_size}, num_heads={num_heads}"
        )
    validate_top(num_classes, include_top, pooling, classifier_activation)
    validate_weights(weights)
    return assemble(
        (h, w), patch_size, hidden_size, num_layers, num_heads, mlp_dim, num_classes, include_top, weights,
        pooling, representation_size, dropout, attention_dropout, drop_path_rate, classifier_activation,
        include_preprocessing, input_tensor, name,
    )


def assemble(
    image_size,
    patch_size,
    hidden_size,
    num_layers,
    num_heads,
    mlp_dim,
    num_classes,
    include_top,
    weights,
    pooling,
    representation_size,
    dropout,
    attention_dropout,
    drop_path_rate,
    classifier_activation,
    include_preprocessing,
    input_tensor,
    name,
    stem=None,
    check_checkpoint=None,
):
    """Input -> optional ``stem`` (the hybrid's CNN) -> patches -> Transformer -> head, then the weights.

    Arguments are validated by the caller. ``check_checkpoint(arrays)`` may
    reject a checkpoint before anything is built; a pre-logits layer in the
    checkpoint is added when ``representation_size`` is None.
    """
    checkpoint = None
    if weights is not None:
        checkpoint = checkpoints.read_checkpoint(weights)
        if check_checkpoint is not None:
            check_checkpoint(checkpoint)
        if representation_size is None:
            representation_size = checkpoints.representation_size_of(checkpoint)

    inputs, x = image_input(image_size, include_preprocessing, input_tensor)
    if stem is not None:
        x = stem(x)
    patches = Patches(patch_size, name="patches")(x)
    outputs = transformer_from_patches(
        patches,
        hidden_size,
        num_layers,
        num_heads,
        mlp_dim,
        num_classes,
        include_top,
        pooling,
        representation_size,
        dropout,
        attention_dropout,
        drop_path_rate,
        classifier_activation,
    )
    model = keras.Model(inputs, outputs, name=name)
    if checkpoint is not None:
        model.load_report = checkpoints.load_checkpoint(model, checkpoint)
        model.load_report.path = str(weights)
    return model


def variant_builder(generic, fixed, builder_name, default_name, doc):
    """A ``keras.applications``-style builder: ``generic(**fixed, <the common arguments>)``.

    Shared by the plain variants (``ViTB16``) and the hybrids (``R50ViTB16``).
    """

    def builder(
        num_classes=1000,
        image_size=224,
        include_top=True,
        weights=None,
        pooling="token",
        representation_size=None,
        dropout=0.0,
        attention_dropout=0.0,
        drop_path_rate=0.0,
        classifier_activation="softmax",
        include_preprocessing=True,
        input_tensor=None,
        name=None,
    ):
        return generic(
            image_size=image_size,
            num_classes=num_classes,
            include_top=include_top,
            weights=weights,
            pooling=pooling,
            representation_size=representation_size,
            dropout=dropout,
            attention_dropout=attention_dropout,
            drop_path_rate=drop_path_rate,
            classifier_activation=classifier_activation,
            include_preprocessing=include_preprocessing,
            input_tensor=input_tensor,
            name=name or default_name,
            **fixed,
        )

    builder.__name__ = builder.__qualname__ = builder_name
    builder.__doc__ = doc
    return builder


def _variant_builder(variant):
    size, patch = variant.split("/")
    config = configs.decode_variant(variant)
    doc = _VARIANT_DOC.format(variant=variant, compact=size + patch, size=size, **config)
    return variant_builder(ViT, config, f"ViT{size}{patch}", "vit_" + variant.replace("/", "").lower(), doc)


_VARIANT_DOC = """Build ViT-{variant}: patch {patch_size}, width {hidden_size}, depth {num_layers}, \
MLP {mlp_dim}, {num_heads} heads.

    Args:
        num_classes: classes of the head (default 1000).
        image_size: int or (height, width), divisible by {patch_size} (default 224).
        include_top, weights, pooling, representation_size, dropout,
        attention_dropout, drop_path_rate, classifier_activation,
        include_preprocessing, input_tensor, name: as in :func:`keras_vit.ViT`.

    Returns:
        A functional ``keras.Model``; inputs are RGB images in [0, 255].

    Example:
    >>> model = keras_vit.ViT{compact}(num_classes=10)  # doctest: +SKIP
    >>> model = keras_vit.ViT{compact}(weights="ViT-{size}_{patch_size}.npz", image_size=384)  # doctest: +SKIP
"""


ViTTi16 = _variant_builder("Ti/16")
ViTS16 = _variant_builder("S/16")
ViTS32 = _variant_builder("S/32")
ViTB16 = _variant_builder("B/16")
ViTB32 = _variant_builder("B/32")
ViTL16 = _variant_builder("L/16")
ViTL32 = _variant_builder("L/32")
ViTH14 = _variant_builder("H/14")

BUILDERS = {
    "Ti/16": ViTTi16,
    "S/16": ViTS16,
    "S/32": ViTS32,
    "B/16": ViTB16,
    "B/32": ViTB32,
    "L/16": ViTL16,
    "L/32": ViTL32,
    "H/14": ViTH14,
}
