"""Small models for small images: the ViT on a conv stem that the main job trains on MNIST, and tiny plain ViTs.

Their named configurations are ``SMALL_MODELS`` in :mod:`keras_vit.architecture.variants` (read by
``keras-vit train --model``); :func:`conv_stem_vit` builds any of them: a
:class:`~keras_vit.architecture.config.ViTConfig` with ``stem="conv"``.
"""

from keras_vit.models.build import make_builder

_CONV_STEM_DOC = """A ViT whose patches come from a small conv stem (Section 3.1, "Hybrid Architecture").

    The stem is 3x3 convolutions with BatchNorm and GELU, named
    ``stem_conv_{i}``/``stem_norm_{i}``; all but the first have stride 2.
    ``stem_channels=()`` gives a plain ViT. The rest -- patches, Eq. 1
    embedding, encoder, head -- is the standard ViT, so every layer name after
    the stem matches :func:`keras_vit.ViT`. ``image_size=None`` takes any size
    (position embeddings stored for ``native_image_size``, default 28), as
    :func:`keras_vit.ViT` does. The other arguments are the fields of
    :class:`keras_vit.ViTConfig` (keyword-only; defaults: patch 2, width 64,
    depth 4, 4 heads, MLP 128, 10 classes).

    Example:
    >>> from keras_vit.architecture.variants import SMALL_MODELS
    >>> model = conv_stem_vit(num_classes=10, **SMALL_MODELS["mnist"])
    >>> model.vit_config.num_patches, model.output_shape
    (49, (None, 10))
"""

conv_stem_vit = make_builder(
    "conv_stem_vit",
    doc=_CONV_STEM_DOC,
    positional=("image_size", "stem_channels"),
    fixed=dict(stem="conv"),
    defaults=dict(
        image_size=28, stem_channels=(16, 32), patch_size=2, hidden_size=64, num_layers=4, num_heads=4, mlp_dim=128,
        num_classes=10,
    ),
    default_name="vit_conv_stem",
)

__test__ = {"conv_stem_vit": _CONV_STEM_DOC}  # made in keras_vit.models.build: doctest finds the example here
