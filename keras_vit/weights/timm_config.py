"""The architecture of a timm ViT: its ``config.json``, timm's registration of its ``architecture``, its state dict.

What no tensor shows (the activation, the epsilon) is timm's default, except where timm's registrations differ per
model for a part the weights have (a pre-norm, attention pooling, a gated MLP): such a file is refused unless its
config says it.
"""

import math
import re

import numpy as np

from keras_vit.errors import CheckpointError
from keras_vit.layers.kernels import ACTIVATIONS as MLP_ACTIVATIONS
from keras_vit.weights import config as config_lib
from keras_vit.weights import declared as declared_lib
from keras_vit.weights import timm_eva, timm_naflex
from keras_vit.weights.declared import declare
from keras_vit.weights.timm_models import BLOCK_ARGS, DEFAULTS, KERAS_VIT_NAMES, NEUTRAL, SWITCHES, block_fields, lacking, lacking_with, registered, registration, switch_lacking, table

GLU_LAYERS = ("SwiGLUPacked", "swiglu_packed")  # timm.layers.SwiGLUPacked: GluMlp(gate_last=False), act(x1) * x2
SWIGLU_LAYERS = ("SwiGLU", "swiglu")  # timm.layers.SwiGLU: fc1_g, fc1_x of int(dim * mlp_ratio), act(fc1_g x) * fc1_x x
MLP_LAYERS = (None, "Mlp", "mlp")
POOLING = {"token": "token", "avg": "gap", "map": "map"}  # timm global_pool -> keras_vit pooling ('' : see settings)


def _check_model_args(model_args, path, eva=False):
    """A ``model_args`` entry keras_vit would otherwise ignore while it changes timm's computation is refused by name.
    ``eva``: the architecture is timm's Eva, whose own arguments (:data:`timm_eva.EVA_ARGS`) are read with its
    registration by :func:`timm_eva.read`, which refuses what keras_vit lacks by name."""
    for name, value in model_args.items():
        if eva and name in timm_eva.EVA_ARGS:
            continue
        if name in KERAS_VIT_NAMES:
            raise CheckpointError(f"{path!r}: model_args.{name}={value!r} is a name of keras_vit's, no timm argument: timm "
                                  "could not build this config.json. Remove it; timm's registration says the rest.")
        if name in DEFAULTS or name in NEUTRAL or name in timm_eva.ROPE_ARGS:
            continue
        if name in SWITCHES:
            what = switch_lacking(name, value)
            if not what:
                continue
            raise CheckpointError(
                f"{path!r}: model_args.{name}={value!r}: keras_vit's ViT has no such part ({what}), so it would "
                "compute another model."
            )
        raise CheckpointError(
            f"{path!r}: model_args.{name}={value!r} is no timm VisionTransformer argument keras_vit knows; it cannot tell "
            "whether the model computes the same without it. Remove it from config.json if it does not change the model."
        )


def _check_rope_args(model_args, architecture, path):
    """RoPE's ``model_args`` only for an Eva registration (timm's VisionTransformer takes none), and never a
    ``rope_type`` whose rotation order (keras_vit's kind fixes it) is not the registration's ``rope_rotate_half``."""
    stated = sorted(set(model_args) & (set(timm_eva.ROPE_ARGS) | set(timm_eva.POOL_ARGS)))
    row = registration(architecture)
    if not stated or row is None:
        return
    if row["model_class"] != "Eva":
        raise CheckpointError(
            f"{path!r}: model_args.{stated[0]}={model_args[stated[0]]!r}: timm's architecture "
            f"{architecture.partition('.')[0]!r} is a {row['model_class']}, which takes no "
            f"{'RoPE' if stated[0] in timm_eva.ROPE_ARGS else 'attention pooling size'} argument (timm's Eva does); timm "
            "could not have built this model."
        )
    rope_type, half = model_args.get("rope_type"), bool(model_args.get("rope_rotate_half", row["args"].get("rope_rotate_half", False)))
    if "rope_type" in model_args and (rope_type == "dinov3") != half:  # as timm_eva.read: DINOv3's halves only
        raise CheckpointError(
            f"{path!r}: model_args.rope_type={rope_type!r} with the registration's rope_rotate_half={half!r} of "
            f"{architecture.partition('.')[0]!r}: timm rotates {'the halves' if half else 'interleaved pairs'} of each "
            f"head, keras_vit's {rope_type!r} RoPE the {'halves' if rope_type == 'dinov3' else 'interleaved pairs'}; it "
            "would compute another model."
        )


def resolve(config, path, architecture=None):
    """``{timm argument: (value, said)}``: ``model_args`` over the top-level ``global_pool`` over the registration
    of ``architecture`` (default: the config's) over ``VisionTransformer``'s defaults (said None).

    Example:
    >>> args = resolve({"architecture": "vit_base_patch16_clip_224", "model_args": {"depth": 2}}, "config.json")
    >>> args["norm_eps"], args["depth"][1], args["act_layer"][0]
    ((1e-05, "architecture='vit_base_patch16_clip_224' (timm registers norm_eps=1e-05)"), 'model_args.depth=2', None)
    """
    config = config_lib.json_object(config or {}, path)
    model_args = config_lib.json_object(config.get("model_args") or {}, path, "model_args")
    architecture = architecture or config.get("architecture")
    _check_model_args(model_args, path, eva=(registration(architecture) or {}).get("model_class") == "Eva")
    refuse_unbuildable(architecture, path)
    _check_rope_args(model_args, architecture, path)
    stated = {**({"global_pool": config["global_pool"]} if config.get("global_pool") is not None else {}), **model_args}
    missing = lacking_with(architecture, stated) if not lacking(architecture) else ()
    if missing:  # an Eva registration whose model_args make what keras_vit lacks (attention pooling without biases...)
        raise CheckpointError(f"{path!r}: timm's architecture {architecture.partition('.')[0]!r} with its model_args "
                              f"{model_args!r} has {'; '.join(missing)}, which keras_vit's ViT does not have. Nothing was built.")
    resolved = {name: (value, None) for name, value in DEFAULTS.items()}
    row, plain = registered(architecture, stated), registered(architecture)
    if row is not None:
        for name, value in row.items():  # an Eva field that model_args changed (fc_norm, pool_include_prefix...) says so
            derived = name not in stated and plain.get(name) != value
            resolved[name] = (value, f"config.json's {stated!r} (timm's Eva derives {name}={value!r})" if derived
                              else f"architecture={architecture!r} (timm registers {name}={value!r})")
        for name, default in (("act_layer", "nn.GELU"), ("norm_eps", "LayerNorm eps=1e-06")):  # hidden: said anyway
            if name not in row:
                resolved[name] = (DEFAULTS[name], f"architecture={architecture!r} (timm registers no {name}: {default})")
    if config.get("global_pool") is not None:
        resolved["global_pool"] = (config["global_pool"], f"global_pool={config['global_pool']!r}")
    for name, value in model_args.items():
        if name in timm_eva.EVA_ARGS and not (name in DEFAULTS or name in NEUTRAL or name in timm_eva.ROPE_ARGS):
            continue  # Eva's own (use_fc_norm, num_reg_tokens...): in what the registration's read derives from them
        resolved[name] = (value, f"model_args.{name}={value!r}")
    blocks = {name: model_args[name] for name in BLOCK_ARGS if name in model_args}
    if blocks:  # the blocks' kind model_args restates or changes, read with the registration's (block_fields)
        registered_args = (registration(architecture) or {}).get("args") or {}
        said = ", ".join(f"model_args.{name}={value!r}" for name, value in blocks.items())
        kind = {name: blocks.get(name, registered_args.get(name)) for name in BLOCK_ARGS}
        for field, value in block_fields(kind["block_fn"], kind["attn_layer"]).items():
            if resolved[field][0] != value:  # what the registration already says keeps its words
                resolved[field] = (value, said)
    if resolved["pool_include_prefix"][0] and resolved["global_pool"][0] in ("token", ""):  # timm's pool() reads it
        resolved["pool_include_prefix"] = (False, f"{resolved['global_pool'][1]} (timm's token pooling ignores pool_include_prefix)")
    if resolved["res_post_norm"][0] and resolved["init_values"][0] is not None:  # ResPostBlock's norms' initial scale
        resolved["init_values"] = (None, f"{resolved['res_post_norm'][1]} (init_values: the norms' initial scale, no LayerScale)")
    resolved["architecture"] = (architecture, "registered" if row is not None else None)
    return resolved


def refuse_unbuildable(architecture, path):
    """Refuse, before anything is built, an ``architecture`` timm does not register or whose registration has a
    switch keras_vit's ViT lacks (:func:`keras_vit.weights.timm_models.lacking`), naming the switches.

    Example:
    >>> refuse_unbuildable("vit_small_patch16_18x2_224", "config.json")
    Traceback (most recent call last):
    ...
    keras_vit.errors.CheckpointError: 'config.json': timm's architecture 'vit_small_patch16_18x2_224' has parallel attention and MLP blocks (block_fn=ParallelThingsBlock), which keras_vit's ViT does not have; its weights would load into another model. Nothing was built.
    """
    if architecture is None:
        return
    if not isinstance(architecture, str):
        raise CheckpointError(f"{path!r}: architecture={architecture!r}, expected the name of a timm model.")
    missing = lacking(architecture)
    if missing:
        raise CheckpointError(
            f"{path!r}: timm's architecture {architecture.partition('.')[0]!r} has {'; '.join(missing)}, which keras_vit's "
            "ViT does not have; its weights would load into another model. Nothing was built."
        )
    if registration(architecture) is None:
        raise CheckpointError(
            f"{path!r}: timm {table()['timm_version']} registers no architecture {architecture.partition('.')[0]!r} in its ViT "
            "family (keras_vit's table keras_vit/weights/data/timm_registrations.json is generated from timm by "
            "tools/timm_registrations.py), so keras_vit cannot tell what it computes: timm itself could not build it. "
            "Name the registered architecture it was trained as, or regenerate the table for a newer timm."
        )


def _fc_norm(args):
    """Whether timm's ``VisionTransformer`` puts its final norm after pooling (``fc_norm``), as its ``__init__``."""
    return args["global_pool"] in ("avg", "avgmax", "max") if args["fc_norm"] is None else args["fc_norm"]


# what a timm state dict shows: part -> (its key, what it is, the timm arguments that build it (the first said is named
# in a contradiction), what they build (None: whether the first is true), its ViTConfig field); in the order
# consistent() names a contradiction, while record() declares in RECORDED's
PARTS = {
    "class_token": ("cls_token", "", ("class_token",), None, "class_token"),
    "distilled": ("dist_token", "DeiT's distillation token", ("distilled",), None, "distillation_token"),
    "reg_tokens": ("reg_token", "", ("reg_tokens",), lambda a: a["reg_tokens"], "num_register_tokens"),
    "layer_scale": ("blocks.0.ls1.gamma", "LayerScale", ("init_values",), lambda a: a["init_values"] is not None, None),
    "qkv_bias": ("blocks.*.attn.qkv.bias", "", ("qkv_bias",), None, None),
    "pre_norm": ("norm_pre.weight", "a LayerNorm before the blocks", ("pre_norm",), None, "pre_norm"),
    "map": ("attn_pool.latent", "attention pooling", ("global_pool",), lambda a: a["global_pool"] == "map", None),
    "glu": ("blocks.0.mlp.fc1.weight", "", ("mlp_layer",), lambda a: a["mlp_layer"] in GLU_LAYERS + SWIGLU_LAYERS, "mlp_type"),
    "proj_bias": ("blocks.0.attn.proj.bias", "", ("proj_bias",), None, "proj_bias"),
    # a parallel block's MLP always has a first bias (in_proj's or mlp_bias), its second a zero one when proj_bias=False
    "mlp_bias": ("blocks.0.mlp.fc2.bias", "", ("proj_bias",), lambda a: bool(a["proj_bias"] or a.get("parallel_blocks")),
                 "mlp_bias"),
    "norm_bias": ("blocks.0.norm1.bias", "a LayerNorm's bias; RmsNorm has none", ("norm_type",),
                  lambda a: a["norm_type"] == "layernorm", None),
    "patch_norm": ("patch_embed.norm.weight", "a norm of the patch embeddings", ("patch_norm",), None, "patch_norm"),
    "mlp_norm": ("blocks.0.mlp.norm.weight", "a LayerNorm inside the MLP", ("scale_mlp_norm",), None, "mlp_norm"),
    "attention_norm": ("blocks.0.attn.norm.weight", "a LayerNorm inside attention", ("scale_attn_norm",), None, "attention_norm"),
    "fc_norm": ("fc_norm.weight", "a LayerNorm after pooling", ("fc_norm", "global_pool"),
                lambda a: bool(a["final_norm"] and _fc_norm(a)), "fc_norm"),
    "norm": ("norm.weight", "the final LayerNorm", ("final_norm", "global_pool", "fc_norm"),
             lambda a: bool(a["final_norm"] and not _fc_norm(a)), "final_norm"),
}
RECORDED = ("class_token", "distilled", "reg_tokens", "glu", "pre_norm", "norm", "fc_norm", "patch_norm", "proj_bias",
            "mlp_bias", "mlp_norm", "attention_norm")


def _built(part, args):
    """What timm builds of ``part`` from ``args`` (``{timm argument: value}``): what its weights must show."""
    _, _, names, built, _ = PARTS[part]
    return built(args) if built else bool(args[names[0]])


def observe(shapes, path):
    """What a timm state dict (``{timm key: shape}``) shows about its architecture: ``{part: (value, said)}``."""
    seen = {part: (key in shapes, f"'{key}'" + (f" ({what})" if what else "")) for part, (key, what, *_) in PARTS.items()}
    seen["reg_tokens"] = (int(shapes["reg_token"][1]) if "reg_token" in shapes else 0, "'reg_token'")
    seen["layer_scale"] = (any(re.search(r"\.(ls1\.gamma|gamma_1)$", k) for k in shapes), seen["layer_scale"][1])
    seen["qkv_bias"] = (any(k.endswith("attn.qkv.bias") for k in shapes), seen["qkv_bias"][1])
    fc1, fc2 = shapes.get("blocks.0.mlp.fc1.weight"), shapes.get("blocks.0.mlp.fc2.weight")
    glu = fc1 is not None and fc2 is not None and fc1[0] != fc2[1] and fc1[0] == 2 * fc2[1]
    seen["glu"] = (glu, f"'blocks.0.mlp.fc1.weight' {tuple(fc1) if fc1 else ''} (2 x the {fc2[1] if fc2 else ''} inputs "
                        "of fc2: a gated MLP)" if glu else "'blocks.0.mlp.fc1.weight'")
    return seen


def consistent(resolved, seen, config_path):
    """Refuse a config whose stated architecture the state dict contradicts (naming the setting and the key)."""
    if seen["patch_norm"][0] and resolved["patch_norm"][1] is None:
        raise CheckpointError(
            f"{config_path!r}: the weights have {seen['patch_norm'][1]}, and no timm registration or config.json says "
            "which norm it is (LayerNorm or RmsNorm, its epsilon): name the registered architecture it was trained as."
        )
    values = {name: value for name, (value, _) in resolved.items()}
    for part, (_, _, names, _, _) in PARTS.items():
        relied = [name for name in names if resolved[name][1] is not None]
        have, said = seen[part]
        if relied and have != _built(part, values):
            raise CheckpointError(
                f"{config_path!r}: config.json says {resolved[relied[0]][1]} but the weights have {have!r} ({said}): "
                "the config belongs to another model, or the weights do."
            )


def activation_of(resolved, seen, path):
    """``(keras_vit mlp_activation, said)``; a part whose activation timm's registrations vary is refused when unknown."""
    act, said = resolved["act_layer"]
    if said is None:
        varying = [what for part, what in (("glu", "a gated MLP (timm registers SiLU for DINOv2-g)"),
                                           ("map", "attention pooling (SigLIP towers use gelu or gelu_tanh)"),
                                           ("pre_norm", "a CLIP-style pre-norm (OpenAI's towers use quick_gelu)"))
                   if seen[part][0]]
        if varying:
            raise CheckpointError(
                f"{path!r}: {_named(resolved)} has {varying[0]}, whose MLP activation timm sets per registration, and keras_vit's "
                "table of timm architectures (keras_vit/weights/timm_models.py) does not have it: the file does not say "
                "which activation its weights were trained with. Add model_args.act_layer to its config.json "
                "(gelu, gelu_tanh, quick_gelu, silu), or use a registered architecture name."
            )
        return "gelu", None
    name = declared_lib.activation(act)  # not a string: refused by timm._declared
    if name not in MLP_ACTIVATIONS:
        raise CheckpointError(
            f"{path!r}: {said or f'act_layer={act!r}'}: keras_vit's MLP has no such activation "
            f"(it has {', '.join(MLP_ACTIVATIONS)})."
        )
    return name, said


def epsilon_of(resolved, seen, path, weights):
    """``(LayerNorm epsilon, said)``: the registration's ``norm_layer`` eps, else timm's 1e-6."""
    eps, said = resolved["norm_eps"]
    if said is None and seen["pre_norm"][0]:
        raise CheckpointError(
            f"{path!r}: {_named(resolved)} has a CLIP-style pre-norm ('norm_pre'), and timm's CLIP registrations build "
            "their LayerNorms with eps=1e-5 where other ViTs use 1e-6; the architecture is not in keras_vit's table "
            "(keras_vit/weights/timm_models.py), so the epsilon is unknown. Use a registered architecture name."
        )
    return eps, said or f"timm layout (LayerNorm eps={eps:g})"


def _named(resolved):
    architecture = resolved["architecture"][0]
    return f"architecture {architecture!r}" if architecture else "a timm state dict without a config.json"


def prefix_positions(resolved, seen, shapes, image_size, path):
    """``{"prefix_positions": (value, said), "register_positions": (value, said)}``: whether the class (and
    distillation) tokens, and the register tokens, have position embeddings, read from ``pos_embed``'s length and the
    grid. timm's table covers every prefix token, registers included, unless ``no_embed_class`` (then none)."""
    cls, dist, registers = int(seen["class_token"][0]), int(seen["distilled"][0]), seen["reg_tokens"][0]
    prefix = cls + dist
    tokens = " and ".join(filter(None, ["the class token" * cls, "the distillation token" * dist,
                                        f"the {registers} register tokens" * bool(registers)]))
    stated, said = resolved["no_embed_class"]
    pos, kernel = shapes.get("pos_embed"), shapes.get("patch_embed.proj.weight")
    length = int(pos[1]) if pos is not None and len(pos) == 3 else None
    found = None  # whether the table has the prefix tokens' positions
    if length is not None and kernel is not None and len(kernel) == 4 and prefix + registers:
        if image_size is not None:
            grid = (image_size[0] // kernel[2]) * (image_size[1] // kernel[3])
        else:  # a square grid: the length with or without the prefix positions
            fits = [n for n in dict.fromkeys((length - prefix - registers, length - prefix, length))
                    if n > 0 and math.isqrt(n) ** 2 == n]
            if len(fits) > 1:  # 16 = 3 x 3 + 7 registers, or 4 x 4 without their positions: never guessed
                raise CheckpointError(
                    f"{path!r}: 'pos_embed' {tuple(pos)} is a grid of {' or '.join(map(str, fits))} patches, with or "
                    f"without the positions of {tokens}, and nothing states the image size: give the file its "
                    "config.json (timm's pretrained_cfg.input_size or model_args.img_size).")
            grid = fits[0] if fits else None
        if grid is not None and registers and prefix and length == grid + prefix:
            raise CheckpointError(
                f"{path!r}: 'pos_embed' {tuple(pos)} has positions for the class token but not for the {registers} "
                "register tokens: timm's table has both (no_embed_class=False) or neither (no_embed_class=True).")
        if grid is not None and length in (grid, grid + prefix + registers):
            found = length == grid + prefix + registers
    if said is not None and found is not None and found == bool(stated):
        raise CheckpointError(f"{path!r}: config.json says {said}, but 'pos_embed' {tuple(pos)} "
                              f"{'has' if found else 'lacks'} the positions of {tokens}.")
    if said is not None:
        value = not stated
    elif found is None:
        return {"prefix_positions": (True, None), "register_positions": (False, None)}
    else:
        value, said = found, f"'pos_embed' {tuple(pos)} ({'with' if found else 'without'} the positions of {tokens})"
    return {"prefix_positions": (value, said), "register_positions": (value and registers > 0, said if registers else None)}


def pooling_of(resolved, seen, path):
    """``(keras_vit pooling or None, said)``: timm's ``global_pool`` (an unstated default: not declared; a stated
    ``''``, timm's head on every token: keras_vit's ``pooling=None``)."""
    pool, said = resolved["global_pool"]
    if seen["map"][0]:
        return "map", seen["map"][1]
    if pool == "" and said is not None:
        return None, said
    if pool in ("", None) or (said is None and not seen["class_token"][0]):
        return ("gap" if not seen["class_token"][0] else None), None
    if pool not in POOLING:
        raise CheckpointError(
            f"{path!r}: timm global_pool={pool!r}: keras_vit pools the class token ('token'), the mean of the patch "
            "tokens ('avg') or by attention ('map')."
        )
    if pool == "token" and not seen["class_token"][0]:
        raise CheckpointError(f"{path!r}: timm global_pool='token' without a class token ('cls_token') to pool.")
    return POOLING[pool], said


def head_is_projection(seen, tensors, conv_stem=False):
    """Whether ``head`` is CLIP's projection (keras_vit's ``projection_dim``): a pre-norm tower (or MobileCLIP's
    ConvStem tower, ``conv_stem``) whose head bias is all zeros. timm's ``_convert_openai_clip`` (and its OpenCLIP
    ``visual.head.proj`` path) put CLIP's bias-free ``proj`` into ``head.weight`` with ``head.bias = torch.zeros(...)``,
    as ``_convert_mobileclip`` does MobileCLIP's ``classifier.proj``; a trained classifier's bias is never exactly zero."""
    if not (seen["pre_norm"][0] or conv_stem) or "head.bias" not in tensors.shapes or "head_dist.weight" in tensors.shapes:
        return False
    return not np.any(tensors.array("head.bias"))


def record(resolved, seen, extra, config_path, weights):
    """The declared record of a timm file: ``resolved`` (config and table) first, ``extra`` (``{field: (value,
    said)}`` already decided) next, what the weights show last; ``config_path`` and ``weights``: the origins."""
    width, ratio = resolved["embed_dim"], resolved["mlp_ratio"]
    mlp = (None, None)
    if ratio[1] is not None and width[1] is not None:  # SwiGLUPacked's width: half the outputs of fc1
        mlp = (int(width[0] * ratio[0]) // (2 if resolved["mlp_layer"][0] in GLU_LAYERS else 1),
               f"{ratio[1]} (x width {width[0]})")
    stated = {"num_heads": resolved["num_heads"], "hidden_size": width, "num_layers": resolved["depth"], "mlp_dim": mlp,
              "qkv_bias": resolved["qkv_bias"], "class_token": resolved["class_token"], "norm_type": resolved["norm_type"],
              "res_post_norm": resolved["res_post_norm"], "parallel_blocks": resolved["parallel_blocks"],
              "differential_attention": resolved["differential_attention"]}
    out = {}
    for field, (value, said) in [*stated.items(), *extra.items()]:  # what resolve says starts with one of these
        if said is not None:
            declare(out, field, value, said, config_path if said.startswith(("model_args", "architecture", "global_pool")) else weights)
    for part in RECORDED:
        have, said = seen[part]
        field = PARTS[part][4]
        declare(out, field, ("glu" if have else "mlp") if field == "mlp_type" else have, said if have else f"no {said}", weights)
    init, said = resolved["init_values"]
    scale = (init if init is not None else 1e-5) if seen["layer_scale"][0] else None
    declare(out, "layer_scale_init", scale, seen["layer_scale"][1] if scale else f"no {seen['layer_scale'][1]}", weights)
    return out


def config_fields(architecture, num_classes=0, projection_dim=None):
    """The ``ViTConfig`` arguments of timm's registration of ``architecture`` (no weights needed): what
    :func:`keras_vit.from_pretrained` builds for its Hub weights. ``num_classes`` 0: no head (features).

    Example:
    >>> fields = config_fields("vit_small_patch14_reg4_dinov2")
    >>> [fields[k] for k in ("image_size", "num_register_tokens", "prefix_positions", "layer_scale_init")]
    [518, 4, False, 1e-05]
    """
    if registered(architecture) is None:
        refuse_unbuildable(architecture, "timm")
    args = {**DEFAULTS, **registered(architecture)}
    stem = args.pop("conv_stem", None)  # MobileCLIP's ConvStem: keras_vit's conv stem, its last conv the patches
    if stem is not None:
        args["patch_size"] = stem["patch_size"]
        stem = dict(stem="conv", stem_channels=tuple(stem["stem_channels"]), stem_strides=tuple(stem["stem_strides"]),
                    stem_norm_epsilon=stem["stem_norm_epsilon"])
    if "backbone_layers" in args:  # a hybrid: from_pretrained reads it from its weights (keras_vit.weights.timm_hybrid)
        raise ValueError(f"{architecture!r} is a timm hybrid: its ViTConfig is read from its weights, not its registration alone.")
    mlp_dim = int(args["embed_dim"] * args["mlp_ratio"]) // (2 if args["mlp_layer"] in GLU_LAYERS else 1)  # packed: fc1 has both halves
    pool_heads, pool_ratio = (args["attn_pool_num_heads"], args["attn_pool_mlp_ratio"]) if args["global_pool"] == "map" else (None, None)
    pool_mlp = int(args["embed_dim"] * pool_ratio) if pool_ratio else None  # Eva's AttentionPoolLatent sizes; None: the blocks'
    return dict(
        # timm's patch convolution drops what the patches do not cover (so400m/14 at 384: 27 x 14 = 378): cropped
        image_size=args["img_size"], crop_remainder=any(n % args["patch_size"] for n in np.atleast_1d(args["img_size"])),
        patch_size=args["patch_size"], hidden_size=args["embed_dim"], num_layers=args["depth"], num_heads=args["num_heads"],
        mlp_dim=mlp_dim, layer_norm_epsilon=args["norm_eps"], prefix_positions=not args["no_embed_class"],
        register_positions=bool(args["reg_tokens"]) and not args["no_embed_class"],
        layer_scale_init=args["init_values"], mlp_activation=declared_lib.activation(args["act_layer"]),
        qkv_bias=args["qkv_bias"], pooling=POOLING[args["global_pool"]], projection_dim=projection_dim,
        norm_type=args["norm_type"], res_post_norm=args["res_post_norm"], parallel_blocks=args["parallel_blocks"],
        differential_attention=args["differential_attention"], pool_include_prefix=args["pool_include_prefix"],
        map_num_heads=None if pool_heads == args["num_heads"] else pool_heads,
        map_mlp_dim=None if pool_mlp == mlp_dim else pool_mlp, num_classes=num_classes or 1, include_top=bool(num_classes),
        mlp_type="glu" if _built("glu", args) else "mlp",
        **{PARTS[part][4]: _built(part, args) for part in RECORDED if part != "glu"},
        **{**timm_eva.fields(args), **timm_naflex.fields(args)}, **(stem or {}),
    )
