"""keras-hub's ``SigLIPBackbone`` (``keras_hub/src/models/siglip/``: ``SigLIPVisionEncoder``, ``siglip_layers.py``)
as a row: its ``vision_encoder``.

No class token, ``intermediate_activation`` ``"gelu_approximate"`` (keras_vit's ``gelu_tanh``),
``layer_norm_epsilon`` in the blocks and the pooling head, ``post_layer_norm`` fixed at 1e-6, the
attention-pooling head (keras_vit's ``pooling="map"``); the text tower and the ``SigLIPHead``'s logit scale and
bias are skipped and reported.
"""

from keras_vit.errors import CheckpointError
from keras_vit.weights.conventions import HALF
from keras_vit.weights.keras_hub.family import POSITION_IDS, TEXT, Family, Keys, dense, encoder, mha, pair
from keras_vit.weights.mapping import MAP_ATT, POSEMB_KEY

_ENCODER = "SigLIPVisionEncoder"


def _special(read, found):
    epsilon = read.number("layer_norm_epsilon", 1e-6, integer=False)
    if abs(epsilon - 1e-6) > 1e-9:
        raise CheckpointError(
            f"{read.path!r}: {read.where}layer_norm_epsilon={epsilon!r}: keras-hub's SigLIPVisionEncoder keeps 1e-6 in its "
            "post_layer_norm and uses this one in the blocks and the pooling head; keras_vit has one epsilon for every "
            "LayerNorm, so this preset would compute something else."
        )


def _keys(read, depth):
    vision = "layers/sig_lip_vision_encoder/layers"
    embed, head = f"{vision}/sig_lip_vision_embedding", f"{vision}/sig_lip_multi_head_attention_pooling"
    table = {**dense(f"{embed}/patch_embedding", "embedding"), f"{embed}/position_embedding/vars/0": POSEMB_KEY,
             **pair(f"{vision}/layer_normalization", "Transformer/encoder_norm"),
             f"{head}/vars/0": "MAPHead_0/probe", **mha(f"{head}/attention", MAP_ATT), **pair(f"{head}/layer_norm", "MAPHead_0/LayerNorm_0"),
             **dense(f"{head}/mlp/fc1", "MAPHead_0/MlpBlock_0/Dense_0"), **dense(f"{head}/mlp/fc2", "MAPHead_0/MlpBlock_0/Dense_1")}
    table.update(encoder(f"{vision}/sig_lip_encoder_layer", depth, ("layer_norm1", "layer_norm2"), "self_attn", ("mlp/fc1", "mlp/fc2")))
    table[f"{embed}/vars/0"] = POSITION_IDS
    return Keys(table, skip={"^layers/sig_lip_text_encoder/": TEXT.format("SigLIP"),
                             "^layers/sig_lip_head/": "SigLIPHead's logit_scale and logit_bias (image-text similarity)"})


FAMILY = Family(
    backbone="SigLIPBackbone", vision=_ENCODER, converter="SigLIPImageConverter",
    normalization=("0.5 / 0.5", HALF),
    fields={"layer_norm_epsilon": ("layer_norm_epsilon", 1e-6), "mlp_activation": ("intermediate_activation", "gelu_approximate")},
    switches={"class_token": (False, f"{_ENCODER}: no class token"),
              "pooling": ("map", f"{_ENCODER}'s head (SigLIPMultiHeadAttentionPooling)")},
    keys=_keys, special=_special)
