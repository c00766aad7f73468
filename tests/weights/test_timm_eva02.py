"""timm's EVA-02 Ti / S registrations (eva.py ``eva02_{tiny,small}_patch14_{224,336}``) load exactly, against a NumPy
forward pass written from timm's code (tests/reference_eva02.py; checked against timm itself by
tools/check_timm_rope.py): axial RoPE on timm's ``ref_feat_shape`` grid (ViTConfig ``rope_reference_grid``); what
EVA-02 B / L and the CLIP towers add stays refused by name."""

import json
import os

import numpy as np
import pytest
import safetensors.numpy as safetensors_numpy

import keras_vit
import reference_eva02
from keras_vit.architecture.config import ViTConfig
from keras_vit.errors import CheckpointError
from keras_vit.layers import rope as rope_lib
from keras_vit.weights import timm_models

MEAN, STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
# 4 x 6 patches (and 5 x 3) on a 3 x 5 reference grid: every axis scaled, by a different factor; a width of 48,
# whose SwiGLU width 48 * 4 * 2 / 3 is an integer as EVA-02's are
TINY = dict(patch_size=8, embed_dim=48, depth=2, num_heads=2, mlp_ratio=4 * 2 / 3, ref_feat_shape=[3, 5])


def eva02_folder(folder, size, architecture="eva02_tiny_patch14_224", seed=0):
    """A Hub folder as timm's ``save_for_hf`` writes it. Returns (folder, state dict, args)."""
    args = dict(TINY, img_size=list(size))
    state = reference_eva02.state_dict(args, seed=seed)
    os.makedirs(folder, exist_ok=True)
    safetensors_numpy.save_file(state, os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as f:
        # the registration's mlp_ratio (4 * 2 / 3, Eva's SwiGLU width): model_args leave it out
        model_args = {k: v for k, v in args.items() if k != "mlp_ratio"}
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


def test_eva02_base_large_and_clip_switches_stay_refused_by_name(tmp_path):
    for architecture in ("eva02_base_patch14_448", "eva02_large_patch14_224"):
        why = timm_models.lacking(architecture)[0]
        assert "separate q / k / v projections (qkv_fused=False)" in why and "a norm inside the MLP (scale_mlp=True)" in why
    assert "a norm inside attention (scale_attn_inner=True)" in timm_models.lacking("eva02_large_patch14_clip_224")[0]
    assert not timm_models.lacking("eva02_small_patch14_336")
    folder, _, _ = eva02_folder(str(tmp_path / "base"), (32, 48), architecture="eva02_base_patch14_224")
    with pytest.raises(CheckpointError, match="a norm inside the MLP"):
        keras_vit.from_pretrained(folder)
