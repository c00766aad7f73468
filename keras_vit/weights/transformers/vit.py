"""What a transformers ``ViTModel`` / ``ViTForImageClassification`` ``config.json`` (``model_type`` ``vit``) says
(its keys: the ``"vit"`` row of :data:`keras_vit.weights.transformers.layouts.LAYOUTS`). Its ``layer_norm_eps``
(1e-12 in Google's ports) is declared: the model must use it.
"""

import re

from keras_vit.errors import CheckpointError
from keras_vit.weights import config as config_lib
from keras_vit.weights.declared import activation, declare
from keras_vit.weights.source import Reading

# transformers' ViTConfig's defaults (those of the family's rows too)
DEFAULTS = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072, hidden_act="gelu",
                layer_norm_eps=1e-12, image_size=224, patch_size=16, num_channels=3, qkv_bias=True)


def _said(config, field, value):
    """How an error quotes ``field``: its value in the file, or ViTConfig's default for an absent field."""
    return f"{field}={value!r}" if field in config else f"has no {field} (ViTConfig's default {value!r})"


def settings(config, path="<config>", keys=()):
    """What a transformers ``config.json`` of ``model_type`` ``vit`` says: heads, epsilon, activation, sizes to
    check, labels; every field type-checked, an absent one ``ViTConfig``'s default. A ``hidden_act`` other than the
    exact GELU is declared, and refused when compared with the model's; a ``pooler_act`` other than tanh is refused
    where the weights (``keys``) hold ``ViTModel``'s pooler, keras_vit's pre-logits (dense + tanh, the paper's).

    Example:
    >>> s = settings({"model_type": "vit", "layer_norm_eps": 1e-12, "num_attention_heads": 3,
    ...               "id2label": {"1": "dog", "0": "cat"}})
    >>> s.layer_norm_epsilon, s.num_heads, s.class_names
    (1e-12, 3, ['cat', 'dog'])
    """
    read = config_lib.Fields(config, path, defaults=DEFAULTS, whose="transformers'")
    act = config.get("hidden_act", DEFAULTS["hidden_act"])
    if not isinstance(act, str):
        raise CheckpointError(f"{path!r}: hidden_act={act!r}, expected the name of an activation.")
    if config.get("pooler_act", "tanh") != "tanh" and any(re.match(r"(vit\.)?pooler\.dense\.", key) for key in keys):
        raise CheckpointError(f"{path!r}: pooler_act={config['pooler_act']!r}: the pooler of its weights (pooler.dense) "
                              "is followed by it, keras_vit's pre-logits by tanh (the paper's): not built.")
    names = config_lib.indexed_names(config.get("id2label"), "id2label", path) or []
    if all(re.fullmatch(r"LABEL_\d+", name) for name in names):  # transformers' placeholder labels
        names = []
    record = {}  # what the model must have: compared with its ViTConfig by keras_vit.weights.declared.check
    for field, name in (("num_heads", "num_attention_heads"), ("layer_norm_epsilon", "layer_norm_eps")):
        value = read.number(name, integer=field == "num_heads")
        declare(record, field, value, read.said(name, value), path)
    expected = []  # (quantity, the field as the config says it, value): checked against the weights
    for quantity, field in (("hidden_size", "hidden_size"), ("num_layers", "num_hidden_layers"),
                            ("mlp_dim", "intermediate_size"), ("num_channels", "num_channels")):
        value = read.number(field)
        expected.append((quantity, _said(config, field, value), value))
        if field in config and quantity != "num_channels":  # a size the file states, not ViTConfig's default
            declare(record, quantity, value, read.said(field, value), path)
    for field in ("patch_size", "image_size"):
        value = config.get(field, DEFAULTS[field])
        expected.append((field, _said(config, field, value), config_lib.size_pair(value, path, field)))
    qkv_bias = read.flag("qkv_bias")
    expected.append(("qkv_bias", f"qkv_bias={qkv_bias!r}", qkv_bias))
    declare(record, "mlp_activation", activation(act), f"hidden_act={act!r}", path)
    declare(record, "qkv_bias", qkv_bias, f"qkv_bias={qkv_bias!r}", path)
    return Reading(declared=record, expected=expected, architecture=(config.get("architectures") or ["ViTModel"])[0],
                   class_names=names or None, layout="vit",
                   position_resampling="bicubic_torch")  # ViTEmbeddings.interpolate_pos_encoding: torch bicubic
