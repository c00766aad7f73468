"""timm's registered ViT family members, as data: architecture name -> the ``model_args`` timm builds it with.

A timm Hub repository's ``config.json`` names its ``architecture`` (``"vit_small_patch14_dinov2"``) and
usually carries no ``model_args``: timm builds the model from the function registered under that name.
What the weights do not show (the MLP activation, the LayerNorm epsilon, LayerScale's initial value,
the pooling of a model with a class token) is read here; ``model_args`` in the config.json override it
(:mod:`keras_vit.weights.timm_config`), and the state dict's shapes are checked against both.

Every row was copied from huggingface/pytorch-image-models (commit aa4b5850, 2026-08):
``timm/models/vision_transformer.py`` (the ``@register_model`` functions' ``model_args``) and
``timm/models/deit.py`` (``deit3_*``; ``deit_*_distilled_*``, built by ``VisionTransformerDistilled``:
``distilled``). ``img_size`` is the ``input_size`` of the architecture's ``default_cfgs`` entries, which
timm's ``build_model_with_cfg`` passes as ``img_size`` (``_update_default_model_kwargs``). ``norm_eps``
is the ``eps`` of the registration's ``norm_layer=partial(LayerNorm, eps=1e-5)`` (timm's CLIP models),
else ``VisionTransformer``'s 1e-6. Keys are timm's argument names, so a row reads like its registration.
"""

# VisionTransformer.__init__'s defaults for the arguments keras_vit reads
DEFAULTS = dict(
    patch_size=16, embed_dim=768, depth=12, num_heads=12, mlp_ratio=4.0, qkv_bias=True, class_token=True,
    reg_tokens=0, no_embed_class=False, init_values=None, global_pool="token", fc_norm=None, pre_norm=False,
    final_norm=True, act_layer=None, mlp_layer=None, img_size=224, dynamic_img_size=False, norm_eps=1e-6,
    distilled=False,
)

_S, _B, _L = dict(embed_dim=384, depth=12, num_heads=6), dict(embed_dim=768, depth=12, num_heads=12), dict(
    embed_dim=1024, depth=24, num_heads=16)
_G = dict(embed_dim=1536, depth=40, num_heads=24, mlp_ratio=2.66667 * 2, mlp_layer="SwiGLUPacked", act_layer="silu")
_SO400M = dict(embed_dim=1152, depth=27, num_heads=16, mlp_ratio=3.7362)
_DINOV2 = dict(patch_size=14, init_values=1e-5, img_size=518)
_REG4 = dict(reg_tokens=4, no_embed_class=True)
_SIGLIP = dict(class_token=False, global_pool="map")
_CLIP = dict(pre_norm=True, norm_eps=1e-5)
_QUICK = dict(act_layer="quick_gelu")
_DEIT3 = dict(patch_size=16, no_embed_class=True, init_values=1e-6)
_GAP = dict(patch_size=16, class_token=False, no_embed_class=True, reg_tokens=4, global_pool="avg", img_size=256)

ARCHITECTURES = {
    # DINOv2 (Oquab et al.); "with registers" (Darcet et al.): timm's _convert_dinov2 makes them no_embed_class
    "vit_small_patch14_dinov2": dict(_DINOV2, **_S),
    "vit_base_patch14_dinov2": dict(_DINOV2, **_B),
    "vit_large_patch14_dinov2": dict(_DINOV2, **_L),
    "vit_giant_patch14_dinov2": dict(_DINOV2, **_G),
    "vit_small_patch14_reg4_dinov2": dict(_DINOV2, **_S, **_REG4),
    "vit_base_patch14_reg4_dinov2": dict(_DINOV2, **_B, **_REG4),
    "vit_large_patch14_reg4_dinov2": dict(_DINOV2, **_L, **_REG4),
    "vit_giant_patch14_reg4_dinov2": dict(_DINOV2, **_G, **_REG4),
    # SigLIP image towers with their attention pooling (timm: default nn.GELU, the exact one)
    "vit_base_patch16_siglip_224": dict(_SIGLIP, patch_size=16, **_B),
    "vit_base_patch16_siglip_256": dict(_SIGLIP, patch_size=16, img_size=256, **_B),
    "vit_base_patch16_siglip_384": dict(_SIGLIP, patch_size=16, img_size=384, **_B),
    "vit_large_patch16_siglip_256": dict(_SIGLIP, patch_size=16, img_size=256, **_L),
    "vit_large_patch16_siglip_384": dict(_SIGLIP, patch_size=16, img_size=384, **_L),
    "vit_so400m_patch14_siglip_224": dict(_SIGLIP, patch_size=14, **_SO400M),
    "vit_so400m_patch14_siglip_384": dict(_SIGLIP, patch_size=14, img_size=384, **_SO400M),
    # CLIP image towers (ln_pre, LayerNorm eps 1e-5; the *_quickgelu_* registrations: OpenAI's own activation)
    "vit_base_patch32_clip_224": dict(_CLIP, patch_size=32, **_B),
    "vit_base_patch16_clip_224": dict(_CLIP, patch_size=16, **_B),
    "vit_large_patch14_clip_224": dict(_CLIP, patch_size=14, **_L),
    "vit_base_patch32_clip_quickgelu_224": dict(_CLIP, patch_size=32, **_B, **_QUICK),
    "vit_base_patch16_clip_quickgelu_224": dict(_CLIP, patch_size=16, **_B, **_QUICK),
    "vit_large_patch14_clip_quickgelu_224": dict(_CLIP, patch_size=14, **_L, **_QUICK),
    # DeiT III (deit.py); distilled DeiT (deit.py, VisionTransformerDistilled)
    "deit3_small_patch16_224": dict(_DEIT3, **_S),
    "deit3_small_patch16_384": dict(_DEIT3, img_size=384, **_S),
    "deit3_base_patch16_224": dict(_DEIT3, **_B),
    "deit3_base_patch16_384": dict(_DEIT3, img_size=384, **_B),
    "deit3_large_patch16_224": dict(_DEIT3, **_L),
    "deit3_large_patch16_384": dict(_DEIT3, img_size=384, **_L),
    "deit_tiny_distilled_patch16_224": dict(patch_size=16, embed_dim=192, depth=12, num_heads=3, distilled=True),
    "deit_small_distilled_patch16_224": dict(patch_size=16, distilled=True, **_S),
    "deit_base_distilled_patch16_224": dict(patch_size=16, distilled=True, **_B),
    "deit_base_distilled_patch16_384": dict(patch_size=16, distilled=True, img_size=384, **_B),
    # the paper's ViT, which timm's MAE weights (*.mae, no head) load into
    "vit_base_patch16_224": dict(patch_size=16, **_B),
    "vit_large_patch16_224": dict(patch_size=16, **_L),
    "vit_huge_patch14_224": dict(patch_size=14, embed_dim=1280, depth=32, num_heads=16),
    # timm's "SBB" register models with global average pooling (fc_norm after pooling, timm's rule for 'avg')
    "vit_medium_patch16_reg4_gap_256": dict(_GAP, embed_dim=512, depth=12, num_heads=8, init_values=1e-5),
    "vit_betwixt_patch16_reg4_gap_256": dict(_GAP, embed_dim=640, depth=12, num_heads=10, init_values=1e-5),
    "vit_base_patch16_reg4_gap_256": dict(_GAP, **_B),
    # the paper's hybrids (vision_transformer_hybrid.py): backbone_layers = the stage depths of _resnetv2(layers),
    # () for its stem alone; patch_size on the backbone's feature map (_create_vision_transformer_hybrid: 1)
    "vit_tiny_r_s16_p8_224": dict(patch_size=8, embed_dim=192, depth=12, num_heads=3, backbone_layers=()),
    "vit_tiny_r_s16_p8_384": dict(patch_size=8, embed_dim=192, depth=12, num_heads=3, backbone_layers=(), img_size=384),
    "vit_small_r26_s32_224": dict(patch_size=1, **_S, backbone_layers=(2, 2, 2, 2)),
    "vit_small_r26_s32_384": dict(patch_size=1, **_S, backbone_layers=(2, 2, 2, 2), img_size=384),
    "vit_base_r26_s32_224": dict(patch_size=1, **_B, backbone_layers=(2, 2, 2, 2)),
    "vit_base_r50_s16_224": dict(patch_size=1, **_B, backbone_layers=(3, 4, 9)),
    "vit_base_r50_s16_384": dict(patch_size=1, **_B, backbone_layers=(3, 4, 9), img_size=384),
    "vit_large_r50_s32_224": dict(patch_size=1, **_L, backbone_layers=(3, 4, 6, 3)),
    "vit_large_r50_s32_384": dict(patch_size=1, **_L, backbone_layers=(3, 4, 6, 3), img_size=384),
}


def registered(architecture):
    """The ``model_args`` timm registers for ``architecture`` (a pretrained tag after ``.`` is ignored), or None.

    Example:
    >>> registered("vit_small_patch14_reg4_dinov2.lvd142m")["reg_tokens"]
    4
    >>> registered("vit_x") is None
    True
    """
    if not isinstance(architecture, str):
        return None
    row = ARCHITECTURES.get(architecture.partition(".")[0])
    return dict(row) if row is not None else None
