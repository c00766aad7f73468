"""Hugging Face transformers' ViT (``save_pretrained`` folders) -> the original checkpoint layout.

``ViTModel`` / ``ViTForImageClassification``
(``transformers/models/vit/modeling_vit.py``) keep query, key and value as
separate ``nn.Linear`` (``(out, in)`` weights), the patch embedding as a
``Conv2d`` ``(D, C, P, P)``, ``layernorm_before`` / ``layernorm_after`` in each
layer, ``vit.layernorm`` at the end, ``classifier`` on the class token and, in
``ViTModel`` files (the imagenet21k ports), ``pooler.dense`` + tanh: the
original pre-logits layer (``convert_vit_timm_to_pytorch.py`` maps
``pre_logits.fc`` to it). The LayerNorm epsilon is ``layer_norm_eps`` of
``config.json`` (1e-12 in Google's ports), which the model must use.

Attention kernels come back with merged head axes, as from
:mod:`keras_vit.weights.timm`; missing query/key/value biases
(``qkv_bias: false``) are zeros; what ``config.json`` declares (heads, epsilon, ``hidden_act``,
``qkv_bias``, sizes) is compared with the model's by :mod:`keras_vit.weights.declared`.
"""

import re

import numpy as np  # noqa: F401  (the doctests' np)

from keras_vit.errors import CheckpointError
from keras_vit.weights import config as config_lib
from keras_vit.weights.declared import activation, declare
from keras_vit.weights.conventions import finish, patch_kernel
from keras_vit.weights.source import Reading

FORMAT = "transformers"
LAYER_NORM_EPSILON = 1e-12  # ViTConfig's default layer_norm_eps
MARKERS = ("embeddings.patch_embeddings.projection.weight",)

_LAYER = re.compile(r"^encoder\.layer\.(\d+)\.(.+)$")
_ATT = "MultiHeadDotProductAttention_1"
_LAYER_KEYS = {
    "layernorm_before.weight": "LayerNorm_0/scale",
    "layernorm_before.bias": "LayerNorm_0/bias",
    "attention.attention.query.weight": f"{_ATT}/query/kernel",
    "attention.attention.query.bias": f"{_ATT}/query/bias",
    "attention.attention.key.weight": f"{_ATT}/key/kernel",
    "attention.attention.key.bias": f"{_ATT}/key/bias",
    "attention.attention.value.weight": f"{_ATT}/value/kernel",
    "attention.attention.value.bias": f"{_ATT}/value/bias",
    "attention.output.dense.weight": f"{_ATT}/out/kernel",
    "attention.output.dense.bias": f"{_ATT}/out/bias",
    "layernorm_after.weight": "LayerNorm_2/scale",
    "layernorm_after.bias": "LayerNorm_2/bias",
    "intermediate.dense.weight": "MlpBlock_3/Dense_0/kernel",
    "intermediate.dense.bias": "MlpBlock_3/Dense_0/bias",
    "output.dense.weight": "MlpBlock_3/Dense_1/kernel",
    "output.dense.bias": "MlpBlock_3/Dense_1/bias",
}
_TOP_KEYS = {
    "embeddings.cls_token": "cls",
    "embeddings.position_embeddings": "Transformer/posembed_input/pos_embedding",
    "embeddings.patch_embeddings.projection.bias": "embedding/bias",
    "layernorm.weight": "Transformer/encoder_norm/scale",
    "layernorm.bias": "Transformer/encoder_norm/bias",
    "pooler.dense.weight": "pre_logits/kernel",
    "pooler.dense.bias": "pre_logits/bias",
    "classifier.weight": "head/kernel",
    "classifier.bias": "head/bias",
}
_IGNORED = ("embeddings.mask_token",)  # masked-image-modelling input, unused for classification


def _strip(key):
    return key[len("vit."):] if key.startswith("vit.") else key


def matches(keys):
    """Whether a state dict with these keys is a transformers ViT (with or without the ``vit.`` prefix).

    Example:
    >>> matches(["vit.embeddings.patch_embeddings.projection.weight"]), matches(["patch_embed.proj.weight"])
    (True, False)
    """
    keys = {_strip(k) for k in keys}
    return all(marker in keys for marker in MARKERS)


def to_original(tensors, path="<arrays>"):
    """Rename and transpose a transformers ViT state dict into the original ``.npz`` layout.

    Example:
    >>> out = to_original({"vit.embeddings.patch_embeddings.projection.weight": np.zeros((8, 3, 4, 4)),
    ...                    "classifier.weight": np.zeros((10, 8))})
    >>> out["embedding/kernel"].shape, out["head/kernel"].shape
    ((4, 4, 3, 8), (8, 10))
    """
    out, origin = {}, {}
    unknown = []
    for key, array in tensors.items():
        short = _strip(key)
        layer = _LAYER.match(short)
        if short == "embeddings.patch_embeddings.projection.weight":
            name, value = "embedding/kernel", patch_kernel(key, array, path)
        elif short in _TOP_KEYS:
            name = _TOP_KEYS[short]
            value = array.T if short.endswith("dense.weight") or short == "classifier.weight" else array
        elif layer and layer[2] in _LAYER_KEYS:
            name = f"Transformer/encoderblock_{layer[1]}/{_LAYER_KEYS[layer[2]]}"
            value = array.T if array.ndim == 2 else array
        else:
            if short not in _IGNORED:
                unknown.append(key)
            continue
        if name in origin:  # "vit.layernorm.weight" and "layernorm.weight": which one would win is dict order
            first, second = sorted((origin[name], key))
            raise CheckpointError(
                f"Checkpoint {path!r}: keys {first!r} and {second!r} are both {name!r} "
                "(with and without the 'vit.' prefix); keep one of them."
            )
        out[name], origin[name] = value, key
    return finish(out, unknown, path, "transformers ViT")


def _said(config, field, value):
    """How an error quotes ``field``: its value in the file, or ViTConfig's default for an absent field."""
    return f"{field}={value!r}" if field in config else f"has no {field} (ViTConfig's default {value!r})"


def settings(config, path="<config>"):
    """What a transformers ``config.json`` says: heads, epsilon, activation, sizes to check, labels.

    Every field read is type-checked (:mod:`keras_vit.weights.config`); absent fields take
    ``ViTConfig``'s defaults.

    Raises:
        CheckpointError: a ``model_type`` other than ``"vit"``, or a field of the wrong type (the
            message names it and its value). A ``hidden_act`` other than the exact GELU is declared
            (``"declared"``) and refused when compared with the model's.

    Example:
    >>> s = settings({"model_type": "vit", "layer_norm_eps": 1e-12, "num_attention_heads": 3,
    ...               "id2label": {"1": "dog", "0": "cat"}})
    >>> s.layer_norm_epsilon, s.num_heads, s.class_names
    (1e-12, 3, ['cat', 'dog'])
    """
    config = config_lib.json_object(config, path)
    model_type = config.get("model_type")
    if model_type != "vit":
        raise CheckpointError(
            f"{path!r} describes a transformers model of type {model_type!r}; keras_vit reads model_type 'vit' "
            "(ViTModel, ViTForImageClassification)."
        )
    act = config.get("hidden_act", "gelu")
    if not isinstance(act, str):
        raise CheckpointError(f"{path!r}: hidden_act={act!r}, expected the name of an activation.")
    names = config_lib.indexed_names(config.get("id2label"), "id2label", path) or []
    if all(re.fullmatch(r"LABEL_\d+", name) for name in names):  # transformers' placeholder labels
        names = []
    expected = []  # (quantity, the field as the config says it, value): checked against the weights
    for quantity, field, default in (
        ("hidden_size", "hidden_size", 768),
        ("num_layers", "num_hidden_layers", 12),
        ("mlp_dim", "intermediate_size", 3072),
        ("num_channels", "num_channels", 3),
    ):
        value = config_lib.number(config, field, default, path, integer=True)
        expected.append((quantity, _said(config, field, value), value))
    for field, default in (("patch_size", 16), ("image_size", 224)):
        value = config.get(field, default)
        expected.append((field, _said(config, field, value), config_lib.size_pair(value, path, field)))
    qkv_bias = config.get("qkv_bias", True)
    if not isinstance(qkv_bias, bool):
        raise CheckpointError(f"{path!r}: qkv_bias={qkv_bias!r}, expected true or false.")
    expected.append(("qkv_bias", f"qkv_bias={qkv_bias!r}", qkv_bias))
    record = {}  # what the model must have: compared with its ViTConfig by keras_vit.weights.declared.check
    for field, name, default in (
        ("num_heads", "num_attention_heads", 12),
        ("layer_norm_epsilon", "layer_norm_eps", LAYER_NORM_EPSILON),
        ("hidden_size", "hidden_size", None),
        ("num_layers", "num_hidden_layers", None),
        ("mlp_dim", "intermediate_size", None),
    ):
        value = config_lib.number(config, name, default, path, integer=field != "layer_norm_epsilon")
        if value is not None:
            said = f"{name}={value!r}" if name in config else f"{name} absent (transformers' default {value!r})"
            declare(record, field, value, said, path)
    declare(record, "mlp_activation", activation(act), f"hidden_act={act!r}", path)
    declare(record, "qkv_bias", qkv_bias, f"qkv_bias={qkv_bias!r}", path)
    return Reading(declared=record, expected=expected, architecture=(config.get("architectures") or ["ViTModel"])[0],
                   class_names=names or None, layout="vit")
