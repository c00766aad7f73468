"""The architecture a checkpoint describes, read from its shapes and settings (no tensor data).

What :func:`keras_vit.from_pretrained` builds: the arguments of ``keras_vit.ViT``
(or ``keras_vit.HybridViT`` when the file has a ResNet root) that the weights of
a :class:`~keras_vit.weights.formats.CheckpointInfo` fit exactly. Sizes come
from the tensors (patch size and width from ``embedding/kernel``, depth from the
``encoderblock_{i}`` keys, MLP width from ``Dense_0``, the resolution from the
position embeddings, classes from the head, pooling from the class token); the
number of heads from the file where it says (an ``.npz`` stores ``(D, heads,
head_dim)`` kernels, timm and transformers configs name it), else from the
registered variant of the same width, depth and MLP (timm's ``vit_tiny`` ...
``vit_huge`` and DeiT use the paper's heads), else it must be given.
:func:`representation_size_of` is the pre-logits width a builder reads before it builds.
"""

import math
import re

from keras_vit.errors import CheckpointError
from keras_vit.layers.resnet import GROUP_NORM_GROUPS, ROOT_WIDTH, backbone_stride
from keras_vit.weights.mapping import POSEMB_KEY, block_units_of

_BLOCK = re.compile(r"^Transformer/encoderblock_(\d+)/")
# ViTConfig's family switches a source declares (keras_vit.weights.declared): from_pretrained builds them as declared
FAMILY_FIELDS = (
    "class_token", "distillation_token", "num_register_tokens", "prefix_positions", "layer_scale_init", "mlp_activation",
    "mlp_type", "qkv_bias", "pre_norm", "final_norm", "fc_norm", "projection_dim", "input_mean", "input_std",
    "position_resampling",
)


def infer(info, source=None, known_heads=None):
    """The ``ViT`` / ``HybridViT`` arguments that the checkpoint ``info`` describes.

    Args:
        info: a :class:`~keras_vit.weights.formats.CheckpointInfo` (``formats.describe(path)``).
        source: what the user named (``hf://...``, a preset), for error messages; default ``info.path``.
        known_heads: ``{(hidden_size, num_layers, mlp_dim): num_heads}`` of registered variants,
            used when the file does not say its number of heads.

    Returns:
        A dict with ``patch_size``, ``hidden_size``, ``num_layers``, ``mlp_dim``, ``num_heads``
        (None when unknown), ``image_size``, ``pooling``, ``num_classes`` (None: no head),
        ``representation_size`` (None: no pre-logits), ``family`` (the :data:`FAMILY_FIELDS` the file
        declares), and ``block_units``, ``width`` for a hybrid.

    Raises:
        CheckpointError: a tensor the architecture is read from is missing or has an unexpected
            shape; the message names ``source`` and the key.

    Example:
    >>> from keras_vit.weights.formats import CheckpointInfo
    >>> shapes = {"embedding/kernel": (16, 16, 3, 192), "cls": (1, 1, 192), POSEMB_KEY: (1, 197, 192),
    ...           "Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel": (192, 768),
    ...           "Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel": (192, 3, 64),
    ...           "head/kernel": (192, 1000)}
    >>> arch = infer(CheckpointInfo(path="ti.npz", format="npz", shapes=shapes))
    >>> [arch[k] for k in ("patch_size", "hidden_size", "num_layers", "num_heads", "image_size", "num_classes")]
    [16, 192, 1, 3, 224, 1000]
    """
    shapes = info.shapes
    source = source or info.path
    kernel = _shape(shapes, "embedding/kernel", 4, source, "(P, P, C, D)")
    if kernel[0] != kernel[1]:
        raise CheckpointError(f"{source!r}: non-square patches {kernel[:2]} in 'embedding/kernel' are not supported.")
    patch, hidden = int(kernel[0]), int(kernel[3])
    layers = sorted({int(m[1]) for m in map(_BLOCK.match, shapes) if m})
    if not layers or layers != list(range(len(layers))):
        raise CheckpointError(
            f"{source!r}: encoder blocks {layers or 'none'} are not numbered 0..N-1 ('Transformer/encoderblock_{{i}}/...')."
        )
    dense = _shape(shapes, "Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel", 2, source, "(D, mlp_dim)")
    family = {field: info.declared[field].value for field in FAMILY_FIELDS if field in (info.declared or {})}
    glu = family.get("mlp_type") == "glu"  # a gated MLP's first Dense holds both halves: (D, 2 * mlp_dim)
    arch = dict(patch_size=patch, hidden_size=hidden, num_layers=len(layers), mlp_dim=int(dense[1]) // (2 if glu else 1))

    query = shapes.get("Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel", ())
    heads = int(query[1]) if len(query) == 3 else info.num_heads  # (D, heads, head_dim) in an .npz
    if heads is None:
        heads = (known_heads or {}).get((hidden, len(layers), arch["mlp_dim"]))
    arch["num_heads"] = heads

    class_token = family.get("class_token", "cls" in shapes)
    posemb = _shape(shapes, POSEMB_KEY, 3, source, "(1, tokens, D)")
    prefix = int(class_token) + int(family.get("distillation_token", "dist" in shapes))
    positions = int(posemb[1]) - (prefix if family.get("prefix_positions", True) else 0)
    side = math.isqrt(max(positions, 0))
    if side * side != positions or side == 0:
        raise CheckpointError(
            f"{source!r}: {positions} position embeddings (besides the class token) are not a square grid, "
            "so the image size cannot be read from the file."
        )
    stride = 1
    if "conv_root/kernel" in shapes:  # a hybrid: ResNet-v2 root and stages before the patches
        arch["block_units"] = block_units_of(shapes)
        arch["width"] = _root_width(shapes["conv_root/kernel"], source)
        stride = backbone_stride(arch["block_units"])
    arch["image_size"] = side * patch * stride
    declared_pooling = (info.declared or {}).get("pooling")
    arch["pooling"] = declared_pooling.value if declared_pooling else "token" if class_token else "gap"
    arch["family"] = family
    head = shapes.get("head/kernel")
    arch["num_classes"] = int(head[-1]) if head is not None else None
    pre_logits = shapes.get("pre_logits/kernel")
    arch["representation_size"] = int(pre_logits[-1]) if pre_logits is not None else None
    return arch


def _shape(shapes, key, ndim, source, layout):
    shape = shapes.get(key)
    if shape is None or len(shape) != ndim:
        found = "is missing" if shape is None else f"has shape {tuple(shape)}"
        raise CheckpointError(
            f"Cannot tell the architecture of {source!r}: {key!r} {found}, expected {layout}. Is it a ViT checkpoint?"
        )
    return tuple(shape)


def _root_width(shape, source):
    channels = shape[-1] if len(shape) == 4 else 0
    if not channels or channels % GROUP_NORM_GROUPS:
        raise CheckpointError(
            f"{source!r}: 'conv_root/kernel' has shape {tuple(shape)}, expected (7, 7, 3, {ROOT_WIDTH} * width) "
            f"with a multiple of {GROUP_NORM_GROUPS} channels."
        )
    width = channels / ROOT_WIDTH
    return int(width) if width == int(width) else width


def representation_size_of(checkpoint):
    """Width of the pre-logits layer stored in a checkpoint (arrays or shapes), or None.

    Example:
    >>> representation_size_of({"pre_logits/kernel": (768, 768)}), representation_size_of({})
    (768, None)
    """
    kernel = checkpoint.get("pre_logits/kernel")
    if kernel is None:
        return None
    return int((kernel.shape if hasattr(kernel, "shape") else kernel)[-1])
