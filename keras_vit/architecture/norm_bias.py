"""AIMv2's switches of :class:`~keras_vit.architecture.config.ViTConfig`: the norm type, a norm of the patch
embeddings, and projections without biases; checked and normalised here, impossible combinations refused by name.

AIMv2 (timm's ``aimv2_*``: ``norm_layer=RmsNorm``, ``embed_norm_layer=RmsNorm``, ``mlp_layer=SwiGLU``,
``qkv_bias=False``, ``proj_bias=False``; transformers' ``Aimv2VisionModel``) is ``norm_type="rmsnorm"``,
``patch_norm=True``, ``qkv_bias=False``, ``proj_bias=False``, ``mlp_bias=False`` with ``mlp_type="glu"`` and
``mlp_activation="silu"`` (SwiGLU: ``silu(x W_gate) * (x W_up)``).

Example:
>>> from keras_vit.architecture.config import ViTConfig
>>> aimv2 = ViTConfig(image_size=28, patch_size=14, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=88,
...                   norm_type="rmsnorm", patch_norm=True, qkv_bias=False, proj_bias=False, mlp_bias=False,
...                   mlp_type="glu", mlp_activation="silu", class_token=False, pooling="gap")
>>> aimv2.norm_type, aimv2.patch_norm, aimv2.mlp_bias
('rmsnorm', True, False)
>>> ViTConfig(norm_type="rmsnorm", pooling="map")
Traceback (most recent call last):
...
ValueError: Impossible ViTConfig: pooling='map' is SigLIP's attention-pooling head, whose norm is a LayerNorm (and its MLP biased): no published model has it with norm_type='rmsnorm'. Received: norm_type='rmsnorm', pooling='map'
"""

import numbers

from keras_vit.layers.normalization import NORM_TYPES

# the fields this module checks, with the paper's values
PAPER = {"norm_type": "layernorm", "patch_norm": False, "proj_bias": True, "mlp_bias": True}


def validate(config, set_):
    """Check and normalise the fields of :data:`PAPER` in ``config`` (a ``ViTConfig`` being created); ``set_(name,
    value)`` stores a normalised value. Raises a ``ValueError`` naming the field, or the fields of a combination."""
    if config.norm_type not in NORM_TYPES:
        raise ValueError(f"Unknown `norm_type`: expected one of {NORM_TYPES}. Received: norm_type={config.norm_type!r}")
    for flag in ("patch_norm", "proj_bias", "mlp_bias"):
        value = getattr(config, flag)
        if not isinstance(value, (bool, numbers.Integral)):
            raise ValueError(f"`{flag}` must be a bool. Received: {flag}={value!r}")
        set_(flag, bool(value))
    if config.norm_type != "layernorm" and (config.mlp_norm or config.attention_norm):
        raise ValueError(
            "Impossible ViTConfig: mlp_norm and attention_norm are NormFormer's sub-LayerNorms (EVA-02's, BEiT-3's); "
            f"no published model has them with norm_type={config.norm_type!r}, and keras_vit builds them as LayerNorms. "
            f"Received: norm_type={config.norm_type!r}, mlp_norm={config.mlp_norm!r}, attention_norm={config.attention_norm!r}"
        )
    if config.pooling == "map" and config.norm_type != "layernorm":
        raise ValueError(
            "Impossible ViTConfig: pooling='map' is SigLIP's attention-pooling head, whose norm is a LayerNorm (and its "
            f"MLP biased): no published model has it with norm_type={config.norm_type!r}. "
            f"Received: norm_type={config.norm_type!r}, pooling='map'"
        )
