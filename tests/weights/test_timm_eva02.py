"""timm's EVA-02 registrations (eva.py ``eva02_{tiny,small,base,large}_patch14_*``, the CLIP towers) and EVA-01's
(``eva_giant_patch14_*``) load exactly, against a NumPy forward pass written from timm's code (tests/reference_eva02.py;
checked against timm itself by tools/check_timm_rope.py): axial RoPE on timm's ``ref_feat_shape`` grid (ViTConfig
``rope_reference_grid``), separate q / k / v projections, the sub-LayerNorms (``mlp_norm``, ``attention_norm``); what
eva.py has beyond them stays refused by name."""

import json
import os

import numpy as np
import pytest
import safetensors.numpy as safetensors_numpy

import keras_vit
import reference_eva02
from keras_vit.architecture.config import ViTConfig
from keras_vit.architecture.params import count_config_params
from keras_vit.errors import CheckpointError
from keras_vit.layers import rope as rope_lib
from keras_vit.weights import timm_models

MEAN, STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
# 4 x 6 patches (and 5 x 3) on a 3 x 5 reference grid: every axis scaled, by a different factor; a width of 48,
# whose SwiGLU width 48 * 4 * 2 / 3 is an integer as EVA-02's are
TINY = dict(patch_size=8, embed_dim=48, depth=2, num_heads=2, mlp_ratio=4 * 2 / 3, ref_feat_shape=[3, 5])


def eva02_folder(folder, size, architecture="eva02_tiny_patch14_224", seed=0, **switches):
    """A Hub folder as timm's ``save_for_hf`` writes it, ``switches`` the registration's in the reference's terms.
    Returns (folder, state dict, args)."""
    args = dict(TINY, img_size=list(size), **switches)
    state = reference_eva02.state_dict(args, seed=seed)
    os.makedirs(folder, exist_ok=True)
    safetensors_numpy.save_file(state, os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as f:
        # the sizes: the registration's mlp_ratio (Eva's SwiGLU width) and switches are its own, model_args leave them out
        model_args = {k: v for k, v in args.items() if k in ("patch_size", "embed_dim", "depth", "num_heads", "img_size")
                      or (k == "ref_feat_shape" and args.get("use_rot_pos_emb", True))}
        json.dump({"architecture": architecture, "num_classes": 0, "num_features": 48, "model_args": model_args,
                   "pretrained_cfg": {"input_size": [3, *size], "mean": MEAN, "std": STD}}, f)
    return folder, state, args


@pytest.mark.parametrize("size", [(32, 48), (40, 24)])
def test_from_pretrained_computes_timms_eva02(size, tmp_path):
    folder, state, args = eva02_folder(str(tmp_path / "eva02"), size)
    model = keras_vit.from_pretrained(folder, include_top=False)
    config = model.vit_config
    assert (config.rope, config.rope_reference_grid, config.rope_grid_indexing) == ("axial", (3, 5), "ij")
    assert config.position_embedding and config.class_token and config.mlp_type == "glu"
    # timm's parameters plus EvaAttention's zero key bias (a weight in keras_vit)
    assert model.count_params() == sum(v.size for v in state.values()) + 2 * 48
    pixels = np.random.default_rng(1).uniform(0, 255, (2, *size, 3)).astype("float32")
    got = np.asarray(model(pixels), np.float64)
    want = np.stack([reference_eva02.forward(image, state, args) for image in pixels])
    assert np.max(np.abs(got - want)) <= 1e-5 * np.max(np.abs(want)), np.max(np.abs(got - want))
    # the same weights without the reference grid compute another model: the scaling is what matched
    grid = [n // 8 for n in size]  # a reference grid equal to the model's: no scaling
    unscaled = np.stack([reference_eva02.forward(image, state, dict(args, ref_feat_shape=grid)) for image in pixels])
    assert np.max(np.abs(got - unscaled)) > 1e-2 * np.max(np.abs(want))


def test_reference_grid_scales_the_coordinates():
    spec = rope_lib.check_spec({"kind": "axial", "grid": (2, 4), "grid_indexing": "ij", "reference_grid": (4, 2)})
    rows, cols = rope_lib.coordinates(spec)
    np.testing.assert_allclose(rows, np.repeat([0.0, 2.0], 4), atol=1e-12)
    np.testing.assert_allclose(cols, np.tile([0.0, 0.5, 1.0, 1.5], 2), atol=1e-12)
    with pytest.raises(ValueError, match="read only with kind 'axial'"):
        rope_lib.check_spec({"kind": "dinov3", "grid": (2, 4), "reference_grid": (4, 2)})


@pytest.mark.parametrize("fields, named", [
    (dict(rope_reference_grid=(16, 16)), "read only with rope"),
    (dict(rope="mixed", rope_reference_grid=(16, 16)), "rope='mixed' has none"),
    (dict(rope="dinov3", rope_reference_grid=(16, 16)), "rope='dinov3' has none"),
    (dict(rope="axial", rope_reference_grid=(16, 0)), "positive ints"),
    (dict(rope="axial", rope_reference_grid=16), "positive ints"),
])
def test_impossible_reference_grids_are_refused(fields, named):
    with pytest.raises(ValueError, match=named):
        ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64, **fields)


def test_reference_grid_round_trips_through_the_config():
    config = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
                       rope="axial", rope_reference_grid=[3, 5])
    assert config.rope_reference_grid == (3, 5)
    assert ViTConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


# EVA-02 B / L, EVA-02's CLIP towers and EVA-01 in the reference's terms (each registration's own switches; the tiny
# sizes in model_args; a registration's mlp_ratio is its own, so L's (2730 / 1024) would not give timm's width at 48)
FORMS = {
    "eva02_base_patch14_224": dict(qkv_fused=False, scale_mlp=True),
    "eva02_base_patch16_clip_224": dict(qkv_fused=False, scale_mlp=True, scale_attn_inner=True, global_pool="token"),
    "eva_giant_patch14_224": dict(swiglu_mlp=False, use_rot_pos_emb=False, mlp_ratio=6144 / 1408),
    # EVA-02-CLIP-E: EvaBlockPostNorm (residual post-norm blocks), no RoPE, GELU, the class token
    "eva02_enormous_patch14_clip_224": dict(swiglu_mlp=False, use_rot_pos_emb=False, mlp_ratio=15360 / 1792,
                                            use_post_norm=True, global_pool="token"),
}


@pytest.mark.parametrize("architecture", sorted(FORMS))
def test_from_pretrained_computes_eva02_base_its_clip_towers_and_eva01(architecture, tmp_path):
    """Separate q / k / v (k without bias) joined into keras_vit's qkv, the NormFormer sub-LayerNorms (mlp_norm,
    attention_norm), EVA-01 without RoPE, EVA-02-CLIP-E's post-norm blocks: timm's output within 1e-5."""
    switches = FORMS[architecture]
    folder, state, args = eva02_folder(str(tmp_path / "eva"), (32, 48), architecture=architecture, **switches)
    model = keras_vit.from_pretrained(folder, include_top=False)
    config = model.vit_config
    assert (config.mlp_norm, config.attention_norm) == (bool(switches.get("scale_mlp")), bool(switches.get("scale_attn_inner")))
    assert config.rope == ("axial" if switches.get("use_rot_pos_emb", True) else None)
    assert config.pooling == ("token" if switches.get("global_pool") == "token" else "gap")
    assert config.res_post_norm == bool(switches.get("use_post_norm")) and config.layer_scale_init is None
    # timm's parameters plus EvaAttention's key bias (zeros: a buffer, or no k_proj bias; a weight in keras_vit)
    assert model.count_params() == sum(v.size for v in state.values()) + 2 * 48
    pixels = np.random.default_rng(1).uniform(0, 255, (2, 32, 48, 3)).astype("float32")
    got = np.asarray(model(pixels), np.float64)
    want = np.stack([reference_eva02.forward(image, state, args) for image in pixels])
    assert np.max(np.abs(got - want)) <= 1e-5 * np.max(np.abs(want)), np.max(np.abs(got - want))
    key_bias = model.get_layer("transformer_block_1").attention.key_dense.bias
    assert not np.any(np.asarray(key_bias))


def test_sub_layer_norms_are_fields_counted_and_round_tripped():
    small = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=2, mlp_dim=48)
    config = ViTConfig(**small, mlp_norm=True, attention_norm=True)
    assert ViTConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    model = keras_vit.ViT(**small, mlp_norm=True, attention_norm=True)
    assert model.count_params() == keras_vit.ViT(**small).count_params() + 2 * (2 * 48 + 2 * 32)
    assert model.count_params() == count_config_params(model.vit_config)
    block = model.get_layer("transformer_block_0")
    reloaded = type(block).from_config(block.get_config())
    assert (reloaded.mlp_norm, reloaded.attention_norm, reloaded.get_config()) == (True, True, block.get_config())
    for field in ("mlp_norm", "attention_norm"):
        with pytest.raises(ValueError, match=f"`{field}` must be a bool. Received: {field}='yes'"):
            ViTConfig(**small, **{field: "yes"})


def test_weights_contradicting_the_registration_or_without_it_are_refused(tmp_path):
    # EVA-02 B's weights (mlp.norm, q_proj / k_proj / v_proj) under Ti's name: Ti has no norm inside the MLP
    folder, _, _ = eva02_folder(str(tmp_path / "base"), (32, 48), architecture="eva02_tiny_patch14_224", **FORMS["eva02_base_patch14_224"])
    with pytest.raises(CheckpointError, match=r"scale_mlp_norm=False.*'blocks.0.mlp.norm.weight'"):
        keras_vit.from_pretrained(folder)
    # without config.json: separate q / k / v show an EVA-02, whose RoPE is not in the weights (an ungated MLP: nothing
    # else is asked of the file first)
    folder, _, _ = eva02_folder(str(tmp_path / "bare"), (32, 48), qkv_fused=False, swiglu_mlp=False)
    os.remove(os.path.join(folder, "config.json"))
    with pytest.raises(CheckpointError, match="separate q / k / v projections .* no config.json naming its architecture"):
        keras_vit.from_pretrained(os.path.join(folder, "model.safetensors"))


def test_what_eva_py_still_has_that_keras_vit_lacks_stays_refused_by_name():
    assert not any(timm_models.lacking(a) for a in FORMS)
    # separate q / k / v in timm's AttentionRope (a key bias, Sapiens2's) are not EVA's
    assert "separate q / k / v projections (keras_vit reads EVA's own" in timm_models.lacking("vit_base_patch16_sapiens2")[0]
