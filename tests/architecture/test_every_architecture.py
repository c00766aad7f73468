"""Every kind of keras_vit architecture through the shared harness (tests/harness.py): one row each."""

import pytest

import keras_vit
from harness import run_model_saving_test, run_model_test

SMALL = dict(hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=5)
ROWS = {
    "token": dict(image_size=32, patch_size=8, **SMALL),
    "gap_prelogits_rectangular": dict(image_size=(32, 48), patch_size=8, pooling="gap", representation_size=16, **SMALL),
    "non_square_patches_logits": dict(image_size=32, patch_size=(8, 4), classifier_activation=None, **SMALL),
    "any_size": dict(image_size=None, native_image_size=(16, 24), patch_size=8, **SMALL),
    "features_no_top": dict(image_size=32, patch_size=16, include_top=False, pooling=None, **SMALL),
    "pooled_no_top_no_preprocessing": dict(image_size=32, patch_size=8, include_top=False, include_preprocessing=False, **SMALL),
    "hybrid": dict(image_size=32, stem="resnet", block_units=(1,), width=0.5, patch_size=1, **SMALL),
    "conv_stem": dict(image_size=28, stem="conv", stem_channels=(8, 16), patch_size=2, **SMALL),
    "transformers_epsilon": dict(image_size=32, patch_size=8, layer_norm_epsilon=1e-12, **SMALL),
    # RoPE-ViT: axial RoPE without a position table, mixed (learnable frequencies per layer) with one
    "rope_axial": dict(image_size=(32, 48), patch_size=8, rope="axial", position_embedding=False, layer_scale_init=1e-5,
                       **dict(SMALL, num_heads=2)),
    "rope_mixed_ape": dict(image_size=32, patch_size=8, rope="mixed", prefix_positions=False, rope_grid_indexing="ij",
                           **dict(SMALL, num_heads=2)),
    # DINOv3: its RoPE, four registers, SwiGLU (the *_plus models), average pooling
    "dinov3_plus": dict(image_size=(32, 48), patch_size=8, rope="dinov3", rope_grid_indexing="ij", position_embedding=False,
                        num_register_tokens=4, prefix_positions=False, mlp_type="glu", mlp_activation="silu",
                        layer_scale_init=1e-5, pooling="gap", **dict(SMALL, num_heads=2)),
    # timm's SBB so150m: registers whose positions are in the table (no class token), on a rectangle for the resampling
    "so150m_register_positions": dict(image_size=(32, 48), patch_size=8, class_token=False, num_register_tokens=4,
                                      register_positions=True, pooling="gap", layer_scale_init=1e-5, **SMALL),
    # timm's vit_base_patch16_rpn_224: residual post-norm blocks, average pooling with fc_norm, no qkv bias
    "res_post_norm": dict(image_size=(32, 48), patch_size=8, res_post_norm=True, class_token=False, pooling="gap",
                          fc_norm=True, final_norm=False, qkv_bias=False, **SMALL),
    # attention pooling over the class and register tokens too (timm's pool_include_prefix; EVA's attention pooling)
    "map_with_prefix": dict(image_size=32, patch_size=8, num_register_tokens=2, pooling="map", pool_include_prefix=True,
                            **SMALL),
    # timm's vit_pwee: parallel blocks (one norm, one LayerScale of both branches), registers, average pooling
    "parallel_blocks": dict(image_size=(32, 48), patch_size=8, parallel_blocks=True, class_token=False, num_register_tokens=1,
                            pooling="gap", fc_norm=True, final_norm=False, layer_scale_init=1e-5, **SMALL),
    # timm's vit_dwee: differential attention (sequential blocks; vit_dpwee's parallel ones in tests/weights)
    "differential_attention": dict(image_size=(32, 48), patch_size=8, differential_attention=True, class_token=False,
                                   num_register_tokens=1, pooling="gap", fc_norm=True, final_norm=False, **SMALL),
    # EVA-02's CLIP towers: axial RoPE on a reference grid, SwiGLU, the sub-LayerNorms in the MLP and the attention
    "eva02_clip": dict(image_size=(32, 48), patch_size=8, rope="axial", rope_reference_grid=(3, 5), rope_grid_indexing="ij",
                       mlp_type="glu", mlp_activation="silu", mlp_norm=True, attention_norm=True, **dict(SMALL, num_heads=2)),
    # Perception Encoder core: axial RoPE on a reference grid with an offset beside the table, a pre-norm, attention
    # pooling with heads and an MLP width of its own, a projection
    "pe_core": dict(image_size=(32, 48), patch_size=8, rope="axial", rope_temperature=10000.0, rope_grid_offset=1.0,
                    rope_reference_grid=(3, 5), pre_norm=True, pooling="map", map_num_heads=8, map_mlp_dim=96,
                    projection_dim=16, layer_norm_epsilon=1e-5, **dict(SMALL, num_heads=2)),
}


@pytest.mark.parametrize("row", sorted(ROWS))
def test_every_architecture_builds_round_trips_and_saves(row, tmp_path):
    model, inputs, _ = run_model_test(ROWS[row])
    run_model_saving_test(model, inputs, tmp_path)


def test_the_builders_are_rows_of_the_same_configuration():
    assert keras_vit.ViTTi16(num_classes=3, image_size=32).vit_config == keras_vit.ViTConfig(
        image_size=32, num_classes=3, **keras_vit.decode_variant("Ti/16")
    )
    hybrid = keras_vit.HybridViT((1,), 0.5, image_size=32, **SMALL).vit_config
    assert hybrid == keras_vit.ViTConfig(**ROWS["hybrid"])
    assert keras_vit.conv_stem_vit(28, (8, 16), **SMALL).vit_config == keras_vit.ViTConfig(**ROWS["conv_stem"])
