"""timm's ViT state dict (``.safetensors``) -> the original checkpoint layout.

timm's ``VisionTransformer`` (``timm/models/vision_transformer.py``) stores a
ViT as PyTorch tensors: ``patch_embed.proj.weight`` ``(D, C, P, P)``, one fused
``blocks.{i}.attn.qkv.weight`` ``(3D, D)`` (query, key, value stacked, heads
inside each), ``nn.Linear`` weights as ``(out, in)``, ``norm`` the final
LayerNorm (epsilon 1e-6), ``head`` the classifier. timm's own ``_load_weights``
(the reader of the original ``.npz``) defines the correspondence this module
inverts: ``qkv.weight = concat(kernel.reshape(D, D).T for query, key, value)``,
``proj.weight = out_kernel.reshape(D, D).T``, conv kernels ``(P, P, C, D)``
transposed to ``(D, C, P, P)``.

The attention kernels are returned with their head axes merged
(``query/kernel`` ``(D, heads * head_dim)``): a state dict does not store the
number of heads, and the loader splits the merged axes with the model's.
Missing query/key/value biases (``qkv_bias=False``) become zeros in the converted
layout, and the file declares ``qkv_bias=False`` (:mod:`keras_vit.weights.declared`),
which a load into keras_vit's attention (always with biases) refuses.

Models with parts keras_vit does not implement are refused by name: a
distillation token (distilled DeiT), register tokens, layer scale, a norm after
pooling (``fc_norm``), a pre-norm, q/k norms, attention pooling.
"""

import re

import numpy as np

from keras_vit.errors import CheckpointError
from keras_vit.weights import config as config_lib
from keras_vit.weights import declared as declared_lib
from keras_vit.weights.declared import declare

FORMAT = "timm"
LAYER_NORM_EPSILON = 1e-6  # timm's VisionTransformer: partial(nn.LayerNorm, eps=1e-6)

_BLOCK = re.compile(r"^blocks\.(\d+)\.(.+)$")
# inside blocks.{i}: timm name -> (original key under encoderblock_{i}, transpose a Linear weight)
_BLOCK_KEYS = {
    "norm1.weight": ("LayerNorm_0/scale", False),
    "norm1.bias": ("LayerNorm_0/bias", False),
    "attn.proj.weight": ("MultiHeadDotProductAttention_1/out/kernel", True),
    "attn.proj.bias": ("MultiHeadDotProductAttention_1/out/bias", False),
    "norm2.weight": ("LayerNorm_2/scale", False),
    "norm2.bias": ("LayerNorm_2/bias", False),
    "mlp.fc1.weight": ("MlpBlock_3/Dense_0/kernel", True),
    "mlp.fc1.bias": ("MlpBlock_3/Dense_0/bias", False),
    "mlp.fc2.weight": ("MlpBlock_3/Dense_1/kernel", True),
    "mlp.fc2.bias": ("MlpBlock_3/Dense_1/bias", False),
}
_TOP_KEYS = {
    "cls_token": ("cls", False),
    "pos_embed": ("Transformer/posembed_input/pos_embedding", False),
    "patch_embed.proj.bias": ("embedding/bias", False),
    "norm.weight": ("Transformer/encoder_norm/scale", False),
    "norm.bias": ("Transformer/encoder_norm/bias", False),
    "head.weight": ("head/kernel", True),
    "head.bias": ("head/bias", False),
    "pre_logits.fc.weight": ("pre_logits/kernel", True),
    "pre_logits.fc.bias": ("pre_logits/bias", False),
}
# parts of timm ViTs that keras_vit has no layer for: key pattern -> what it is
_UNSUPPORTED = {
    r"^(dist_token|head_dist\.)": (
        "a distillation token and head (distilled DeiT, deit_*_distilled_*: its position embeddings cover 2 extra "
        "tokens), which keras_vit does not support; the non-distilled deit_* weights load"
    ),
    r"^reg_token": "register tokens",
    r"\.ls[12]\.gamma$|\.gamma_[12]$": "layer scale (DeiT-III / CaiT style)",
    r"^fc_norm\.": "a LayerNorm after pooling (fc_norm), where keras_vit normalises before pooling",
    r"^norm_pre\.": "a LayerNorm before the blocks (pre_norm, CLIP style)",
    r"\.attn\.(q_norm|k_norm|norm)\.": "query/key normalisation",
    r"^attn_pool\.": "attention pooling (MAP head)",
    r"^patch_embed\.norm\.": "a normalised patch embedding",
}
MARKERS = ("patch_embed.proj.weight", "blocks.0.attn.qkv.weight")


def matches(keys):
    """Whether a state dict with these keys is a timm ViT.

    Example:
    >>> matches(["cls_token", "patch_embed.proj.weight", "blocks.0.attn.qkv.weight"]), matches(["cls"])
    (True, False)
    """
    return all(marker in keys for marker in MARKERS)


def refuse_unsupported(keys, path):
    """Raise a ``CheckpointError`` naming the first timm feature in ``keys`` that keras_vit does not implement."""
    for pattern, what in _UNSUPPORTED.items():
        found = sorted(k for k in keys if re.search(pattern, k))
        if found:
            raise CheckpointError(
                f"Checkpoint {path!r} is a timm model with {what} (keys {', '.join(map(repr, found[:6]))}"
                f"{', ...' if len(found) > 6 else ''}): keras_vit's ViT has no such part, "
                "so these weights cannot be loaded without changing what the model computes."
            )


def _linear(array, transpose):
    return array.T if transpose and array.ndim == 2 else array


def to_original(tensors, path="<arrays>"):
    """Rename and transpose a timm ViT state dict into the original ``.npz`` layout.

    Args:
        tensors: ``{timm key: array}`` (arrays, or stand-ins with the right shape).
        path: named in errors.

    Returns:
        ``{original key: array}``; attention kernels have merged head axes.

    Raises:
        CheckpointError: a key that is neither a plain ViT weight nor a known
            unsupported part, or a fused qkv weight that is not ``(3D, D)``.

    Example:
    >>> d = 8
    >>> arrays = {"patch_embed.proj.weight": np.zeros((d, 3, 4, 4)), "blocks.0.attn.qkv.weight": np.zeros((3 * d, d))}
    >>> out = to_original(arrays)
    >>> out["embedding/kernel"].shape, out["Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel"].shape
    ((4, 4, 3, 8), (8, 8))
    """
    refuse_unsupported(tensors, path)
    out = {}
    unknown = []
    for key, array in tensors.items():
        block = _BLOCK.match(key)
        if key == "patch_embed.proj.weight":
            out["embedding/kernel"] = patch_kernel(key, array, path)
        elif key in _TOP_KEYS:
            name, transpose = _TOP_KEYS[key]
            out[name] = _linear(array, transpose)
        elif block and block[2] in ("attn.qkv.weight", "attn.qkv.bias"):
            out.update(_split_qkv(block[1], block[2], array, path))
        elif block and block[2] in _BLOCK_KEYS:
            name, transpose = _BLOCK_KEYS[block[2]]
            out[f"Transformer/encoderblock_{block[1]}/{name}"] = _linear(array, transpose)
        else:
            unknown.append(key)
    return finish(out, unknown, path, "timm")


def patch_kernel(key, array, path):
    """A PyTorch patch-embedding convolution ``(D, C, P, P)`` as the original ``embedding/kernel`` ``(P, P, C, D)``."""
    if array.ndim != 4:
        raise CheckpointError(f"Checkpoint {path!r}: {key!r} has shape {array.shape}, expected (D, C, P, P).")
    return array.transpose(2, 3, 1, 0)


def finish(out, unknown, path, layout):
    """Refuse the keys no ViT has (named, at most 10 shown), then add the q/k/v biases a file left out; returns ``out``."""
    if unknown:
        raise CheckpointError(
            f"Checkpoint {path!r} ({layout} layout) has {len(unknown)} key(s) that are not part of a ViT: "
            f"{', '.join(sorted(unknown)[:10])}"
        )
    _add_missing_qkv_bias(out)
    return out


def _split_qkv(index, name, array, path):
    prefix = f"Transformer/encoderblock_{index}/MultiHeadDotProductAttention_1"
    width = array.shape[-1] if name.endswith("weight") else array.shape[0] // 3
    if array.shape[0] != 3 * width or (name.endswith("weight") and array.ndim != 2):
        raise CheckpointError(
            f"Checkpoint {path!r}: 'blocks.{index}.{name}' has shape {array.shape}, expected a fused "
            "query/key/value tensor of 3 x the width."
        )
    parts = {}
    for i, part in enumerate(("query", "key", "value")):
        piece = array[i * width:(i + 1) * width]
        parts[f"{prefix}/{part}/{'kernel' if name.endswith('weight') else 'bias'}"] = _linear(piece, name.endswith("weight"))
    return parts


def _add_missing_qkv_bias(out):
    """``qkv_bias=False`` models have no query/key/value bias: the original layout's zeros (for the shapes;
    :mod:`keras_vit.weights.formats` declares ``qkv_bias=False``, which the loader refuses).

    Only for a file without any: one that lacks some of them is damaged, and the loader names
    the missing keys.
    """
    if any(k.endswith(("/query/bias", "/key/bias", "/value/bias")) for k in out):
        return
    for key in [k for k in out if k.endswith("/query/kernel")]:
        for part in ("query", "key", "value"):
            out[key.replace("/query/kernel", f"/{part}/bias")] = np.zeros(out[key].shape[-1], dtype=np.float32)


# timm architecture name -> (number of heads, width): the paper's sizes (timm's vit_tiny ... vit_huge, DeiT)
_SIZES = {"tiny": (3, 192), "small": (6, 384), "base": (12, 768), "large": (16, 1024), "huge": (16, 1280)}
_NAME = re.compile(r"^(?:vit|deit)_(tiny|small|base|large|huge)_patch")
_POOLING = {"token": "token", "avg": "gap"}  # timm's global_pool -> keras_vit's pooling


def settings(config, path="<config>", weights=None):
    """What a timm ``config.json`` says beyond the weights: heads, epsilon, activation, labels, input normalisation.

    The sizes it states (``model_args``, ``num_features``, ``num_classes``, the width and patch in the
    ``architecture`` name, ``pretrained_cfg.input_size``) go to ``"expected"``, to be checked against
    the weights (:func:`keras_vit.weights.config.check_against_weights`): a config.json of another
    model would otherwise give these weights its number of heads. What it declares about the
    architecture (heads, ``act_layer``, ``qkv_bias``, depth, width, MLP ratio, class token, pooling; and
    timm's LayerNorm epsilon, declared by the layout itself, from ``weights``) goes to ``"declared"``, to be
    compared with the model's (:func:`keras_vit.weights.declared.check`).

    Example:
    >>> s = settings({"architecture": "deit_small_patch16_224", "pretrained_cfg": {"mean": [0.485, 0.456, 0.406]}})
    >>> s["num_heads"], s["layer_norm_epsilon"], s["mean"]
    (6, 1e-06, [0.485, 0.456, 0.406])
    >>> [(quantity, value) for quantity, _, value in s["expected"]]  # from the name: width 384, patch 16
    [('hidden_size', 384), ('patch_size', 16)]
    >>> settings({"model_args": {"act_layer": "quick_gelu"}})["declared"]["mlp_activation"]
    Declaration(value='quick_gelu', said="model_args.act_layer='quick_gelu'", origin='<config>')
    """
    config = config_lib.json_object(config or {}, path)
    pretrained = config_lib.json_object(config.get("pretrained_cfg") or {}, path, "pretrained_cfg")
    args = config_lib.json_object(config.get("model_args") or {}, path, "model_args")
    architecture = config.get("architecture")
    name = _NAME.match(architecture) if isinstance(architecture, str) else None
    record = _declared(config, args, architecture, name, path, weights)
    expected = _expected(config, args, pretrained, architecture, name, path)
    names = config.get("label_names")
    names = config_lib.indexed_names(names, "label_names", path)
    descriptions = config.get("label_descriptions") or {}
    if names and isinstance(descriptions, dict):
        names = [str(descriptions.get(name, name)) for name in names]
    return {
        "architecture": architecture,
        "tag": pretrained.get("tag"),
        "num_heads": record["num_heads"].value if "num_heads" in record else None,
        "layer_norm_epsilon": LAYER_NORM_EPSILON,
        "global_pool": args.get("global_pool", config.get("global_pool")),
        "class_names": names or None,
        "mean": pretrained.get("mean"),
        "std": pretrained.get("std"),
        "expected": expected,
        "declared": record,
    }


def _declared(config, args, architecture, name, path, weights):
    """The architecture a timm config declares, as timm builds the model from it (``model_args`` over the name)."""
    record = {}
    heads = config_lib.number(args, "num_heads", None, path, integer=True)
    if heads is not None:
        declare(record, "num_heads", heads, f"model_args.num_heads={heads!r}", path)
    elif name:
        declare(record, "num_heads", _SIZES[name[1]][0], f"architecture={architecture!r} ({_SIZES[name[1]][0]} heads)", path)
    width = config_lib.number(args, "embed_dim", None, path, integer=True)
    if width is not None:
        declare(record, "hidden_size", width, f"model_args.embed_dim={width!r}", path)
    elif name:
        width = _SIZES[name[1]][1]
        declare(record, "hidden_size", width, f"architecture={architecture!r} (width {width})", path)
    depth = config_lib.number(args, "depth", None, path, integer=True)
    if depth is not None:
        declare(record, "num_layers", depth, f"model_args.depth={depth!r}", path)
    ratio = config_lib.number(args, "mlp_ratio", None, path)
    if ratio is not None and width is not None:
        declare(record, "mlp_dim", int(width * ratio), f"model_args.mlp_ratio={args['mlp_ratio']!r} (x width {width})", path)
    if "act_layer" in args:
        act = args["act_layer"]
        if act is not None and not isinstance(act, str):
            raise CheckpointError(f"{path!r}: model_args.act_layer={act!r}, expected the name of an activation.")
        declare(record, "mlp_activation", declared_lib.activation(act), f"model_args.act_layer={act!r}", path)
    for field in ("qkv_bias", "class_token"):
        if field in args:
            if not isinstance(args[field], bool):
                raise CheckpointError(f"{path!r}: model_args.{field}={args[field]!r}, expected true or false.")
            declare(record, field, args[field], f"model_args.{field}={args[field]!r}", path)
    for source, label in ((args, "model_args.global_pool"), (config, "global_pool")):
        pool = source.get("global_pool")
        if pool in _POOLING:
            declare(record, "pooling", _POOLING[pool], f"{label}={pool!r}", path)
    if weights is not None:  # timm's VisionTransformer: partial(nn.LayerNorm, eps=1e-6), whatever the config
        declare(record, "layer_norm_epsilon", LAYER_NORM_EPSILON, f"timm layout (LayerNorm eps={LAYER_NORM_EPSILON:g})", weights)
    return record


def _expected(config, args, pretrained, architecture, name, path):
    """``[(quantity, field, value), ...]``: the sizes a timm config states, as timm builds the model from them."""
    expected = []

    def integer(source, field, quantity, label):
        value = config_lib.number(source, field, None, path, integer=True)
        if value is not None:
            expected.append((quantity, f"{label}={value!r}", value))

    integer(args, "embed_dim", "hidden_size", "model_args.embed_dim")
    if "embed_dim" not in args and name:  # timm builds the name's width unless model_args overrides it
        width = _SIZES[name[1]][1]
        expected.append(("hidden_size", f"architecture={architecture!r} (width {width})", width))
    integer(config, "num_features", "num_features", "num_features")
    integer(args, "depth", "num_layers", "model_args.depth")
    integer(args, "patch_size", "patch_size", "model_args.patch_size")
    patch = re.search(r"_patch(\d+)", architecture) if isinstance(architecture, str) else None
    if "patch_size" not in args and patch:
        expected.append(("patch_size", f"architecture={architecture!r} (patch {patch[1]})", int(patch[1])))
    for source, label in ((args, "model_args.num_classes"), (config, "num_classes")):
        value = source.get("num_classes")
        if value is not None and value != 0:  # 0: timm's model without a head
            value = config_lib.number(source, "num_classes", None, path, integer=True)
            expected.append(("num_classes", f"{label}={value!r}", value))
    for field in ("qkv_bias", "class_token"):
        if field in args:
            expected.append((field, f"model_args.{field}={args[field]!r}", args[field]))
    if "img_size" in args:
        expected.append(("image_size", f"model_args.img_size={args['img_size']!r}",
                         config_lib.size_pair(args["img_size"], path, "model_args.img_size")))
    elif isinstance(pretrained.get("input_size"), list) and len(pretrained["input_size"]) == 3:
        size = pretrained["input_size"]
        expected.append(("image_size", f"pretrained_cfg.input_size={size!r}",
                         config_lib.size_pair(size[1:], path, "pretrained_cfg.input_size")))
    return expected
