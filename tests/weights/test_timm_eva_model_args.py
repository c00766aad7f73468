"""A config.json's ``model_args.global_pool`` on an Eva registration is read as timm's Eva reads it.

timm's ``Eva.__init__`` derives its norms (``use_fc_norm`` None: on for ``'avg'``; the final norm otherwise) and its
attention pooling's reach (``AttentionPoolLatent`` over every token, prefix tokens included) from ``global_pool``
together with the other arguments. keras_vit read those from the registration and then laid ``model_args`` over
the result, so ``model_args={'global_pool': 'map'}`` on RoPE-ViT, DINOv3 ``_qkvb``, LingBot or PE spatial pooled the
patch tokens only (1e-2 relative off timm's pooled features, silently), and ``'token'`` on EVA-02 / ``'avg'`` on
PE core or RoPE-ViT was refused as a config that "belongs to another model" (timm 1.0.31 builds and saves each).
"""

import pytest

from keras_vit.errors import CheckpointError
from keras_vit.weights import timm_config


def _resolve(architecture, **model_args):
    return timm_config.resolve({"architecture": architecture, "model_args": model_args}, "config.json")


@pytest.mark.parametrize("architecture", ["vit_small_patch16_rope_224", "vit_small_patch16_dinov3_qkvb",
                                          "vit_small_patch16_lingbot", "vit_pe_spatial_tiny_patch16_512"])
def test_attention_pooling_from_model_args_reads_the_prefix_tokens(architecture):
    resolved = _resolve(architecture, global_pool="map")
    assert resolved["global_pool"][0] == "map"
    assert resolved["pool_include_prefix"][0] is True  # timm's Eva: AttentionPoolLatent(x) over every token
    assert "global_pool" in resolved["pool_include_prefix"][1]


@pytest.mark.parametrize("architecture, global_pool, fc_norm", [
    ("eva02_tiny_patch14_224", "token", False),  # registered 'avg' with fc_norm: 'token' takes the final norm
    ("vit_pe_core_tiny_patch16_384", "avg", True),  # registered 'map': 'avg' takes fc_norm, patch tokens only
    ("vit_small_patch16_rope_mixed_ape_224", "avg", True),  # registered 'token'
])
def test_the_norms_follow_model_args_global_pool(architecture, global_pool, fc_norm):
    resolved = _resolve(architecture, global_pool=global_pool)
    assert resolved["fc_norm"][0] is fc_norm
    assert resolved["final_norm"][0] is True
    assert resolved["pool_include_prefix"][0] is False


def test_model_args_that_make_what_keras_vit_lacks_are_refused_by_name():
    with pytest.raises(CheckpointError, match="global_pool='map' with qkv_bias=False"):
        _resolve("vit_small_patch16_dinov3", global_pool="map")  # timm's AttentionPoolLatent keeps its biases


def test_other_registrations_and_plain_model_args_are_unchanged():
    assert _resolve("vit_small_patch16_dinov3", depth=2)["pool_include_prefix"] == _resolve("vit_small_patch16_dinov3")["pool_include_prefix"]
    assert _resolve("eva02_tiny_patch14_224", dynamic_img_size=True)["fc_norm"][0] is True
    assert _resolve("vit_small_patch14_reg4_dinov2", global_pool="map")["pool_include_prefix"][0] is False  # VisionTransformer's


def test_a_top_level_global_pool_is_read_with_the_registration_too():
    resolved = timm_config.resolve({"architecture": "vit_small_patch16_rope_224", "global_pool": "map"}, "config.json")
    assert resolved["pool_include_prefix"][0] is True


def test_pool_include_prefix_with_token_pooling_is_timms_no_op():
    """timm's VisionTransformer.pool reads pool_include_prefix for the mean and attention pooling only; with
    global_pool='token' it was an 'Impossible ViTConfig' here, though timm builds and saves the model."""
    resolved = _resolve("vit_small_patch14_reg4_dinov2", global_pool="token", pool_include_prefix=True)
    assert resolved["pool_include_prefix"][0] is False and "ignores" in resolved["pool_include_prefix"][1]
    assert _resolve("vit_small_patch14_reg4_dinov2", global_pool="avg", pool_include_prefix=True)["pool_include_prefix"][0] is True


def test_model_args_dynamic_img_size_false_lifts_the_registration_s():
    """DINOv3 with an absolute table (model_args use_abs_pos_emb=True, dynamic_img_size=False: timm 1.0.31 builds it,
    the class and register tokens' positions in pos_embed) is the fixed-size model keras_vit builds; the registration's
    dynamic_img_size=True stayed and refused it."""
    resolved = _resolve("vit_small_patch16_dinov3", use_abs_pos_emb=True, dynamic_img_size=False)
    assert resolved["no_embed_class"][0] is False and resolved["reg_tokens"][0] == 4
    with pytest.raises(CheckpointError, match="dynamic image size with an absolute position table"):
        _resolve("vit_small_patch16_dinov3", use_abs_pos_emb=True)


@pytest.mark.parametrize("architecture, model_args, field, value", [
    ("eva02_tiny_patch14_224", dict(use_fc_norm=False), "fc_norm", False),
    ("vit_small_patch16_dinov3", dict(use_fc_norm=True), "fc_norm", True),
    ("vit_small_patch16_dinov3", dict(num_reg_tokens=0), "reg_tokens", 0),
    ("eva02_tiny_patch14_224", dict(num_reg_tokens=2), "reg_tokens", 2),
    ("eva02_tiny_patch14_224", dict(scale_mlp=True), "scale_mlp_norm", True),
    ("eva02_tiny_patch14_224", dict(scale_attn_inner=True), "scale_attn_norm", True),
    ("eva02_tiny_patch14_224", dict(use_post_norm=True), "res_post_norm", True),
    ("vit_pe_core_tiny_patch16_384", dict(use_pre_transformer_norm=False), "pre_norm", False),
    ("vit_small_patch16_dinov3", dict(use_rot_pos_emb=False), "use_rot_pos_emb", False),  # rope_rotate_half: no RoPE
])
def test_eva_own_model_args_are_read_with_the_registration(architecture, model_args, field, value):
    """Eva's own arguments in model_args (timm 1.0.31 builds and saves each; keras_vit matched timm's output on every
    one, within 4e-7) were refused as 'no timm VisionTransformer argument keras_vit knows'."""
    assert _resolve(architecture, **model_args)[field][0] == value


def test_eva_model_args_keras_vit_lacks_stay_refused_by_name():
    with pytest.raises(CheckpointError, match="half-split rotation with rope_type='cat'"):
        _resolve("vit_small_patch16_rope_224", rope_rotate_half=True)
    with pytest.raises(CheckpointError, match="query/key normalisation"):
        _resolve("vit_small_patch16_dinov3", qk_norm=True)
