"""timm's RoPE-ViT registrations (eva.py ``vit_*_patch16_rope*_224``) load exactly, against a NumPy forward pass written
from timm's code (tests/reference_rope.py; checked against timm itself by tools/check_timm_rope.py), and what keras_vit
lacks in eva.py stays refused by name."""

import json
import os

import numpy as np
import pytest
import safetensors.numpy as safetensors_numpy

import keras_vit
import reference_rope
from keras_vit.errors import CheckpointError
from keras_vit.weights import timm_eva, timm_models

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
TINY = dict(patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=5)
# architecture -> the Eva arguments of its registration that reference_rope needs beside TINY
ARCHITECTURES = {
    "vit_small_patch16_rope_224": dict(rope_type="cat", rope_temperature=100.0),
    "vit_small_patch16_rope_ape_224": dict(rope_type="cat", rope_temperature=100.0, use_abs_pos_emb=True, no_embed_class=True),
    "vit_base_patch16_rope_mixed_224": dict(rope_type="mixed", rope_temperature=10.0),
    "vit_large_patch16_rope_mixed_ape_224": dict(rope_type="mixed", rope_temperature=10.0, use_abs_pos_emb=True,
                                                 no_embed_class=True),
}


def rope_folder(folder, architecture, size=(32, 48), config=True, seed=0, **model_args):
    """A Hub folder as timm's ``save_for_hf`` writes it: ``model.safetensors`` and ``config.json`` (``model_args`` with
    the tiny sizes, ``pretrained_cfg`` with the input size and ImageNet normalisation). Returns (folder, state dict, args)."""
    args = dict(TINY, img_size=list(size), **model_args)
    state = reference_rope.state_dict(dict(ARCHITECTURES.get(architecture, {}), **args), seed=seed)
    os.makedirs(folder, exist_ok=True)
    safetensors_numpy.save_file(state, os.path.join(folder, "model.safetensors"))
    if config:
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump({"architecture": architecture, "num_classes": 5, "num_features": 32, "model_args": args,
                       "pretrained_cfg": {"input_size": [3, *size], "mean": MEAN, "std": STD}}, f)
    return folder, state, dict(ARCHITECTURES.get(architecture, {}), **args)


def images(size, batch=2, seed=1):
    return np.random.default_rng(seed).uniform(0, 255, (batch, *size, 3)).astype("float32")


def assert_matches(model, state, args, pixels, tol=1e-5):
    got = np.asarray(model(pixels), np.float64)
    want = np.stack([reference_rope.forward(image, state, args) for image in pixels])
    assert got.shape == want.shape
    assert np.max(np.abs(got - want)) <= tol * np.max(np.abs(want)), np.max(np.abs(got - want))


@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
def test_from_pretrained_computes_timms_rope_vit(architecture, tmp_path):
    folder, state, args = rope_folder(str(tmp_path / architecture), architecture)
    model = keras_vit.from_pretrained(folder, classifier_activation=None)
    config = model.vit_config
    assert config.rope == ("mixed" if "mixed" in architecture else "axial") and config.rope_grid_indexing == "xy"
    assert config.position_embedding == ("ape" in architecture) and config.grid == (4, 6)
    assert model.count_params() == sum(a.size for a in state.values())  # timm's parameters, one for one
    assert_matches(model, state, args, images((32, 48)))


def test_load_checkpoint_into_a_built_model_and_the_refusals_of_other_positions(tmp_path):
    folder, state, args = rope_folder(str(tmp_path / "axial"), "vit_small_patch16_rope_224", rope_grid_indexing="ij",
                                      rope_grid_offset=1.0)
    common = dict(image_size=(32, 48), patch_size=8, hidden_size=32, num_layers=2, num_heads=2, mlp_dim=128, num_classes=5,
                  layer_scale_init=1e-5, classifier_activation=None, input_mean=MEAN, input_std=STD)
    model = keras_vit.ViT(rope="axial", rope_temperature=100.0, rope_grid_indexing="ij", rope_grid_offset=1.0,
                          position_embedding=False, **common)
    keras_vit.load_checkpoint(model, folder)
    assert_matches(model, state, args, images((32, 48), batch=1))
    for wrong, named in ((dict(rope=None, position_embedding=False), "rope=None"),
                         (dict(rope="axial", rope_temperature=100.0, position_embedding=False, rope_grid_offset=1.0),
                          "rope_grid_indexing='xy'"),
                         (dict(rope="axial", rope_grid_indexing="ij", rope_grid_offset=1.0), "position_embedding=True")):
        with pytest.raises(CheckpointError, match=named):
            keras_vit.load_checkpoint(keras_vit.ViT(**wrong, **common), folder)


def test_rope_needs_no_resampling_at_another_resolution(tmp_path):
    """Axial RoPE without a table at 48 x 64: the rotation of the new grid, as timm computes it for img_size=(48, 64)."""
    folder, state, args = rope_folder(str(tmp_path / "axial"), "vit_small_patch16_rope_224")
    model = keras_vit.from_pretrained(folder, classifier_activation=None, image_size=(48, 64))
    assert model.vit_config.grid == (6, 8) and not model.load_report.resized
    assert_matches(model, state, dict(args, img_size=(48, 64)), images((48, 64), batch=1))
    resized = keras_vit.resize_model(keras_vit.from_pretrained(folder, classifier_activation=None), image_size=(48, 64))
    np.testing.assert_allclose(np.asarray(resized(images((48, 64)))), np.asarray(model(images((48, 64)))), rtol=1e-5, atol=1e-5)


def test_what_eva_py_has_and_keras_vit_lacks_stays_refused_by_name(tmp_path):
    supported = sorted(a for a, row in timm_models.table()["architectures"].items()  # DINOv3's: test_timm_dinov3.py
                       if row["model_class"] == "Eva" and not timm_models.lacking(a) and "dinov3" not in a and "lingbot" not in a
                       and not a.startswith("vit_pe_"))  # Perception Encoder's: test_timm_pe.py
    # EVA-02 (axial RoPE on a reference grid; B / L with separate q / k / v and sub-LayerNorms), its CLIP towers
    # (EVA-02-CLIP-E's post-norm blocks too), EVA-01 and the rope_reg*_gap models: test_timm_eva02.py
    assert supported == sorted([f"vit_{size}_patch16_rope{kind}_224" for size in ("small", "base", "large")
                                for kind in ("", "_ape", "_mixed", "_mixed_ape")]
                               + [f"eva02_{size}_patch14_{res}" for size in ("tiny", "small") for res in (224, 336)]
                               + [f"eva02_{size}_patch14_{res}" for size in ("base", "large") for res in (224, 448)]
                               + ["eva02_base_patch16_clip_224", "eva02_large_patch14_clip_224", "eva02_large_patch14_clip_336",
                                  "eva02_enormous_patch14_clip_224"]
                               + [f"eva_giant_patch14_{res}" for res in ("224", "336", "560", "clip_224")]
                               + [f"vit_{size}_patch16_rope_reg{n}_gap_256" for size, n in
                                  (("medium", 1), ("mediumd", 1), ("betwixt", 4), ("base", 1))])
    mrope = dict(timm_models.registration("vit_base_patch16_rope_224")["args"], rope_type="mrope")
    assert any("'mrope' RoPE" in why for why in timm_eva.read(mrope, timm_models.table()["classes"]["Eva"])[1])
    folder, _, _ = rope_folder(str(tmp_path / "bare"), "vit_base_patch16_rope_mixed_224", config=False)
    with pytest.raises(CheckpointError, match="rope.freqs"):  # the grid indexing is not in the weights
        keras_vit.from_pretrained(folder, num_heads=2)
    folder, _, _ = rope_folder(str(tmp_path / "contradicted"), "vit_small_patch16_rope_224", use_abs_pos_emb=True)
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    del config["model_args"]["use_abs_pos_emb"]
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    with pytest.raises(CheckpointError, match="pos_embed"):  # the registration has no table; these weights do
        keras_vit.from_pretrained(folder)


@pytest.mark.parametrize("fields, named", [
    (dict(rope="axial", image_size=None), "image_size=None"),
    (dict(rope="axial", num_heads=4, hidden_size=24), "multiple of 4"),
    (dict(rope="mixed", rope_grid_offset=1.0), "no grid offset"),
    (dict(rope_temperature=10.0), "read only with rope"),
    (dict(rope="2d"), "Unknown `rope`"),
    (dict(rope="axial", rope_grid_indexing="yx"), "rope_grid_indexing"),
])
def test_impossible_rope_configs_are_refused(fields, named):
    sizes = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64)
    with pytest.raises(ValueError, match=named):
        keras_vit.ViTConfig(**{**sizes, **fields})


def test_rope_model_args_timm_could_not_have_built_are_refused(tmp_path):
    """timm keeps the rotation order (rope_rotate_half) of the registration whatever model_args.rope_type says, and
    its VisionTransformer takes no RoPE argument: such a config.json is refused, never built with another rotation."""
    folder, _, _ = rope_folder(str(tmp_path / "half"), "vit_small_patch16_rope_224", rope_type="dinov3")
    with pytest.raises(CheckpointError, match=r"model_args\.rope_type='dinov3' with the registration's "
                                              r"rope_rotate_half=False"):
        keras_vit.from_pretrained(folder)
    folder, _, _ = rope_folder(str(tmp_path / "vit"), "vit_small_patch16_224", use_rot_pos_emb=True)
    with pytest.raises(CheckpointError, match=r"model_args\.use_rot_pos_emb=True: .* is a VisionTransformer, which "
                                              r"takes no RoPE argument"):
        keras_vit.from_pretrained(folder)
