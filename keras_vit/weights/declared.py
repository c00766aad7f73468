"""What a checkpoint declares about its architecture, and the one comparison of that with a model's ``ViTConfig``.

Merged attention kernels have the same shapes for 2 heads or 4, and no tensor shows the LayerNorm epsilon, MLP
activation or attention biases: loaded into a model built with other values, such weights give other logits without
an error. So every source returns a *declared record* ``{field: Declaration(value, said, origin)}``, and
:func:`check` names every difference from a model's config at once, before anything is built or written. The sizes a
file states are checked against its own weights instead (:func:`keras_vit.weights.config.check_against_weights`):
another resolution is resampled, a head of another size is a new head.
"""

import os
from typing import NamedTuple

from keras_vit.architecture.family import PREFIX_POOLINGS
from keras_vit.errors import CheckpointError

# how a file writes the exact (erf) GELU, keras_vit's MLP activation: transformers' "gelu", timm's default nn.GELU
EXACT_GELU = ("gelu", "GELU", "nn.GELU", "torch.nn.GELU", "torch.nn.modules.activation.GELU")
# every source's names of keras_vit's other MLP activations: transformers' ACT2FN keys, timm's create_act names and classes
ACTIVATIONS = {
    "gelu_tanh": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh", "GELUTanh": "gelu_tanh",
    "quick_gelu": "quick_gelu", "QuickGELU": "quick_gelu",
    "silu": "silu", "swish": "silu", "SiLU": "silu", "nn.SiLU": "silu", "torch.nn.SiLU": "silu",
}
# fields a builder takes from the file when its caller did not set them
ADOPTED = ("layer_norm_epsilon", "mlp_activation", "resnet_norms")
# fields whose None means the blocks' value (the attention pooling head's heads and MLP width), with pooling="map"
FOLLOWS = {"map_num_heads": "num_heads", "map_mlp_dim": "mlp_dim"}
# fields whose None is a value (no LayerScale, no projection), compared like any other
NULLABLE = ("layer_scale_init", "projection_dim", "rope")
_WHY = {
    "resnet_norms": " (the hybrid's weight-standardisation and GroupNorm epsilons; unset, a builder takes the file's)",
    "mlp_activation": " (keras_vit's MLP activations: gelu, gelu_tanh, quick_gelu, silu; unset, a builder takes the file's)",
    "qkv_bias": " (build the model with the file's qkv_bias)",
}


class Declaration(NamedTuple):
    """One field a source declares: ``value`` in ``ViTConfig``'s terms, ``said`` as the file writes it, ``origin`` the file."""

    value: object
    said: str
    origin: str


def declare(record, field, value, said, origin):
    """Add ``field`` to ``record`` unless a more specific place of the source declared it first; returns ``record``.

    Example:
    >>> record = declare({}, "num_heads", 4, "model_args.num_heads=4", "/m/config.json")
    >>> declare(record, "num_heads", 3, "architecture='vit_tiny_patch16_224'", "/m/config.json")["num_heads"]
    Declaration(value=4, said='model_args.num_heads=4', origin='config.json')
    """
    record.setdefault(field, Declaration(value, said, os.path.basename(os.fspath(origin)) or str(origin)))
    return record


def activation(value):
    """A declared MLP activation in keras_vit's terms (:data:`ACTIVATIONS`; ``"gelu"`` for the exact GELU), else the
    name as written, which no model has, so :func:`check` refuses it by name.

    Example:
    >>> activation("nn.GELU"), activation("gelu_pytorch_tanh"), activation("QuickGELU"), activation(None), activation("relu")
    ('gelu', 'gelu_tanh', 'quick_gelu', 'gelu', 'relu')
    """
    if value is None or value in EXACT_GELU:
        return "gelu"
    return ACTIVATIONS.get(value, value) if isinstance(value, str) else value


# the poolings of a model without a head that read no weights of the file: keras.applications' spellings
OUTPUT_POOLINGS = ("avg", "max", "feature_map")
TOKEN_OUTPUTS = (None, "feature_map")  # of a model without a head: the tokens, no pooled vector (no fc_norm, projection)


def model_value(config, field):
    """The model's value of a declared ``field`` (None: nothing to compare, a field ``ViTConfig`` lacks too).

    A model without a head pooled as ``keras.applications`` spells it (:data:`OUTPUT_POOLINGS`) has no
    pooling to compare: the file's pooling chose its classifier's input, which such a model does not use.
    """
    if field in ("pooling", "pool_include_prefix") and not config.include_top and config.pooling in OUTPUT_POOLINGS:
        return None
    if field == "pool_include_prefix" and config.pooling not in PREFIX_POOLINGS:  # the tokens, or the class token
        return None
    if field in FOLLOWS:  # nothing to compare without an attention pooling head
        if config.pooling != "map":
            return None
        value = getattr(config, field)
        return getattr(config, FOLLOWS[field]) if value is None else value
    return getattr(config, field, None)


def _agrees(field, declared, have):
    if field == "layer_scale_init":  # its presence decides the weights; the initial value is the loaded gammas'
        return (have is None) == (declared is None)
    if have is None or declared is None:
        return have is declared
    if field == "layer_norm_epsilon":
        return abs(have - declared) <= 1e-3 * declared
    if isinstance(have, (list, tuple)) or isinstance(declared, (list, tuple)):
        if not isinstance(have, (list, tuple)) or not isinstance(declared, (list, tuple)) or len(have) != len(declared):
            return False
        return all(a == b or (isinstance(a, float) and isinstance(b, float) and abs(a - b) <= 1e-6) for a, b in zip(have, declared))
    return have == declared


def mismatches(record, config):
    """``["config.json: num_attention_heads=4 but the model has num_heads=2", ...]``: every field that differs.

    Example:
    >>> from keras_vit.architecture.config import ViTConfig
    >>> config = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64)
    >>> record = declare({}, "num_heads", 4, "num_attention_heads=4", "vit/config.json")
    >>> declare(record, "mlp_activation", "relu", "hidden_act='relu'", "vit/config.json")
    ... # doctest: +ELLIPSIS
    {...}
    >>> mismatches(record, config)  # doctest: +NORMALIZE_WHITESPACE
    ['config.json: num_attention_heads=4 but the model has num_heads=2',
     "config.json: hidden_act='relu' but the model has mlp_activation='gelu' (keras_vit's MLP activations: gelu, gelu_tanh,
     quick_gelu, silu; unset, a builder takes the file's)"]
    """
    found = []  # a model with pooling=None returns the tokens: no pooling to compare (have is None), nor OUTPUT_POOLINGS
    for field, (value, said, origin) in record.items():
        if field in ("fc_norm", "projection_dim") and not config.include_top and config.pooling in TOKEN_OUTPUTS:
            continue  # they act on the pooled vector: a model giving the tokens has none (its weights skipped)
        have = model_value(config, field)
        if field in FOLLOWS and value is None and have is not None:  # the file's "the blocks'": the model's blocks'
            value = getattr(config, FOLLOWS[field])
        if (have is None and field not in NULLABLE) or _agrees(field, value, have):
            continue
        shown = f"{have:g}" if field == "layer_norm_epsilon" else repr(have)
        found.append(f"{origin}: {said} but the model has {field}={shown}{_WHY.get(field, '')}")
    return found


def check(record, config, path, model_name=None):
    """Refuse a checkpoint (``path``) whose declared ``record`` (``CheckpointInfo.declared``) differs from the model's
    ``config`` (a ``ViTConfig``; ``model_name`` if it is built): a ``CheckpointError`` naming the file, each field as
    the file says it, and the model's field with its value."""
    found = mismatches(record or {}, config)
    if not found:
        return
    model = f"model {model_name!r}" if model_name else "the model"
    raise CheckpointError(
        f"Checkpoint {os.fspath(path)!r} declares an architecture that {model} does not have "
        f"({len(found)} difference(s)): {'; '.join(found)}. The weights would load into it and compute something "
        "else. Build the model with the file's values (a builder's weights= takes the LayerNorm epsilon from the "
        "file), or let keras_vit.from_pretrained(path) build the architecture the file describes."
    )


def adopt(config, record, given):
    """``config`` with the :data:`ADOPTED` fields the file declares and the caller did not set (in ``given``); a
    value ``ViTConfig`` refuses (an activation keras_vit lacks) is left to :func:`check`, which names it."""
    for field in ADOPTED:
        if field in record and field not in given:
            try:
                config = config.replace(**{field: record[field].value})
            except ValueError:  # a value keras_vit has no such layer for (gelu_new): check() names it
                continue
    return config
