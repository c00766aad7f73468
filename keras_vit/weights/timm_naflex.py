"""timm's ``NaFlexVit`` class (``timm/models/naflexvit.py``) where it is the paper's ViT with a NaFlex input path.

``naflexvit_base_patch16_gap`` / ``_par_gap`` / ``_parfac_gap`` (``e300_s576_in1k``), the SigLIP 2 NaFlex towers
(``naflexvit_{base,so400m}_patch16_siglip``) and C-RADIO (``naflexvit_{base,large,huge,giant}_patch16_radio_v3``,
``naflexvit_{so400m,huge}_patch16_radio_v4``) build ``NaFlexVit(NaFlexVitCfg(...))``: timm's ``Block`` (pre-norm,
fused ``qkv``, an ``Mlp``, LayerScale with ``init_values``), a linear patch embedding of flattened ``(ph, pw, C)``
patches (``embeds.proj``), a learned ``(1, rows, cols, D)`` table (``embeds.pos_embed``; ``pos_embed_grid_size``
``(16, 16)``, C-RADIO's ``(128, 128)``) or a factorised pair (``embeds.pos_embed_y`` ``(1, rows, D)``,
``embeds.pos_embed_x`` ``(1, cols, D)``), resampled per image (``F.interpolate``, :data:`RESAMPLING`: bicubic or
bilinear with antialiasing, or C-RADIO's bilinear without it, ``pos_embed_antialias=False``, with
``pos_embed_align_corners`` False or True (v3-B / H); ``pos_embed_ar_preserving``: to the square of the longer side,
cropped), register tokens without positions (C-RADIO's summary tokens past the first), and the masked pooling. That
is keras_vit's ViT with ``input_mode="naflex"`` (:mod:`keras_vit.architecture.naflex`).

Any other switch (a resampling rule :data:`RESAMPLING` lacks, RoPE, EVA attention, SwiGLU...) is refused by name.
"""

import numpy as np

from keras_vit.weights.conventions import patch_linear
from keras_vit.weights.mapping import FACTORIZED_KEYS

# the NaFlex arguments keras_vit reads (beside VisionTransformer's), with their values in a classic timm ViT
ARGS = {"naflex": False, "naflex_pos_embed": "learned", "naflex_ar_preserving": False,
        "naflex_resampling": "bicubic_torch_antialias", "naflex_grid": None}
# (pos_embed_interp_mode, pos_embed_antialias, pos_embed_align_corners) of F.interpolate -> position_resampling
RESAMPLING = {("bicubic", True, False): "bicubic_torch_antialias", ("bilinear", True, False): "bilinear_torch_antialias",
              ("bilinear", False, False): "bilinear_torch", ("bilinear", False, True): "linear_aligned"}
# NaFlexVitCfg fields that are VisionTransformer's under the same name and meaning
SHARED = ("patch_size", "embed_dim", "depth", "num_heads", "mlp_ratio", "qkv_bias", "class_token", "reg_tokens",
          "init_values", "global_pool", "fc_norm", "final_norm", "pre_norm", "act_layer")
NEUTRAL = ("attn_drop_rate", "drop_rate", "pos_drop_rate", "patch_drop_rate", "proj_drop_rate", "drop_path_rate",
           "weight_init", "fix_init", "dataclass", "enable_patch_interpolator", "use_key_only_attn_mask",
           "rope_temperature", "rope_grid_indexing", "rope_grid_offset", "num_classes", "device", "dtype", "img_size",
           "pos_embed_grid_size", "pos_embed", "pos_embed_ar_preserving", "pos_embed_interp_mode",
           "pos_embed_antialias", "pos_embed_align_corners")  # the last three: read together below (RESAMPLING)
# NaFlexVitCfg fields keras_vit has only at these values: what each is otherwise
ONLY = {
    "embed_proj_type": ("linear", "a convolutional patch embedding"),
    "input_norm_layer": (None, "a norm of the flattened patches"), "embed_norm_layer": (None, "a normalised patch embedding"),
    "norm_layer": (None, "another norm"), "block_fn": (None, "another block"), "mlp_layer": (None, "another MLP"),
    "attn_layer": (None, "another attention"), "attn_type": ("standard", "EVA / RoPE attention"),
    "rope_type": ("", "RoPE"), "rope_ref_feat_shape": (None, "RoPE"), "rope_rotate_half": (False, "RoPE"),
    "rope_shift_coords": (None, "RoPE"), "rope_jitter_coords": (None, "RoPE"), "rope_rescale_coords": (None, "RoPE"),
    "rope_mrope_section": (None, "RoPE"), "qk_norm": (False, "query/key normalisation"),
    "proj_bias": (True, "projections without biases"), "scale_attn_inner_norm": (False, "a norm inside attention"),
    "scale_mlp_norm": (False, "a norm inside the MLP"), "num_kv_heads": (None, "grouped-query attention"),
    "attn_gated": (False, "gated attention"), "swiglu_mlp": (False, "a SwiGLU MLP"), "swiglu_align_to": (0, "a SwiGLU MLP"),
    "qkv_fused": (True, "separate q / k / v"), "attn_only_layer_scale": (False, "LayerScale on attention only"),
    "pool_include_prefix": (False, "pooling over the prefix tokens too"),
    "attn_pool_num_heads": (None, "attention pooling of other heads"), "attn_pool_mlp_ratio": (None, "attention pooling of another MLP"),
    "pos_embed_use_grid_sample": (False, "position tables sampled with grid_sample"),
    "dynamic_img_pad": (False, "image padding"), "patchify_channels_last": (True, "patches flattened channels first"),
    "in_chans": (3, "input channels other than RGB"),
}
POS_EMBED_KEYS = dict(zip(("embeds.pos_embed_y", "embeds.pos_embed_x"), FACTORIZED_KEYS))  # timm.py's top-level keys
RENAMED = {"embeds.proj.bias": "patch_embed.proj.bias", "embeds.cls_token": "cls_token", "embeds.reg_token": "reg_token"}


def read(args, defaults):
    """``(arguments or None, lacking)`` of a NaFlexVit registration's ``args`` (``{"cfg": {...}, ...}``; ``defaults``:
    NaFlexVit's own, from the table)."""
    cfg = {**{k: v for k, v in {**defaults, **args}.items() if k != "cfg"}, **(args.get("cfg") or {})}
    out, lacking = {name: cfg[name] for name in SHARED if name in cfg}, []
    for name, value in cfg.items():
        if name in SHARED or name in NEUTRAL:
            continue
        if name in ONLY:
            if value not in (ONLY[name][0],) and not (name == "rope_type" and value in ("", "none", None)):
                lacking.append(f"{ONLY[name][1]} ({name}={value!r})")
        else:
            lacking.append(f"NaFlexVitCfg.{name}={value!r}, which keras_vit does not know")
    if cfg.get("global_pool") not in ("avg", "token", "map", ""):
        lacking.append(f"pooling global_pool={cfg.get('global_pool')!r}")
    rule = (cfg.get("pos_embed_interp_mode", "bicubic"), cfg.get("pos_embed_antialias", True),
            cfg.get("pos_embed_align_corners", False))
    if cfg.get("pos_embed") == "learned" and rule not in RESAMPLING:  # the factorised tables: linear, whatever these say
        lacking.append(f"position tables resampled by F.interpolate(mode={rule[0]!r}, antialias={rule[1]!r}, "
                       f"align_corners={rule[2]!r}) (pos_embed_interp_mode, pos_embed_antialias, pos_embed_align_corners)")
    if cfg.get("pos_embed") not in ("learned", "factorized", "none", "", None):
        lacking.append(f"position embeddings pos_embed={cfg.get('pos_embed')!r}")
    grid = cfg.get("pos_embed_grid_size")
    if not grid:
        lacking.append("no stored position grid (pos_embed_grid_size=None: a classic ViT through use_naflex)")
    if lacking:
        return None, list(dict.fromkeys(lacking))
    patch = int(cfg["patch_size"]) if not isinstance(cfg["patch_size"], (list, tuple)) else int(cfg["patch_size"][0])
    out.update(no_embed_class=True, img_size=[int(grid[0]) * patch, int(grid[1]) * patch], naflex=True,
               naflex_pos_embed=cfg.get("pos_embed") or "none", naflex_ar_preserving=bool(cfg["pos_embed_ar_preserving"]),
               naflex_resampling=RESAMPLING.get(rule, ARGS["naflex_resampling"]), norm_eps=1e-6,
               naflex_grid=[int(grid[0]), int(grid[1])],
               use_abs_pos_emb=cfg.get("pos_embed") == "learned")  # a (1, rows * cols, D) 'pos_embed' (timm_eva's reading)
    if out.get("act_layer") is None:
        out.pop("act_layer", None)
    return out, []


def fields(args):
    """The ``ViTConfig`` NaFlex fields of timm arguments (:data:`ARGS`; absent: an image model)."""
    args = {**ARGS, **{k: v for k, v in args.items() if k in ARGS}}
    if not args["naflex"]:
        return {}
    out = {"input_mode": "naflex", "position_aspect_preserving": bool(args["naflex_ar_preserving"]),
           "factorized_positions": args["naflex_pos_embed"] == "factorized",
           "position_resampling": args["naflex_resampling"]}
    if out["factorized_positions"]:  # positions without a 'pos_embed' table (timm_eva.fields says none)
        out["position_embedding"] = True
    return out


def image_size(resolved):
    """``(said, (height, width))``: the size whose patches make the stored grid (``model_args.patch_size`` applied),
    or None for a classic timm ViT."""
    if not resolved.get("naflex", (False, None))[0]:
        return None
    (rows, cols), said = resolved["naflex_grid"]
    patch = resolved["patch_size"][0]
    patch = patch[0] if isinstance(patch, (list, tuple)) else patch
    return f"{said} (pos_embed_grid_size x patch_size {patch})", (rows * patch, cols * patch)


def declared(resolved):
    """``{ViTConfig field: (value, said)}`` of a NaFlex registration (nothing for a classic timm ViT)."""
    if not resolved.get("naflex", (False, None))[0]:
        return {}
    said = f"{resolved['naflex'][1]}: timm's NaFlexVit"
    values = fields({k: v for k, (v, _) in resolved.items() if k in ARGS})
    return {name: (value, said) for name, value in values.items() if name != "position_resampling"}  # the Reading's


def to_vit_layout(tensors, path="<arrays>"):
    """timm's ``VisionTransformer`` keys of a NaFlexVit state dict (timm's ``checkpoint_filter_fn`` the other way):
    ``embeds.proj`` ``(D, ph * pw * C)`` as the patch convolution ``(D, C, ph, pw)``, ``embeds.pos_embed``
    ``(1, rows, cols, D)`` as ``pos_embed`` ``(1, rows * cols, D)``, ``embeds.cls_token`` / ``reg_token`` as ``cls_token``
    / ``reg_token``; the factorised tables (:data:`POS_EMBED_KEYS`) and any other key keep theirs (an unknown one is
    refused by name later)."""
    out = {RENAMED.get(k, k): v for k, v in tensors.items() if k not in ("embeds.proj.weight", "embeds.pos_embed")}
    if "embeds.proj.weight" in tensors:
        out["patch_embed.proj.weight"] = patch_linear("embeds.proj.weight", tensors["embeds.proj.weight"], path)
    if "embeds.pos_embed" in tensors:
        value = tensors["embeds.pos_embed"]
        out["pos_embed"] = np.reshape(value, (1, value.shape[1] * value.shape[2], value.shape[3]))
    return out
