"""keras-hub's DINOv3 presets (``DINOV3Backbone``): folders written in keras-hub's own layout
(tests/reference_keras_hub_dinov3.py) load with every switch read from their config.json and give keras-hub's tokens
(an independent NumPy forward of its layers; checked against keras-hub itself by benchmarks/keras_hub_presets.py
--family); what keras_vit cannot compute is refused by name."""

import json

import numpy as np
import pytest

import reference_keras_hub_dinov3 as khub3
from helpers import images

import keras_vit
from keras_vit.errors import CheckpointError

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
SCALE, OFFSET = [1 / (255 * s) for s in STD], [-m / s for m, s in zip(MEAN, STD)]


def preset(folder, seed=0, **fields):
    cfg = khub3.config(**fields)
    w = khub3.weights(cfg, seed)
    khub3.write_preset(str(folder), cfg, w, SCALE, OFFSET)
    return cfg, w


def close(got, want, rtol=2e-5):
    assert got.shape == want.shape
    assert np.max(np.abs(got - want)) <= rtol * np.max(np.abs(want)), np.max(np.abs(got - want)) / np.max(np.abs(want))


VARIANTS = {
    # as keras-hub's converter writes the published presets: 4 registers, no key bias, exact GELU
    "published": dict(use_key_bias=False),
    # the "plus" models: SwiGLU (gate_proj, up_proj), another RoPE base and LayerScale init, 2 registers (without a
    # mask token before them)
    "plus": dict(use_gated_mlp=True, hidden_activation="silu", use_key_bias=False, layer_scale_init_value=1e-5,
                 num_register_tokens=2, rope_theta=1000.0, use_mask_token=False),
    # no registers, no mask token, no bias anywhere, another epsilon, a rectangle
    "bare": dict(num_register_tokens=0, use_mask_token=False, use_query_bias=False, use_key_bias=False, use_value_bias=False,
                 use_proj_bias=False, use_mlp_bias=False, layer_norm_eps=1e-6, image_shape=[32, 48, 3], apply_layernorm=True),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_dinov3_preset_gives_keras_hubs_tokens(tmp_path, variant):
    cfg, w = preset(tmp_path / "p", **VARIANTS[variant])
    pixels = images(size=tuple(cfg["image_shape"][:2]))
    want = khub3.forward(pixels, cfg, w, SCALE, OFFSET)
    tokens = keras_vit.from_pretrained(str(tmp_path / "p"), pooling=None)
    close(np.asarray(tokens(pixels)), want)
    model = keras_vit.from_pretrained(str(tmp_path / "p"))  # the normed class token, as for keras-hub's DINOv2
    close(np.asarray(model(pixels)), want[:, 0])
    c = model.vit_config
    assert (c.rope, c.rope_grid_indexing, c.rope_grid_offset, c.position_embedding) == ("dinov3", "ij", 0.0, False)
    assert c.rope_temperature == pytest.approx(cfg["rope_theta"]) and c.layer_norm_epsilon == pytest.approx(cfg["layer_norm_eps"])
    assert (c.num_register_tokens, c.layer_scale_init, c.image_size) == (
        cfg["num_register_tokens"], pytest.approx(cfg["layer_scale_init_value"]), tuple(cfg["image_shape"][:2]))
    assert (c.mlp_type, c.mlp_activation) == (("glu", "silu") if cfg["use_gated_mlp"] else ("mlp", "gelu"))
    assert (c.qkv_bias, c.proj_bias, c.mlp_bias) == (cfg["use_query_bias"], cfg["use_proj_bias"], cfg["use_mlp_bias"])
    np.testing.assert_allclose(c.input_std, STD, rtol=1e-6)
    # keras-hub's parameters one for one (the mask token left out), with zeros for a key bias it does not have
    mask = 32 if cfg["use_mask_token"] else 0
    zero_key_biases = 2 * 32 if cfg["use_query_bias"] and not cfg["use_key_bias"] else 0
    assert tokens.count_params() == sum(a.size for a in w.values()) - mask + zero_key_biases
    report = str(model.load_report)
    assert "keras-hub" in report and ("the mask token" in report) == cfg["use_mask_token"]
    assert ("zeros stand in for the key bias of every attention" in report) == bool(zero_key_biases)
    assert ("pyramid_outputs" in report) == cfg["apply_layernorm"]


def test_a_dinov3_preset_at_another_size_takes_the_rope_of_that_grid(tmp_path):
    """keras-hub builds its rotation from the image it is given: at 48 x 24 the 6 x 3 grid's, nothing resampled."""
    cfg, w = preset(tmp_path / "p", **VARIANTS["plus"])
    model = keras_vit.from_pretrained(str(tmp_path / "p"), image_size=(48, 24), pooling=None)
    pixels = images(size=(48, 24))
    assert model.vit_config.grid == (6, 3) and not model.load_report.resized
    close(np.asarray(model(pixels)), khub3.forward(pixels, cfg, w, SCALE, OFFSET))


def test_an_image_shape_the_patches_do_not_divide_is_cropped_as_keras_hubs_convolution_does(tmp_path):
    cfg, w = preset(tmp_path / "p", image_shape=[36, 44, 3])
    model = keras_vit.from_pretrained(str(tmp_path / "p"), pooling=None)
    assert model.vit_config.crop_remainder and model.vit_config.grid == (4, 5)
    pixels = images(size=(36, 44))
    close(np.asarray(model(pixels)), khub3.forward(pixels, cfg, w, SCALE, OFFSET))


def test_what_keras_vit_cannot_compute_is_refused_by_the_presets_field(tmp_path):
    preset(tmp_path / "relu", hidden_activation="relu")
    with pytest.raises(CheckpointError, match=r"config.json': config.hidden_activation='relu' is no activation keras_vit's MLP "
                                              r"has \(keras-hub passes it to Keras' Dense: keras_vit reads 'gelu', 'silu', 'swish'\)"):
        keras_vit.from_pretrained(str(tmp_path / "relu"))
    preset(tmp_path / "any", image_shape=[None, None, 3])
    with pytest.raises(CheckpointError, match=r"config.image_shape=\[None, None, 3\], expected \[height, width, channels\]"):
        keras_vit.from_pretrained(str(tmp_path / "any"))
    preset(tmp_path / "first", data_format="channels_first")
    with pytest.raises(CheckpointError, match=r"config.data_format='channels_first'; keras_vit models take channels_last images"):
        keras_vit.from_pretrained(str(tmp_path / "first"))
    preset(tmp_path / "flag", use_gated_mlp="yes")
    with pytest.raises(CheckpointError, match=r"config.use_gated_mlp='yes', expected true or false"):
        keras_vit.from_pretrained(str(tmp_path / "flag"))


def test_a_model_without_dinov3s_switches_is_refused_and_nothing_is_loaded(tmp_path):
    preset(tmp_path / "p", use_key_bias=False)
    model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64,
                          include_top=False, num_register_tokens=4, layer_scale_init=1.0, layer_norm_epsilon=1e-5)
    before = [np.array(v) for v in model.weights]
    with pytest.raises(CheckpointError, match=r"DINOV3RopePositionEmbedding \(RoPE of the patch tokens, the head's halves "
                                              r"rotated\) but the model has rope=None"):
        keras_vit.load_checkpoint(model, str(tmp_path / "p"))
    assert all(np.array_equal(a, np.array(v)) for a, v in zip(before, model.weights))


def test_a_missing_or_extra_weight_is_named(tmp_path):
    import h5py

    preset(tmp_path / "p", use_gated_mlp=True, hidden_activation="silu")
    with h5py.File(tmp_path / "p" / "model.weights.h5", "a") as f:
        del f["layers/dinov3_encoder/layers/dinov3_layer_1/mlp/gate_proj/vars/1"]
    with pytest.raises(CheckpointError, match=r"model.weights.h5 has no 'layers/dinov3_encoder/layers/dinov3_layer_1/mlp/gate_proj/"
                                              r"vars/1' \(Transformer/encoderblock_1/MlpBlock_3/Dense_0_gate/bias in the original"):
        keras_vit.from_pretrained(str(tmp_path / "p"))
    preset(tmp_path / "k")  # a key bias the config says is not there
    cfg = json.loads((tmp_path / "k" / "config.json").read_text())
    cfg["config"]["use_key_bias"] = False
    (tmp_path / "k" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"has 2 weight\(s\) a DINOV3Backbone of its config.json does not have: "
                                              r"layers/dinov3_encoder/layers/dinov3_layer/attention/key_dense/vars/1"):
        keras_vit.from_pretrained(str(tmp_path / "k"))
