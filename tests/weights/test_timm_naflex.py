"""timm's C-RADIO NaFlex registrations (naflexvit_*_radio_*) read from the generated table: the position table resampled
bilinearly without antialiasing (align_corners False, or True for v3-B / H), a tiny folder of each kind against the
NumPy reference, and what keras_vit still lacks of NaFlexVitCfg refused by name."""

import json
import re

import numpy as np
import pytest

import keras_vit
from keras_vit.errors import CheckpointError
from keras_vit.layers import naflex_grid
from keras_vit.weights import timm_config, timm_models, timm_naflex
from keras_vit.weights.mapping import layer_weights
import reference_naflex

safetensors_numpy = pytest.importorskip("safetensors.numpy")

RADIO = {  # registration: (position_resampling, register tokens) as timm 1.0.31's naflexvit.py builds them
    "naflexvit_base_patch16_radio_v3": ("linear_aligned", 7), "naflexvit_large_patch16_radio_v3": ("bilinear_torch", 7),
    "naflexvit_huge_patch16_radio_v3": ("linear_aligned", 7), "naflexvit_giant_patch16_radio_v3": ("bilinear_torch", 7),
    "naflexvit_so400m_patch16_radio_v4": ("bilinear_torch", 9), "naflexvit_huge_patch16_radio_v4": ("bilinear_torch", 9),
}


@pytest.mark.parametrize("name", sorted(RADIO))
def test_c_radio_registrations_are_read(name):
    assert timm_models.lacking(name) == ()
    fields = timm_config.config_fields(name)
    resampling, registers = RADIO[name]
    assert fields["input_mode"] == "naflex" and fields["position_resampling"] == resampling
    assert fields["position_aspect_preserving"] is True and fields["factorized_positions"] is False
    assert (fields["image_size"], fields["patch_size"]) == ([2048, 2048], 16)  # the 128 x 128 table
    assert (fields["class_token"], fields["num_register_tokens"], fields["prefix_positions"]) == (True, registers, False)
    assert (fields["pooling"], fields["final_norm"], fields["fc_norm"]) == ("token", False, False)


def _radio_folder(folder, architecture, d=32, p=4, seed=0):
    """A timm C-RADIO repository at depth 1 and width 32, written from naflexvit.py's key names without torch."""
    from foreign_files import timm_state_dict
    from helpers import vit_checkpoint

    rng = np.random.default_rng(seed)
    params = vit_checkpoint(patch_size=p, hidden_size=d, num_layers=1, num_heads=4, mlp_dim=4 * d)
    t = {k: v for k, v in timm_state_dict(params, num_layers=1, d=d).items()
         if k not in ("pos_embed", "norm.weight", "norm.bias", "head.weight", "head.bias")}  # final_norm=False
    t["embeds.proj.weight"] = t.pop("patch_embed.proj.weight").transpose(0, 2, 3, 1).reshape(d, p * p * 3).copy()
    t["embeds.proj.bias"] = t.pop("patch_embed.proj.bias")
    t["embeds.cls_token"] = rng.normal(size=(1, 1, d)).astype("float32")
    t.pop("cls_token")
    t["embeds.reg_token"] = rng.normal(size=(1, RADIO[architecture][1], d)).astype("float32")
    t["embeds.pos_embed"] = rng.normal(size=(1, 128, 128, d)).astype("float32")  # std 1: the positions matter
    if timm_models.registered(architecture).get("init_values"):
        t["blocks.0.ls1.gamma"], t["blocks.0.ls2.gamma"] = (1 + 0.1 * rng.normal(size=(2, d))).astype("float32")
    folder.mkdir()
    safetensors_numpy.save_file(t, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({
        "architecture": architecture, "num_classes": 0,
        "model_args": {"depth": 1, "embed_dim": d, "num_heads": 4, "patch_size": p, "mlp_ratio": 4.0}}))
    return str(folder)


@pytest.mark.parametrize("name", ["naflexvit_base_patch16_radio_v3", "naflexvit_so400m_patch16_radio_v4"])
def test_a_c_radio_folder_matches_the_numpy_reference(tmp_path, name):
    """A padded batch of three aspect ratios (grids 4 x 4, 3 x 6, 6 x 2: the 128 x 128 table resampled to 4 x 4 and
    6 x 6, then cropped) against tests/reference_naflex.py, one image at a time with torch's bilinear loops."""
    model = keras_vit.from_pretrained(_radio_folder(tmp_path / "radio", name), include_top=False, max_patches=20)
    c = model.vit_config
    assert (c.position_resampling, c.position_aspect_preserving, c.grid) == (RADIO[name][0], True, (128, 128))
    weights = {path: np.asarray(v, np.float64) for layer in model.layers for path, v in layer_weights(layer).items()}
    rng = np.random.default_rng(1)
    pixels = [rng.uniform(0, 255, (h * 4, w * 4, 3)).astype("float32") for h, w in ((4, 4), (3, 6), (6, 2))]
    got = np.asarray(model(naflex_grid.batch(pixels, 4, 20)))
    cfg = dict(patch=4, grid=c.grid, layers=1, heads=4, class_token=True, registers=c.num_register_tokens,
               pooling="token", aspect_preserving=True, factorized=False, kernel=c.position_resampling)
    expected = np.stack([reference_naflex.forward(image, weights, cfg) for image in pixels])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4 * np.abs(expected).max())
    # the other align_corners gives another answer: the comparison above can fail
    other = dict(cfg, kernel="bilinear_torch" if cfg["kernel"] == "linear_aligned" else "linear_aligned")
    assert np.abs(reference_naflex.forward(pixels[1], weights, other) - expected[1]).max() > 1e-3 * np.abs(expected).max()


def _radio_cfg(**changes):
    row = timm_models.registration("naflexvit_large_patch16_radio_v3")["args"]
    return {**row, "cfg": {**row["cfg"], **changes}}


@pytest.mark.parametrize("changes, phrase", [
    (dict(pos_embed_interp_mode="bicubic"),
     r"F\.interpolate\(mode='bicubic', antialias=False, align_corners=False\) \(pos_embed_interp_mode"),
    (dict(pos_embed_antialias=True, pos_embed_align_corners=True),
     r"F\.interpolate\(mode='bilinear', antialias=True, align_corners=True\)"),
    (dict(pos_embed_use_grid_sample=True), r"sampled with grid_sample \(pos_embed_use_grid_sample=True\)"),
    (dict(rope_type="axial"), r"RoPE \(rope_type='axial'\)"),
])
def test_what_naflexvit_still_lacks_is_refused_by_name(changes, phrase):
    out, lacking = timm_naflex.read(_radio_cfg(**changes), timm_models.table()["classes"]["NaFlexVit"])
    assert out is None and len(lacking) == 1
    assert re.search(phrase, lacking[0]), lacking


def test_the_factorised_tables_ignore_the_2d_rule():
    """timm resamples pos_embed_y / pos_embed_x linearly (align_corners=False) whatever the 2-D switches say."""
    out, lacking = timm_naflex.read(_radio_cfg(pos_embed="factorized", pos_embed_interp_mode="bicubic"),
                                    timm_models.table()["classes"]["NaFlexVit"])
    assert lacking == [] and out["naflex_pos_embed"] == "factorized"


def test_a_config_json_that_changes_align_corners_is_refused_by_name(tmp_path):
    """C-RADIO v3-L / g's Hub code switched align_corners in 2025-07 (timm's note): a config.json that says so is
    refused, not read with the registration's value."""
    path = _radio_folder(tmp_path / "radio", "naflexvit_base_patch16_radio_v3")
    config = json.loads((tmp_path / "radio" / "config.json").read_text())
    config["model_args"]["pos_embed_align_corners"] = False
    (tmp_path / "radio" / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"model_args\.pos_embed_align_corners=False"):
        keras_vit.from_pretrained(path, include_top=False, max_patches=20)


@pytest.mark.parametrize("shape", [(8, 4, 12), (12,)])
def test_a_naflex_patch_embedding_that_is_no_matrix_is_refused_by_name(shape):
    """An ``embeds.proj.weight`` of another rank is refused naming the key, not with a bare unpacking error."""
    with pytest.raises(CheckpointError, match=r"'m\.safetensors'.*'embeds\.proj\.weight' \(" + str(shape[0])):
        timm_naflex.to_vit_layout({"embeds.proj.weight": np.zeros(shape, np.float32)}, "m.safetensors")


def test_a_model_args_img_size_does_not_size_the_naflex_table(tmp_path):
    """timm's NaFlexVit sizes its position table by pos_embed_grid_size whatever model_args.img_size says (timm
    1.0.31 builds and writes naflexvit_base_patch16_gap with img_size=192 and its 16 x 16 table); keras_vit refused
    such a folder as "img_size=[192, 192] (12 x 12 patches) but the weights' position embeddings cover 256 patches"."""
    name = "naflexvit_base_patch16_radio_v3"
    folder = _radio_folder(tmp_path / "radio", name)
    plain = keras_vit.from_pretrained(folder, include_top=False, max_patches=20)
    config = json.loads((tmp_path / "radio" / "config.json").read_text())
    config["model_args"]["img_size"] = 48
    (tmp_path / "radio" / "config.json").write_text(json.dumps(config))
    sized = keras_vit.from_pretrained(folder, include_top=False, max_patches=20)
    rng = np.random.default_rng(2)
    batch = naflex_grid.batch([rng.uniform(0, 255, (12, 24, 3)).astype("float32")], 4, 20)
    # the same model twice: one CPU gives the same bits, but no computed float is compared exactly (the house rule)
    np.testing.assert_allclose(np.asarray(sized(batch)), np.asarray(plain(batch)), rtol=0, atol=1e-6)
