"""The hybrid ViT of the paper (Sec. 3.1): a ResNet-v2 feature map cut into patches.

The ResNet-v2 (GroupNorm, weight-standardised convolutions) is
:mod:`keras_vit.layers.resnet`; its feature map goes through
``Patches(patch_size)`` (1x1 for the paper's hybrids) and the very same
:func:`keras_vit.models.vit.assemble` as the plain ViT, as timm builds its
hybrids: the same ViT with a different patch embedding. Checkpoint keys of the
ResNet are mapped by :func:`keras_vit.weights.mapping.hybrid_targets`, chosen by the
loader because the model has a ResNet stem.
"""

from keras_vit import weights as weights_lib
from keras_vit.layers.resnet import GROUP_NORM_GROUPS, ROOT_WIDTH, backbone_stride, resnet_stem
from keras_vit.models import variants
from keras_vit.weights import presets
from keras_vit.models.arguments import (
    positive_ints, positive_pair, stored_image_size, validate_grid, validate_top, validate_transformer, validate_weights,
)
from keras_vit.models.vit import assemble, variant_builder


def _validate_resnet(block_units, width):
    units = positive_ints(block_units, "block_units")
    root = int(ROOT_WIDTH * width) if isinstance(width, (int, float)) and not isinstance(width, bool) and width > 0 else 0
    if root < GROUP_NORM_GROUPS or root % GROUP_NORM_GROUPS:
        raise ValueError(
            f"`width` must make the root width int({ROOT_WIDTH} * width) a positive multiple of the "
            f"{GROUP_NORM_GROUPS} GroupNorm groups (e.g. 0.5, 1, 2). Received: width={width!r}"
        )
    return units


def variant_of(block_units, width, patch_size, sizes):
    """The registry name of a hybrid's shape (``"R50+B/16"``), or None."""
    for name, entry in variants.HYBRID_VARIANTS.items():
        same_stem = (block_units, width, positive_pair(patch_size, "patch_size")) == (entry["block_units"], 1, (1, 1))
        if same_stem and variants.VARIANTS[entry["size"]] == sizes:
            return name
    return None


def HybridViT(
    block_units=(3, 4, 9),
    width=1,
    *,
    patch_size=1,
    hidden_size=768,
    num_layers=12,
    num_heads=12,
    mlp_dim=3072,
    image_size=224,
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
    name="hybrid_vit",
):
    """Build a hybrid ViT: ResNet-v2 (GroupNorm, weight standardisation) + Transformer.

    Args:
        block_units: units per ResNet stage; ``(3, 4, 9)`` for R50+ViT-B/16 (stride
            16), ``(2, 2, 2, 2)`` for R26 and ``(3, 4, 6, 3)`` for R50 with four
            stages (stride 32), ``()`` for the root alone (stride 4).
        width: width multiplier of the ResNet (root width ``64 * width``, a
            multiple of the 32 GroupNorm groups).
        patch_size: patch size on the feature map (1 for the paper's hybrids).
        hidden_size, num_layers, num_heads, mlp_dim: the Transformer's shape.
        image_size: int or ``(h, w)``, divisible by the stride times the patch
            size; None: any such size, the grid being the feature map's (see
            :func:`keras_vit.ViT`).
        num_classes, include_top, weights, pooling, representation_size, dropout,
            attention_dropout, drop_path_rate, classifier_activation,
            include_preprocessing, input_tensor, native_image_size, name: as in :func:`keras_vit.ViT`.
            ``weights`` is an original hybrid ``.npz`` (e.g. ``R50+ViT-B_16.npz``)
            or a preset tag of a registered hybrid; its stage sizes must match
            ``block_units`` (checked before building).

    Returns:
        A functional ``keras.Model``; with ``weights``, the report of the load
        is ``model.load_report`` (see :func:`keras_vit.weights.load_into`).

    Example:
    >>> model = HybridViT(block_units=(1, 1), width=0.5, image_size=32, hidden_size=32,
    ...                   num_layers=1, num_heads=2, mlp_dim=64, num_classes=3)
    >>> model.get_layer("patch_encoder").num_patches
    16
    """
    units = _validate_resnet(block_units, width)
    size, argument = stored_image_size(image_size, native_image_size)
    stride = backbone_stride(units)
    (h, w), _ = validate_grid(size, patch_size, stride, context=f" for block_units={units}", name=argument)
    validate_transformer(hidden_size, num_layers, num_heads, mlp_dim)
    validate_top(num_classes, include_top, pooling, classifier_activation)
    sizes = dict(hidden_size=hidden_size, num_layers=num_layers, mlp_dim=mlp_dim, num_heads=num_heads)
    weights = validate_weights(weights, variant=variant_of(units, width, patch_size, sizes), hybrid=True, image_size=(h, w))
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
        stem=lambda x: resnet_stem(x, units, width),
        stride=stride,
        check_checkpoint=lambda shapes: weights_lib.check_hybrid_stages(shapes, units, str(weights)),
    )


_HYBRID_DOC = """Build the hybrid {variant}: ResNet stages {block_units} (stride {stride}), 1x1 patches, \\
Transformer of width {hidden_size}, depth {num_layers}, MLP {mlp_dim}, {num_heads} heads.

    Args:
        num_classes: classes of the head (default 1000).
        image_size: int or (height, width), divisible by {stride} (default 224);
            None: any such size (see :func:`keras_vit.ViT`).
        include_top, weights, pooling, representation_size, dropout,
        attention_dropout, drop_path_rate, classifier_activation,
        include_preprocessing, input_tensor, native_image_size, name: as in
        :func:`keras_vit.ViT` (keyword-only).
        patch_size: patches of another size than 1 on the feature map (keyword-only).

    Returns:
        A functional ``keras.Model``; inputs are RGB images in [0, 255].

    Example:
    >>> model = keras_vit.{builder}(num_classes=10)  # doctest: +SKIP
    >>> model = keras_vit.{builder}(weights="{file}.npz", image_size=384)  # doctest: +SKIP
    >>> model = keras_vit.{builder}(weights="{tag}", num_classes=10)  # doctest: +SKIP
"""


def _hybrid_builder(variant):
    config = variants.decode_hybrid_variant(variant)
    builder = variants.builder_name(variant)
    file = variant.replace("/", "_").replace("+", "+ViT-")
    doc = _HYBRID_DOC.format(
        variant=variant,
        builder=builder,
        stride=backbone_stride(config["block_units"]),
        file=file,
        tag=presets.presets_of(variant)[0].tag,
        **config,
    )
    return variant_builder(HybridViT, config, builder, variants.model_name(variant), doc, variant)


# variant name -> builder, for every hybrid of the registry
HYBRID_BUILDERS = {variant: _hybrid_builder(variant) for variant in variants.HYBRID_VARIANTS}
R50ViTB16 = HYBRID_BUILDERS["R50+B/16"]
R26ViTS32 = HYBRID_BUILDERS["R26+S/32"]
R50ViTL32 = HYBRID_BUILDERS["R50+L/32"]
