"""transformers' AIMv2 (``modeling_aimv2.py``): the ``aimv2_vision_model`` and ``aimv2`` rows' blocks, as ViTConfig's
switches.

``Aimv2VisionModel``: ``Aimv2VisionEmbeddings`` (the patch ``Conv2d`` with its bias, ``rms_norm`` of the patch
embeddings, a learned ``position_embedding`` of the patches: no class token), ``Aimv2EncoderLayer`` (``rms_norm1``,
``Aimv2Attention``: ``q/k/v/out_proj`` with biases where ``qkv_bias``, the output projection's too; ``rms_norm2``,
``Aimv2MLP``: ``down_proj(act(gate_proj x) * up_proj x)``, biases where ``mlp_bias``), a final ``rms_norm``; every
RMSNorm of ``rms_norm_eps``. With ``use_head=False`` it returns ``last_hidden_state`` (keras_vit's ``pooling=None``).
What keras_vit does not build is refused by name (:data:`REFUSED_FIELDS`, :data:`REFUSED_CLASSES`).
"""

from keras_vit.errors import CheckpointError
from keras_vit.layers.kernels import ACTIVATIONS
from keras_vit.weights.declared import activation

# Aimv2VisionConfig's defaults (transformers 5.24)
DEFAULTS = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=24, num_attention_heads=8, num_channels=3,
                image_size=224, patch_size=14, hidden_act="silu", rms_norm_eps=1e-5, qkv_bias=False, mlp_bias=False,
                use_head=True, is_native=False)
SWITCHES = {"class_token": (False, "no class token"), "norm_type": ("rmsnorm", "Aimv2RMSNorm in every norm"),
            "patch_norm": (True, "Aimv2VisionEmbeddings.rms_norm of the patch embeddings"),
            "pooling": (None, "last_hidden_state, every token (no pooler without use_head)")}
# what keras_vit does not build, as the config says it: field -> (the value that needs it, what it is)
REFUSED_FIELDS = {
    "use_head": (True, "AIMv2's attention-pooling head (Aimv2AttentionPoolingHead: a learned query without a query "
                       "projection, key and value projections, output_proj), which keras_vit does not build; an "
                       "Aimv2VisionModel with use_head=False loads (its last_hidden_state)"),
    "is_native": (True, "AIMv2's native-resolution position embeddings (2-D sin-cos, built for each image size), "
                        "which keras_vit does not build"),
}
REFUSED_CLASSES = {"Aimv2Model": (
    "Aimv2Model's image embedding is visual_projection of its vision tower's attention-pooling head "
    "(Aimv2AttentionPoolingHead), which keras_vit does not build; an Aimv2VisionModel repository with use_head=False "
    "loads (the vision tower's last_hidden_state)")}
FIXED_SIZE = "AIMv2's position table, which Aimv2VisionEmbeddings adds at this size only (no interpolate_pos_encoding)"


def blocks(put, read, path, expected):
    """Declare (``put``) what ``read`` (the vision config's :class:`~keras_vit.weights.config.Fields`) says of AIMv2's
    blocks: the gated MLP, its activation and width, and the biases; refuse the parts keras_vit lacks."""
    for field, (value, why) in REFUSED_FIELDS.items():
        if read.flag(field) == value:
            raise CheckpointError(f"{path!r}: {read.said(field, value)}: {why}.")
    act = read.config.get("hidden_act", DEFAULTS["hidden_act"])
    if not isinstance(act, str) or activation(act) not in ACTIVATIONS:
        raise CheckpointError(f"{path!r}: {read.where}hidden_act={act!r} is no activation keras_vit's MLP has.")
    mlp = read.number("intermediate_size")
    said = read.said("intermediate_size", mlp)
    put("mlp_type", "glu", "Aimv2MLP (down_proj(act(gate_proj x) * up_proj x))")
    put("mlp_activation", activation(act), read.said("hidden_act", act) + " (gated: act(gate_proj x) * up_proj x)")
    put("mlp_dim", mlp, said)
    expected.append(("mlp_dim", said, 2 * mlp))  # gate_proj and up_proj joined
    qkv, mlp_bias = read.flag("qkv_bias"), read.flag("mlp_bias")
    put("qkv_bias", qkv, read.said("qkv_bias", qkv))
    put("proj_bias", qkv, read.said("qkv_bias", qkv) + " (Aimv2Attention's out_proj too)")
    put("mlp_bias", mlp_bias, read.said("mlp_bias", mlp_bias))
