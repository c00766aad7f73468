"""keras-hub's ``DINOV2Backbone`` (``keras_hub/src/models/dinov2/``: ``dinov2_backbone.py``, ``dinov2_layers.py``) as a row.

The class token, LayerScale on both branches, an exact-GELU MLP or SwiGLU (``use_swiglu_ffn``),
``num_register_tokens`` after the class token without positions, every LayerNorm ``epsilon=1e-6``, and two position
tables: ``position_embeddings`` for ``position_embedding_shape`` (what keras-hub keeps) and the one it computes from
it for ``image_shape`` with ``keras.ops.image.resize`` bicubic (``antialias_in_interpolation``), recomputed on every
load; keras_vit resamples by the same rule (:mod:`keras_vit.layers.resampling`). The backbone returns every token
after the final norm.
"""

from keras_vit.weights.conventions import IMAGENET
from keras_vit.weights.declared import declare
from keras_vit.weights.keras_hub.family import Family, Keys, dense, encoder, pair, pyramid_norm, tokens
from keras_vit.weights.mapping import POSEMB_KEY


def _special(read, found):
    """SwiGLU's hidden width, and the position table keras-hub resamples to ``image_shape``."""
    inner = read.number("intermediate_dim")
    if read.flag("use_swiglu_ffn", False):  # DINOV2SwiGLUFFN: weights_in (D, 2 h), silu(x1) * x2
        mlp = (int(inner * 2 / 3) + 7) // 8 * 8
        said = f"{read.said('intermediate_dim', inner)} with use_swiglu_ffn=True ((int({inner} * 2 / 3) + 7) // 8 * 8 = {mlp})"
        declare(found.declared, "mlp_activation", "silu", "config.use_swiglu_ffn=True (SiLU-gated MLP)", read.path)
        declare(found.declared, "mlp_dim", mlp, said, read.path)
    pyramid_norm(read, found)
    antialias = read.flag("antialias_in_interpolation", False)
    table_shape = read.shape("position_embedding_shape", (518, 518, 3))
    method = "bicubic_torch_antialias" if antialias else "bicubic_tf"
    found.position_resampling = method
    grids = [(size[0] // read.patch[0], size[1] // read.patch[1]) for size in (table_shape, read.image)]
    table_said = read.said("position_embedding_shape", list(table_shape))
    if grids[0] == grids[1]:
        return None, ("image_size", table_said, table_shape[:2])
    # the weights' table is checked against position_embedding_shape before it is resampled
    found.notes.append(
        f"position_embeddings for {table_said} ({grids[0][0]} x {grids[0][1]} patches) resampled to config.image_shape's "
        f"{grids[1][0]} x {grids[1][1]} as keras-hub does on load (keras.ops.image.resize bicubic, antialias={antialias}: "
        f"position_resampling={method!r})")
    return (grids[0], grids[1], method, table_said), ("image_size", read.said("image_shape", list(read.image)), read.image[:2])


def _keys(read, depth):
    glu = read.flag("use_swiglu_ffn", False)
    embed = "layers/dinov2_embedding"
    table, skip, n = tokens(read, embed, 0)
    skip[f"^{embed}/vars/{n}$"] = ("interpolated_position_embeddings, which keras-hub recomputes from "
                                   "position_embeddings on load (keras_vit too)")
    table[f"{embed}/vars/{n + 1}"] = POSEMB_KEY
    table.update(dense(f"{embed}/patch_embeddings/projection", "embedding"))
    table.update(pair("layers/layer_normalization", "Transformer/encoder_norm"))
    table.update(encoder("layers/dinov2_encoder/layers/dinov2_layer", depth, ("norm1", "norm2"), "attention/attention",
                         ("mlp/weights_in", "mlp/weights_out") if glu else ("mlp/fc1", "mlp/fc2"), ("layer_scale1", "layer_scale2")))
    return Keys(table, skip)


FAMILY = Family(
    backbone="DINOV2Backbone", converter="DINOV2ImageConverter", normalization=("ImageNet", IMAGENET),
    fields={"num_register_tokens": ("num_register_tokens", 0), "layer_scale_init": ("layer_scale_init_value", 1.0),
            "mlp_type": ("use_swiglu_ffn", False)},
    switches={"layer_norm_epsilon": (1e-6, "DINOV2Backbone's LayerNormalization(epsilon=1e-6)")},
    keys=_keys, special=_special)
