"""keras-hub's ``DINOV3Backbone`` (``keras_hub/src/models/dinov3/``: ``dinov3_backbone.py``, ``dinov3_layers.py``) as a row.

The class token, then ``num_register_tokens`` registers (keras-hub's default 4), no absolute position table: RoPE
of the patch tokens in every attention (``DINOV3RopePositionEmbedding``: patch centres ``(i + 0.5) / n`` per axis
mapped to ``[-1, 1]``, rows first, ``inv_freq = 1 / rope_theta ** arange(0, 1, 4 / head_dim)``, angles ``2 pi c
inv_freq`` tiled ``[row, col, row, col]`` and the head's halves rotated; the class and register tokens are not:
keras_vit's ``rope="dinov3"`` with ``rope_grid_indexing="ij"``, recomputed for any image size as keras-hub does).
LayerScale on both branches (``lambda1``, whatever ``layer_scale_init_value``), ``layer_norm_eps`` in every
LayerNorm, Keras ``Dense`` query / key / value / output projections (``use_{query,key,value,proj}_bias``) and an
MLP of ``hidden_activation`` (Keras' names: ``"gelu"`` is the exact GELU), gated with ``use_gated_mlp``
(``act(gate_proj x) * up_proj x``: joined ``[gate; up]`` as keras_vit's ``mlp_type="glu"``). The backbone
returns every token after the final norm; keras_vit gives the normed class token (``pooling=None``: the tokens),
as for keras-hub's DINOv2.
"""

from keras_vit.errors import CheckpointError
from keras_vit.weights.conventions import IMAGENET
from keras_vit.weights.declared import declare
from keras_vit.weights.keras_hub.family import ATT, Family, Keys, dense, encoder, pair, pyramid_norm, tokens

# Keras' activation names keras-hub's Dense layers take -> keras_vit's MLP activations
_ACTIVATIONS = {"gelu": "gelu", "silu": "silu", "swish": "silu"}
_QKV = (("query", "use_query_bias"), ("key", "use_key_bias"), ("value", "use_value_bias"))


def _biases(read):
    """``{projection: whether keras-hub gives it a bias}`` (keras-hub's defaults: all)."""
    return {**{part: read.flag(field, True) for part, field in _QKV}, "out": read.flag("use_proj_bias", True),
            "mlp": read.flag("use_mlp_bias", True)}


def _special(read, found):
    """The activation in keras_vit's terms, the biases, the RoPE base, and notes on what stands in for what."""
    act = read.config.get("hidden_activation", "gelu")
    if not isinstance(act, str) or act not in _ACTIVATIONS:
        raise CheckpointError(
            f"{read.path!r}: config.hidden_activation={act!r} is no activation keras_vit's MLP has (keras-hub passes it "
            f"to Keras' Dense: keras_vit reads {', '.join(repr(a) for a in _ACTIVATIONS)}).")
    gated = read.flag("use_gated_mlp", False)
    declare(found.declared, "mlp_activation", _ACTIVATIONS[act],
            read.said("hidden_activation", act) + (" (gated: act(gate_proj x) * up_proj x)" if gated else ""), read.path)
    bias = _biases(read)
    said = ", ".join(read.said(field, bias[part]) for part, field in _QKV)
    qkv = any(bias[part] for part, _ in _QKV)
    missing = [part for part, _ in _QKV if not bias[part]]
    declare(found.declared, "qkv_bias", qkv, said, read.path)
    if qkv and missing:  # a zero bias is no bias: the same scores
        found.notes.append(f"{said}: zeros stand in for the {' and '.join(missing)} bias{'es' if len(missing) > 1 else ''} "
                           "of every attention (keras_vit's attention has query, key and value biases together), which "
                           "changes nothing")
    declare(found.declared, "proj_bias", bias["out"], read.said("use_proj_bias", bias["out"]), read.path)
    declare(found.declared, "mlp_bias", bias["mlp"], read.said("use_mlp_bias", bias["mlp"]), read.path)
    theta = read.number("rope_theta", 100.0, integer=False)
    declare(found.declared, "rope_temperature", float(theta), read.said("rope_theta", theta), read.path)
    pyramid_norm(read, found)


def _keys(read, depth):
    bias, gated = _biases(read), read.flag("use_gated_mlp", False)
    width = read.number("hidden_dim")
    embed = "layers/dinov3_embedding"
    table, skip, _ = tokens(read, embed, 4)
    mlp = {"mlp/gate_proj": "Dense_0_gate", "mlp/up_proj": "Dense_0_up"} if gated else {"mlp/up_proj": "Dense_0"}
    table.update({**dense(f"{embed}/patch_embeddings/projection", "embedding"),
                  **pair("layers/layer_normalization", "Transformer/encoder_norm"),
                  **encoder("layers/dinov3_encoder/layers/dinov3_layer", depth, ("norm1", "norm2"), "attention",
                            {**mlp, "mlp/down_proj": "Dense_1"}, ("layer_scale1", "layer_scale2"), bias, bias["mlp"])})
    qkv, zeros, joined = any(bias[p] for p, _ in _QKV), {}, {}
    for key in (f"Transformer/encoderblock_{i}" for i in range(depth)):
        zeros.update({f"{key}/{ATT}/{part}/bias": (width,) for part, _ in _QKV if qkv and not bias[part]})
        mlp = f"{key}/MlpBlock_3"
        joined.update({f"{mlp}/Dense_0/{kind}": (f"{mlp}/Dense_0_gate/{kind}", f"{mlp}/Dense_0_up/{kind}")
                       for kind in (("kernel", "bias") if bias["mlp"] else ("kernel",)) if gated})
    return Keys(table, skip, zeros=zeros, joined=joined)


FAMILY = Family(
    backbone="DINOV3Backbone", converter="DINOV3ImageConverter", normalization=("ImageNet", IMAGENET),
    fields={"num_register_tokens": ("num_register_tokens", 4), "layer_scale_init": ("layer_scale_init_value", 1.0),
            "mlp_type": ("use_gated_mlp", False), "layer_norm_epsilon": ("layer_norm_eps", 1e-5)},
    switches={"rope": ("dinov3", "DINOV3RopePositionEmbedding (RoPE of the patch tokens, the head's halves rotated)"),
              "rope_grid_indexing": ("ij", "DINOV3RopePositionEmbedding's coordinates (row, column)"),
              "rope_grid_offset": (0.0, "DINOV3RopePositionEmbedding's patch centres (i + 0.5) / n"),
              "position_embedding": (False, "DINOV3Embedding: no absolute position table"),
              "prefix_positions": (False, "DINOV3Embedding: no absolute position table")},
    keys=_keys, special=_special)
