"""What a transformers ``config.json`` of the ViT family declares, each ``model_type`` a row of data (:class:`Family`).

Every switch is declared, named with the field that sets it (a row states only those its ``modeling_*.py`` fixes
where they differ from the paper's, :data:`keras_vit.architecture.family.PAPER`), so a model built with another is
refused by field name and :func:`keras_vit.from_pretrained` builds exactly this architecture.
"""

import os
from typing import NamedTuple

from keras_vit.errors import CheckpointError
from keras_vit.weights import config as config_lib
from keras_vit.weights.declared import activation, declare
from keras_vit.weights.conventions import CLIP_MEAN_STD, HALF, IMAGENET
from keras_vit.weights.input_normalization import processor_normalization
from keras_vit.weights.source import NaFlexForm, Reading
from keras_vit.weights.transformers.vit import DEFAULTS as _VIT


class Family(NamedTuple):
    """One ``model_type``. ``encoder``: whose code path its ``modeling_*.py`` follows (``"vit"``, ``"dinov2"``,
    ``"clip"``, ``"siglip"``: how the MLP size, the pooling and the projection are read); ``layout``: its key table;
    ``defaults``: its config's defaults (a field named here is read from the config); ``normalization``: ``(label,
    (mean, std))`` of its published checkpoints; ``resampling``: its ``interpolate_pos_encoding`` rule, or None where
    keras_vit has not that rule (the model runs at its own size only, said by ``fixed_size``); ``switches``:
    ``{ViTConfig field: (value, said)}`` fixed by its code where they differ from the paper's; ``tower``: the
    vision settings are in ``vision_config``; ``classifiers``: ``{architecture: layout}`` of a classifier on the mean
    of the tokens; ``projection``: ``{architecture: "vision" or "top"}``, the classes with a projection and the
    config (vision or whole) whose ``projection_dim`` sizes it; ``top_defaults``: the whole config's defaults;
    ``refused``: ``{architecture: why}`` of the classes keras_vit has no switch for; ``epsilon``: the config's name of
    the norms' epsilon."""

    encoder: str
    layout: str
    defaults: dict
    normalization: tuple
    resampling: str | None = "bicubic_torch"  # interpolate_pos_encoding: torch bicubic, size=, align_corners=False
    switches: dict = {}
    tower: bool = False
    classifiers: dict = {}
    projection: dict = {}
    top_defaults: dict = {}
    refused: dict = {}
    fixed_size: str = ""
    epsilon: str = "layer_norm_eps"


_IMAGENET, _CLIP, _HALF = ("ImageNet", IMAGENET), ("OpenAI CLIP", CLIP_MEAN_STD), ("0.5", HALF)
_DINOV2 = dict(_VIT, mlp_ratio=4, layer_norm_eps=1e-6, patch_size=14, layerscale_value=1.0, use_swiglu_ffn=False)
_NO_QKV = {k: v for k, v in _VIT.items() if k != "qkv_bias"}  # q/k/v biases without a switch
_CLIP_VISION = dict(_NO_QKV, hidden_act="quick_gelu", layer_norm_eps=1e-5, patch_size=32, projection_dim=512)
_SIGLIP = dict(_NO_QKV, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6, vision_use_head=True)
_CLIP_NORMS = {"pre_norm": (True, "pre_layrnorm before the blocks"),
               "final_norm": (False, "post_layernorm on the pooled class token only"),
               "fc_norm": (True, "post_layernorm on the pooled class token")}
_NO_CLASS = {"class_token": (False, "no class token")}


def _clip(name, model_prefix, top_projection=512, classifier=None):
    """A CLIP-like two-tower ``model_type`` (``model_prefix`` of its class names) and its ``*_vision_model``."""
    classifiers = {f"{classifier}ForImageClassification": "clip_classifier"} if classifier else {}
    projection = {f"{model_prefix}Model": "top", f"{model_prefix}VisionModelWithProjection": "vision"}
    row = Family("clip", name, _CLIP_VISION, _CLIP, switches=_CLIP_NORMS, tower=True, classifiers=classifiers,
                 projection=projection, top_defaults={"projection_dim": top_projection})
    return row, row._replace(tower=False)


_DINOV3 = dict(_NO_QKV, hidden_size=384, intermediate_size=1536, num_attention_heads=6, layer_norm_eps=1e-5,
               rope_theta=100.0, query_bias=True, key_bias=False, value_bias=True, proj_bias=True, mlp_bias=True,
               layerscale_value=1.0, use_gated_mlp=False, num_register_tokens=0)
# DINOv3ViTModel: RoPE on the patch tokens (DINOv3ViTRopePositionEmbedding: centred coordinates in [-1, 1], rows
# first, the head's halves rotated), no position table; its pos_embed_shift / jitter / rescale act in training only
_DINOV3_SWITCHES = {"rope": ("dinov3", "DINOv3ViTRopePositionEmbedding (RoPE of the patch tokens)"),
                    "rope_grid_indexing": ("ij", "DINOv3ViTRopePositionEmbedding's coordinates (row, column)"),
                    "position_embedding": (False, "no absolute position table"),
                    "prefix_positions": (False, "no absolute position table")}
FAMILIES = {
    "dinov2": Family("dinov2", "dinov2", _DINOV2, _IMAGENET),
    "dinov2_with_registers": Family("dinov2", "dinov2_with_registers", dict(_DINOV2, num_register_tokens=4), _IMAGENET,
                                    resampling="bicubic_torch_antialias"),
    "deit": Family("vit", "deit", _VIT, _IMAGENET, switches={"distillation_token": (True, "a distillation token")},
                   refused={"DeiTForImageClassification": (
                       "DeiTForImageClassification reads the class token only, past a distillation token that no head "
                       "reads; keras_vit's ViTConfig has no switch for that: distillation_token=True averages the class "
                       "and distillation heads (DeiTForImageClassificationWithTeacher; without a head, the two tokens), "
                       "and a model without it has no distillation token in its sequence. Load a "
                       "DeiTForImageClassificationWithTeacher or DeiTModel repository.")}),
    "vit_mae": Family("vit", "vit_mae", _VIT, _IMAGENET),
    "vit_msn": Family("vit", "vit_msn", dict(_VIT, layer_norm_eps=1e-6), _IMAGENET),
    "ijepa": Family("vit", "ijepa", _VIT, _IMAGENET, switches={
        **_NO_CLASS, "prefix_positions": (True, "positions for the patches only (no class token)"), "pooling": ("gap", "the mean of the tokens (IJepaForImageClassification's input; IJepaModel has "
                                        "no pooler: the mean of its last_hidden_state)")}),
    "siglip": Family("siglip", "siglip", _SIGLIP, _HALF, switches=_NO_CLASS, tower=True,
                     classifiers={"SiglipForImageClassification": "siglip_classifier"}),
    "siglip2": Family("siglip", "siglip2", dict(_SIGLIP, num_patches=256), _HALF, resampling=None,
                      switches=_NO_CLASS, tower=True, classifiers={"Siglip2ForImageClassification": "siglip2_classifier"},
                      fixed_size="SigLIP2's position embeddings, resized bilinearly with antialiasing"),
    "dinov3_vit": Family("dinov3", "dinov3_vit", _DINOV3, _IMAGENET, switches=_DINOV3_SWITCHES),
    "tipsv2": Family("dinov2", "tipsv2", dict(_DINOV2, image_size=448, num_register_tokens=1),
                     ("[0, 1] (no normalisation)", ((0.0,) * 3, (1.0,) * 3)), resampling=None, tower=True,
                     fixed_size="TIPSv2 resamples its position embeddings bilinearly with antialiasing"),
}
FAMILIES["clip"], FAMILIES["clip_vision_model"] = _clip("clip", "CLIP", classifier="CLIP")
FAMILIES["metaclip_2"], FAMILIES["metaclip_2_vision_model"] = _clip("clip", "MetaClip2", classifier="MetaClip2")
FAMILIES["chinese_clip"], FAMILIES["chinese_clip_vision_model"] = _clip("clip", "ChineseCLIP")
FAMILIES["altclip"], FAMILIES["altclip_vision_model"] = _clip("altclip", "AltCLIP", top_projection=768)
FAMILIES["clipseg"], FAMILIES["clipseg_vision_model"] = (row._replace(refused={"CLIPSegForImageSegmentation": (
    "CLIPSegForImageSegmentation is CLIP with a segmentation decoder on its hidden states, which keras_vit does not "
    "build; a CLIPSegModel or CLIPSegVisionModel repository loads (CLIP's image tower)")})
    for row in _clip("clip", "CLIPSeg"))
for _name in ("siglip", "siglip2", "tipsv2"):  # the vision model alone: its settings at the top of its config.json
    FAMILIES[f"{_name}_vision_model"] = FAMILIES[_name]._replace(tower=False)
# AIMv2 (modeling_aimv2.py). Aimv2VisionModel: Aimv2VisionEmbeddings (the patch Conv2d with its bias, rms_norm of the
# patch embeddings, a learned position_embedding of the patches: no class token), Aimv2EncoderLayer (rms_norm1,
# Aimv2Attention: q/k/v/out_proj with biases where qkv_bias, the output projection's too; rms_norm2, Aimv2MLP:
# down_proj(act(gate_proj x) * up_proj x), biases where mlp_bias), a final rms_norm; every RMSNorm of rms_norm_eps.
# With use_head=False it returns last_hidden_state (keras_vit's pooling=None). Aimv2VisionConfig's defaults (5.24):
_AIMV2 = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=24, num_attention_heads=8, num_channels=3,
              image_size=224, patch_size=14, hidden_act="silu", rms_norm_eps=1e-5, qkv_bias=False, mlp_bias=False,
              use_head=True, is_native=False)
FAMILIES["aimv2_vision_model"] = Family(
    "aimv2", "aimv2", _AIMV2, _CLIP, resampling=None, epsilon="rms_norm_eps",
    switches={"class_token": (False, "no class token"), "norm_type": ("rmsnorm", "Aimv2RMSNorm in every norm"),
              "patch_norm": (True, "Aimv2VisionEmbeddings.rms_norm of the patch embeddings"),
              "pooling": (None, "last_hidden_state, every token (no pooler without use_head)")},
    fixed_size="AIMv2's position table, which Aimv2VisionEmbeddings adds at this size only (no interpolate_pos_encoding)")
FAMILIES["aimv2"] = FAMILIES["aimv2_vision_model"]._replace(tower=True, refused={"Aimv2Model": (
    "Aimv2Model's image embedding is visual_projection of its vision tower's attention-pooling head "
    "(Aimv2AttentionPoolingHead), which keras_vit does not build; an Aimv2VisionModel repository with use_head=False "
    "loads (the vision tower's last_hidden_state)")})
# what keras_vit does not build of AIMv2, as the config says it: field -> (the value that needs it, what it is)
_AIMV2_REFUSED = {
    "use_head": (True, "AIMv2's attention-pooling head (Aimv2AttentionPoolingHead: a learned query without a query "
                       "projection, key and value projections, output_proj), which keras_vit does not build; an "
                       "Aimv2VisionModel with use_head=False loads (its last_hidden_state)"),
    "is_native": (True, "AIMv2's native-resolution position embeddings (2-D sin-cos, built for each image size), "
                        "which keras_vit does not build"),
}
MODEL_TYPES = tuple(FAMILIES)
# the family's model_types whose blocks need a switch keras_vit lacks (their modeling_*.py): refused by name
REFUSED = {
    "pixtral": "2-D rotary position embeddings (RoPE), RMSNorm and a SwiGLU MLP",
    "mlcd_vision_model": "rotary position embeddings (RoPE) on the patch tokens",
    "beit": "a relative position bias in every attention layer",
    "data2vec-vision": "a relative position bias in every attention layer",
}
# transformers' hidden_act (ACT2FN keys) that keras_vit has: -> mlp_activation through declared.activation
ACTIVATIONS = ("gelu", "gelu_pytorch_tanh", "gelu_new", "quick_gelu", "silu", "swish")
# the paper's switches a row does not state, as a read-from text says them
_PAPER = {"class_token": (True, "a class token"), "distillation_token": (False, "no distillation token"),
          "num_register_tokens": (0, "no register tokens"), "prefix_positions": (True, "the class token has a position embedding"),
          "layer_scale_init": (None, "no LayerScale"), "pre_norm": (False, "no LayerNorm before the blocks"),
          "final_norm": (True, "a final LayerNorm"), "fc_norm": (False, "no norm after pooling")}


def settings(config, path, model_type):
    """The :class:`~keras_vit.weights.source.Reading` of a family ``config.json`` (``model_type`` one of
    :data:`MODEL_TYPES`); its ``layout`` names the key table (:data:`keras_vit.weights.transformers.layouts.LAYOUTS`).

    Example:
    >>> s = settings({"model_type": "dinov2", "hidden_size": 32, "mlp_ratio": 4, "use_swiglu_ffn": True,
    ...               "architectures": ["Dinov2Model"]}, "config.json", "dinov2")
    >>> [(f, s.declared[f].value) for f in ("mlp_type", "mlp_dim", "mlp_activation", "layer_scale_init", "pooling")]
    [('mlp_type', 'glu'), ('mlp_dim', 88), ('mlp_activation', 'silu'), ('layer_scale_init', 1.0), ('pooling', 'token')]
    >>> s = settings({"model_type": "ijepa", "architectures": ["IJepaModel"]}, "config.json", "ijepa")
    >>> s.declared["class_token"].value, s.declared["pooling"].value
    (False, 'gap')
    """
    row = FAMILIES[model_type]
    architecture = (config.get("architectures") or [None])[0]
    if architecture in row.refused:
        raise CheckpointError(f"{path!r}: {row.refused[architecture]}")
    vision, where = config, ""
    if row.tower:
        vision, where = config_lib.json_object(config.get("vision_config") or {}, path, "vision_config"), "vision_config."
    read = config_lib.Fields(vision, path, where, row.defaults, "transformers'")
    record, notes, expected = {}, [], []

    def put(field, value, said):
        declare(record, field, value, said, path)

    for field, name in (("hidden_size", "hidden_size"), ("num_layers", "num_hidden_layers"),
                        ("num_heads", "num_attention_heads"), ("layer_norm_epsilon", row.epsilon)):
        value = read.number(name, integer=field != "layer_norm_epsilon")
        put(field, value, read.said(name, value))
    (width, sizes), (depth, layers) = record["hidden_size"][:2], record["num_layers"][:2]
    if row.encoder == "aimv2":  # the parts keras_vit lacks, refused before its MLP is read
        for field, (value, why) in _AIMV2_REFUSED.items():
            if read.flag(field) == value:
                raise CheckpointError(f"{path!r}: {read.said(field, value)}: {why}.")
    _mlp(put, read, row, vision, width, path, where, expected)
    if row.encoder == "dinov3":
        _dinov3(put, read, path)
    elif row.encoder == "aimv2":  # Aimv2Attention's q/k/v biases, and its out_proj's with them
        qkv, mlp_bias = read.flag("qkv_bias"), read.flag("mlp_bias")
        put("qkv_bias", qkv, read.said("qkv_bias", qkv))
        put("proj_bias", qkv, read.said("qkv_bias", qkv) + " (Aimv2Attention's out_proj too)")
        put("mlp_bias", mlp_bias, read.said("mlp_bias", mlp_bias))
    else:
        qkv = read.flag("qkv_bias") if "qkv_bias" in row.defaults else True
        put("qkv_bias", qkv, read.said("qkv_bias", qkv) if "qkv_bias" in row.defaults else f"{model_type} attention (q/k/v biases)")
    classifier = row.classifiers.get(architecture)
    _switches(put, read, row, model_type, architecture, classifier)
    _top(put, read, row, architecture, config, classifier)
    patch = vision.get("patch_size", row.defaults["patch_size"])
    patch_side = config_lib.size_pair(patch, path, where + "patch_size")[0]
    expected += [("hidden_size", sizes, width), ("num_layers", layers, depth),
                 ("patch_size", read.said("patch_size", patch), patch_side),
                 ("num_channels", read.said("num_channels", read.number("num_channels")), read.number("num_channels"))]
    if "num_patches" in row.defaults:  # SigLIP2 (NaFlex): positions for num_patches, resized by transformers per image
        side = int(round(read.number("num_patches") ** 0.5))
        size, said = (side * patch_side,) * 2, read.said("num_patches", side * side)
    else:
        image = vision.get("image_size", row.defaults["image_size"])
        size, said = config_lib.size_pair(image, path, where + "image_size"), read.said("image_size", image)
        expected.append(("image_size", said, size))
    if row.resampling is None:  # a rule keras_vit does not have: the model runs at the file's size only
        put("image_size", tuple(size), f"{said} ({row.fixed_size}, a rule keras_vit does not have: the model runs at "
            "that size only)")
    if row.layout in ("clip", "altclip"):
        notes.append("CLIP's patch embedding has no bias: keras_vit's (embedding/bias) is zeros")
    if model_type == "vit_mae":
        ratio = vision.get("mask_ratio", 0.75)
        notes.append(f"config.json mask_ratio={ratio!r}: the encoder runs on every patch (no masking), as ViTMAEModel with "
                     "mask_ratio=0; its class token output does not depend on the order MAE shuffles the patches into")
    names = config_lib.indexed_names(config.get("id2label"), "id2label", path) or []
    return Reading(declared=record, expected=expected, architecture=architecture, notes=notes,
                   class_names=None if not names or all(n.startswith("LABEL_") for n in names) else names,
                   position_resampling=row.resampling, layout=classifier or row.layout,
                   naflex=_siglip2_naflex(size, said, path) if "num_patches" in row.defaults else None)


def _siglip2_naflex(size, said, path):
    """The :class:`~keras_vit.weights.source.NaFlexForm` of a SigLIP 2 config whose table's grid makes ``size``
    pixels (``said``: how the config says it): transformers' SigLIP 2 NaFlex (``modeling_siglip2.py``,
    ``image_processing_siglip2.py``) as keras_vit's NaFlex model, read with ``from_pretrained(..., max_patches=N)`` or
    ``input_mode="naflex"`` (else the image model at the table's own grid, square images of ``S * P`` pixels, where
    the resampling is the identity).

    ``Siglip2VisionModel`` takes each image at its own grid: ``pixel_values`` ``(B, N, P * P * C)`` (patches flattened
    as ``(P, P, C)``), ``pixel_attention_mask`` ``(B, N)`` and ``spatial_shapes`` ``(B, 2)``. Its
    ``Siglip2VisionEmbeddings`` adds to the first ``h * w`` patches of each image the ``(S, S)`` table
    (``S = sqrt(num_patches)``) resampled to ``(h, w)`` by the weights of ``F.interpolate(mode="bilinear",
    align_corners=False, antialias=True)`` (``resize_positional_embeddings``: keras_vit's ``bilinear_torch_antialias``);
    the padding takes the first position and the mask keeps it out of every attention (the keys) and of the
    attention-pooling head's, and ``Siglip2ForImageClassification`` averages the valid tokens. Its processor gives each
    image its grid by ``get_image_size_for_max_num_patches`` (:data:`keras_vit.layers.naflex_grid.GRID_RULES`
    ``"siglip2"``) and resizes it bilinearly with antialiasing.
    """
    record = {}
    declare(record, "input_mode", "naflex", "Siglip2VisionModel (pixel_values, pixel_attention_mask, spatial_shapes: "
            "each image at its own grid)", path)
    declare(record, "grid_rule", "siglip2", "Siglip2ImageProcessor (get_image_size_for_max_num_patches)", path)
    declare(record, "image_size", tuple(size), f"{said} (the table's grid; resampled to each image's)", path)
    note = ("SigLIP 2 NaFlex: each image at its own grid (Siglip2ImageProcessor's rule, ViTConfig.grid_rule='siglip2'),"
            " the position table resampled to it bilinearly with antialiasing (resize_positional_embeddings), the "
            "padding masked")
    return NaFlexForm(declared=record, position_resampling="bilinear_torch_antialias", note=note)


def _dinov3(put, read, path):
    """DINOv3ViTModel's biases and RoPE base: query, key and value biases where any is (zeros for those
    ``*_bias=False`` leaves out: the same output), the output and MLP projections' biases where ``proj_bias`` / ``mlp_bias``."""
    query, key, value = (read.flag(name) for name in ("query_bias", "key_bias", "value_bias"))
    for name in ("proj_bias", "mlp_bias"):  # the output projection's (o_proj) and the MLP's biases: ViTConfig's switches
        flag = read.flag(name)
        put(name, flag, read.said(name, flag))
    said = ", ".join(read.said(name, flag) for name, flag in (("query_bias", query), ("key_bias", key), ("value_bias", value)))
    missing = [name for name, flag in (("query", query), ("key", key), ("value", value)) if not flag]
    biased = query or key or value  # the projections without a bias get zeros beside the others' (the same output)
    put("qkv_bias", biased, said + (f" (the {', '.join(missing)} bias: zeros)" if biased and missing else ""))
    theta = read.number("rope_theta", integer=False)
    put("rope_temperature", float(theta), read.said("rope_theta", theta))


def _mlp(put, read, row, vision, width, path, where, expected):
    """The MLP: a ratio of the width (DINOv2, TIPSv2) or ``intermediate_size``; gated with ``use_gated_mlp``
    (DINOv3ViTGatedMLP: ``act(gate_proj x) * up_proj x``), always (AIMv2) or ``use_swiglu_ffn`` (SiLU)."""
    act = vision.get("hidden_act", row.defaults["hidden_act"])
    gated = row.encoder == "aimv2" or ("use_gated_mlp" in row.defaults and read.flag("use_gated_mlp"))
    if "mlp_ratio" in row.defaults:
        ratio = read.number("mlp_ratio", integer=False)
        ratio_said = read.said("mlp_ratio", vision.get("mlp_ratio", ratio))
    swiglu = "use_swiglu_ffn" in row.defaults and read.flag("use_swiglu_ffn")
    if not swiglu and (not isinstance(act, str) or act not in ACTIVATIONS):
        raise CheckpointError(f"{path!r}: {where}hidden_act={act!r} is no activation keras_vit's MLP has "
                              f"(transformers' {', '.join(map(repr, ACTIVATIONS))}).")
    if swiglu:  # Dinov2SwiGLUFFN: weights_in (2 h, D), silu(x1) * x2, h = (int(int(D * mlp_ratio) * 2 / 3) + 7) // 8 * 8
        mlp = (int(int(width * ratio) * 2 / 3) + 7) // 8 * 8
        said = f"{ratio_said} with use_swiglu_ffn=True ((int({int(width * ratio)} * 2 / 3) + 7) // 8 * 8)"
        put("mlp_type", "glu", "use_swiglu_ffn=True")
        put("mlp_activation", "silu", "use_swiglu_ffn=True (SiLU-gated MLP)")
    else:
        if "mlp_ratio" in row.defaults:  # Dinov2MLP: int(hidden_size * mlp_ratio)
            mlp, said = int(width * ratio), f"{ratio_said} (x hidden_size {width})"
        else:
            mlp = read.number("intermediate_size")
            said = read.said("intermediate_size", mlp)
        swiglu_off = " (use_swiglu_ffn=False)" if "use_swiglu_ffn" in row.defaults else ""
        gate = "Aimv2MLP (down_proj(act(gate_proj x) * up_proj x))" if row.encoder == "aimv2" else "use_gated_mlp=True"
        put("mlp_type", "glu" if gated else "mlp", gate if gated else "no gated MLP" + swiglu_off)
        put("mlp_activation", activation(act),
            read.said("hidden_act", act) + (" (gated: act(gate_proj x) * up_proj x)" if gated else ""))
    expected.append(("mlp_dim", said, 2 * mlp if gated or swiglu else mlp))  # a gated MLP's first layer: both halves
    put("mlp_dim", mlp, said)


def _switches(put, read, row, model_type, architecture, classifier):
    """The paper's switches, each replaced by the row's (or by its config's: registers, LayerScale)."""
    switches = {field: (value, f"{model_type}: {said}") for field, (value, said) in dict(_PAPER, **row.switches).items()}
    if "num_register_tokens" in row.defaults:
        registers = read.number("num_register_tokens", zero=True)  # 0: none (a (1, 0, width) tensor)
        if registers:
            switches["num_register_tokens"] = (registers, read.said("num_register_tokens", registers))
    if "layerscale_value" in row.defaults:
        scale = read.number("layerscale_value", integer=False)
        switches["layer_scale_init"] = (scale, read.said("layerscale_value", scale))
    if classifier == "clip_classifier":  # the mean of last_hidden_state, which post_layernorm never touches
        said = f"{architecture}: no LayerNorm after the blocks (post_layernorm is not read)"
        switches["final_norm"] = switches["fc_norm"] = (False, said)
    for field, (value, said) in switches.items():
        if field != "pooling":
            put(field, value, said)


def _top(put, read, row, architecture, config, classifier):
    """Pooling and projection, as the repository's class (``architectures``) computes its output."""
    if classifier:  # SigLIP: every token (no class token), after post_layernorm; CLIP: past the class token, no norm
        put("pooling", "gap", f"architectures=[{architecture!r}]: classifier on the mean of the " + (
            "tokens after post_layernorm" if row.encoder == "siglip" else "patch tokens of last_hidden_state"))
    elif "pooling" in row.switches:
        put("pooling", row.switches["pooling"][0], f"{architecture}: {row.switches['pooling'][1]}")
    elif row.encoder == "dinov2":
        concat = architecture is not None and architecture.endswith("ForImageClassification")
        put("pooling", "token_gap_concat" if concat else "token",
            f"architectures=[{architecture!r}]: " + ("classifier on [class token; mean of the patch tokens]" if concat
                                                     else "the class token"))
    elif row.encoder == "siglip":
        head = read.flag("vision_use_head")
        put("pooling", "map" if head else None, read.said("vision_use_head", head))
    else:
        put("pooling", "token", "the class token")
    projection, which = None, row.projection.get(architecture)
    if which is not None:
        source = config if which == "top" else read.config
        defaults = row.top_defaults if which == "top" else row.defaults
        projection = config_lib.number(source, "projection_dim", defaults["projection_dim"], read.path, integer=True)
        said = f"{'' if which == 'top' else read.where}projection_dim={projection!r} ({architecture})"
    else:
        said = f"architectures=[{architecture!r}]: no projection"
    put("projection_dim", projection, said)


def normalization(reading, folder, model_type):
    """``reading`` with the input ``mean`` / ``std``: from ``preprocessor_config.json``, else the default."""
    file = os.path.join(folder, "preprocessor_config.json")
    label, (mean, std) = FAMILIES[model_type].normalization
    mean, std, said = (processor_normalization(config_lib.read_json(file), file, list(mean), list(std))
                       if os.path.isfile(file) else (mean, std, None))
    reading.notes.append(f"input normalisation from preprocessor_config.json: {said}" if said else
                         f"no image_mean / image_std in a preprocessor_config.json beside the weights: {label} mean and "
                         f"std, those of the published {model_type} checkpoints ({list(mean)}, {list(std)})")
    reading.mean, reading.std = [float(v) for v in mean], [float(v) for v in std]
    return reading
