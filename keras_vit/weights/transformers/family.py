"""What a transformers ``config.json`` of the ViT family declares: DINOv2 (with registers), DeiT, SigLIP (2), CLIP, ViT-MAE.

Each ``model_type`` is the paper's ViT with a few of :class:`~keras_vit.architecture.config.ViTConfig`'s
family switches, fixed by its ``modeling_*.py`` or read from its config (``use_swiglu_ffn``,
``layerscale_value``, ``num_register_tokens``, ``hidden_act``, ``qkv_bias``, ``projection_dim``); the
record returned (:mod:`keras_vit.weights.declared`) names each switch with the field that sets it, so a
model built with another switch is refused by field name, and :func:`keras_vit.from_pretrained` builds
exactly this architecture. A whole CLIP or SigLIP repository (``model_type`` ``clip``, ``siglip``,
``siglip2``: a text tower inside) is read from its ``vision_config``.

The input normalisation (the reading's ``mean`` / ``std``) is ``image_mean`` / ``image_std`` of the
``preprocessor_config.json`` beside the weights, else the values of the published checkpoints of that
``model_type`` (:data:`DEFAULT_NORMALIZATION`); the load report says which. As for every source,
:func:`keras_vit.from_pretrained` builds it as the model's ``input_mean`` / ``input_std``, and a model built
with other ones gets the difference folded into its patch embedding (exact). The position resampling rule of
``interpolate_pos_encoding`` is the reading's ``position_resampling``, which ``from_pretrained`` builds too.
"""

import os

from keras_vit.errors import CheckpointError
from keras_vit.weights import config as config_lib
from keras_vit.weights.declared import activation, declare
from keras_vit.weights.conventions import CLIP_MEAN_STD, HALF, IMAGENET
from keras_vit.weights.input_normalization import processor_normalization
from keras_vit.weights.source import Reading

# model_type -> the layout of its vision weights (layouts.LAYOUTS)
LAYOUT_OF = {
    "dinov2": "dinov2", "dinov2_with_registers": "dinov2_with_registers", "deit": "deit", "vit_mae": "vit_mae",
    "clip": "clip", "clip_vision_model": "clip", "siglip": "siglip", "siglip_vision_model": "siglip",
    "siglip2": "siglip2", "siglip2_vision_model": "siglip2",
}
MODEL_TYPES = tuple(LAYOUT_OF)
# (layout, architectures[0]) -> the layout of a classifier's keys: a classifier on the mean of the tokens
# (modeling_*.py's *ForImageClassification.forward); what its vision model computes besides is not read
CLASSIFIERS = {("siglip", "SiglipForImageClassification"): "siglip_classifier",
               ("siglip2", "Siglip2ForImageClassification"): "siglip2_classifier",
               ("clip", "CLIPForImageClassification"): "clip_classifier"}
TOWERS = ("clip", "siglip", "siglip2")  # image and text towers: the image tower's settings are in vision_config
# what the published checkpoints' preprocessor_config.json says, for a folder without one
DEFAULT_NORMALIZATION = {
    "dinov2": ("ImageNet", IMAGENET), "dinov2_with_registers": ("ImageNet", IMAGENET), "deit": ("ImageNet", IMAGENET),
    "vit_mae": ("ImageNet", IMAGENET), "clip": ("OpenAI CLIP", CLIP_MEAN_STD), "siglip": ("0.5", HALF),
    "siglip2": ("0.5", HALF),
}
# transformers' hidden_act (ACT2FN keys) that keras_vit has: -> mlp_activation through declared.activation
ACTIVATIONS = ("gelu", "gelu_pytorch_tanh", "gelu_new", "quick_gelu", "silu", "swish")
# each layout's config defaults (transformers' configuration_*.py), for a field a config.json leaves out
_VIT = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072, hidden_act="gelu",
            layer_norm_eps=1e-12, image_size=224, patch_size=16, num_channels=3, qkv_bias=True)
DEFAULTS = {
    "dinov2": dict(_VIT, mlp_ratio=4, layer_norm_eps=1e-6, patch_size=14, layerscale_value=1.0, use_swiglu_ffn=False),
    "deit": _VIT,
    "vit_mae": _VIT,
    "clip": dict(_VIT, hidden_act="quick_gelu", layer_norm_eps=1e-5, patch_size=32, projection_dim=512),
    "siglip": dict(_VIT, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6, vision_use_head=True),
}
DEFAULTS["dinov2_with_registers"] = dict(DEFAULTS["dinov2"], num_register_tokens=4)
DEFAULTS["siglip2"] = dict(DEFAULTS["siglip"], num_patches=256)
# position embeddings for another grid, as each model's interpolate_pos_encoding resamples them (size=, not scale_factor)
RESAMPLING = {"dinov2": "bicubic_torch", "dinov2_with_registers": "bicubic_torch_antialias", "deit": "bicubic_torch",
              "vit_mae": "bicubic_torch", "clip": "bicubic_torch", "siglip": "bicubic_torch"}


class _Reader:
    """Reads the fields of one (vision) config with their types checked, quoting each as the file writes it."""

    def __init__(self, config, layout, path, where=""):
        self.config, self.defaults, self.path, self.where = config, DEFAULTS[layout], path, where

    def said(self, field, value):
        if field in self.config:
            return f"{self.where}{field}={value!r}"
        return f"{self.where}{field} absent (transformers' default {value!r})"

    def number(self, field, integer=True):
        return config_lib.number(self.config, field, self.defaults.get(field), self.path, integer=integer)

    def flag(self, field):
        value = self.config.get(field, self.defaults.get(field))
        if not isinstance(value, bool):
            raise CheckpointError(f"{self.path!r}: {self.where}{field}={value!r}, expected true or false.")
        return value


def settings(config, path, model_type):
    """The :class:`~keras_vit.weights.source.Reading` of a family ``config.json`` (``model_type`` one of
    :data:`MODEL_TYPES`); its ``layout`` names the key table (:data:`keras_vit.weights.transformers.layouts.LAYOUTS`).

    Example:
    >>> s = settings({"model_type": "dinov2", "hidden_size": 32, "mlp_ratio": 4, "use_swiglu_ffn": True,
    ...               "architectures": ["Dinov2Model"]}, "config.json", "dinov2")
    >>> [(f, s.declared[f].value) for f in ("mlp_type", "mlp_dim", "mlp_activation", "layer_scale_init", "pooling")]
    [('mlp_type', 'glu'), ('mlp_dim', 88), ('mlp_activation', 'silu'), ('layer_scale_init', 1.0), ('pooling', 'token')]
    """
    layout = LAYOUT_OF[model_type]
    architecture = (config.get("architectures") or [None])[0]
    vision, where = config, ""
    if model_type in TOWERS:
        vision, where = config_lib.json_object(config.get("vision_config") or {}, path, "vision_config"), "vision_config."
    read = _Reader(vision, layout, path, where)
    record, notes, expected = {}, [], []

    def put(field, value, said):
        declare(record, field, value, said, path)

    width, depth, heads = read.number("hidden_size"), read.number("num_hidden_layers"), read.number("num_attention_heads")
    put("hidden_size", width, read.said("hidden_size", width))
    put("num_layers", depth, read.said("num_hidden_layers", depth))
    put("num_heads", heads, read.said("num_attention_heads", heads))
    epsilon = read.number("layer_norm_eps", integer=False)
    put("layer_norm_epsilon", epsilon, read.said("layer_norm_eps", epsilon))
    act = vision.get("hidden_act", read.defaults["hidden_act"])
    glu = layout.startswith("dinov2") and read.flag("use_swiglu_ffn")
    if glu:  # Dinov2SwiGLUFFN: weights_in (2 h, D), silu(x1) * x2, h = (int(int(D * mlp_ratio) * 2 / 3) + 7) // 8 * 8
        ratio = read.number("mlp_ratio", integer=False)
        mlp = (int(int(width * ratio) * 2 / 3) + 7) // 8 * 8
        said = f"{read.said('mlp_ratio', vision.get('mlp_ratio', ratio))} with use_swiglu_ffn=True ((int({int(width * ratio)} * 2 / 3) + 7) // 8 * 8)"
        put("mlp_type", "glu", "use_swiglu_ffn=True")
        put("mlp_activation", "silu", "use_swiglu_ffn=True (SiLU-gated MLP)")
        expected.append(("mlp_dim", said, 2 * mlp))  # the weights' weights_in has both halves
    else:
        if layout.startswith("dinov2"):  # Dinov2MLP: int(hidden_size * mlp_ratio)
            ratio = read.number("mlp_ratio", integer=False)
            mlp, said = int(width * ratio), f"{read.said('mlp_ratio', vision.get('mlp_ratio', ratio))} (x hidden_size {width})"
        else:
            mlp = read.number("intermediate_size")
            said = read.said("intermediate_size", mlp)
        if not isinstance(act, str) or act not in ACTIVATIONS:
            raise CheckpointError(
                f"{path!r}: {where}hidden_act={act!r} is no activation keras_vit's MLP has "
                f"(transformers' {', '.join(map(repr, ACTIVATIONS))})."
            )
        put("mlp_type", "mlp", "no gated MLP" + (" (use_swiglu_ffn=False)" if layout.startswith("dinov2") else ""))
        put("mlp_activation", activation(act), read.said("hidden_act", act))
        expected.append(("mlp_dim", said, mlp))
    put("mlp_dim", mlp, said)
    qkv = read.flag("qkv_bias") if "qkv_bias" in read.defaults and layout not in ("clip", "siglip", "siglip2") else True
    put("qkv_bias", qkv, read.said("qkv_bias", qkv) if layout not in ("clip", "siglip", "siglip2") else f"{layout} attention (q/k/v biases)")
    classifier = (layout, architecture) in CLASSIFIERS
    _tokens(put, read, layout, model_type, classifier)
    _top(put, read, layout, architecture, config, classifier)
    patch = vision.get("patch_size", read.defaults["patch_size"])
    expected += [("hidden_size", read.said("hidden_size", width), width), ("num_layers", read.said("num_hidden_layers", depth), depth),
                 ("patch_size", read.said("patch_size", patch), config_lib.size_pair(patch, path, where + "patch_size")[0]),
                 ("num_channels", read.said("num_channels", read.number("num_channels")), read.number("num_channels"))]
    resampling = None  # SigLIP2 runs at its native grid only
    if layout == "siglip2":  # NaFlex: positions for num_patches, resized by transformers (bilinear, antialiased) per image
        side = int(round(read.number("num_patches") ** 0.5))
        size = side * config_lib.size_pair(patch, path, where + "patch_size")[0]
        put("image_size", (size, size), f"{read.said('num_patches', side * side)} (SigLIP2's position embeddings, resized "
            "bilinearly with antialiasing, a rule keras_vit does not have: the model runs at that grid only)")
    else:
        image = vision.get("image_size", read.defaults["image_size"])
        expected.append(("image_size", read.said("image_size", image), config_lib.size_pair(image, path, where + "image_size")))
        resampling = RESAMPLING[layout]  # interpolate_pos_encoding: torch bicubic (with antialias for registers)
    if layout == "clip":
        notes.append("CLIP's patch embedding has no bias: keras_vit's (embedding/bias) is zeros")
    if layout == "vit_mae":
        ratio = vision.get("mask_ratio", 0.75)
        notes.append(f"config.json mask_ratio={ratio!r}: the encoder runs on every patch (no masking), as ViTMAEModel with "
                     "mask_ratio=0; its class token output does not depend on the order MAE shuffles the patches into")
    names = config_lib.indexed_names(config.get("id2label"), "id2label", path) or []
    return Reading(declared=record, expected=expected, architecture=architecture, notes=notes,
                   class_names=None if not names or all(n.startswith("LABEL_") for n in names) else names,
                   position_resampling=resampling, layout=CLASSIFIERS.get((layout, architecture), layout))


def _tokens(put, read, layout, model_type, classifier):
    put("class_token", layout != "siglip" and layout != "siglip2",
        f"{model_type}: " + ("no class token" if layout.startswith("siglip") else "a class token"))
    put("distillation_token", layout == "deit", f"{model_type}: " + ("a distillation token" if layout == "deit" else "no distillation token"))
    registers = read.number("num_register_tokens") if layout == "dinov2_with_registers" else 0
    put("num_register_tokens", registers, read.said("num_register_tokens", registers) if registers else f"{model_type}: no register tokens")
    put("prefix_positions", True, f"{model_type}: the class token has a position embedding")
    scale = read.number("layerscale_value", integer=False) if layout.startswith("dinov2") else None
    put("layer_scale_init", scale, read.said("layerscale_value", scale) if scale else f"{model_type}: no LayerScale")
    put("pre_norm", layout == "clip", f"{model_type}: " + ("pre_layrnorm" if layout == "clip" else "no LayerNorm before the blocks"))
    if layout == "clip" and classifier:  # the mean of last_hidden_state, which post_layernorm never touches
        said = "CLIPForImageClassification: no LayerNorm after the blocks (post_layernorm is not read)"
        put("final_norm", False, said)
        put("fc_norm", False, said)
        return
    put("final_norm", layout != "clip", f"{model_type}: " + ("post_layernorm on the pooled class token" if layout == "clip" else "a final LayerNorm"))
    put("fc_norm", layout == "clip", f"{model_type}: " + ("post_layernorm on the pooled class token" if layout == "clip" else "no norm after pooling"))


def _top(put, read, layout, architecture, config, classifier):
    """Pooling and projection, as the repository's class (``architectures``) computes its output."""
    if classifier:  # SigLIP: every token (no class token), after post_layernorm; CLIP: past the class token, no norm
        put("pooling", "gap", f"architectures=[{architecture!r}]: classifier on the mean of the " + (
            "tokens after post_layernorm" if layout.startswith("siglip") else "patch tokens of last_hidden_state"))
    elif layout.startswith("dinov2"):
        concat = architecture is not None and architecture.endswith("ForImageClassification")
        put("pooling", "token_gap_concat" if concat else "token",
            f"architectures=[{architecture!r}]: " + ("classifier on [class token; mean of the patch tokens]" if concat
                                                     else "the class token"))
    elif layout.startswith("siglip"):
        head = read.flag("vision_use_head")
        put("pooling", "map" if head else None, read.said("vision_use_head", head))
    else:
        if architecture == "DeiTForImageClassification":
            raise CheckpointError(
                f"{read.path!r}: DeiTForImageClassification reads the class token only, past a distillation token "
                "that no head reads; keras_vit's ViTConfig has no switch for that: distillation_token=True averages "
                "the class and distillation heads (DeiTForImageClassificationWithTeacher; without a head, the two "
                "tokens), and a model without it has no distillation token in its sequence. Load a "
                "DeiTForImageClassificationWithTeacher or DeiTModel repository."
            )
        put("pooling", "token", "the class token")
    projection = None
    if layout == "clip" and architecture in ("CLIPVisionModelWithProjection", "CLIPModel"):
        source = config if architecture == "CLIPModel" else read.config
        projection = config_lib.number(source, "projection_dim", 512, read.path, integer=True)
        said = f"{'' if architecture == 'CLIPModel' else read.where}projection_dim={projection!r} ({architecture})"
    else:
        said = f"architectures=[{architecture!r}]: no projection"
    put("projection_dim", projection, said)


def normalization(reading, folder, model_type):
    """``reading`` with the input ``mean`` / ``std``: from ``preprocessor_config.json``, else the default."""
    file = os.path.join(folder, "preprocessor_config.json")
    label, (mean, std) = DEFAULT_NORMALIZATION[LAYOUT_OF[model_type]]
    said = None
    if os.path.isfile(file):
        mean, std, said = processor_normalization(config_lib.read_json(file), file, list(mean), list(std))
    if said is None:
        reading.notes.append(
            f"no image_mean / image_std in a preprocessor_config.json beside the weights: {label} mean and std, "
            f"those of the published {model_type} checkpoints ({list(mean)}, {list(std)})")
    else:
        reading.notes.append(f"input normalisation from preprocessor_config.json: {said}")
    reading.mean, reading.std = [float(v) for v in mean], [float(v) for v in std]
    return reading
