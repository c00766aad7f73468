"""Functional ViT models: one generic builder, thin wrappers per variant.

``ViT(...)`` takes any architecture; ``ViTB16(...)`` and friends look their
sizes up in :mod:`keras_vit.models.variants`. The arguments follow
``keras.applications``; they are checked by :mod:`keras_vit.models.arguments`
before anything is built. Weights are loaded after the model is built, by
:func:`keras_vit.weights.load_into`.
"""

import keras

from keras_vit import weights as weights_lib
from keras_vit.layers import LAYER_NORM_EPSILON, PatchEncoder, Patches, TokenPooling, TransformerBlock
from keras_vit.models import variants
from keras_vit.weights import presets
from keras_vit.models.arguments import (
    DEFAULT_IMAGE_SIZE, image_size_pair, stored_image_size, validate_grid, validate_top, validate_transformer, validate_weights,
)


def encoder(
    x, *, num_layers, num_heads, mlp_dim, dropout=0.0, attention_dropout=0.0, drop_path_rate=0.0,
    layer_norm_epsilon=LAYER_NORM_EPSILON,
):
    """Stack ``num_layers`` blocks (names ``transformer_block_{i}``) and the final norm.

    Stochastic depth grows linearly with depth from 0 to ``drop_path_rate``; every LayerNorm
    uses ``layer_norm_epsilon`` (1e-6 in the original checkpoints, 1e-12 in transformers' ports).
    """
    for i in range(num_layers):
        rate = drop_path_rate * i / max(num_layers - 1, 1)
        x = TransformerBlock(
            num_heads=num_heads,
            mlp_dim=mlp_dim,
            dropout=dropout,
            attention_dropout=attention_dropout,
            drop_path=rate,
            layer_norm_epsilon=layer_norm_epsilon,
            name=f"transformer_block_{i}",
        )(x)
    return keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="encoder_norm")(x)


def head(x, *, num_classes, include_top, pooling, representation_size, classifier_activation):
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
    *,
    grid_size=None,
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
    layer_norm_epsilon=LAYER_NORM_EPSILON,
):
    """Patches -> Eq. 1 embedding -> encoder -> head. Shared with the hybrid and the conv-stem model.

    ``grid_size`` is the ``(rows, cols)`` grid the position embeddings are
    stored for (:func:`cut_patches`); None: ``patches`` is a sequence of a square grid.
    """
    num_patches = patches.shape[1] if grid_size is None else grid_size[0] * grid_size[1]
    x = PatchEncoder(
        num_patches=num_patches,
        hidden_size=hidden_size,
        class_token=pooling != "gap",
        dropout=dropout,
        grid_size=grid_size,
        name="patch_encoder",
    )(patches)
    x = encoder(
        x,
        num_layers=num_layers,
        num_heads=num_heads,
        mlp_dim=mlp_dim,
        layer_norm_epsilon=layer_norm_epsilon,
        dropout=dropout,
        attention_dropout=attention_dropout,
        drop_path_rate=drop_path_rate,
    )
    return head(
        x,
        num_classes=num_classes,
        include_top=include_top,
        pooling=pooling,
        representation_size=representation_size,
        classifier_activation=classifier_activation,
    )


def image_input(image_size, include_preprocessing, input_tensor=None):
    """Model input (``(None, None, 3)`` for ``image_size=None``), plus the [0, 255] -> [-1, 1] scaling of the original ViT."""
    h, w = (None, None) if image_size is None else image_size_pair(image_size)
    if input_tensor is not None:
        inputs = input_tensor
    else:
        inputs = keras.Input(shape=(h, w, 3), name="images")
    x = inputs
    if include_preprocessing:
        x = keras.layers.Rescaling(scale=1.0 / 127.5, offset=-1.0, name="preprocessing")(x)
    return inputs, x


def cut_patches(x, patch_size, native_image_size, stride=1):
    """``(patches, grid)``: the feature map ``x`` cut by a ``Patches`` layer named ``patches``, and the stored grid.

    A feature map of static size is cut into one sequence, and its grid is the
    one the position embeddings are stored for. One of a size known only when
    the model runs (``image_size=None``) keeps its grid
    (``Patches(flatten=False)``), and the embeddings are stored for the grid of
    ``native_image_size`` after the stem's total ``stride`` (``"same"``
    padding: ``ceil(size / stride)`` pixels).
    """
    dynamic = x.shape[1] is None or x.shape[2] is None
    layer = Patches(patch_size, flatten=not dynamic, name="patches")
    if dynamic:
        h, w = image_size_pair(native_image_size)
        grid = layer.grid_size((None, -(-h // stride), -(-w // stride), None))
    else:
        grid = layer.grid_size(x.shape)
    return layer(x), grid


def ViT(
    image_size=224,
    patch_size=16,
    *,
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
    native_image_size=None,
    name="vit",
):
    """Build a Vision Transformer (Dosovitskiy et al., 2020) of any size.

    Args:
        image_size: int or ``(height, width)``; each divisible by the patch
            size. None builds a model of input ``(batch, None, None, 3)`` that
            takes any size the patch size divides: the grid is ``H/P x W/P``
            and the position embeddings, stored for the grid of
            ``native_image_size``, are resampled to it in the graph, in 2-D as
            the checkpoint loader resamples them (the class token's kept).
        patch_size: int or ``(ph, pw)``. With ``weights`` of another patch size,
            the patch-embedding kernel is resampled (FlexiViT's pseudo-inverse
            resize, :mod:`keras_vit.weights.patchemb`).
        hidden_size, num_layers, num_heads, mlp_dim: the Transformer's shape
            (keyword-only, as every argument after ``patch_size``).
        num_classes: classes of the head (used when ``include_top``).
        include_top: add the classification head. Without it the model returns
            the pooled representation, or every token with ``pooling=None``.
        weights: None (random init), the path to an original Google ``.npz``
            checkpoint, or a preset tag (``"imagenet21k"``,
            ``"imagenet21k+imagenet2012"``, ``"augreg_in21k"``,
            ``"augreg_in21k_ft_in1k"``...: downloaded once, then read from the
            Keras cache; the model's shape must be a registered variant). A
            pre-logits layer present in the file is added automatically;
            position embeddings are interpolated to ``image_size``; a head of
            another size is skipped and left at zero.
        pooling: ``"token"`` (class token, the paper's default), ``"gap"``
            (mean of the tokens, no class token) or None (``include_top=False``
            only: return the token sequence).
        representation_size: width of the optional tanh pre-logits layer.
        dropout, attention_dropout, drop_path_rate: regularisation rates.
        classifier_activation: activation of the head; None returns logits.
        include_preprocessing: inputs are RGB in [0, 255] and the model scales
            them to [-1, 1]; if False, feed [-1, 1] pixels yourself.
        input_tensor: optional Keras tensor to use as the model input.
        native_image_size: with ``image_size=None``, the int or ``(height,
            width)`` whose patch grid the position embeddings are stored for
            (default 224): a checkpoint is loaded as into a model of that size.
        name: model name.

    Returns:
        A functional ``keras.Model``; with ``weights``, the report of the load
        is ``model.load_report`` (see :func:`keras_vit.weights.load_into`).

    Example:
    >>> model = ViT(image_size=32, patch_size=8, hidden_size=64, num_layers=2,
    ...             num_heads=4, mlp_dim=128, num_classes=10)
    >>> model.output_shape
    (None, 10)
    >>> model = ViT(image_size=None, native_image_size=32, patch_size=8, hidden_size=64, num_layers=2,
    ...             num_heads=4, mlp_dim=128, num_classes=10)
    >>> model.input_shape, tuple(model(keras.ops.zeros((1, 48, 64, 3))).shape)
    ((None, None, None, 3), (1, 10))
    """
    size, argument = stored_image_size(image_size, native_image_size)
    (h, w), _ = validate_grid(size, patch_size, name=argument)
    validate_transformer(hidden_size, num_layers, num_heads, mlp_dim)
    validate_top(num_classes, include_top, pooling, classifier_activation)
    sizes = dict(hidden_size=hidden_size, num_layers=num_layers, mlp_dim=mlp_dim, num_heads=num_heads)
    weights = validate_weights(weights, variant=variant_of(patch_size, sizes), image_size=(h, w))
    return assemble(
        image_size=None if image_size is None else (h, w),
        native_image_size=(h, w),
        patch_size=patch_size,
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_heads=num_heads,
        mlp_dim=mlp_dim,
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
        name=name,
    )


def variant_of(patch_size, sizes):
    """The registry name of a plain ViT's shape (``"B/16"``), or None: what a preset tag is looked up by.

    Example:
    >>> variant_of(16, variants.VARIANTS["Ti"]), variant_of(8, dict(variants.VARIANTS["Ti"], num_layers=6))
    ('Ti/16', None)
    """
    ph, pw = patch_size if isinstance(patch_size, (tuple, list)) else (patch_size, patch_size)
    for size, config in variants.VARIANTS.items():
        if ph == pw and config == sizes:
            return f"{size}/{ph}"
    return None


def assemble(
    *,
    image_size,
    patch_size,
    weights,
    include_preprocessing,
    input_tensor,
    name,
    representation_size,
    native_image_size=None,
    stem=None,
    stride=1,
    check_checkpoint=None,
    **transformer,
):
    """Input -> optional ``stem`` (the hybrid's CNN, of total ``stride``) -> patches -> Transformer -> head, then the weights.

    Arguments are validated by the caller; ``**transformer`` are the keyword
    arguments of :func:`transformer_from_patches` but ``representation_size``
    and ``grid_size``. ``image_size=None`` builds a model of any input size
    whose position embeddings are stored for ``native_image_size`` (:func:`cut_patches`).
    With ``weights``, the file's shapes are peeked at before building
    (:func:`keras_vit.weights.checkpoint_shapes`, no data read): a pre-logits
    layer in the checkpoint is added when ``representation_size`` is None, and
    ``check_checkpoint(shapes)`` may refuse the file before anything is built; the
    LayerNorms take the epsilon the file declares (:func:`keras_vit.weights.describe`).
    The built model is then loaded by :func:`keras_vit.weights.load_into`.
    """
    if weights is not None:
        info = weights_lib.describe(weights)  # shapes and settings only, no tensor data
        shapes = info.shapes
        if check_checkpoint is not None:
            check_checkpoint(shapes)
        if representation_size is None:
            representation_size = weights_lib.representation_size_of(shapes)
        # the LayerNorm epsilon the weights were trained with (1e-12 in transformers' ports): another
        # epsilon changes every output without an error
        transformer.setdefault("layer_norm_epsilon", info.layer_norm_epsilon)

    inputs, x = image_input(image_size, include_preprocessing, input_tensor)
    if stem is not None:
        x = stem(x)
    patches, grid = cut_patches(x, patch_size, native_image_size or image_size, stride)
    outputs = transformer_from_patches(patches, grid_size=grid, representation_size=representation_size, **transformer)
    model = keras.Model(inputs, outputs, name=name)
    if weights is not None:
        weights_lib.load_into(model, weights)
    return model


def variant_builder(generic, fixed, builder_name, default_name, doc, variant=None):
    """A ``keras.applications``-style builder: ``generic(**fixed, <the common arguments>)``.

    Shared by the plain variants (``ViTB16``) and the hybrids (``R50ViTB16``).
    ``patch_size`` overrides the variant's (FlexiViT): a preset tag then still
    names the checkpoint of ``variant``, resolved here, and its patch-embedding
    kernel is resampled when loaded.
    """

    def builder(
        num_classes=1000,
        image_size=DEFAULT_IMAGE_SIZE,
        *,
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
        native_image_size=None,
        patch_size=None,
        name=None,
    ):
        config = dict(fixed)
        if patch_size is not None and patch_size != fixed["patch_size"]:
            config["patch_size"] = patch_size
            size, _ = stored_image_size(image_size, native_image_size)
            weights = validate_weights(weights, variant=variant, hybrid="+" in (variant or ""), image_size=size)
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
            native_image_size=native_image_size,
            name=name or default_name,
            **config,
        )

    builder.__name__ = builder.__qualname__ = builder_name
    builder.__doc__ = doc
    return builder


_VARIANT_DOC = """Build ViT-{variant}: patch {patch_size}, width {hidden_size}, depth {num_layers}, \
MLP {mlp_dim}, {num_heads} heads.

    Args:
        num_classes: classes of the head (default 1000).
        image_size: int or (height, width), divisible by {patch_size} (default 224);
            None: any size divisible by the patch size (see :func:`keras_vit.ViT`).
        include_top, weights, pooling, representation_size, dropout,
        attention_dropout, drop_path_rate, classifier_activation,
        include_preprocessing, input_tensor, native_image_size, name: as in
        :func:`keras_vit.ViT` (keyword-only).
        patch_size: another patch size than {patch_size} (keyword-only): the
            checkpoint's patch-embedding kernel is resampled (FlexiViT).

    Returns:
        A functional ``keras.Model``; inputs are RGB images in [0, 255].

    Example:
    >>> model = keras_vit.{builder}(num_classes=10)  # doctest: +SKIP
    >>> model = keras_vit.{builder}(weights="ViT-{size}_{patch_size}.npz", image_size=384)  # doctest: +SKIP
    >>> model = keras_vit.{builder}(weights="{tag}", image_size=384, num_classes=10)  # doctest: +SKIP
    >>> model = keras_vit.{builder}(weights="{tag}", image_size=None)  # any size  # doctest: +SKIP
"""


def _vit_builder(variant):
    config = variants.decode_variant(variant)
    size = variant.split("/")[0]
    builder = variants.builder_name(variant)
    tag = presets.presets_of(variant)[0].tag
    doc = _VARIANT_DOC.format(variant=variant, builder=builder, size=size, tag=tag, **config)
    return variant_builder(ViT, config, builder, variants.model_name(variant), doc, variant)


# variant name -> builder, for every variant of the registry
BUILDERS = {variant: _vit_builder(variant) for variant in variants.VIT_VARIANTS}
ViTTi16 = BUILDERS["Ti/16"]
ViTS16 = BUILDERS["S/16"]
ViTS32 = BUILDERS["S/32"]
ViTB16 = BUILDERS["B/16"]
ViTB32 = BUILDERS["B/32"]
ViTL16 = BUILDERS["L/16"]
ViTL32 = BUILDERS["L/32"]
ViTH14 = BUILDERS["H/14"]
