"""Parameter counts from the shapes alone, without building: the large variants are too slow to allocate in CI.

Both counts are checked against built models in the tests (every small variant,
and the hybrids at small sizes).
"""

from keras_vit.architecture.arguments import positive_pair
from keras_vit.layers.resnet import ROOT_WIDTH, backbone_stride


def count_params(
    patch_size,
    hidden_size,
    num_layers,
    mlp_dim,
    num_heads,
    *,
    num_classes=1000,
    image_size=224,
    channels=3,
    representation_size=None,
    class_token=True,
    include_top=True,
):
    """Count a ViT's parameters from its shape alone, without building it.

    Args:
        patch_size, hidden_size, num_layers, mlp_dim, num_heads: the architecture
            (what :func:`keras_vit.decode_variant` returns).
        num_classes, image_size, representation_size, include_top: as in
            :func:`keras_vit.ViT`; ``class_token=False`` for ``pooling="gap"``.
        channels: channels of the image (or feature map) cut into patches.

    Returns:
        The number of weights of the built model.

    Example:
    >>> from keras_vit.architecture.variants import decode_variant
    >>> count_params(**decode_variant("B/16"))
    86567656
    """
    del num_heads  # heads split D; they do not change the count
    h, w = positive_pair(image_size, "image_size")
    ph, pw = positive_pair(patch_size, "patch_size")
    num_patches = (h // ph) * (w // pw)
    d = hidden_size
    embed = ph * pw * channels * d + d
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


def count_hybrid_params(block_units=(3, 4, 9), width=1, image_size=224, **vit):
    """Count a hybrid's parameters from its shape alone, without building it.

    Args:
        block_units, width, image_size: as in :func:`keras_vit.HybridViT`.
        **vit: ``patch_size``, ``hidden_size``, ``num_layers``, ``mlp_dim``,
            ``num_heads`` and the head arguments of :func:`count_params`.

    Example:
    >>> count_hybrid_params(hidden_size=768, num_layers=12, mlp_dim=3072, num_heads=12, patch_size=1)
    98659112
    """
    total, channels = resnet_params(block_units, width)
    h, w = (image_size, image_size) if isinstance(image_size, int) else image_size
    stride = backbone_stride(block_units)
    grid = (-(-h // stride), -(-w // stride))
    return total + count_params(image_size=grid, channels=channels, **vit)


def resnet_params(block_units, width=1):
    """``(parameters, output channels)`` of the hybrid's ResNet-v2 stem.

    Example:
    >>> resnet_params((3, 4, 9))
    (11894848, 1024)
    """
    root = int(ROOT_WIDTH * width)
    total = 7 * 7 * 3 * root + 2 * root  # conv_root (no bias) + gn_root
    channels = root
    for i, units in enumerate(block_units):
        features = root * 2**i
        for j in range(units):
            stride = 2 if (i > 0 and j == 0) else 1
            total += channels * features + 2 * features  # conv1 + gn1
            total += 9 * features * features + 2 * features  # conv2 + gn2
            total += features * 4 * features + 2 * 4 * features  # conv3 + gn3
            if channels != 4 * features or stride != 1:
                total += channels * 4 * features + 2 * 4 * features  # conv_proj + gn_proj
            channels = 4 * features
    return total, channels


def count_config_params(config):
    """Count the parameters of the model a :class:`~keras_vit.architecture.config.ViTConfig` describes, without building it.

    Every family switch is counted (tokens, LayerScale, gated MLPs, qkv bias, extra norms and sub-LayerNorms,
    attention pooling (its own heads and MLP width), projection, DeiT's second head, RoPE-Mixed's frequencies, no
    position table, RMSNorm, a patch norm, bias-free projections); the tests compare the
    count with built models.

    Example:
    >>> from keras_vit.architecture.config import ViTConfig
    >>> from keras_vit.architecture.variants import decode_variant
    >>> count_config_params(ViTConfig(**decode_variant("B/16")))
    86567656
    """
    d, m = config.hidden_size, config.mlp_dim
    if config.stem == "resnet":
        stem, channels = resnet_params(config.block_units, config.width)
    else:
        channels, stem = 3, 0
        kernels = config.stem_strides or (3,) * len(config.stem_channels)  # patchify kernels, or 3 x 3
        for width, k in zip(config.stem_channels, kernels):  # convolutions without bias, BatchNorm (4 weights per channel)
            stem += k * k * channels * width + 4 * width
            channels = width
    ph, pw = config.patch_size
    embed = ph * pw * channels * d + d
    embed += d * (int(config.class_token) + int(config.distillation_token) + config.num_register_tokens)
    embed += (config.num_patches + config.num_position_prefix) * d if config.position_embedding else 0
    norm = 2 * d if config.norm_type == "layernorm" else d  # RMSNorm: a scale, no bias
    embed += norm if config.patch_norm else 0
    glu = 2 if config.mlp_type == "glu" else 1
    mlp = d * m * glu + m * d + ((m * glu + d) if config.mlp_bias else 0)
    branches = 1 if config.parallel_blocks else 2  # a parallel block's one norm and one LayerScale before both
    block = branches * norm + 3 * d * d + (3 * d if config.qkv_bias else 0) + d * d + (d if config.proj_bias else 0) + mlp
    block += branches * d if config.layer_scale_init is not None else 0
    block += 3 * (d // config.num_heads) if config.differential_attention else 0  # four lambdas (half a head), sub_norm
    block += d if config.rope == "mixed" else 0  # RoPE-Mixed's frequencies: (2, heads, head_dim / 2) per layer
    block += 2 * m * int(config.mlp_norm) + 2 * d * int(config.attention_norm)  # the sub-LayerNorms' scales and biases
    total = stem + embed + config.num_layers * block
    total += norm * (int(config.pre_norm) + int(config.final_norm) + int(config.fc_norm))
    if config.pooling == "map":  # probe, query, key/value, output, LayerNorm, MLP (its own width, or the blocks')
        pm = config.map_mlp_dim or m
        total += d + 3 * d * d + (3 * d if config.qkv_bias else 0) + d * d + d + 2 * d + d * pm + pm + pm * d + d
    width = 2 * d if config.pooling == "token_gap_concat" else d
    if config.projection_dim:
        total += width * config.projection_dim
        width = config.projection_dim
    if config.representation_size and config.pooled:  # the pre-logits act on the pooled vector
        total += width * config.representation_size + config.representation_size
        width = config.representation_size
    if config.include_top and config.pooling is not None:
        total += (width * config.num_classes + config.num_classes) * (2 if config.distillation_token else 1)
    return total
