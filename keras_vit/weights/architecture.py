"""The architecture a checkpoint describes, read from its shapes and settings (no tensor data): what
:func:`keras_vit.from_pretrained` builds (:func:`infer`); :func:`representation_size_of` is the pre-logits width a
builder reads before it builds.
"""

import math
import re

from keras_vit.errors import CheckpointError
from keras_vit.layers.embedding import position_prefix
from keras_vit.layers.resnet import GROUP_NORM_GROUPS, ROOT_WIDTH, backbone_stride
from keras_vit.weights.mapping import FACTORIZED_KEYS, POSEMB_KEY, block_units_of
from keras_vit.weights.source import CheckpointInfo

_BLOCK = re.compile(r"^Transformer/encoderblock_(\d+)/")


def infer(info, source=None, known_heads=None):
    """The ``ViT`` / ``HybridViT`` arguments that the checkpoint ``info`` (``formats.describe(path)``) describes:
    the sizes, ``num_heads`` (None when unknown), ``num_classes`` (None: no head), ``representation_size`` (None: no
    pre-logits), the family's switches (:func:`family_of`), and ``block_units``, ``width`` for a hybrid.

    Args:
        source: what the user named (``hf://...``, a preset), for error messages; default ``info.path``.
        known_heads: ``{(hidden_size, num_layers, mlp_dim): num_heads}`` of registered variants,
            used when the file does not say its number of heads.

    Raises:
        CheckpointError: a tensor the architecture is read from is missing or has an unexpected
            shape; the message names ``source`` and the key.

    Example:
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
    arch = dict(patch_size=patch, hidden_size=hidden, num_layers=len(layers), mlp_dim=int(dense[1]))
    arch.update(family_of(info))
    if arch["mlp_type"] == "glu":  # Dense_0 holds both halves of the gate: (D, 2 * mlp_dim)
        arch["mlp_dim"] = int(dense[1]) // 2

    query = shapes.get("Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel", ())
    heads = int(query[1]) if len(query) == 3 else info.num_heads  # (D, heads, head_dim) in an .npz
    if heads is None:
        heads = (known_heads or {}).get((hidden, len(layers), arch["mlp_dim"]))
    arch["num_heads"] = heads
    for field, blocks in (("map_num_heads", heads), ("map_mlp_dim", arch["mlp_dim"])):
        if arch[field] == blocks:  # the attention pooling head sized as the blocks: ViTConfig's None
            arch[field] = None

    class_token = arch["class_token"]
    if FACTORIZED_KEYS[0] in shapes:  # NaFlex's factorised tables: (1, rows, D) and (1, cols, D)
        grid = (int(shapes[FACTORIZED_KEYS[0]][1]), int(_shape(shapes, FACTORIZED_KEYS[1], 3, source, "(1, cols, D)")[1]))
    elif arch["position_embedding"] or POSEMB_KEY in shapes:
        posemb = _shape(shapes, POSEMB_KEY, 3, source, "(1, tokens, D)")
        positions = int(posemb[1]) - position_prefix(int(class_token) + int(arch["distillation_token"]), arch["num_register_tokens"],
                                                     arch["prefix_positions"], arch["register_positions"])
        grid = grid_of(positions, info.grid, source)
    elif info.grid is not None:  # no position table (RoPE-ViT): the grid of the image size the file states
        grid = tuple(int(n) for n in info.grid)
    else:
        raise CheckpointError(f"{source!r} has no position embeddings and no config stating its image size: the image "
                              "size cannot be read from the file. Give it the config.json it was saved with.")
    stride = 1
    if "conv_root/kernel" in shapes:  # a hybrid: ResNet-v2 root and stages before the patches
        arch["block_units"] = block_units_of(shapes)
        arch["width"] = _root_width(shapes["conv_root/kernel"], source)
        stride = backbone_stride(arch["block_units"])
    elif "stem/conv_0/kernel" in shapes:  # a conv stem: patchify convolutions before the patches
        arch.update(conv_stem_of(info, source))
        stride = math.prod(arch["stem_strides"])
    size = (grid[0] * patch * stride, grid[1] * patch * stride)
    stated = tuple(info.image_size or ())
    if stated and stride == 1 and stated != size and (stated[0] // patch, stated[1] // patch) == grid:
        size, arch["crop_remainder"] = stated, True  # timm's So400m/14 at 384: 6 pixels past the patches
    arch["image_size"] = size[0] if size[0] == size[1] else size
    arch["pooling"] = _pooling(info, class_token)
    head = shapes.get("head/kernel")
    arch["num_classes"] = int(head[-1]) if head is not None else None
    arch["representation_size"] = representation_size_of(shapes)
    return arch


def grid_of(positions, declared, source):
    """``(rows, cols)`` of ``positions`` patch positions: the grid the file's config states (a rectangle:
    ``image_size: [16, 64]``), else the square they make."""
    if declared is not None:
        rows, cols = (int(n) for n in declared)
        if rows * cols != positions:
            raise CheckpointError(
                f"{source!r}: the image size its config states makes a {rows} x {cols} grid of patches, but the "
                f"weights have {positions} position embeddings (besides the class token)."
            )
        return rows, cols
    side = math.isqrt(max(positions, 0))
    if side * side != positions or side == 0:
        raise CheckpointError(
            f"{source!r}: {positions} position embeddings (besides the class token) are not a square grid, and no "
            "config states the image size, so the image size cannot be read from the file."
        )
    return side, side


def family_of(info):
    """The family's switches a checkpoint fixes: what it declares, else what its canonical keys show.

    Example:
    >>> shapes = {"cls": (1, 1, 8), "reg": (1, 4, 8), "Transformer/encoderblock_0/LayerScale_1/gamma": (8,),
    ...           "Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel": (8, 64),
    ...           "Transformer/encoderblock_0/MlpBlock_3/Dense_1/kernel": (32, 8)}
    >>> family = family_of(CheckpointInfo(path="f", format="npz", shapes=shapes))
    >>> [family[k] for k in ("num_register_tokens", "layer_scale_init", "mlp_type", "qkv_bias", "final_norm")]
    [4, 1e-05, 'glu', False, False]
    """
    shapes, declared = info.shapes, info.declared
    block = "Transformer/encoderblock_0/"
    dense_0 = shapes.get(block + "MlpBlock_3/Dense_0/kernel", (0, 0))
    dense_1 = shapes.get(block + "MlpBlock_3/Dense_1/kernel", (0, 0))
    projection = shapes.get("projection/kernel")
    map_mlp = shapes.get("MAPHead_0/MlpBlock_0/Dense_0/kernel")
    seen = {
        "class_token": "cls" in shapes,
        "distillation_token": "dist" in shapes,
        "num_register_tokens": int(shapes["reg"][1]) if "reg" in shapes else 0,
        "prefix_positions": True, "register_positions": False,  # the registers' positions only where a file declares them
        "layer_scale_init": 1e-5 if block + "LayerScale_1/gamma" in shapes else None,
        "mlp_activation": "gelu",
        "mlp_type": "glu" if dense_0[-1] and dense_0[-1] == 2 * dense_1[0] else "mlp",
        "qkv_bias": block + "MultiHeadDotProductAttention_1/query/bias" in shapes,
        "pre_norm": "Transformer/pre_norm/scale" in shapes,
        "final_norm": "Transformer/encoder_norm/scale" in shapes,
        "fc_norm": "fc_norm/scale" in shapes,
        "projection_dim": int(projection[-1]) if projection else None,
        # RoPE-Mixed's frequencies show in the weights; axial RoPE and its settings only where a file declares them
        "rope": "mixed" if block + "MultiHeadDotProductAttention_1/rope_frequencies" in shapes else None,
        "rope_temperature": None, "rope_grid_indexing": "xy", "rope_grid_offset": 0.0, "rope_reference_grid": None,
        "position_embedding": POSEMB_KEY in shapes or FACTORIZED_KEYS[0] in shapes,
        # a norm without a bias is RMSNorm only where a file declares it (a LayerNorm's bias may be missing)
        "norm_type": "layernorm", "patch_norm": "embedding_norm/scale" in shapes,
        "proj_bias": block + "MultiHeadDotProductAttention_1/out/bias" in shapes,
        "mlp_bias": block + "MlpBlock_3/Dense_1/bias" in shapes,
        "input_mode": "image", "position_aspect_preserving": False, "factorized_positions": FACTORIZED_KEYS[0] in shapes,
        "grid_rule": "timm",
        "mlp_norm": block + "MlpBlock_3/LayerNorm_0/scale" in shapes,
        "attention_norm": block + "MultiHeadDotProductAttention_1/LayerNorm_0/scale" in shapes,
        "res_post_norm": False,  # post-norm blocks have the pre-norm blocks' keys: only where a file declares them
        "parallel_blocks": False,  # only where a file declares them (timm's: its fused in_proj, read by weights/timm.py)
        "differential_attention": block + "MultiHeadDotProductAttention_1/lambda_q1" in shapes,  # its lambdas' trace
        "pool_include_prefix": False,  # the pooling of the patch tokens only (timm's default), but where a file declares it
        # the attention pooling head's MLP width shows in its weights; its heads only where a file declares them
        "map_num_heads": None, "map_mlp_dim": int(map_mlp[-1]) if map_mlp else None,
    }
    return {field: declared[field].value if field in declared else value for field, value in seen.items()}


# the ViT family's ViTConfig fields that the weights (and what the file declares) fix: those family_of reads
FAMILY = tuple(family_of(CheckpointInfo(path="", format="", shapes={})))


def _pooling(info, class_token):
    if "MAPHead_0/probe" in info.shapes:
        return "map"
    if "pooling" in info.declared:  # None too: a model whose output is its tokens (AIMv2, SigLIP without a head)
        return info.declared["pooling"].value
    return "token" if class_token else "gap"


def _shape(shapes, key, ndim, source, layout):
    shape = shapes.get(key)
    if shape is None or len(shape) != ndim:
        found = "is missing" if shape is None else f"has shape {tuple(shape)}"
        raise CheckpointError(
            f"Cannot tell the architecture of {source!r}: {key!r} {found}, expected {layout}. Is it a ViT checkpoint?"
        )
    return tuple(shape)


CONV_STEM = ("stem_channels", "stem_strides", "stem_norm_epsilon")  # a conv stem's fields (with stem="conv")


def conv_stem_of(info, source):
    """``stem="conv"`` and its fields from a conv stem's kernels (``stem/conv_{i}/kernel``: the channels) and what
    the files declare (the strides and the BatchNorms' epsilon, which the weights do not show: refused without).

    Example:
    >>> from keras_vit.weights.declared import declare
    >>> said = {}
    >>> for field, value in (("stem_strides", (4, 2)), ("stem_norm_epsilon", 1e-5)):
    ...     _ = declare(said, field, value, "the registration", "config.json")
    >>> shapes = {"stem/conv_0/kernel": (4, 4, 3, 8), "stem/conv_1/kernel": (2, 2, 8, 8)}
    >>> conv_stem_of(CheckpointInfo(path="m", format="timm", shapes=shapes, declared=said), "m")
    {'stem': 'conv', 'stem_channels': (8, 8), 'stem_strides': (4, 2), 'stem_norm_epsilon': 1e-05}
    """
    shapes, declared = info.shapes, info.declared
    kernels = [shapes[f"stem/conv_{i}/kernel"] for i in range(len(shapes)) if f"stem/conv_{i}/kernel" in shapes]
    missing = [field for field in ("stem_strides", "stem_norm_epsilon") if field not in declared]
    if missing:
        raise CheckpointError(f"{source!r} has a convolutional stem ('stem/conv_0/kernel'...) whose {' and '.join(missing)} "
                              "its weights do not show and no config declares: name the timm architecture it was trained as.")
    strides = tuple(declared["stem_strides"].value)
    if len(strides) != len(kernels) or any(tuple(k[:2]) != (s, s) for k, s in zip(kernels, strides)):
        raise CheckpointError(f"{source!r}: {declared['stem_strides'].said} does not fit the stem's kernels "
                              f"{[tuple(k[:2]) for k in kernels]} (keras_vit's patchify stem: a kernel of its stride).")
    return {"stem": "conv", "stem_channels": tuple(int(k[3]) for k in kernels), "stem_strides": strides,
            "stem_norm_epsilon": float(declared["stem_norm_epsilon"].value)}


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
