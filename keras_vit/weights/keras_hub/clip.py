"""keras-hub's ``CLIPBackbone`` (``keras_hub/src/models/clip/``: ``CLIPVisionEncoder``, ``clip_layers.py``) as a
row: its ``vision_encoder``.

``pre_layer_norm``, quick GELU, every LayerNorm ``epsilon=1e-5``, a patch embedding without bias (zeros stand
in), ``vision_pooler`` (the class token after ``layer_norm``: keras_vit's ``fc_norm``) and the bias-free
``vision_projection`` (``projection_dim``); the text tower, ``text_projection`` and the ``CLIPHead``'s logit scale
are skipped and reported.
"""

from keras_vit.weights import config as config_lib
from keras_vit.weights.conventions import CLIP_MEAN_STD
from keras_vit.weights.declared import declare
from keras_vit.weights.keras_hub.family import POSITION_IDS, TEXT, Family, Keys, encoder, pair
from keras_vit.weights.mapping import POSEMB_KEY

_ENCODER = "CLIPVisionEncoder"


def _special(read, found):
    """``projection_dim`` of the backbone's own config (not the vision encoder's), and the notes."""
    top = config_lib.Fields(read.top, read.path, "config.", required="a CLIPBackbone's config")
    projection = top.number("projection_dim")
    declare(found.declared, "projection_dim", projection, f"config.projection_dim={projection!r} (vision_projection)", read.path)
    found.notes.append("CLIP's patch embedding has no bias: keras_vit's (embedding/bias) is zeros")
    if read.config.get("intermediate_output_index") is not None:
        found.notes.append(f"{read.said('intermediate_output_index', read.config['intermediate_output_index'])}: that extra "
                           "output is not built (the image embedding is)")


def _keys(read, depth):
    vision = "layers/clip_vision_encoder/layers"
    embed = f"{vision}/clip_vision_embedding"
    table = {f"{embed}/vars/0": "cls", f"{embed}/vars/1": POSITION_IDS, f"{embed}/patch_embedding/vars/0": "embedding/kernel",
             f"{embed}/position_embedding/vars/0": POSEMB_KEY, **pair(f"{vision}/layer_normalization", "Transformer/pre_norm"),
             **pair(f"{vision}/layer_normalization_1", "fc_norm"), "layers/dense/vars/0": "projection/kernel"}
    table.update(encoder(f"{vision}/clip_encoder_layer", depth, ("layer_norm_1", "layer_norm_2"), "attention", ("dense_1", "dense_2")))
    return Keys(table, named={"layers/dense/vars": ("vision_projection", None),
                              "layers/dense_1/vars": ("text_projection", "the text tower's projection (text_projection)")},
                zeros={"embedding/bias": (read.number("hidden_dim"),)},
                skip={"^layers/clip_text_encoder/": TEXT.format("CLIP"), "^layers/clip_head/": "CLIPHead's logit_scale (image-text similarity)"})


FAMILY = Family(
    backbone="CLIPBackbone", vision=_ENCODER, converter="CLIPImageConverter",
    normalization=("OpenAI CLIP", CLIP_MEAN_STD),
    fields={"mlp_activation": ("intermediate_activation", "quick_gelu")},
    switches={"layer_norm_epsilon": (1e-5, f"{_ENCODER}'s LayerNormalization(epsilon=1e-5)"),
              "pre_norm": (True, f"{_ENCODER}: pre_layer_norm"),
              "final_norm": (False, f"{_ENCODER}: layer_norm read on the class token"),
              "fc_norm": (True, f"{_ENCODER}: layer_norm read on the class token (CLIPVisionPooler)")},
    keys=_keys, special=_special)
