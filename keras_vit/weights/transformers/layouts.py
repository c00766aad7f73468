"""The key tables of transformers' ViT family: their names -> the original layout, one :class:`Layout` per ``model_type``.

Each is written from its ``modeling_*.py``. ``save_pretrained`` puts ``vision_model.`` before the vision keys of
CLIP and SigLIP, except transformers 5's ``CLIPVisionModel``, ``SiglipVisionModel`` and ``Siglip2VisionModel``: its
loader reads the 4.x keys with the prefix removed (``conversion_mapping.py``'s
``PrefixChange(prefix_to_remove="vision_model")``); transformers 5.24 writes the 4.x names.
"""

import re
from typing import NamedTuple

import numpy as np

from keras_vit.errors import CheckpointError
from keras_vit.weights.conventions import (MASK as _MASK, counted, finish, joined, linear as _linear, norm as _norm, patch_linear,
                                           renamed, torch_tensors)
from keras_vit.weights.mapping import ATT, MAP_ATT, POSEMB_KEY as POSEMB


def _layer(norms, attention, mlp, scales=()):
    """An encoder layer's keys (transformers' names -> the original names under ``Transformer/encoderblock_{i}/``):
    its two norms, ``attention`` ``{nn.Linear: query|key|value|out|qkv}``, ``mlp`` ``{nn.Linear: Dense_0|Dense_1}``
    and LayerScale ``scales`` (the attention's gamma, the MLP's)."""
    return {**_norm(norms[0], "LayerNorm_0"), **_norm(norms[1], "LayerNorm_2"),
            **{k: v for name, part in attention.items() for k, v in _linear(name, f"{ATT}/{part}").items()},
            **{k: v for name, part in mlp.items() for k, v in _linear(name, f"MlpBlock_3/{part}").items()},
            **dict(zip(scales, ("LayerScale_1/gamma", "LayerScale_3/gamma")))}


_VIT_ATTENTION = {**{f"attention.attention.{n}": n for n in ("query", "key", "value")}, "attention.output.dense": "out"}
_VIT_MLP = {"intermediate.dense": "Dense_0", "output.dense": "Dense_1"}


def _proj(prefix, out="out"):
    """``{prefix}.q_proj``, ``k_proj``, ``v_proj`` and the output's ``{prefix}.{out}_proj``."""
    return {f"{prefix}.{n}_proj": part for n, part in (("q", "query"), ("k", "key"), ("v", "value"), (out, "out"))}


VIT_LAYER = _layer(("layernorm_before", "layernorm_after"), _VIT_ATTENTION, _VIT_MLP)  # ViTLayer, DeiTLayer, ViTMAELayer
DINOV2_LAYER = _layer(  # Dinov2Layer: norm1, attention, layer_scale1, norm2, mlp (Dinov2MLP or Dinov2SwiGLUFFN)...
    ("norm1", "norm2"), _VIT_ATTENTION, {"mlp.fc1": "Dense_0", "mlp.fc2": "Dense_1",
                                         # SwiGLU: (2 * hidden, D), silu(first half) * second half
                                         "mlp.weights_in": "Dense_0", "mlp.weights_out": "Dense_1"},
    ("layer_scale1.lambda1", "layer_scale2.lambda1"))
DINOV3_LAYER = _layer(  # DINOv3ViTLayer: norm1, attention (q/k/v/o_proj), layer_scale1, norm2, mlp, layer_scale2
    ("norm1", "norm2"), _proj("attention", "o"),
    # DINOv3ViTMLP's up_proj; DINOv3ViTGatedMLP: act(gate) * up, joined by _dinov3
    {"mlp.up_proj": "Dense_0", "mlp.gate_proj": "Dense_0_gate", "mlp.down_proj": "Dense_1"},
    ("layer_scale1.lambda1", "layer_scale2.lambda1"))
CLIP_LAYER = _layer(  # CLIPEncoderLayer, SiglipEncoderLayer
    ("layer_norm1", "layer_norm2"), _proj("self_attn"), {"mlp.fc1": "Dense_0", "mlp.fc2": "Dense_1"})

_VIT_TOP = {
    "embeddings.cls_token": "cls",
    "embeddings.position_embeddings": POSEMB,
    **_linear("embeddings.patch_embeddings.projection", "embedding"),
    **_norm("layernorm", "Transformer/encoder_norm"),
}
_SIGLIP_TOP = {
    **_linear("embeddings.patch_embedding", "embedding"),
    "embeddings.position_embedding.weight": POSEMB,
    **_norm("post_layernorm", "Transformer/encoder_norm"),
    "head.probe": "MAPHead_0/probe",
    "head.attention.in_proj_weight": f"{MAP_ATT}/qkv/kernel",  # split into query, key, value
    "head.attention.in_proj_bias": f"{MAP_ATT}/qkv/bias",
    **_linear("head.attention.out_proj", f"{MAP_ATT}/out"),
    **_norm("head.layernorm", "MAPHead_0/LayerNorm_0"),
    **_linear("head.mlp.fc1", "MAPHead_0/MlpBlock_0/Dense_0"),
    **_linear("head.mlp.fc2", "MAPHead_0/MlpBlock_0/Dense_1"),
}
_TEXT = "the text tower (keras_vit loads the image tower of a CLIP or SigLIP model)"
_POSITION_IDS = "a buffer of position indices 0..N-1 (no weights)"
# the prefix of the vision model's keys -> the classes whose save_pretrained writes it (the load report says which)
_TOWER = {
    "vision_model.": "the vision tower under 'vision_model.' (transformers 4.x, and the CLIPModel, SiglipModel, "
                     "CLIPVisionModelWithProjection and *ForImageClassification of transformers 4.x and 5)",
    "": "the keys without the 'vision_model.' prefix of transformers 5's CLIPVisionModel, SiglipVisionModel and "
        "Siglip2VisionModel",
}


class Layout(NamedTuple):
    """One ``model_type``'s keys: ``prefixes`` (``{prefix of the vision model's keys: the classes that write it, or
    None}``, ``""`` for none; one per file); ``layer`` (the regex of encoder layer keys after the prefix, group 1
    the index, group 2 the name in ``layer_keys``); ``top`` the vision model's keys outside the layers (after the
    prefix -> original key); ``whole`` the keys outside the vision model (a classifier, CLIP's
    ``visual_projection.weight``); ``skipped`` (regex on the whole key -> reason; a named group ``group`` is the
    prefix its keys are reported under, ``text_model.*``); ``zeros`` (original keys the layout has none of, zeros
    of the width: CLIP's patch embedding has no bias); ``bare``: the vision model's keys may also come without the
    prefix (``ViTModel``'s keys beside ``ViTForImageClassification``'s ``vit.``; transformers 5's
    ViTMSNForImageClassification writes its encoder layers so: the Hub checkpoints' names, which its
    ``conversion_mapping.py`` renames ``encoder.`` -> ``vit.encoder.`` on load and back on save)."""

    prefixes: dict
    layer: str
    layer_keys: dict
    top: dict
    skipped: dict
    whole: dict
    zeros: tuple = ()
    bare: bool = False
    hook: object = None  # out -> out, after the renaming: parts joined or added (DINOv3's gated MLP, its key bias)


def _dinov3(out):
    """DINOv3ViTGatedMLP's ``gate_proj`` joined before ``up_proj`` (``[gate; up]``: keras_vit's GLU computes
    ``act(first half) * second half``), and the zero key bias of an attention whose ``k_proj`` has none
    (``key_bias=False`` beside query and value biases), or of any other projection without one beside those with."""
    for name in [k for k in out if "/Dense_0_gate/" in k]:
        target = name.replace("Dense_0_gate", "Dense_0")
        out[target] = joined([out.pop(name), out[target]], axis=-1)
    for name in [k for k in out if k.endswith((f"{ATT}/query/bias", f"{ATT}/key/bias", f"{ATT}/value/bias"))]:
        for part in ("query", "key", "value"):  # a projection without a bias: zeros beside the others' (the same scores)
            out.setdefault(name.rsplit("/", 2)[0] + f"/{part}/bias", np.zeros(out[name].shape, np.float32))
    return out


_CLASSIFIER = _linear("classifier", "head")


def _encoder(model, layer_keys, top, whole=_CLASSIFIER, skipped=(), mask=True, bare=False):
    """A ViT-like ``model_type``'s layout: the vision keys under ``{model}.`` or none, the layers
    ``encoder.layer.N``, the ``mask`` token and ``skipped`` (``{regex: reason}``) left out."""
    mask = {rf"^({model}\.)?embeddings\.mask_token$": _MASK} if mask else {}
    return Layout({f"{model}.": None, "": None}, r"^encoder\.layer\.(\d+)\.(.+)$", layer_keys, top,
                  {**mask, **dict(skipped)}, whole, bare=bare)


LAYOUTS = {
    "vit": _encoder("vit", VIT_LAYER, {**_VIT_TOP, **_linear("pooler.dense", "pre_logits")}, bare=True),
    "dinov2": _encoder("dinov2", DINOV2_LAYER, _VIT_TOP),
    "dinov2_with_registers": _encoder("dinov2_with_registers", DINOV2_LAYER,
                                      {**_VIT_TOP, "embeddings.register_tokens": "reg"}),
    "deit": _encoder(
        "deit", VIT_LAYER, {**_VIT_TOP, "embeddings.distillation_token": "dist"},
        {**_linear("cls_classifier", "head"), **_linear("distillation_classifier", "head_dist")},
        {r"^(deit\.)?pooler\.dense\.": "DeiTModel's pooler (dense + tanh on the class token), which DeiT's classifiers do "
                                      "not read: the model returns the mean of the class and distillation tokens"}),
    "vit_mae": _encoder("vit", VIT_LAYER, _VIT_TOP, {}, mask=False, skipped={
        r"^(?P<group>decoder\.)": "MAE's pixel decoder (pre-training only; keras_vit loads the encoder, without masking)"}),
    # ViT-MSN: ViTMSNModel's keys bare, ViTMSNForImageClassification's under vit. (its classifier reads the class token)
    "vit_msn": _encoder("vit", VIT_LAYER, _VIT_TOP, bare=True),
    # I-JEPA: no class token; IJepaModel's keys bare, IJepaForImageClassification's under ijepa.
    "ijepa": _encoder("ijepa", VIT_LAYER, {k: v for k, v in _VIT_TOP.items() if v != "cls"}),
    "dinov3_vit": Layout(
        {"": None}, r"^layer\.(\d+)\.(.+)$", DINOV3_LAYER,
        {"embeddings.cls_token": "cls", "embeddings.register_tokens": "reg",
         **_linear("embeddings.patch_embeddings", "embedding"), **_norm("norm", "Transformer/encoder_norm")},
        {r"^embeddings\.mask_token$": _MASK}, {}, hook=_dinov3),
    "clip": Layout(
        _TOWER, r"^encoder\.layers\.(\d+)\.(.+)$", CLIP_LAYER,
        {"embeddings.class_embedding": "cls", "embeddings.patch_embedding.weight": "embedding/kernel",
         "embeddings.position_embedding.weight": POSEMB, **_norm("pre_layrnorm", "Transformer/pre_norm"),
         **_norm("post_layernorm", "fc_norm")},
        {r"^(?P<group>text_model\.)|^text_projection\.|^logit_scale$": _TEXT,
         r"^(vision_model\.)?embeddings\.position_ids$": _POSITION_IDS},
        {"visual_projection.weight": "projection/kernel"}, zeros=("embedding/bias",)),
    "siglip": Layout(
        _TOWER, r"^encoder\.layers\.(\d+)\.(.+)$", CLIP_LAYER, _SIGLIP_TOP,
        {r"^(?P<group>text_model\.)|^logit_scale$|^logit_bias$": _TEXT,
         r"^(vision_model\.)?embeddings\.position_ids$": _POSITION_IDS}, {}),
}
LAYOUTS["siglip2"] = LAYOUTS["siglip"]  # the NaFlex patch embedding is an nn.Linear: see to_original
# AltCLIP: CLIP's vision tower; transformers 5's AltCLIPModel writes encoder.layer.N (its text tower's renaming
# "layer." -> "layers." undone on save, conversion_mapping.py), 4.x and AltCLIPVisionModel encoder.layers.N
LAYOUTS["altclip"] = LAYOUTS["clip"]._replace(layer=r"^encoder\.layers?\.(\d+)\.(.+)$")
# TIPSv2: the original (timm-like) names, which transformers 5's save_pretrained writes back (conversion_mapping.py's
# Tipsv2VisionModel renamings undone): bare in Tipsv2VisionModel, under vision_encoder. in Tipsv2Model
TIPSV2_LAYER = _layer(  # attn.qkv: [query; key; value] (3D, D), split in three; SwiGLU mlp.w12: (2 * hidden, D)
    ("norm1", "norm2"), {"attn.qkv": "qkv", "attn.proj": "out"},
    {"mlp.c_fc": "Dense_0", "mlp.c_proj": "Dense_1", "mlp.w12": "Dense_0", "mlp.w3": "Dense_1"},
    ("ls1.gamma", "ls2.gamma"))
LAYOUTS["tipsv2"] = Layout(
    {"vision_encoder.": "the vision tower of Tipsv2Model under 'vision_encoder.'",
     "": "Tipsv2VisionModel's keys (TIPSv2's original names, without a prefix)"},
    r"^blocks\.(\d+)\.(.+)$", TIPSV2_LAYER,
    {"cls_token": "cls", "register_tokens": "reg", "pos_embed": POSEMB, **_linear("patch_embed.proj", "embedding"),
     **_norm("norm", "Transformer/encoder_norm")},
    {r"^(vision_encoder\.)?mask_token$": _MASK,
     r"^(?P<group>text_encoder\.)|^temperature$": "the text tower (keras_vit loads the image tower of a TIPSv2 model)"},
    {})
# AIMv2 (Aimv2VisionModel): RMSNorms (a scale each), the gated MLP joined [gate; up] as DINOv3's (_dinov3)
AIMV2_LAYER = _layer(("rms_norm1", "rms_norm2"), _proj("attention"),
                     {"ffn.gate_proj": "Dense_0_gate", "ffn.up_proj": "Dense_0", "ffn.down_proj": "Dense_1"})
LAYOUTS["aimv2"] = Layout(
    {"": None}, r"^encoder\.layers\.(\d+)\.(.+)$", AIMV2_LAYER,
    {**_linear("embeddings.patch_embed", "embedding"), **_norm("embeddings.rms_norm", "embedding_norm"),
     "embeddings.position_embedding.weight": POSEMB, **_norm("rms_norm", "Transformer/encoder_norm")},
    {r"^embeddings\.position_ids$": _POSITION_IDS}, {}, hook=_dinov3)
# the *ForImageClassification classes: a classifier on the mean of the tokens; what their vision model computes
# besides (SigLIP's attention-pooling head, CLIP's post_layernorm of the class token) is not read
for _name, _cls in (("siglip", "SiglipForImageClassification"), ("siglip2", "Siglip2ForImageClassification")):
    LAYOUTS[f"{_name}_classifier"] = LAYOUTS["siglip"]._replace(whole=_CLASSIFIER, skipped={
        **LAYOUTS["siglip"].skipped, r"^(?P<group>(vision_model\.)?head\.)": f"the attention-pooling head of the vision "
        f"model, which {_cls} computes but does not read (its classifier reads the mean of the tokens)"})
LAYOUTS["clip_classifier"] = LAYOUTS["clip"]._replace(
    skipped={**LAYOUTS["clip"].skipped,
             r"^(?P<group>(vision_model\.)?post_layernorm\.)": "the vision model's post_layernorm, which normalises "
             "the class token of its pooler_output: CLIPForImageClassification (MetaClip2ForImageClassification) averages the patch tokens of "
             "last_hidden_state, which it does not normalise"},
    whole=_CLASSIFIER)
# what marks a state dict as one of the family's: its patch embedding, under one of its layout's prefixes
# (not timm's own name, which a bare TIPSv2 file shares: that one is claimed by its config.json's model_type)
MARKERS = tuple(sorted({prefix + key for layout in LAYOUTS.values() for prefix in layout.prefixes
                        for key, name in layout.top.items() if name == "embedding/kernel"} - {"patch_embed.proj.weight"}))


def matches(keys):
    """Whether a state dict holds one of the family's vision models (a patch embedding under a known name).

    Example:
    >>> matches(["dinov2.embeddings.patch_embeddings.projection.weight"]), matches(["patch_embed.proj.weight"])
    (True, False)
    """
    return any(key in MARKERS for key in keys)


def prefix_of(keys, layout):
    """The prefix of a file's vision keys: the first of ``layout.prefixes`` its patch embedding is found under
    (else the first that any key has: the missing patch embedding is refused later, by name).

    Example:
    >>> prefix_of(["embeddings.patch_embedding.weight", "head.probe"], LAYOUTS["siglip"])
    ''
    >>> prefix_of(["vision_model.embeddings.patch_embedding.weight"], LAYOUTS["siglip"])
    'vision_model.'
    """
    marker = next(key for key, name in layout.top.items() if name == "embedding/kernel")
    keys = set(keys)
    found = [prefix for prefix in layout.prefixes if prefix + marker in keys]
    return (found or [p for p in layout.prefixes if any(k.startswith(p) for k in keys)] or [""])[0]


def to_original(tensors, path, layout_name, notes=None):
    """``(arrays, skipped)``: a family state dict in the original layout, and ``{what: reason}`` of the keys left out.

    ``notes`` (a list), when given, gets which of the layout's prefixes the file's keys have, where it says.

    Example:
    >>> arrays = {"vision_model.embeddings.class_embedding": np.zeros(8), "text_model.x.weight": np.zeros((2, 2)),
    ...           "vision_model.embeddings.patch_embedding.weight": np.zeros((8, 3, 4, 4))}
    >>> out, skipped = to_original(arrays, "clip", "clip")
    >>> out["cls"].shape, out["embedding/bias"].shape, list(skipped)
    ((1, 1, 8), (8,), ['text_model.* (1 tensor)'])
    """
    layout = LAYOUTS[layout_name]
    layer = re.compile(layout.layer)
    prefix = prefix_of(tensors, layout)
    if notes is not None and layout.prefixes[prefix]:
        notes.append(f"transformers layout: {layout.prefixes[prefix]}")

    def rename(key):
        short = key[len(prefix):] if key.startswith(prefix) else (key if layout.bare else None)
        match = layer.match(short) if short is not None else None
        block = match and layout.layer_keys.get(match[2])
        return layout.whole.get(key) or layout.top.get(short) or (block and f"Transformer/encoderblock_{match[1]}/{block}")

    names, skipped, unknown = renamed(tensors, rename, layout.skipped)
    out, origin = {}, {}
    for key, name in names.items():
        array = tensors[key]
        if name == "embedding/kernel" and array.ndim == 2:  # SigLIP2's nn.Linear over patches (convert_image_to_patches)
            array = patch_linear(key, array, path)
        for part, value in torch_tensors(key, name, array, path).items():
            if part in origin:
                first, second = sorted((origin[part], key))
                raise CheckpointError(f"Checkpoint {path!r}: keys {first!r} and {second!r} are both {part!r}; keep one.")
            out[part], origin[part] = value, key
    if layout.hook is not None:
        out = layout.hook(out)
    if "embedding/kernel" in out:
        for name in layout.zeros:
            out.setdefault(name, np.zeros(out["embedding/kernel"].shape[-1], np.float32))
    out = finish(out, unknown, path, f"transformers {layout_name}, " + (f"{prefix!r}-prefixed" if prefix else "unprefixed"))
    return out, counted(skipped)
