"""keras-hub's ViT-family backbones (DINOv2, SigLIP's and CLIP's image towers): what ``config.json`` declares and
where each weight lies in ``model.weights.h5``, as data (no file is read here: :mod:`keras_vit.weights.keras_hub`
reads them).

Written from keras-hub's ``keras_hub/src/models/dinov2/`` (``DINOV2Backbone``, ``dinov2_layers.py``), ``deit/``,
``siglip/`` (``SigLIPBackbone``, ``SigLIPVisionEncoder``, ``siglip_layers.py``) and ``clip/`` (``CLIPBackbone``,
``CLIPVisionEncoder``, ``clip_layers.py``), with the variable paths Keras 3's ``save_weights`` gives those layers
(the rules in :mod:`keras_vit.weights.keras_hub_layout`; checked against keras-hub 0.32's own ``save_to_preset``
by ``benchmarks/keras_hub_presets.py``):

* ``DINOV2Backbone``: the class token, LayerScale on both branches, an exact-GELU MLP or SwiGLU
  (``use_swiglu_ffn``: ``weights_in`` ``(D, 2 h)``, ``h = (int(intermediate_dim * 2 / 3) + 7) // 8 * 8``),
  ``num_register_tokens`` after the class token without positions, every LayerNorm ``epsilon=1e-6``, and two
  position tables: ``position_embeddings`` for ``position_embedding_shape`` (what keras-hub keeps) and the one
  it computes from it for ``image_shape`` with ``keras.ops.image.resize`` bicubic (``antialias_in_interpolation``),
  recomputed on every load. keras_vit resamples ``position_embeddings`` to ``image_shape`` by the same rule
  (``"bicubic_tf"``, or ``"bicubic_torch_antialias"`` with antialiasing: :mod:`keras_vit.layers.resampling`), which
  becomes the model's ``position_resampling``. The backbone returns every token after the final norm.
* ``SigLIPBackbone``: its ``vision_encoder`` (no class token, ``intermediate_activation`` ``"gelu_approximate"``
  = keras_vit's ``gelu_tanh``, ``layer_norm_epsilon`` in the blocks and the pooling head, ``post_layer_norm``
  fixed at 1e-6, the attention-pooling head: keras_vit's ``pooling="map"``); the text tower and the
  ``SigLIPHead``'s logit scale and bias are skipped and reported.

SigLIP's and CLIP's position embeddings are a Keras ``Embedding`` read at the indices their ``position_ids``
variable holds (``0..N-1`` in a converted preset; zeros in a CLIP keras-hub built and saved without converting
one): the table is gathered by the stored indices, so keras_vit computes what keras-hub does with either.
* ``DeiTBackbone`` (``deit/``: ``DeiTEmbeddings``, ``DeiTEncoder``): class and distillation tokens, both with
  position embeddings (one ``(1, N + 2, D)`` table), exact GELU, ``layer_norm_epsilon`` everywhere, ``use_mha_bias``
  (False: no attention biases at all), every token after the final norm; keras_vit's DeiT (``distillation_token``)
  returns the mean of the two tokens. A ``DeiTImageClassifier``'s head is left out (:func:`task_reason`).
* ``CLIPBackbone``: its ``vision_encoder`` (``pre_layer_norm``, quick GELU, every LayerNorm ``epsilon=1e-5``, a
  patch embedding without bias: zeros stand in) with ``vision_pooler`` (the class token after ``layer_norm``:
  keras_vit's ``fc_norm``) and the bias-free ``vision_projection`` (``projection_dim``); the text tower,
  ``text_projection`` and the ``CLIPHead``'s logit scale are skipped and reported.
"""

import re

import numpy as np

from keras_vit.errors import CheckpointError
from keras_vit.weights import config as config_lib
from keras_vit.weights.declared import activation, declare
from keras_vit.weights.mapping import POSEMB_KEY
from keras_vit.weights.posemb import resize_position_embedding
from keras_vit.weights.conventions import CLIP_MEAN_STD, HALF, IMAGENET

DINOV2, SIGLIP, CLIP, DEIT = "DINOV2Backbone", "SigLIPBackbone", "CLIPBackbone", "DeiTBackbone"
BACKBONES = (DINOV2, SIGLIP, CLIP, DEIT)
IMAGE_CONVERTERS = {DINOV2: "DINOV2ImageConverter", SIGLIP: "SigLIPImageConverter", CLIP: "CLIPImageConverter",
                    DEIT: "DeiTImageConverter"}
TASKS = {DEIT: "DeiTImageClassifier"}  # a task.json beside the backbone: its head is read by task_reason
# the input scaling of keras-hub's published presets (their image_converter.json), for a folder without one
DEFAULT_NORMALIZATION = {DINOV2: ("ImageNet", IMAGENET), SIGLIP: ("0.5 / 0.5", HALF), CLIP: ("OpenAI CLIP", CLIP_MEAN_STD),
                         DEIT: ("ImageNet", IMAGENET)}
_ATT = "MultiHeadDotProductAttention_1"
_MAP_ATT = "MAPHead_0/MultiHeadDotProductAttention_0"
POSITION_IDS = "position_ids"  # the Embedding's indices: the table is gathered by them, as keras-hub does
_TEXT = "the text tower (keras_vit loads the image tower of a keras-hub {} preset)"


def _mha(group, key, bias=True):
    """Keras ``MultiHeadAttention``'s four ``EinsumDense`` (kernels ``(D, heads, hd)``, ``(heads, hd, D)``; biases
    unless ``use_bias=False``)."""
    return {f"{group}/{dense}_dense/vars/{i}": f"{key}/{part}/{kind}"
            for dense, part in (("query", "query"), ("key", "key"), ("value", "value"), ("output", "out"))
            for i, kind in enumerate(("kernel", "bias") if bias else ("kernel",))}


def _pair(group, key, names=("scale", "bias")):
    return {f"{group}/vars/{i}": f"{key}/{name}" for i, name in enumerate(names)}


def _block(prefix, i):
    """Keras names the i-th layer of a list by its class in snake case, ``_1``, ``_2``... after the first."""
    return prefix + (f"_{i}" if i else "")


class _Reader:
    """The fields of one keras-hub object's ``config``, typed, each quoted as the file writes it."""

    def __init__(self, config, path, where):
        self.config, self.path, self.where = config, path, where

    def said(self, field, value):
        return f"{self.where}{field}={value!r}" if field in self.config else f"{self.where}{field} absent (keras-hub's default {value!r})"

    def number(self, field, default=None, integer=True):
        value = config_lib.number(self.config, field, default, self.path, integer=integer)
        if value is None:
            raise CheckpointError(f"{self.path!r}: {self.where}{field} is missing; a keras-hub backbone's config names it.")
        return value

    def flag(self, field, default):
        value = self.config.get(field, default)
        if not isinstance(value, bool):
            raise CheckpointError(f"{self.path!r}: {self.where}{field}={value!r}, expected true or false.")
        return value

    def shape(self, field, default=None):
        shape = self.config.get(field, default)
        if (not isinstance(shape, (list, tuple)) or len(shape) not in (2, 3)
                or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in shape)):
            raise CheckpointError(f"{self.path!r}: {self.where}{field}={shape!r}, expected [height, width, channels].")
        return tuple(shape)


def settings(class_name, config, path):
    """What a family backbone's ``config.json`` declares, and where its weights lie (see the module docstring).

    Returns the dict :func:`keras_vit.weights.keras_hub.settings` returns for a ViT preset, with ``table``
    (``{h5 dataset: canonical key}``), ``skip`` (``{regex on a dataset: reason}``), ``named`` (``{group path:
    layer name}`` of groups found by the name Keras stored), ``zeros`` (canonical keys with no weights, zeros
    of the width), ``position`` (``(table grid, image grid, method, what config.json says of the table)`` when keras-hub
    resamples the table).

    Example:
    >>> found = settings("DINOV2Backbone", {"patch_size": 8, "num_layers": 1, "hidden_dim": 16, "num_heads": 2,
    ...     "intermediate_dim": 32, "num_register_tokens": 4, "image_shape": [32, 32, 3],
    ...     "position_embedding_shape": [32, 32, 3]}, "config.json")
    >>> [(f, found["declared"][f].value) for f in ("num_register_tokens", "layer_scale_init", "mlp_activation")]
    [('num_register_tokens', 4), ('layer_scale_init', 1.0), ('mlp_activation', 'gelu')]
    >>> found["table"]["layers/dinov2_embedding/vars/2"], found["position_resampling"]
    ('reg', 'bicubic_tf')
    """
    if config.get("data_format", "channels_last") not in (None, "channels_last"):
        raise CheckpointError(f"{path!r}: config.data_format={config.get('data_format')!r}; keras_vit models take channels_last images.")
    if class_name == DINOV2:
        return _dinov2(_Reader(config, path, "config."))
    if class_name == DEIT:
        return _deit(_Reader(config, path, "config."))
    where = "config.vision_encoder.config."
    vision = config_lib.json_object(config.get("vision_encoder"), path, "config.vision_encoder")
    reader = _Reader(config_lib.json_object(vision.get("config"), path, "config.vision_encoder.config"), path, where)
    expected = {SIGLIP: "SigLIPVisionEncoder", CLIP: "CLIPVisionEncoder"}[class_name]
    if vision.get("class_name") != expected:
        raise CheckpointError(f"{path!r}: config.vision_encoder is a {vision.get('class_name')!r}; a {class_name} has a {expected}.")
    if reader.config.get("data_format", "channels_last") not in (None, "channels_last"):
        raise CheckpointError(f"{path!r}: {where}data_format={reader.config.get('data_format')!r}; keras_vit models take channels_last images.")
    return _siglip(reader) if class_name == SIGLIP else _clip(reader, config)


def _common(read, class_name, epsilon, epsilon_said, act, act_said, mlp_dim, mlp_said, bias=(True, None)):
    """The record, the sizes to check against the weights and the blocks' tables every family shares (``bias``:
    whether the attention has biases, and where the config says so)."""
    record, path = {}, read.path
    declare(record, "qkv_bias", bias[0], bias[1] or f"{class_name}'s attention (biases)", path)
    width, depth, heads = read.number("hidden_dim"), read.number("num_layers"), read.number("num_heads")
    patch = config_lib.size_pair(read.config.get("patch_size"), path, read.where + "patch_size")
    image = read.shape("image_shape")
    for field, value, said in (("hidden_size", width, read.said("hidden_dim", width)), ("num_layers", depth, read.said("num_layers", depth)),
                               ("num_heads", heads, read.said("num_heads", heads)), ("layer_norm_epsilon", epsilon, epsilon_said),
                               ("mlp_activation", act, act_said), ("mlp_dim", mlp_dim, mlp_said), ("qkv_bias", True, f"{class_name}'s attention (biases)")):
        declare(record, field, value, said, path)
    if width % heads:
        raise CheckpointError(f"{path!r}: {read.where}num_heads={heads} does not divide {read.where}hidden_dim={width}.")
    expected = [("hidden_size", read.said("hidden_dim", width), width), ("num_layers", read.said("num_layers", depth), depth),
                ("patch_size", read.said("patch_size", read.config.get("patch_size")), patch),
                ("num_channels", f"{read.where}image_shape={list(image)!r}", image[-1] if len(image) == 3 else 3)]
    return {"declared": record, "expected": expected, "num_layers": depth, "num_heads": heads, "notes": [],
            "task": None, "class_names": None, "architecture": class_name, "mean": None, "std": None,
            "flags": {"use_mha_bias": bias[0]}, "family": class_name, "table": {}, "skip": {}, "named": {}, "zeros": {},
            "position": None, "position_resampling": None, "image_size": (image[0], image[1]), "width": width}


def _switches(found, path, **values):
    for field, (value, said) in values.items():
        declare(found["declared"], field, value, said, path)


def _dinov2(read):
    path = read.path
    inner = read.number("intermediate_dim")
    glu = read.flag("use_swiglu_ffn", False)
    if glu:  # DINOV2SwiGLUFFN: weights_in (D, 2 h), silu(x1) * x2
        mlp = (int(inner * 2 / 3) + 7) // 8 * 8
        act, act_said = "silu", "config.use_swiglu_ffn=True (SiLU-gated MLP)"
        mlp_said = f"{read.said('intermediate_dim', inner)} with use_swiglu_ffn=True ((int({inner} * 2 / 3) + 7) // 8 * 8 = {mlp})"
    else:
        mlp, act, act_said, mlp_said = inner, "gelu", "DINOV2MLP's activation='gelu' (exact)", read.said("intermediate_dim", inner)
    found = _common(read, DINOV2, 1e-6, "DINOV2Backbone's LayerNormalization(epsilon=1e-6)", act, act_said, mlp, mlp_said)
    registers = read.number("num_register_tokens", 0) if read.config.get("num_register_tokens", 0) != 0 else 0
    scale = read.number("layer_scale_init_value", 1.0, integer=False)
    masked = read.flag("use_mask_token", True)
    antialias = read.flag("antialias_in_interpolation", False)
    table_shape = read.shape("position_embedding_shape", (518, 518, 3))
    patch = found["expected"][2][2]
    _switches(found, path, class_token=(True, "DINOV2Backbone: a class token"), distillation_token=(False, "DINOV2Backbone: no distillation token"),
              num_register_tokens=(registers, read.said("num_register_tokens", registers)),
              prefix_positions=(True, "DINOV2Backbone: the class token has a position embedding"),
              layer_scale_init=(scale, read.said("layer_scale_init_value", scale)),
              mlp_type=("glu" if glu else "mlp", read.said("use_swiglu_ffn", glu)), pre_norm=(False, "DINOV2Backbone: no norm before the blocks"),
              final_norm=(True, "DINOV2Backbone: layernorm after the blocks"), fc_norm=(False, "DINOV2Backbone: no norm after pooling"),
              projection_dim=(None, "DINOV2Backbone: no projection"), pooling=("token", "DINOV2Backbone: the class token of its output"))
    method = "bicubic_torch_antialias" if antialias else "bicubic_tf"
    found["position_resampling"] = method
    grids = [(size[0] // patch[0], size[1] // patch[1]) for size in (table_shape, found["image_size"])]
    table_said = read.said("position_embedding_shape", list(table_shape))
    found["expected"] += [("mlp_dim", mlp_said, 2 * mlp if glu else mlp), ("class_token", "DINOV2Backbone: a class token", True),
                          ("image_size", table_said, table_shape[:2]) if grids[0] == grids[1] else
                          ("image_size", read.said("image_shape", list(found["image_size"])), found["image_size"])]
    if grids[0] != grids[1]:  # the weights' table is checked against position_embedding_shape before it is resampled
        found["position"] = (grids[0], grids[1], method, table_said)
        found["notes"].append(
            f"position_embeddings for {read.said('position_embedding_shape', list(table_shape))} ({grids[0][0]} x {grids[0][1]} patches) "
            f"resampled to config.image_shape's {grids[1][0]} x {grids[1][1]} as keras-hub does on load (keras.ops.image.resize "
            f"bicubic, antialias={antialias}: position_resampling={method!r})")
    embed = "layers/dinov2_embedding"
    index = iter(range(5))
    table = {f"{embed}/vars/{next(index)}": "cls"}
    skip = {}
    if masked:
        skip[f"^{embed}/vars/{next(index)}$"] = "the mask token of masked-image modelling (unused at inference)"
    if registers:
        table[f"{embed}/vars/{next(index)}"] = "reg"
    skip[f"^{embed}/vars/{next(index)}$"] = ("interpolated_position_embeddings, which keras-hub recomputes from "
                                              "position_embeddings on load (keras_vit too)")
    table[f"{embed}/vars/{next(index)}"] = POSEMB_KEY
    table.update({f"{embed}/patch_embeddings/projection/vars/{i}": f"embedding/{k}" for i, k in enumerate(("kernel", "bias"))})
    table.update(_pair("layers/layer_normalization", "Transformer/encoder_norm"))
    for i in range(found["num_layers"]):
        block, key = _block("layers/dinov2_encoder/layers/dinov2_layer", i), f"Transformer/encoderblock_{i}"
        table.update({**_pair(f"{block}/norm1", f"{key}/LayerNorm_0"), **_pair(f"{block}/norm2", f"{key}/LayerNorm_2"),
                      **_mha(f"{block}/attention/attention", f"{key}/{_ATT}"),
                      f"{block}/layer_scale1/vars/0": f"{key}/LayerScale_1/gamma", f"{block}/layer_scale2/vars/0": f"{key}/LayerScale_3/gamma",
                      **_pair(f"{block}/mlp/{'weights_in' if glu else 'fc1'}", f"{key}/MlpBlock_3/Dense_0", ("kernel", "bias")),
                      **_pair(f"{block}/mlp/{'weights_out' if glu else 'fc2'}", f"{key}/MlpBlock_3/Dense_1", ("kernel", "bias"))})
    found.update(table=table, skip=skip)
    return found


def _siglip(read):
    epsilon = read.number("layer_norm_epsilon", 1e-6, integer=False)
    if abs(epsilon - 1e-6) > 1e-9:
        raise CheckpointError(
            f"{read.path!r}: {read.where}layer_norm_epsilon={epsilon!r}: keras-hub's SigLIPVisionEncoder keeps 1e-6 in its "
            "post_layer_norm and uses this one in the blocks and the pooling head; keras_vit has one epsilon for every "
            "LayerNorm, so this preset would compute something else."
        )
    name = read.config.get("intermediate_activation", "gelu_approximate")
    act = "gelu_tanh" if name == "gelu_approximate" else activation(name)
    inner = read.number("intermediate_dim")
    found = _common(read, SIGLIP, epsilon, read.said("layer_norm_epsilon", epsilon), act,
                    read.said("intermediate_activation", name), inner, read.said("intermediate_dim", inner))
    path = read.path
    _switches(found, path, class_token=(False, "SigLIPVisionEncoder: no class token"),
              distillation_token=(False, "SigLIPVisionEncoder: no distillation token"),
              num_register_tokens=(0, "SigLIPVisionEncoder: no register tokens"), prefix_positions=(True, "SigLIPVisionEncoder: no prefix tokens"),
              layer_scale_init=(None, "SigLIPVisionEncoder: no LayerScale"), mlp_type=("mlp", "SigLIPMLP"),
              pre_norm=(False, "SigLIPVisionEncoder: no norm before the blocks"), final_norm=(True, "SigLIPVisionEncoder: post_layer_norm"),
              fc_norm=(False, "SigLIPVisionEncoder: no norm after pooling"), projection_dim=(None, "SigLIPVisionEncoder: no projection"),
              pooling=("map", "SigLIPVisionEncoder's head (SigLIPMultiHeadAttentionPooling)"))
    found["expected"] += [("mlp_dim", read.said("intermediate_dim", inner), inner), ("class_token", "SigLIPVisionEncoder: no class token", False),
                          ("image_size", read.said("image_shape", list(read.shape("image_shape"))), found["image_size"])]
    found["position_resampling"] = "bicubic_torch"  # keras-hub's SigLIP has a fixed size; transformers' rule for another
    vision = "layers/sig_lip_vision_encoder/layers"
    embed, head = f"{vision}/sig_lip_vision_embedding", f"{vision}/sig_lip_multi_head_attention_pooling"
    table = {f"{embed}/patch_embedding/vars/0": "embedding/kernel", f"{embed}/patch_embedding/vars/1": "embedding/bias",
             f"{embed}/position_embedding/vars/0": POSEMB_KEY, **_pair(f"{vision}/layer_normalization", "Transformer/encoder_norm"),
             f"{head}/vars/0": "MAPHead_0/probe", **_mha(f"{head}/attention", _MAP_ATT),
             **_pair(f"{head}/layer_norm", "MAPHead_0/LayerNorm_0"),
             **_pair(f"{head}/mlp/fc1", "MAPHead_0/MlpBlock_0/Dense_0", ("kernel", "bias")),
             **_pair(f"{head}/mlp/fc2", "MAPHead_0/MlpBlock_0/Dense_1", ("kernel", "bias"))}
    for i in range(found["num_layers"]):
        block, key = _block(f"{vision}/sig_lip_encoder_layer", i), f"Transformer/encoderblock_{i}"
        table.update({**_pair(f"{block}/layer_norm1", f"{key}/LayerNorm_0"), **_pair(f"{block}/layer_norm2", f"{key}/LayerNorm_2"),
                      **_mha(f"{block}/self_attn", f"{key}/{_ATT}"),
                      **_pair(f"{block}/mlp/fc1", f"{key}/MlpBlock_3/Dense_0", ("kernel", "bias")),
                      **_pair(f"{block}/mlp/fc2", f"{key}/MlpBlock_3/Dense_1", ("kernel", "bias"))})
    table[f"{embed}/vars/0"] = POSITION_IDS
    found.update(table=table, skip={
        "^layers/sig_lip_text_encoder/": _TEXT.format("SigLIP"),
        "^layers/sig_lip_head/": "SigLIPHead's logit_scale and logit_bias (image-text similarity)"})
    return found


def _clip(read, config):
    name = read.config.get("intermediate_activation", "quick_gelu")
    inner = read.number("intermediate_dim")
    found = _common(read, CLIP, 1e-5, "CLIPVisionEncoder's LayerNormalization(epsilon=1e-5)", activation(name),
                    read.said("intermediate_activation", name), inner, read.said("intermediate_dim", inner))
    projection = config_lib.number(config, "projection_dim", None, read.path, integer=True)
    if projection is None:
        raise CheckpointError(f"{read.path!r}: config.projection_dim is missing; a CLIPBackbone's config names it.")
    _switches(found, read.path, class_token=(True, "CLIPVisionEmbedding: a class token"),
              distillation_token=(False, "CLIPVisionEncoder: no distillation token"),
              num_register_tokens=(0, "CLIPVisionEncoder: no register tokens"),
              prefix_positions=(True, "CLIPVisionEmbedding: the class token has a position embedding"),
              layer_scale_init=(None, "CLIPVisionEncoder: no LayerScale"), mlp_type=("mlp", "CLIPEncoderLayer's dense_1, dense_2"),
              pre_norm=(True, "CLIPVisionEncoder: pre_layer_norm"), final_norm=(False, "CLIPVisionEncoder: layer_norm read on the class token"),
              fc_norm=(True, "CLIPVisionEncoder: layer_norm read on the class token (CLIPVisionPooler)"),
              projection_dim=(projection, f"config.projection_dim={projection!r} (vision_projection)"),
              pooling=("token", "CLIPVisionPooler: the class token"))
    found["expected"] += [("mlp_dim", read.said("intermediate_dim", inner), inner), ("class_token", "CLIPVisionEmbedding: a class token", True),
                          ("image_size", read.said("image_shape", list(read.shape("image_shape"))), found["image_size"])]
    found["position_resampling"] = "bicubic_torch"  # keras-hub's CLIP has a fixed size; transformers' rule for another
    found["notes"].append("CLIP's patch embedding has no bias: keras_vit's (embedding/bias) is zeros")
    if read.config.get("intermediate_output_index") is not None:
        found["notes"].append(f"{read.said('intermediate_output_index', read.config['intermediate_output_index'])}: that extra "
                              "output is not built (the image embedding is)")
    vision = "layers/clip_vision_encoder/layers"
    embed = f"{vision}/clip_vision_embedding"
    table = {f"{embed}/vars/0": "cls", f"{embed}/vars/1": POSITION_IDS, f"{embed}/patch_embedding/vars/0": "embedding/kernel",
             f"{embed}/position_embedding/vars/0": POSEMB_KEY, **_pair(f"{vision}/layer_normalization", "Transformer/pre_norm"),
             **_pair(f"{vision}/layer_normalization_1", "fc_norm"), "layers/dense/vars/0": "projection/kernel"}
    for i in range(found["num_layers"]):
        block, key = _block(f"{vision}/clip_encoder_layer", i), f"Transformer/encoderblock_{i}"
        table.update({**_pair(f"{block}/layer_norm_1", f"{key}/LayerNorm_0"), **_pair(f"{block}/layer_norm_2", f"{key}/LayerNorm_2"),
                      **_mha(f"{block}/attention", f"{key}/{_ATT}"),
                      **_pair(f"{block}/dense_1", f"{key}/MlpBlock_3/Dense_0", ("kernel", "bias")),
                      **_pair(f"{block}/dense_2", f"{key}/MlpBlock_3/Dense_1", ("kernel", "bias"))})
    found.update(table=table, named={"layers/dense/vars": ("vision_projection", None),
                        "layers/dense_1/vars": ("text_projection", "the text tower's projection (text_projection)")},
                 zeros={"embedding/bias": (found["width"],)}, skip={
                     "^layers/clip_text_encoder/": _TEXT.format("CLIP"),
                     "^layers/clip_head/": "CLIPHead's logit_scale (image-text similarity)"})
    return found


def _deit(read):
    epsilon = read.number("layer_norm_epsilon", 1e-6, integer=False)
    inner = read.number("intermediate_dim")
    bias = read.flag("use_mha_bias", True)
    found = _common(read, DEIT, epsilon, read.said("layer_norm_epsilon", epsilon), "gelu",
                    "DeiTIntermediate's Dense(activation='gelu') (exact)", inner, read.said("intermediate_dim", inner),
                    bias=(bias, read.said("use_mha_bias", bias)))
    _switches(found, read.path, class_token=(True, "DeiTEmbeddings: a class token"),
              distillation_token=(True, "DeiTEmbeddings: a distillation token after the class token"),
              num_register_tokens=(0, "DeiTBackbone: no register tokens"),
              prefix_positions=(True, "DeiTEmbeddings: the class and distillation tokens have position embeddings"),
              layer_scale_init=(None, "DeiTBackbone: no LayerScale"), mlp_type=("mlp", "DeiTIntermediate, DeiTOutput"),
              pre_norm=(False, "DeiTBackbone: no norm before the blocks"), final_norm=(True, "DeiTEncoder: layer_norm after the blocks"),
              fc_norm=(False, "DeiTBackbone: no norm after pooling"), projection_dim=(None, "DeiTBackbone: no projection"),
              pooling=("token", "DeiTBackbone: every token after the final norm; keras_vit's DeiT reads the class and "
                                "distillation tokens (their mean)"))
    found["expected"] += [("mlp_dim", read.said("intermediate_dim", inner), inner), ("class_token", "DeiTEmbeddings: a class token", True),
                          ("image_size", read.said("image_shape", list(read.shape("image_shape"))), found["image_size"])]
    found["position_resampling"] = "bicubic_torch"  # keras-hub's DeiT has a fixed size; transformers' rule for another
    if not bias:
        found["notes"].append("config.use_mha_bias=false: no query, key, value or output biases in the attention "
                              "(Keras MultiHeadAttention(use_bias=False)); zeros stand in for the output's")
    embed, encoder = "layers/dei_t_embeddings", "layers/dei_t_encoder"
    table = {f"{embed}/vars/0": "cls", f"{embed}/vars/1": "dist", f"{embed}/vars/2": POSEMB_KEY,
             f"{embed}/patch_embedding/vars/0": "embedding/kernel", f"{embed}/patch_embedding/vars/1": "embedding/bias",
             **_pair(f"{encoder}/layer_norm", "Transformer/encoder_norm")}
    for i in range(found["num_layers"]):
        block, key = _block(f"{encoder}/encoder_layers/dei_t_encoder_block", i), f"Transformer/encoderblock_{i}"
        table.update({**_pair(f"{block}/layer_norm_1", f"{key}/LayerNorm_0"), **_pair(f"{block}/layer_norm_2", f"{key}/LayerNorm_2"),
                      **_mha(f"{block}/mha", f"{key}/{_ATT}", bias),
                      **_pair(f"{block}/mlp/dense", f"{key}/MlpBlock_3/Dense_0", ("kernel", "bias")),
                      **_pair(f"{block}/output_layer/dense", f"{key}/MlpBlock_3/Dense_1", ("kernel", "bias"))})
    zeros = {} if bias else {f"Transformer/encoderblock_{i}/{_ATT}/out/bias": (found["width"],) for i in range(found["num_layers"])}
    found.update(table=table, zeros=zeros)
    return found


def task_reason(class_name, task, path):
    """Why keras_vit leaves out the head of a family backbone's ``task.json`` (``task``: its ``config``), or raises
    when it is no task of that backbone.

    keras-hub's ``DeiTImageClassifier`` puts one ``Dense`` on the class token (``pooling="token"``; ``"gap"``: on the
    mean of every token, the class and distillation tokens too), and its converter ports transformers'
    ``cls_classifier`` only; keras_vit's DeiT averages a head on the class token and one on the distillation token.
    The backbone loads; the head is not loaded.

    Example:
    >>> task_reason("DeiTBackbone", {"pooling": "token", "num_classes": 1000}, "task.json")[:57]
    "DeiTImageClassifier's head (1000 classes) reads the class"
    """
    pooling = task.get("pooling", "token")
    read = {"token": "reads the class token only", "gap": "reads the mean of every token (the class and distillation tokens too)"}
    if pooling not in read:
        raise CheckpointError(f"{path!r}: config.pooling={pooling!r}; {TASKS[class_name]} pools with 'token' or 'gap'.")
    classes = config_lib.number(task, "num_classes", None, path, integer=True)
    return (f"{TASKS[class_name]}'s head ({classes} classes) {read[pooling]} (task.json pooling={pooling!r}), past a "
            "distillation token; keras_vit's DeiT averages a head on the class token and one on the distillation token, "
            "so its logits would differ. The backbone is loaded (include_top=False: the mean of the two tokens); "
            "the head is not")


def resolve(found, names):
    """``(table, skip)``: ``found``'s, with each group of ``found["named"]`` (``{default path: (layer name, reason to
    skip or None)}``) where ``names`` (``{group path: the name Keras stored}``) puts it.

    Example:
    >>> found = {"table": {"layers/dense/vars/0": "projection/kernel"}, "skip": {},
    ...          "named": {"layers/dense/vars": ("vision_projection", None), "layers/dense_1/vars": ("text_projection", "text")}}
    >>> resolve(found, {"layers/dense/vars": "text_projection", "layers/dense_1/vars": "vision_projection"})
    ({'layers/dense_1/vars/0': 'projection/kernel'}, {'^layers/dense/vars/': 'text'})
    """
    where = {name: group for group, name in names.items()}
    table, skip = dict(found["table"]), dict(found["skip"])
    for default, (name, reason) in found["named"].items():
        actual = where.get(name, default)
        if reason is not None:
            skip[f"^{re.escape(actual)}/"] = reason
            continue
        table = {(f"{actual}/{d.rpartition('/')[2]}" if d.rpartition("/")[0] == default else d): k for d, k in table.items()}
    return table, skip


def position_ids(folder, found, ids, rows):
    """The stored ``position_ids`` checked to index ``rows`` table rows (a note when not ``0..rows-1``)."""
    ids = np.asarray(ids).reshape(-1)
    if ids.shape[0] != rows or ids.min() < 0 or ids.max() >= rows:
        raise CheckpointError(f"keras-hub preset {folder!r}: position_ids {ids.tolist()[:8]}... do not index the {rows} rows "
                              "of the position embedding table one by one.")
    if not np.array_equal(ids, np.arange(rows)) and not any(n.startswith("position_ids") for n in found["notes"]):
        found["notes"].append(f"position_ids are not 0..{rows - 1} but {ids.tolist()[:8]}...: the position embeddings are "
                              "the table's rows at those indices, as keras-hub computes")
    return ids


def array(found, key, array):
    """A family weight in the original layout: CLIP's ``(D,)`` class token, an ``Embedding``'s ``(N, D)`` table,
    DINOv2's table resampled to ``image_shape`` as keras-hub does."""
    if key == "cls" and array.ndim == 1:
        return array[None, None]
    if key != POSEMB_KEY:
        return array
    array = array[None] if array.ndim == 2 else array
    if found["position"] is not None:
        old, new, method, _ = found["position"]
        array = resize_position_embedding(array.astype(np.float64), new, old, num_prefix_tokens=1, method=method).astype(array.dtype)
    return array


def shape(found, key, shape):
    """:func:`array`'s shape, from the stored one (DINOv2's table checked against ``position_embedding_shape`` first)."""
    if key == "cls" and len(shape) == 1:
        return (1, 1) + shape
    if key != POSEMB_KEY:
        return shape
    shape = (1,) + shape if len(shape) == 2 else shape
    if found["position"] is not None:
        (rows, cols), said = found["position"][0], found["position"][3]
        if len(shape) != 3 or shape[1] != 1 + rows * cols:
            raise CheckpointError(f"{found['declared']['num_layers'].origin!r}: config.json says {said} ({rows} x {cols} "
                                  f"patches) but the weights' position_embeddings have shape {shape}.")
        rows, cols = found["position"][1]
        shape = (1, 1 + rows * cols, shape[-1])
    return shape
