"""The hybrid ViT of the paper (Sec. 3.1): a ResNet-v2 feature map cut into patches, as rows of data.

The ResNet-v2 (GroupNorm, weight-standardised convolutions) is :mod:`keras_vit.layers.resnet`; the
model is the very same :class:`~keras_vit.architecture.config.ViTConfig` with ``stem="resnet"``, as
timm builds its hybrids: the same ViT with a different patch embedding. Checkpoint keys of the ResNet
are mapped by :func:`keras_vit.weights.mapping.hybrid_targets`.
"""

from keras_vit.architecture import variants
from keras_vit.layers.resnet import backbone_stride
from keras_vit.models.build import make_builder
from keras_vit.weights import presets

_HYBRID = dict(stem="resnet")

_HYBRID_VIT_DOC = """Build a hybrid ViT: ResNet-v2 (GroupNorm, weight standardisation) + Transformer.

    Args:
        block_units: units per ResNet stage; ``(3, 4, 9)`` for R50+ViT-B/16 (stride
            16), ``(2, 2, 2, 2)`` for R26 and ``(3, 4, 6, 3)`` for R50 with four
            stages (stride 32), ``()`` for the root alone (stride 4).
        width: width multiplier of the ResNet (root width ``64 * width``, a
            multiple of the 32 GroupNorm groups).
        patch_size: patch size on the feature map (default 1, the paper's hybrids).
        image_size: int or ``(h, w)``, divisible by the stride times the patch
            size; None: any such size, the grid being the feature map's (see
            :func:`keras_vit.ViT`).
        weights, input_tensor, name and the other fields of :class:`keras_vit.ViTConfig`
            (``hidden_size``, ``num_layers``, ``num_heads``, ``mlp_dim``,
            ``num_classes``, ``include_top``, ``pooling``...): as in
            :func:`keras_vit.ViT` (keyword-only). ``weights`` is an original
            hybrid ``.npz`` (e.g. ``R50+ViT-B_16.npz``) or a preset tag of a
            registered hybrid; its stage sizes must match ``block_units``
            (checked before building).

    Returns:
        A :class:`keras_vit.VisionTransformer`; with ``weights``, the report of
        the load is ``model.load_report``.

    Example:
    >>> model = HybridViT(block_units=(1, 1), width=0.5, image_size=32, hidden_size=32,
    ...                   num_layers=1, num_heads=2, mlp_dim=64, num_classes=3)
    >>> model.vit_config.num_patches, model.vit_config.stride
    (16, 8)
"""

HybridViT = make_builder(
    "HybridViT", doc=_HYBRID_VIT_DOC, positional=("block_units", "width"), fixed=_HYBRID,
    defaults=dict(block_units=(3, 4, 9), width=1, patch_size=1), default_name="hybrid_vit",
)

_HYBRID_DOC = """Build the hybrid {variant}: ResNet stages {block_units} (stride {stride}), 1x1 patches, \\
Transformer of width {hidden_size}, depth {num_layers}, MLP {mlp_dim}, {num_heads} heads.

    Args:
        num_classes: classes of the head (default 1000).
        image_size: int or (height, width), divisible by {stride} (default 224);
            None: any such size (see :func:`keras_vit.ViT`).
        weights, input_tensor, name and the fields of :class:`keras_vit.ViTConfig`
            but the sizes: as in :func:`keras_vit.ViT` (keyword-only).
        patch_size: patches of another size than 1 on the feature map (keyword-only).

    Returns:
        A :class:`keras_vit.VisionTransformer`; inputs are RGB images in [0, 255].

    Example:
    >>> model = keras_vit.{builder}(num_classes=10)  # doctest: +SKIP
    >>> model = keras_vit.{builder}(weights="{file}.npz", image_size=384)  # doctest: +SKIP
    >>> model = keras_vit.{builder}(weights="{tag}", num_classes=10)  # doctest: +SKIP
"""


def _hybrid_builder(variant):
    config = variants.decode_hybrid_variant(variant)
    builder = variants.builder_name(variant)
    doc = _HYBRID_DOC.format(
        variant=variant,
        builder=builder,
        stride=backbone_stride(config["block_units"]),
        file=variant.replace("/", "_").replace("+", "+ViT-"),
        tag=presets.presets_of(variant)[0].tag,
        **config,
    )
    return make_builder(
        builder, doc=doc, positional=("num_classes", "image_size"), fixed={**config, **_HYBRID}, variant=variant,
        default_name=variants.model_name(variant),
    )


# variant name -> builder, for every hybrid of the registry
HYBRID_BUILDERS = {variant: _hybrid_builder(variant) for variant in variants.HYBRID_VARIANTS}
R50ViTB16 = HYBRID_BUILDERS["R50+B/16"]
R26ViTS32 = HYBRID_BUILDERS["R26+S/32"]
R50ViTL32 = HYBRID_BUILDERS["R50+L/32"]

__test__ = {"HybridViT": _HYBRID_VIT_DOC}  # made in keras_vit.models.build: doctest finds the example here
