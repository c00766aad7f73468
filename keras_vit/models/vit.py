"""The plain ViT builders: ``ViT`` (any size) and one per variant of the paper (``ViTB16``...), as rows of data.

Each is made by :func:`keras_vit.models.build.make_builder` from the variants' table
(:mod:`keras_vit.architecture.variants`); the arguments are the fields of
:class:`~keras_vit.architecture.config.ViTConfig`, checked before anything is built, plus ``weights``,
``input_tensor`` and ``name``. Weights are loaded after the model is built
(:func:`keras_vit.models.build.build_model`).
"""

from keras_vit.architecture import variants
from keras_vit.models.build import make_builder
from keras_vit.weights import presets

_VIT_DOC = """Build a Vision Transformer (Dosovitskiy et al., 2020) of any size.

    Args:
        image_size: int or ``(height, width)``; each divisible by the patch
            size. None builds a model of input ``(batch, None, None, 3)`` that
            takes any size the patch size divides: the grid is ``H/P x W/P``
            and the position embeddings, stored for the grid of
            ``native_image_size``, are resampled to it in the graph, in 2-D as
            the checkpoint loader resamples them (the class token's kept).
        patch_size: int or ``(ph, pw)``. With ``weights`` of another patch size,
            the patch-embedding kernel is resampled (FlexiViT's pseudo-inverse
            resize, :func:`keras_vit.layers.resampling.resample_patch_embedding`).
        weights: None (random init), the path to an original Google ``.npz``
            checkpoint, a timm or transformers ``.safetensors`` file or folder,
            ``"hf://ORG/NAME"``, a keras_vit ``.keras`` file, or a preset tag
            (``"imagenet21k"``, ``"imagenet21k+imagenet2012"``, ``"augreg_in21k"``,
            ``"augreg_in21k_ft_in1k"``...: downloaded once, then read from the
            Keras cache; the model's shape must be a registered variant). A
            pre-logits layer present in the file is added automatically, the
            LayerNorms take the file's epsilon, position embeddings are
            interpolated to ``image_size``; a head of another size is skipped
            and left at zero.
        input_tensor: optional Keras tensor to use as the model input.
        name: model name (default ``"vit"``).
        classes, input_shape: ``keras.applications``' names of ``num_classes``
            and ``image_size`` (``input_shape=(h, w, 3)``; ``(None, None, 3)``
            for any size).
        **fields: every other field of :class:`keras_vit.ViTConfig`, keyword-only:
            ``hidden_size``, ``num_layers``, ``num_heads``, ``mlp_dim`` (the
            Transformer's shape), ``num_classes``, ``include_top`` (without it
            the model returns the pooled representation, every token with
            ``pooling=None``, or the patch tokens on their grid, ``(batch, h, w,
            hidden_size)``, with ``pooling="feature_map"``), ``pooling``
            (``"token"``, ``"gap"``, ``keras.applications``' ``"avg"`` and
            ``"max"`` (the class token kept), None, ``"feature_map"``),
            ``representation_size`` (tanh pre-logits), ``dropout``,
            ``attention_dropout``, ``drop_path_rate``, ``classifier_activation``
            (None: logits), ``include_preprocessing`` (inputs in [0, 255],
            scaled to [-1, 1] by the model), ``native_image_size`` (with
            ``image_size=None``, the size whose grid the position embeddings
            are stored for, default 224), ``layer_norm_epsilon``, and the stem
            fields (``stem``, ``block_units``, ``width``, ``stem_channels``).

    Returns:
        A :class:`keras_vit.VisionTransformer` (a functional ``keras.Model``)
        whose ``vit_config`` is its architecture; with ``weights``, the report
        of the load is ``model.load_report``.

    Example:
    >>> model = ViT(image_size=32, patch_size=8, hidden_size=64, num_layers=2,
    ...             num_heads=4, mlp_dim=128, num_classes=10)
    >>> model.output_shape, model.vit_config.grid
    ((None, 10), (4, 4))
    >>> import keras
    >>> model = ViT(image_size=None, native_image_size=32, patch_size=8, hidden_size=64, num_layers=2,
    ...             num_heads=4, mlp_dim=128, num_classes=10)
    >>> model.input_shape, tuple(model(keras.ops.zeros((1, 48, 64, 3))).shape)
    ((None, None, None, 3), (1, 10))
"""

ViT = make_builder("ViT", doc=_VIT_DOC, positional=("image_size", "patch_size"), default_name="vit")

_VARIANT_DOC = """Build ViT-{variant}: patch {patch_size}, width {hidden_size}, depth {num_layers}, \
MLP {mlp_dim}, {num_heads} heads.

    Args:
        num_classes: classes of the head (default 1000).
        image_size: int or (height, width), divisible by {patch_size} (default 224);
            None: any size divisible by the patch size (see :func:`keras_vit.ViT`).
        weights, input_tensor, name, and the other fields of :class:`keras_vit.ViTConfig`
            but the sizes (include_top, pooling, representation_size, dropout,
            attention_dropout, drop_path_rate, classifier_activation,
            include_preprocessing, native_image_size...), and keras.applications'
            classes and input_shape: as in :func:`keras_vit.ViT` (keyword-only).
        patch_size: another patch size than {patch_size} (keyword-only): the
            checkpoint's patch-embedding kernel is resampled (FlexiViT).

    Returns:
        A :class:`keras_vit.VisionTransformer`; inputs are RGB images in [0, 255].

    Example:
    >>> model = keras_vit.{builder}(num_classes=10)  # doctest: +SKIP
    >>> model = keras_vit.{builder}(weights="ViT-{size}_{patch_size}.npz", image_size=384)  # doctest: +SKIP
    >>> model = keras_vit.{builder}(weights="{tag}", image_size=384, num_classes=10)  # doctest: +SKIP
    >>> model = keras_vit.{builder}(weights="{tag}", image_size=None)  # any size  # doctest: +SKIP
"""


def _variant_builder(variant):
    sizes = variants.decode_variant(variant)
    builder = variants.builder_name(variant)
    doc = _VARIANT_DOC.format(
        variant=variant, builder=builder, size=variant.split("/")[0], tag=presets.presets_of(variant)[0].tag, **sizes
    )
    return make_builder(
        builder, doc=doc, positional=("num_classes", "image_size"), fixed=dict(sizes, stem=None), variant=variant,
        default_name=variants.model_name(variant),
    )


# variant name -> builder, for every variant of the registry
BUILDERS = {variant: _variant_builder(variant) for variant in variants.VIT_VARIANTS}
ViTTi16 = BUILDERS["Ti/16"]
ViTS16 = BUILDERS["S/16"]
ViTS32 = BUILDERS["S/32"]
ViTB16 = BUILDERS["B/16"]
ViTB32 = BUILDERS["B/32"]
ViTL16 = BUILDERS["L/16"]
ViTL32 = BUILDERS["L/32"]
ViTH14 = BUILDERS["H/14"]

__test__ = {"ViT": _VIT_DOC}  # the builders are made in keras_vit.models.build: doctest finds their examples here
