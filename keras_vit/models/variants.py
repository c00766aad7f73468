"""Model sizes from the paper (Table 1), as data.

Variants are looked up by name (``"B/16"``) and any field can be overridden by
keyword, in the manner of big_vision's ``decode_variant``.
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

_VARIANT_RE = re.compile(r"^(?P<size>[A-Za-z]+)/(?P<patch>\d+)$")


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
    """
    match = _VARIANT_RE.match(str(variant))
    if match is None or match["size"] not in VARIANTS:
        raise ValueError(
            "Unknown ViT variant: expected '<size>/<patch>' with size in "
            f"{sorted(VARIANTS)}, e.g. 'B/16'. Received: variant={variant!r}"
        )
    config = dict(VARIANTS[match["size"]], patch_size=int(match["patch"]))
    unknown = set(overrides) - set(config)
    if unknown:
        raise ValueError(
            f"Unknown override(s) {sorted(unknown)} for variant {variant!r}; "
            f"allowed: {sorted(config)}"
        )
    config.update(overrides)
    return config


def count_params(
    patch_size,
    hidden_size,
    num_layers,
    mlp_dim,
    num_heads,
    num_classes=1000,
    image_size=224,
    channels=3,
    representation_size=None,
    class_token=True,
    include_top=True,
):
    """Count a ViT's parameters from its shape alone, without building it.

    Used for the large variants, whose allocation is too slow for CI, and
    checked against built models for the small ones.
    """
    del num_heads  # heads split D; they do not change the count
    h, w = (image_size, image_size) if isinstance(image_size, int) else image_size
    num_patches = (h // patch_size) * (w // patch_size)
    d = hidden_size
    embed = patch_size * patch_size * channels * d + d
    tokens = num_patches + (1 if class_token else 0)
    embed += tokens * d + (d if class_token else 0)
    block = 2 * 2 * d  # two LayerNorms
    block += 4 * (d * d + d)  # q, k, v, out
    block += d * mlp_dim + mlp_dim + mlp_dim * d + d
    total = embed + num_layers * block + 2 * d  # final LayerNorm
    width = d
    if representation_size:
        total += d * representation_size + representation_size
        width = representation_size
    if include_top:
        total += width * num_classes + num_classes
    return total
