"""timm's ``Eva`` class (``timm/models/eva.py``) where it is the paper's ViT with other position embeddings.

RoPE-ViT (Heo et al., ``vit_*_patch16_rope{,_mixed}{,_ape}_224``) builds ``Eva(attn_type='rope',
use_rot_pos_emb=True)``: the pre-norm ViT's blocks (``AttentionRope``: a fused ``qkv`` with its bias, an ``Mlp`` of
exact GELU, LayerScale ``gamma_1`` / ``gamma_2``, LayerNorm eps 1e-6) with RoPE (:mod:`keras_vit.layers.rope`) of
``rope_type='cat'`` (axial, fixed) or ``'mixed'`` (``rope.freqs`` ``(2, depth, heads, head_dim / 2)``, learned,
split by block in :func:`to_original`), and for ``*_ape`` an absolute table (``no_embed_class=True``). So its state
dict is timm's ViT layout (:mod:`keras_vit.weights.timm`) with ``rope.freqs``, without ``pos_embed`` but for ``_ape``.

DINOv3 (``vit_*_patch16_dinov3{,_qkvb}``) adds ``rope_type='dinov3'`` (``rope_rotate_half=True``), four register
tokens after the class token, no absolute table, LayerNorm eps 1e-5 and Eva's ``global_pool='avg'`` (DINOv3's own
pooling is the class token: ``pooling="token"``); ``_qkvb``: a ``qkv`` bias (its key part zero in Meta's weights).
The ``*_plus`` MLP is timm's ``SwiGLU`` (``fc1_g``, ``fc1_x`` of ``int(dim * mlp_ratio)`` rounded up to
``swiglu_align_to``), packed by :func:`to_vit_layout` into ``fc1`` ``[gate; value]``: ViTConfig's ``mlp_type="glu"``.
``dynamic_img_size`` changes nothing without an absolute table: keras_vit builds the RoPE grid of its image size.

EVA-02 Ti / S and ``vit_*_patch16_rope_reg*_gap_256`` build ``Eva(attn_type='eva', ref_feat_shape=(16, 16))``:
``EvaAttention`` (``q_bias`` / ``v_bias``), a packed SwiGLU or the ViT's MLP, and axial RoPE on a reference grid
(ViTConfig's ``rope_reference_grid``). EVA-02 B / L add ``qkv_fused=False`` (``q_proj``, ``k_proj`` without bias,
``v_proj``, joined by :func:`to_vit_layout`) and ``scale_mlp`` (a LayerNorm before ``fc2``), the CLIP towers
``scale_attn_inner`` (one before ``attn.proj``): ViTConfig's ``mlp_norm`` / ``attention_norm``. EVA-01
(``eva_giant_patch14_*``) is ``EvaAttention`` without RoPE.

Perception Encoder (``vit_pe_*``) builds ``Eva(attn_type='rope')`` with axial RoPE on a reference grid
(``rope_grid_offset=1`` after a class token, ``rope_grid_indexing='xy'``), the absolute table besides,
``use_pre_transformer_norm`` (ViTConfig's ``pre_norm``, no patch bias) and either ``global_pool='map'`` (core:
``attn_pool_num_heads`` / ``attn_pool_mlp_ratio``, ViTConfig's ``map_num_heads`` / ``map_mlp_dim``, then PE's
bias-free ``proj`` as ``head``) or the mean of the patch tokens without final norm (lang, spatial).
"""

import numpy as np

from keras_vit.errors import CheckpointError
from keras_vit.weights.conventions import joined

# Eva's RoPE and position arguments keras_vit reads, with Eva's defaults (timm 1.0.31)
ROPE_ARGS = {"use_abs_pos_emb": True, "use_rot_pos_emb": False, "rope_type": "cat", "rope_temperature": 10000.0,
             "rope_grid_indexing": "ij", "rope_grid_offset": 0.0, "ref_feat_shape": None}
ROPE_TYPES = {"cat": "axial", "mixed": "mixed", "dinov3": "dinov3"}  # timm's rope_type -> ViTConfig.rope
# Eva arguments that are VisionTransformer's under the same name, or change nothing a trained model computes
SHARED = ("patch_size", "embed_dim", "depth", "num_heads", "mlp_ratio", "qkv_bias", "class_token", "no_embed_class",
          "init_values", "global_pool", "img_size", "drop_rate", "pos_drop_rate", "patch_drop_rate", "proj_drop_rate",
          "attn_drop_rate", "drop_path_rate", "num_classes", "device", "dtype", "head_init_scale")
# Eva's NormFormer sub-LayerNorms -> VisionTransformer's names of the same norms (ViTConfig mlp_norm, attention_norm)
SCALE_NORMS = {"scale_mlp": "scale_mlp_norm", "scale_attn_inner": "scale_attn_norm"}
# Eva arguments read together in read (not one by one)
TOGETHER = ("norm_layer", "rope_rotate_half", "swiglu_mlp", "swiglu_align_to", "dynamic_img_size", "num_reg_tokens",
            "attn_type", "use_pre_transformer_norm", "use_post_transformer_norm", "use_fc_norm", "attn_pool_num_heads",
            "attn_pool_mlp_ratio")
POOL_ARGS = ("attn_pool_num_heads", "attn_pool_mlp_ratio")  # AttentionPoolLatent's sizes (None: the blocks')
# Eva's own arguments a config.json's model_args may give: read with the registration by read (timm_models.eva_args)
EVA_ARGS = SHARED + TOGETHER + tuple(SCALE_NORMS) + ("qkv_fused", "use_post_norm")
PHRASES = {  # a switch keras_vit lacks, in words (any value other than Eva's default)
    "attn_type": "EVA's own attention (q_bias / v_bias, a zero k bias; keras_vit reads it without RoPE, EVA-01's, "
                 "with DINOv3's RoPE and with axial RoPE on a reference grid, EVA-02's, only)",
    "qkv_fused": "separate q / k / v projections (keras_vit reads EVA's own, attn_type='eva', only)",
    "in_chans": "input channels other than RGB", "qk_norm": "query/key normalisation",
    "dynamic_img_pad": "image padding", "num_kv_heads": "grouped-query attention",
    "attn_only_layer_scale": "LayerScale on the attention branch only", "rope_shift_coords": "RoPE coordinate augmentation",
    "rope_jitter_coords": "RoPE coordinate augmentation", "rope_rescale_coords": "RoPE coordinate augmentation",
    "rope_mrope_section": "MRoPE sections",
}
FREQS = "rope.freqs"  # timm's RotaryEmbeddingMixed.freqs: (2, depth, heads, head_dim / 2)
ROPE_KEY = "Transformer/encoderblock_{}/MultiHeadDotProductAttention_1/rope_frequencies"  # keras_vit's, per block


def read(args, defaults):
    """``(arguments or None, lacking)`` of an Eva registration's ``args`` (``defaults``: Eva's, from the table)."""
    out, lacking = {}, []
    for name, value in args.items():
        if name in SHARED or name in ROPE_ARGS:
            out[name] = value
        elif name == "qkv_fused" and not value and args.get("attn_type", defaults.get("attn_type")) == "eva":
            continue  # EvaAttention's q_proj / k_proj (no bias) / v_proj: joined by to_vit_layout
        elif name == "use_post_norm":  # EvaBlockPostNorm: x + norm(branch(x)), init_values ignored (no LayerScale)
            out["res_post_norm"] = bool(value)
        elif name in TOGETHER or name in SCALE_NORMS:
            continue
        elif value != defaults.get(name):
            lacking.append(f"{PHRASES.get(name, 'timm argument ' + name)} ({name}={value!r})")
    full = {**defaults, **args}
    rope = {**ROPE_ARGS, **{k: v for k, v in out.items() if k in ROPE_ARGS}}
    dinov3 = rope["use_rot_pos_emb"] and rope["rope_type"] == "dinov3"
    # EvaAttention (attn_type='eva') is the paper's attention, read where PHRASES['attn_type'] says, checked against timm
    eva02 = rope["use_rot_pos_emb"] and rope["rope_type"] == "cat" and rope["ref_feat_shape"] is not None
    if full["attn_type"] != "rope" and not ((dinov3 or eva02 or not rope["use_rot_pos_emb"]) and full["attn_type"] == "eva"):
        lacking.append(f"{PHRASES['attn_type']} (attn_type={full['attn_type']!r})")
    if rope["use_rot_pos_emb"] and rope["rope_type"] not in ROPE_TYPES:
        lacking.append(f"timm's {rope['rope_type']!r} RoPE (rope_type={rope['rope_type']!r}; keras_vit has 'cat', 'mixed' and 'dinov3')")
    if rope["use_rot_pos_emb"] and rope["rope_type"] == "mixed" and rope["rope_grid_offset"]:
        lacking.append(f"a grid offset with mixed RoPE (rope_grid_offset={rope['rope_grid_offset']!r})")
    if bool(full["rope_rotate_half"]) != dinov3 and rope["use_rot_pos_emb"]:  # without RoPE it rotates nothing
        lacking.append(f"{'half-split' if full['rope_rotate_half'] else 'interleaved'} rotation with rope_type="
                       f"{rope['rope_type']!r} (rope_rotate_half={full['rope_rotate_half']!r}; keras_vit rotates "
                       "RoPE-ViT's interleaved pairs and DINOv3's halves)")
    if full["dynamic_img_size"] and rope["use_abs_pos_emb"]:
        lacking.append("dynamic image size with an absolute position table (dynamic_img_size=True: timm resamples "
                       "it bicubically at each size)")
    norm = full["norm_layer"]
    if norm == "LayerNorm" or (isinstance(norm, dict) and norm.get("callable") == "LayerNorm"):
        out["norm_eps"] = norm.get("eps", 1e-6) if isinstance(norm, dict) else 1e-6  # timm.layers.LayerNorm's
    else:
        lacking.append(f"a norm other than timm's LayerNorm (norm_layer={norm!r})")
    if full["num_reg_tokens"]:
        out["reg_tokens"] = full["num_reg_tokens"]
        if not rope["use_abs_pos_emb"]:
            out["no_embed_class"] = True  # no table: the registers have no positions, as keras_vit's
    lacking += _swiglu(full, out)
    # Eva's and VisionTransformer's norms sit alike (before fc2, before attn.proj); stated, so that weights contradicting
    # them are refused
    out.update({vit: bool(full[eva]) for eva, vit in SCALE_NORMS.items()})
    lacking += _norms_and_pooling(full, out)
    if lacking:
        return None, lacking
    out.setdefault("global_pool", defaults.get("global_pool"))
    return out, []


def _norms_and_pooling(full, out):
    """Eva's norms around the blocks (``pre_norm``, ``final_norm``, ``fc_norm``) and its attention pooling sizes as
    VisionTransformer's arguments in ``out``; returns what keras_vit lacks."""
    lacking = []
    out["pre_norm"] = bool(full["use_pre_transformer_norm"])  # PatchEmbed(bias=not use_pre_transformer_norm), as CLIP's
    fc = full["global_pool"] == "avg" if full["use_fc_norm"] is None else bool(full["use_fc_norm"])  # Eva.__init__
    post = not fc if full["use_post_transformer_norm"] is None else bool(full["use_post_transformer_norm"])
    if fc and post:
        lacking.append("both a final norm and a norm after pooling (use_post_transformer_norm=True with use_fc_norm)")
    # VisionTransformer: norm = final_norm and not fc_norm, fc_norm = final_norm and fc_norm
    out.update(final_norm=fc or post, fc_norm=fc)
    out["pool_include_prefix"] = full["global_pool"] == "map"  # Eva's attention pooling reads every token, its mean not
    if full["global_pool"] == "map":  # AttentionPoolLatent(num_heads or the blocks', mlp_ratio or theirs, act GELU)
        out.update({name: full[name] for name in POOL_ARGS})
        if full["swiglu_mlp"]:
            lacking.append("attention pooling with GELU after SwiGLU blocks (global_pool='map' with swiglu_mlp=True)")
        if not full["qkv_bias"]:
            lacking.append("attention pooling with q / kv biases after blocks without them (global_pool='map' with "
                           "qkv_bias=False)")
    return lacking


def _swiglu(full, out):
    """timm's SwiGLU (``swiglu_mlp``) as ``SwiGLUPacked`` arguments in ``out`` (its aligned hidden width is half the
    packed ``fc1``); returns what keras_vit lacks."""
    if not full["swiglu_mlp"]:
        return [] if not full["swiglu_align_to"] else [f"an aligned MLP without SwiGLU (swiglu_align_to={full['swiglu_align_to']!r})"]
    dim, align = int(full["embed_dim"]), int(full["swiglu_align_to"] or 0)
    hidden = int(dim * full["mlp_ratio"])
    hidden += -hidden % align if align else 0
    ratio = 2 * hidden / dim
    if int(dim * ratio) != 2 * hidden:
        return [f"a SwiGLU width {hidden} that no mlp_ratio of embed_dim={dim} states exactly"]
    out.update(mlp_layer="SwiGLUPacked", act_layer="nn.SiLU", mlp_ratio=ratio)
    return []


def fields(args):
    """The ``ViTConfig`` RoPE fields of timm arguments (Eva's :data:`ROPE_ARGS`; absent: a ViT without RoPE)."""
    rope = {**ROPE_ARGS, **{k: v for k, v in args.items() if k in ROPE_ARGS}}
    out = {"position_embedding": bool(rope["use_abs_pos_emb"]), "rope": None}
    if rope["use_rot_pos_emb"]:
        kind = ROPE_TYPES[rope["rope_type"]]
        out.update(rope=kind, rope_grid_indexing=rope["rope_grid_indexing"],
                   rope_temperature=float(rope["rope_temperature"]) if kind != "mixed" else None,
                   rope_grid_offset=float(rope["rope_grid_offset"]))
        reference = rope["ref_feat_shape"]  # Eva hands it to RotaryEmbeddingCat only ('cat'); an int is (n, n)
        if kind == "axial" and reference is not None:
            out["rope_reference_grid"] = tuple(int(n) for n in ((reference, reference) if isinstance(reference, int) else reference))
    return out


def declared(resolved, shapes, keys=()):
    """``{ViTConfig field: (value, said)}`` of the RoPE fields a timm file states (its registration, ``model_args``)
    and its weights show (``rope.freqs``, ``pos_embed``); a contradiction between the two is refused. ``keys``: the
    state dict's own keys (before :func:`to_vit_layout`)."""
    stated = {name: resolved[name] for name in ROPE_ARGS if name in resolved}
    has_freqs, has_table = FREQS in shapes, "pos_embed" in shapes
    out = {"position_embedding": (has_table, "'pos_embed'" if has_table else "no 'pos_embed' (no absolute position table)")}
    if not stated and resolved["architecture"][1] is None:
        separate = "blocks.0.attn.q_proj.weight" in keys  # every timm registration with them has RoPE (EVA-02 B / L)
        if has_freqs or separate:
            raise CheckpointError(
                f"A timm state dict with {repr(FREQS) + ' (RoPE-Mixed)' if has_freqs else 'separate q / k / v projections (EVA-02 B / L, whose RoPE has no weights)'} "
                "and no config.json naming its architecture: its RoPE is not in the weights. Give the folder the "
                "config.json timm saved (architecture=...)."
            )
        return out
    values = fields({name: value for name, (value, _) in stated.items()})
    said = next((s for _, s in stated.values() if s), f"architecture={resolved['architecture'][0]!r} (timm's VisionTransformer: no RoPE)")
    if (values["rope"] == "mixed") != has_freqs or values["position_embedding"] != has_table:
        raise CheckpointError(
            f"{said} but the weights {'have' if has_freqs else 'lack'} {FREQS!r} and {'have' if has_table else 'lack'} "
            "'pos_embed': the config belongs to another model, or the weights do."
        )
    # RoPE-Mixed's temperature only initialised its frequencies: the weights hold them
    out.update({name: (value, said) for name, value in values.items() if name != "position_embedding" and value is not None or name == "rope"})
    return out


def to_original(tensors, path):
    """``{Transformer/encoderblock_{i}/.../rope_frequencies: (2, heads, head_dim / 2)}`` from ``rope.freqs`` (a mixed
    RoPE file has it: :func:`declared` refuses one without)."""
    freqs = tensors[FREQS]
    if freqs.ndim != 4 or freqs.shape[0] != 2:
        raise CheckpointError(f"Checkpoint {path!r}: {FREQS!r} has shape {tuple(freqs.shape)}, expected (2, depth, heads, head_dim / 2).")
    return {ROPE_KEY.format(i): freqs[:, i] for i in range(freqs.shape[1])}


def to_vit_layout(tensors):
    """timm's ``VisionTransformer`` keys of an Eva state dict: ``SwiGLU``'s ``mlp.fc1_g`` / ``mlp.fc1_x`` joined into
    ``SwiGLUPacked``'s ``mlp.fc1`` ``[gate; value]``, ``EvaAttention``'s ``attn.q_bias`` / ``attn.v_bias`` into
    ``attn.qkv.bias`` ``[q; 0; v]`` (its key bias is a zero buffer), and its separate ``attn.q_proj`` / ``k_proj`` /
    ``v_proj`` (``qkv_fused=False``: EVA-02 B / L) into ``attn.qkv`` (``k_proj`` has no bias: zeros in ``[q; 0; v]``).
    Other keys as they are."""
    out = dict(tensors)
    for key in [k for k in tensors if k.endswith(".attn.q_proj.weight")]:
        base = key[:-len("q_proj.weight")]
        weights = [f"{base}{part}_proj.weight" for part in "qkv"]
        if all(k in tensors for k in weights):
            out[base + "qkv.weight"] = joined([out.pop(k) for k in weights], axis=0)
            q, k, v = (f"{base}{part}_proj.bias" for part in "qkv")
            if q in tensors and v in tensors:
                key_bias = out.pop(k) if k in tensors else np.zeros_like(tensors[q])
                out[base + "qkv.bias"] = joined([out.pop(q), key_bias, out.pop(v)], axis=0)
    for key in [k for k in tensors if k.endswith(".mlp.fc1_g.weight") or k.endswith(".mlp.fc1_g.bias")]:
        value = key.replace("fc1_g", "fc1_x")
        if value in tensors:
            out[key.replace("fc1_g", "fc1")] = joined([out.pop(key), out.pop(value)], axis=0)
    for key in [k for k in tensors if k.endswith(".attn.q_bias")]:
        value = key[:-len("q_bias")] + "v_bias"
        if value in tensors:
            q, v = out.pop(key), out.pop(value)
            out[key[:-len("q_bias")] + "qkv.bias"] = joined([q, np.zeros_like(q), v], axis=0)
    return out
