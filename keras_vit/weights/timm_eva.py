"""timm's ``Eva`` class (``timm/models/eva.py``) where it is the paper's ViT with rotary position embeddings: the
RoPE-ViT models of Heo et al. (``vit_{small,base,large}_patch16_rope{,_mixed}{,_ape}_224``, Naver's weights).

Those registrations build ``Eva(attn_type='rope', use_rot_pos_emb=True, ...)``: the blocks are the pre-norm ViT's
(``EvaBlock`` with timm's ``AttentionRope``: one fused ``qkv`` Linear with its bias, ``proj``; an ``Mlp`` of exact
GELU; LayerScale ``gamma_1`` / ``gamma_2``; timm's ``LayerNorm``, eps 1e-6), the class token and the final norm
are the ViT's, and the positions are RoPE (:mod:`keras_vit.layers.rope`): ``rope_type='cat'`` (axial, fixed
frequencies) or ``'mixed'`` (``rope.freqs`` ``(2, depth, heads, head_dim / 2)``, learnable), with an absolute table
besides for ``*_ape`` (``use_abs_pos_emb=True``, ``no_embed_class=True``). So its state dict is timm's ViT layout
(:mod:`keras_vit.weights.timm`) with ``rope.freqs`` added and ``pos_embed`` absent without ``_ape``;
:func:`to_original` splits ``rope.freqs`` by block.

:func:`read` turns an Eva registration into the arguments keras_vit reads (``VisionTransformer``'s names, for
:mod:`keras_vit.weights.timm_models`, plus :data:`ROPE_ARGS`), or names what keras_vit lacks: every other Eva
switch (EVA-02's SwiGLU and scaled norms, post-norm blocks, register tokens, DINOv3's and MRoPE's embeddings,
half rotation, a reference grid, coordinate augmentation...) keeps the model refused by name.
"""

from keras_vit.errors import CheckpointError

# Eva's RoPE and position arguments keras_vit reads, with Eva's defaults (timm 1.0.31)
ROPE_ARGS = {"use_abs_pos_emb": True, "use_rot_pos_emb": False, "rope_type": "cat", "rope_temperature": 10000.0,
             "rope_grid_indexing": "ij", "rope_grid_offset": 0.0}
ROPE_TYPES = {"cat": "axial", "mixed": "mixed"}  # timm's rope_type -> ViTConfig.rope
# Eva arguments that are VisionTransformer's under the same name and meaning
SHARED = ("patch_size", "embed_dim", "depth", "num_heads", "mlp_ratio", "qkv_bias", "class_token", "no_embed_class",
          "init_values", "global_pool", "img_size")
# Eva arguments that do not change what a trained model computes (initialisation, dropout, placement)
NEUTRAL = ("drop_rate", "pos_drop_rate", "patch_drop_rate", "proj_drop_rate", "attn_drop_rate", "drop_path_rate",
           "num_classes", "device", "dtype", "head_init_scale")
# Eva arguments keras_vit has only at these values (besides the class's own defaults): what each is otherwise
ONLY = {
    "attn_type": ("rope", "EVA's own attention (q_bias / v_bias, a scaled inner norm)"),
    "qkv_fused": (True, "separate q / k / v projections"),
    "rope_rotate_half": (False, "half-split rotation"),
    "in_chans": (3, "input channels other than RGB"),
    "norm_layer": ("LayerNorm", "a norm other than timm's LayerNorm of eps 1e-6"),
    "use_post_transformer_norm": (None, "the final norm's placement set apart"),
}
PHRASES = {  # a switch keras_vit lacks, in words (any value other than Eva's default)
    "swiglu_mlp": "a SwiGLU MLP", "swiglu_align_to": "an aligned SwiGLU", "scale_mlp": "a norm inside the MLP",
    "scale_attn_inner": "a norm inside attention", "qk_norm": "query/key normalisation",
    "use_post_norm": "post-norm blocks", "use_pre_transformer_norm": "a norm before the blocks without a patch bias",
    "num_reg_tokens": "register tokens", "dynamic_img_size": "dynamic image size", "dynamic_img_pad": "image padding",
    "ref_feat_shape": "RoPE on a reference grid", "num_kv_heads": "grouped-query attention",
    "attn_only_layer_scale": "LayerScale on the attention branch only", "attn_pool_num_heads": "attention pooling",
    "attn_pool_mlp_ratio": "attention pooling", "rope_shift_coords": "RoPE coordinate augmentation",
    "rope_jitter_coords": "RoPE coordinate augmentation", "rope_rescale_coords": "RoPE coordinate augmentation",
    "rope_mrope_section": "MRoPE sections",
}
FREQS = "rope.freqs"  # timm's RotaryEmbeddingMixed.freqs: (2, depth, heads, head_dim / 2)
ROPE_KEY = "Transformer/encoderblock_{}/MultiHeadDotProductAttention_1/rope_frequencies"  # keras_vit's, per block


def read(args, defaults):
    """``(arguments or None, lacking)`` of an Eva registration's ``args`` (``defaults``: Eva's, from the table)."""
    out, lacking = {}, []
    for name, value in args.items():
        if name in SHARED or name in NEUTRAL or name in ROPE_ARGS:
            out[name] = value
        elif name == "use_fc_norm":
            out["fc_norm"] = value
        elif name in ONLY:
            if value != ONLY[name][0] and value != defaults.get(name):
                lacking.append(f"{ONLY[name][1]} ({name}={value!r})")
        elif value != defaults.get(name):
            lacking.append(f"{PHRASES.get(name, 'timm argument ' + name)} ({name}={value!r})")
    rope = {**ROPE_ARGS, **{k: v for k, v in out.items() if k in ROPE_ARGS}}
    if args.get("attn_type", defaults.get("attn_type")) != "rope" and not any("attn_type" in why for why in lacking):
        lacking.append(f"{ONLY['attn_type'][1]} (attn_type={args.get('attn_type', defaults.get('attn_type'))!r})")
    if rope["use_rot_pos_emb"] and rope["rope_type"] not in ROPE_TYPES:
        lacking.append(f"timm's {rope['rope_type']!r} RoPE (rope_type={rope['rope_type']!r}; keras_vit has 'cat' and 'mixed')")
    if rope["use_rot_pos_emb"] and rope["rope_type"] == "mixed" and rope["rope_grid_offset"]:
        lacking.append(f"a grid offset with mixed RoPE (rope_grid_offset={rope['rope_grid_offset']!r})")
    if lacking:
        return None, lacking
    out.setdefault("global_pool", defaults.get("global_pool"))
    out.setdefault("norm_eps", 1e-6)  # timm.layers.LayerNorm's eps
    return out, []


def fields(args):
    """The ``ViTConfig`` RoPE fields of timm arguments (Eva's :data:`ROPE_ARGS`; absent: a ViT without RoPE)."""
    rope = {**ROPE_ARGS, **{k: v for k, v in args.items() if k in ROPE_ARGS}}
    out = {"position_embedding": bool(rope["use_abs_pos_emb"]), "rope": None}
    if rope["use_rot_pos_emb"]:
        kind = ROPE_TYPES[rope["rope_type"]]
        out.update(rope=kind, rope_grid_indexing=rope["rope_grid_indexing"],
                   rope_temperature=float(rope["rope_temperature"]) if kind == "axial" else None,
                   rope_grid_offset=float(rope["rope_grid_offset"]))
    return out


def declared(resolved, shapes):
    """``{ViTConfig field: (value, said)}`` of the RoPE fields a timm file states (its registration, ``model_args``)
    and its weights show (``rope.freqs``, ``pos_embed``); a contradiction between the two is refused."""
    architecture = resolved["architecture"][0]
    stated = {name: resolved[name] for name in ROPE_ARGS if name in resolved}
    has_freqs, has_table = FREQS in shapes, "pos_embed" in shapes
    out = {"position_embedding": (has_table, "'pos_embed'" if has_table else "no 'pos_embed' (no absolute position table)")}
    if not stated and resolved["architecture"][1] is None:
        if has_freqs:
            raise CheckpointError(
                f"A timm state dict with {FREQS!r} (RoPE-Mixed) and no config.json naming its architecture: its grid "
                "indexing is not in the weights. Give the folder the config.json timm saved (architecture=...)."
            )
        return out
    values = fields({name: value for name, (value, _) in stated.items()})
    said = next((s for _, s in stated.values() if s), f"architecture={architecture!r} (timm's VisionTransformer: no RoPE)")
    if (values["rope"] == "mixed") != has_freqs or values["position_embedding"] != has_table:
        raise CheckpointError(
            f"{said} but the weights {'have' if has_freqs else 'lack'} {FREQS!r} and {'have' if has_table else 'lack'} "
            "'pos_embed': the config belongs to another model, or the weights do."
        )
    # RoPE-Mixed's temperature only initialised its frequencies: the weights hold them
    out.update({name: (value, said) for name, value in values.items() if name != "position_embedding" and value is not None or name == "rope"})
    return out


def to_original(tensors, path):
    """``{Transformer/encoderblock_{i}/.../rope_frequencies: (2, heads, head_dim / 2)}`` from ``rope.freqs``."""
    if FREQS not in tensors:
        return {}
    freqs = tensors[FREQS]
    if freqs.ndim != 4 or freqs.shape[0] != 2:
        raise CheckpointError(f"Checkpoint {path!r}: {FREQS!r} has shape {tuple(freqs.shape)}, expected (2, depth, heads, head_dim / 2).")
    return {ROPE_KEY.format(i): freqs[:, i] for i in range(freqs.shape[1])}
