"""timm's registered ViT family, as data: architecture name -> the arguments timm builds it with, read from timm.

A timm Hub ``config.json`` names its ``architecture`` and seldom has ``model_args`` (which override it,
:mod:`keras_vit.weights.timm_config`): what the weights do not show (the activation, the epsilon, LayerScale's
initial value, the pooling, a block that is not the paper's) is timm's registration of that name. The table,
``data/timm_registrations.json``, is written by ``tools/timm_registrations.py`` from timm itself (each
``@register_model`` of its ViT-family modules called with timm's builder replaced by a recorder), never by hand.
"""

import functools
import json
import os

from keras_vit.weights import timm_eva, timm_hybrid, timm_naflex

# VisionTransformer.__init__'s defaults for the arguments keras_vit reads (timm's names)
DEFAULTS = dict(
    patch_size=16, embed_dim=768, depth=12, num_heads=12, mlp_ratio=4.0, qkv_bias=True, class_token=True,
    reg_tokens=0, no_embed_class=False, init_values=None, global_pool="token", fc_norm=None, pre_norm=False,
    final_norm=True, act_layer=None, mlp_layer=None, img_size=224, dynamic_img_size=False, norm_eps=1e-6,
    distilled=False, proj_bias=True, scale_attn_norm=False, scale_mlp_norm=False, pool_include_prefix=False,
    norm_type="layernorm", patch_norm=False,  # keras_vit's names: timm's norm_layer and embed_norm_layer, as read
    res_post_norm=False,  # keras_vit's name: timm's block_fn=ResPostBlock, Eva's use_post_norm
    parallel_blocks=False,  # keras_vit's name: timm's block_fn=ParallelScalingBlock
    differential_attention=False,  # keras_vit's name: timm's attn_layer='diff' (DiffParallelScalingBlock: both)
    attn_pool_num_heads=None, attn_pool_mlp_ratio=None,  # the last two: Eva's only (timm_eva.POOL_ARGS)
)
KERAS_VIT_NAMES = ("norm_type", "patch_norm", "res_post_norm", "parallel_blocks", "differential_attention")  # of DEFAULTS: no timm argument (not in model_args)
TABLE = os.path.join(os.path.dirname(__file__), "data", "timm_registrations.json")
# arguments that do not change what a trained model computes at its own size
NEUTRAL = ("drop_rate", "pos_drop_rate", "patch_drop_rate", "proj_drop_rate", "attn_drop_rate", "drop_path_rate",
           "weight_init", "fix_init", "num_classes", "device", "dtype")
# timm arguments keras_vit has no switch for: the values that mean "not used" (or that it reads as another field:
# block_fn=ResPostBlock is res_post_norm, ParallelScalingBlock parallel_blocks, attn_layer='diff'
# differential_attention), and what any other is
SWITCHES = {
    "block_fn": (("Block", None, "ResPostBlock", "ParallelScalingBlock", "DiffParallelScalingBlock"), {
                                   "ParallelThingsBlock": "parallel attention and MLP blocks (block_fn=ParallelThingsBlock)"}),
    "attn_layer": (("Attention", "attn", None, "diff"), {}),
    "qk_norm": ((False,), "query/key normalisation (qk_norm=True)"),
    "pos_embed": (("learn",), "position embeddings other than a learned table (pos_embed)"),
    "dynamic_img_pad": ((False,), "padding of images to a multiple of the patch (dynamic_img_pad=True)"),
    "in_chans": ((3,), "input channels other than RGB (in_chans)"),
    "padding_same": ((True,), "a hybrid backbone with PyTorch's symmetric padding (padding_same=False: StdConv2d, "
                              "stem_type=''; keras_vit's ResNet-v2 pads as TensorFlow's SAME)"),  # a model_args only
    # a config.json's model_args only (a registration's are read by _read): keras_vit reads them at timm's default only
    **{name: ((default,), f"timm's default is {default!r}") for name, default in
       (("norm_layer", None), ("embed_norm_layer", None), ("embed_layer", None), ("ignore_head", False))},
}
# timm model classes that are not the paper's ViT: their reader into VisionTransformer's arguments (or what it lacks)
OTHER_CLASSES = {
    "Eva": ("timm's Eva class (eva.py)", timm_eva.read),
    "NaFlexVit": ("timm's NaFlexVit class (naflexvit.py: native aspect ratio and resolution, NaFlex)",
                  timm_naflex.read),
}


@functools.lru_cache(maxsize=1)
def table():
    """The generated table: ``{"timm_version", "modules", "classes", "architectures": {name: row}}``."""
    with open(TABLE) as f:
        return json.load(f)


def registration(architecture):
    """timm's raw registration of ``architecture`` (a pretrained tag after ``.`` is ignored), or None."""
    if not isinstance(architecture, str):
        return None
    return table()["architectures"].get(architecture.partition(".")[0])


# timm's norm layers keras_vit has: name -> (ViTConfig.norm_type, the class's default eps)
NORMS = {"LayerNorm": ("layernorm", 1e-5), "nn.LayerNorm": ("layernorm", 1e-5),  # torch's LayerNorm default
         "RmsNorm": ("rmsnorm", 1e-6), "rmsnorm": ("rmsnorm", 1e-6)}  # timm.layers.RmsNorm's default (get_norm_layer)


def _norm(value, argument="norm_layer"):
    """``(norm_type, eps or None, lacking or None)`` of timm's ``norm_layer`` (or ``embed_norm_layer``) argument as
    the generator writes it; ``(None, None, None)`` for None (timm's default)."""
    if value is None:
        return None, None, None
    name = value.get("callable") if isinstance(value, dict) else value
    if name in NORMS:
        kind, eps = NORMS[name]
        return kind, (value.get("eps", eps) if isinstance(value, dict) else eps), None
    return None, None, f"a {name} norm ({argument}={name}; keras_vit has LayerNorm and RmsNorm)"


def _mlp(value):
    """``(mlp_layer, act_layer or None, lacking or None)`` of timm's ``mlp_layer`` argument."""
    if value in (None, "Mlp"):
        return None, None, None
    if isinstance(value, dict) and value.get("callable") == "GluMlp" and value.get("gate_last") is False:
        return "SwiGLUPacked", value.get("act_layer"), None  # timm's SwiGLUPacked: GluMlp(gate_last=False)
    if value in ("SwiGLUPacked", "SwiGLU"):  # SwiGLU's fc1_g, fc1_x: packed into fc1 (timm_eva.to_vit_layout)
        return value, None, None
    name = value.get("callable") if isinstance(value, dict) else value
    return None, None, f"an MLP of timm's {name} (mlp_layer={name}; keras_vit has Mlp, SwiGLUPacked and SwiGLU)"


def _backbone(value):
    """``(ResNet stage depths or None, lacking or None)`` of timm's ``embed_layer`` argument."""
    if value in (None, "PatchEmbed"):
        return None, None
    backbone = value.get("backbone") if isinstance(value, dict) else None
    if isinstance(value, dict) and value.get("callable") == "HybridEmbed" and backbone:
        if backbone["module"] in ("ResNetV2", "Sequential") and backbone.get("conv") == "StdConv2dSame":
            return tuple(backbone["layers"]), None
        return None, (f"a {backbone['module']} backbone ({backbone.get('conv')}, {backbone.get('norm')}); keras_vit's "
                      "hybrid is the paper's ResNet-v2 with weight-standardised convolutions and GroupNorm")
    name = value.get("callable") if isinstance(value, dict) else value
    return None, f"a patch embedding of timm's {name} (embed_layer={name})"


def _norms(args, out):
    """timm's ``norm_layer`` and ``embed_norm_layer`` into ``out`` (``norm_type``, ``norm_eps``, ``patch_norm``);
    returns what keras_vit lacks: a norm it has not, or a patch norm other than the blocks' (keras_vit's patch norm
    is of the model's ``norm_type`` and epsilon)."""
    kind, eps, why = _norm(args.get("norm_layer"))
    if why:
        return [why]
    if kind is not None:
        out.update(norm_type=kind, norm_eps=eps)
    if args.get("embed_norm_layer") is None:
        return []
    patch_kind, patch_eps, why = _norm(args["embed_norm_layer"], "embed_norm_layer")
    if why or (patch_kind, patch_eps) != (kind or "layernorm", eps if kind else 1e-6):
        return [why or f"a patch-embedding norm other than the blocks' (embed_norm_layer={args['embed_norm_layer']!r}, "
                       f"norm_layer={args.get('norm_layer')!r})"]
    out["patch_norm"] = True
    return []


@functools.lru_cache(maxsize=None)
def _read(architecture, eva_model_args=None):
    row = registration(architecture)
    if row is None:
        return None, ()
    args, lacking = dict(row["args"]), []
    cls = row["model_class"]
    if eva_model_args and cls == "Eva":  # Eva derives its norms and pooling's reach from the args together: read them so
        args.update(json.loads(eva_model_args))
    if cls in OTHER_CLASSES:  # the paper's blocks with RoPE or NaFlex inputs are read; any other switch is refused
        what, read = OTHER_CLASSES[cls]
        out, why = read(args, table()["classes"][cls])
        if out is None:
            return None, (what + ": " + ", ".join(dict.fromkeys(why)),)
        args, cls = out, "VisionTransformer"
    out = {}
    for name, value in args.items():
        if name == "mlp_layer":
            layer, act, why = _mlp(value)
            lacking += [why] if why else []
            out["mlp_layer"] = layer
            if act is not None and "act_layer" not in args:
                out["act_layer"] = act
        elif name in DEFAULTS or name in NEUTRAL or name in timm_eva.ROPE_ARGS or name in timm_naflex.ARGS:
            out[name] = value
        elif name in BLOCK_ARGS and switch_lacking(name, value) is None:
            continue  # read together below (block_fields)
        elif name in ("norm_layer", "embed_norm_layer"):
            continue  # read together below: the patch norm is keras_vit's only where it is the blocks' norm
        elif name == "embed_layer" and timm_hybrid.is_conv_stem(value):  # MobileCLIP's ConvStem: keras_vit's conv stem
            stem, why = timm_hybrid.conv_stem(value)
            lacking += [why] if why else []
            out["conv_stem"] = stem
        elif name == "embed_layer":
            layers, why = _backbone(value)
            lacking += [why] if why else []
            if layers is not None:
                out["backbone_layers"] = layers
        elif name in SWITCHES:
            lacking += filter(None, [switch_lacking(name, value)])
        else:
            lacking.append(f"timm argument {name}={value!r}, which keras_vit does not know")
    out.update(block_fields(args.get("block_fn"), args.get("attn_layer")))
    lacking += _norms(args, out)
    if out.get("res_post_norm"):  # ResPostBlock and Eva's post-norm block have no LayerScale: init_values is no switch
        out["init_values"] = None
    out["mlp_layer"] = out.get("mlp_layer")
    if out.get("norm_eps") is None:
        out.pop("norm_eps", None)
    if cls == "VisionTransformerDistilled":
        out["distilled"] = True
    if "img_size" not in out:  # the pretrained tag's input size
        tag = architecture.partition(".")[2] or row.get("default_tag")
        size = (row["tags"].get(tag) or row.get("default_cfg") or {}).get("input_size")
        if size:
            out["img_size"] = size[1] if size[1] == size[2] else list(size[1:])
    return out, tuple(lacking)


BLOCK_ARGS = ("block_fn", "attn_layer")  # timm's arguments of the blocks' kind, read together by block_fields
PARALLEL_BLOCKS = ("ParallelScalingBlock", "DiffParallelScalingBlock")


def block_fields(block_fn, attn_layer):
    """The keras_vit switches timm's ``block_fn`` and ``attn_layer`` (values :data:`SWITCHES` accepts) turn on:
    ``ResPostBlock`` is ``res_post_norm`` (x + norm(branch(x)); its init_values scale the norms), a parallel block
    ``parallel_blocks`` (ViT-22B's x + ls(MSA(LN(x)) + MLP(LN(x)))), ``DiffParallelScalingBlock`` and ``attn_layer='diff'``
    beside a sequential block ``differential_attention`` (timm's DiffAttention, its lambda_init by the block's index;
    ``ParallelScalingBlock`` ignores ``attn_layer``: its attention is its own).

    Example:
    >>> block_fields("DiffParallelScalingBlock", None), block_fields("ParallelScalingBlock", "diff"), block_fields(None, "diff")
    ({'parallel_blocks': True, 'differential_attention': True}, {'parallel_blocks': True}, {'differential_attention': True})
    """
    fields = {}
    if block_fn == "ResPostBlock":
        fields["res_post_norm"] = True
    if block_fn in PARALLEL_BLOCKS:
        fields["parallel_blocks"] = True
    if block_fn == "DiffParallelScalingBlock" or (attn_layer == "diff" and block_fn not in PARALLEL_BLOCKS):
        fields["differential_attention"] = True
    return fields


def switch_lacking(name, value):
    """What keras_vit's ViT lacks for timm's ``name=value`` of :data:`SWITCHES`, or None for a value that means "not used"."""
    accepted, what = SWITCHES[name]
    if value in accepted:
        return None
    return what.get(value, f"{name}={value!r}") if isinstance(what, dict) else what


def registered(architecture, model_args=None):
    """The arguments timm registers for ``architecture`` (timm's names, :data:`DEFAULTS`' vocabulary; ``img_size``
    from its pretrained tag's input size when the function does not set it), or None when timm has no such
    registration. An architecture with a switch keras_vit lacks (:func:`lacking`) also returns None.

    Example:
    >>> registered("vit_small_patch14_reg4_dinov2.lvd142m")["reg_tokens"]
    4
    >>> registered("vit_x") is None
    True
    """
    args, lacking_ = _read(architecture, eva_args(architecture, model_args)) if isinstance(architecture, str) else (None, ())
    return dict(args) if args is not None and not lacking_ else None


def eva_args(architecture, model_args):
    """``model_args`` as the key of :func:`_read` for an ``Eva`` registration (None for any other): timm's Eva derives
    ``fc_norm``, the final norm and whether attention pooling reads the prefix tokens from ``global_pool`` and its
    other arguments together, so a ``model_args.global_pool`` is read with the registration, not over its results.
    ``dynamic_img_size=True`` is left out: at the model's own size it changes nothing (as for VisionTransformer)."""
    row = registration(architecture)
    if not model_args or row is None or row["model_class"] != "Eva":
        return None
    return json.dumps({k: v for k, v in model_args.items() if k != "dynamic_img_size" or not v}, sort_keys=True)


def lacking_with(architecture, model_args):
    """:func:`lacking` of ``architecture`` with a config.json's ``model_args`` read into an Eva registration."""
    return _read(architecture, eva_args(architecture, model_args))[1] if isinstance(architecture, str) else ()


def lacking(architecture):
    """What timm's registration of ``architecture`` has that keras_vit's ViT does not: a tuple of phrases, each
    naming the switch and timm's argument (empty for an architecture keras_vit builds, or one timm lacks).

    Example:
    >>> lacking("vit_small_patch16_18x2_224")
    ('parallel attention and MLP blocks (block_fn=ParallelThingsBlock)',)
    >>> lacking("vit_base_patch16_224")
    ()
    """
    return _read(architecture)[1] if isinstance(architecture, str) else ()
