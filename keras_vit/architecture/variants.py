"""The one registry of model variants, as data: ViT sizes, hybrid stages, small models.

Variants are looked up by name (``"B/16"``, ``"R50+B/16"``) and any field can be
overridden by keyword, in the manner of big_vision's ``decode_variant``. The
builders (``keras_vit.ViTB16``...), their dicts ``BUILDERS`` /
``HYBRID_BUILDERS``, ``keras-vit info`` and ``keras-vit train --model`` are all
derived from these tables.
"""

import re

# width (hidden size D), depth (layers), MLP size, heads -- Table 1 of the paper,
# plus the Ti and S sizes of DeiT / "How to train your ViT" (AugReg).
VARIANTS = {
    "Ti": dict(hidden_size=192, num_layers=12, mlp_dim=768, num_heads=3),
    "S": dict(hidden_size=384, num_layers=12, mlp_dim=1536, num_heads=6),
    "B": dict(hidden_size=768, num_layers=12, mlp_dim=3072, num_heads=12),
    "L": dict(hidden_size=1024, num_layers=24, mlp_dim=4096, num_heads=16),
    "H": dict(hidden_size=1280, num_layers=32, mlp_dim=5120, num_heads=16),
}

# the plain ViTs with a public builder (keras_vit.ViTTi16 ... keras_vit.ViTH14), in this order
VIT_VARIANTS = ("Ti/16", "S/16", "S/32", "B/16", "B/32", "L/16", "L/32", "H/14")

# the paper's hybrids: ResNet-v2 stage sizes and the ViT size of their Transformer; 1x1 patches
# on the feature map, ResNet width multiplier 1
HYBRID_VARIANTS = {
    "R50+B/16": dict(block_units=(3, 4, 9), size="B"),
    "R26+S/32": dict(block_units=(2, 2, 2, 2), size="S"),
    "R50+L/32": dict(block_units=(3, 4, 6, 3), size="L"),
}

# small models for 28x28 images (`keras-vit train --model mnist|tiny|micro`), built by
# keras_vit.models.small.conv_stem_vit; stem_channels=() is a plain ViT
SMALL_MODELS = {
    "mnist": dict(
        image_size=28, stem_channels=(32, 64), patch_size=2, hidden_size=64, num_layers=4, num_heads=4, mlp_dim=128
    ),
    "tiny": dict(image_size=28, stem_channels=(), patch_size=4, hidden_size=64, num_layers=4, num_heads=4, mlp_dim=128),
    "micro": dict(image_size=28, stem_channels=(), patch_size=7, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64),
}

_VARIANT_RE = re.compile(r"^(?P<size>[A-Za-z]+)/(?P<patch>\d+)$")


def _override(config, variant, overrides):
    unknown = set(overrides) - set(config)
    if unknown:
        raise ValueError(
            f"Unknown override(s) {sorted(unknown)} for variant {variant!r}; allowed: {sorted(config)}"
        )
    config.update(overrides)
    return config


def decode_variant(variant, **overrides):
    """Return the architecture arguments for a variant name such as ``"B/16"``.

    Args:
        variant: ``"<size>/<patch>"`` where size is one of ``Ti, S, B, L, H``.
        **overrides: any field to replace (``num_layers=6``...).

    Returns:
        A dict with ``patch_size, hidden_size, num_layers, mlp_dim, num_heads``.

    Example:
    >>> decode_variant("B/16")["hidden_size"]
    768
    >>> decode_variant("S/32", num_layers=6)["num_layers"]
    6
    """
    match = _VARIANT_RE.match(str(variant))
    if match is None or match["size"] not in VARIANTS:
        raise ValueError(
            "Unknown ViT variant: expected '<size>/<patch>' with size in "
            f"{sorted(VARIANTS)}, e.g. 'B/16'. Received: variant={variant!r}"
        )
    config = dict(VARIANTS[match["size"]], patch_size=int(match["patch"]))
    return _override(config, variant, overrides)


def decode_hybrid_variant(variant, **overrides):
    """Return the architecture arguments of a hybrid such as ``"R50+B/16"`` (those of ``HybridViT``).

    Args:
        variant: a key of ``HYBRID_VARIANTS``.
        **overrides: any field to replace.

    Returns:
        A dict with ``block_units, width, patch_size, hidden_size, num_layers, mlp_dim, num_heads``.

    Example:
    >>> config = decode_hybrid_variant("R50+B/16")
    >>> config["block_units"], config["patch_size"], config["hidden_size"]
    ((3, 4, 9), 1, 768)
    """
    if variant not in HYBRID_VARIANTS:
        raise ValueError(f"Unknown hybrid variant: expected one of {list(HYBRID_VARIANTS)}. Received: variant={variant!r}")
    entry = HYBRID_VARIANTS[variant]
    config = dict(VARIANTS[entry["size"]], block_units=entry["block_units"], width=1, patch_size=1)
    return _override(config, variant, overrides)


def builder_name(variant):
    """The public builder of a variant: ``"B/16" -> "ViTB16"``, ``"R50+B/16" -> "R50ViTB16"``.

    Example:
    >>> builder_name("Ti/16"), builder_name("R26+S/32")
    ('ViTTi16', 'R26ViTS32')
    """
    resnet, _, vit = variant.rpartition("+")
    return resnet + "ViT" + vit.replace("/", "")


def model_name(variant):
    """The default ``name`` of a builder's model: ``"B/16" -> "vit_b16"``, ``"R50+B/16" -> "r50_vit_b16"``.

    Example:
    >>> model_name("B/16"), model_name("R50+L/32")
    ('vit_b16', 'r50_vit_l32')
    """
    resnet, _, vit = variant.rpartition("+")
    return (resnet.lower() + "_" if resnet else "") + "vit_" + vit.replace("/", "").lower()
