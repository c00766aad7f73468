"""AIMv2 in timm's layout (``aimv2_*`` registrations of vision_transformer.py) and transformers' (``aimv2_vision_model``)
loads exactly, against the NumPy forward pass of tests/reference_aimv2.py (checked against timm and transformers
themselves by tools/sweep_timm.py and tools/check_transformers_layouts.py); what keras_vit lacks (the attention-pooling
head, native-resolution positions, Aimv2Model) and weights that contradict their config are refused by name."""

import json
import os

import numpy as np
import pytest
import safetensors.numpy as safetensors_numpy

import keras_vit
import reference_aimv2 as ref
from helpers import images
from keras_vit.errors import CheckpointError
from keras_vit.weights import timm_config, timm_models

AIMV2_TIMM = [name for name in timm_models.table()["architectures"] if name.startswith("aimv2_")]
# a tiny AIMv2: 4 x 4 patches of 8, width 32 (4 heads), SwiGLU width int(32 * 1.25) = 40
TINY_ARGS = dict(embed_dim=32, depth=2, num_heads=4, mlp_ratio=1.25, patch_size=8, img_size=[32, 32])


def timm_folder(folder, architecture="aimv2_large_patch14_224", sd=None, **model_args):
    """A Hub folder as timm's ``save_for_hf`` writes it; ``(folder, state dict)``."""
    sd = ref.state_dict() if sd is None else sd
    os.makedirs(folder, exist_ok=True)
    safetensors_numpy.save_file(sd, os.path.join(folder, "model.safetensors"))
    config = {"architecture": architecture, "num_classes": 0, "num_features": 32, "global_pool": "avg",
              "model_args": {**TINY_ARGS, **model_args},
              "pretrained_cfg": {"input_size": [3, 32, 32], "mean": ref.CLIP[0], "std": ref.CLIP[1]}}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    return str(folder), sd


def transformers_folder(folder, sd=None, **config):
    """A folder as ``Aimv2VisionModel.save_pretrained`` writes it; ``(folder, the timm-layout state dict)``."""
    sd = ref.state_dict() if sd is None else sd
    os.makedirs(folder, exist_ok=True)
    safetensors_numpy.save_file(ref.to_transformers(sd), os.path.join(folder, "model.safetensors"))
    config = {"model_type": "aimv2_vision_model", "architectures": ["Aimv2VisionModel"], "hidden_size": 32,
              "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 32,
              "patch_size": 8, "hidden_act": "silu", "rms_norm_eps": 1e-5, "qkv_bias": False, "mlp_bias": False,
              "use_head": False, "is_native": False, **config}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    return str(folder), sd


def test_every_aimv2_registration_is_read():
    assert len(AIMV2_TIMM) == 12
    for name in AIMV2_TIMM:
        assert timm_models.lacking(name) == (), name
        fields = timm_config.config_fields(name)
        assert (fields["norm_type"], fields["patch_norm"], fields["proj_bias"], fields["mlp_bias"]) == ("rmsnorm", True, False, False)
        assert (fields["mlp_type"], fields["mlp_activation"], fields["layer_norm_epsilon"]) == ("glu", "silu", 1e-5)
        assert fields["mlp_dim"] == int(fields["hidden_size"] * timm_models.registration(name)["args"]["mlp_ratio"]), name
    assert timm_config.config_fields("aimv2_huge_patch14_448")["mlp_dim"] == 4096  # int(1536 * 2.6667)


def test_timm_aimv2_computes_timms_output(tmp_path):
    folder, sd = timm_folder(tmp_path / "aimv2")
    model = keras_vit.from_pretrained(folder)
    config = model.vit_config
    assert (config.norm_type, config.patch_norm, config.pooling, config.class_token) == ("rmsnorm", True, "gap", False)
    assert model.count_params() == sum(v.size for v in sd.values())
    x = images()
    want = np.stack([ref.tokens(image, sd, 4, 8).mean(0) for image in x])  # timm's avg pooling of the patch tokens
    np.testing.assert_allclose(np.asarray(model(x)), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_timm_aimv2_with_biases_from_model_args(tmp_path):
    folder, sd = timm_folder(tmp_path / "biased", sd=ref.state_dict(bias=True, seed=2), qkv_bias=True, proj_bias=True)
    model = keras_vit.from_pretrained(folder)
    assert (model.vit_config.qkv_bias, model.vit_config.proj_bias, model.vit_config.mlp_bias) == (True, True, True)
    x = images()
    want = np.stack([ref.tokens(image, sd, 4, 8).mean(0) for image in x])
    np.testing.assert_allclose(np.asarray(model(x)), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_weights_that_contradict_the_registration_are_refused(tmp_path):
    biased = ref.state_dict(bias=True)
    folder, _ = timm_folder(tmp_path / "proj", sd=biased, qkv_bias=True)  # the registration's proj_bias=False
    with pytest.raises(CheckpointError, match=r"proj_bias=False.*'blocks.0.attn.proj.bias'"):
        keras_vit.from_pretrained(folder)
    layer_norm = dict(ref.state_dict(), **{"blocks.0.norm1.bias": np.zeros(32, np.float32)})
    folder, _ = timm_folder(tmp_path / "ln", sd=layer_norm)
    with pytest.raises(CheckpointError, match=r"norm_type='rmsnorm'.*'blocks.0.norm1.bias'"):
        keras_vit.from_pretrained(folder)


def test_a_patch_norm_without_a_registration_is_refused(tmp_path):
    """No config.json: the weights show a norm of the patch embeddings, not whether it is a LayerNorm or RmsNorm."""
    sd = ref.state_dict()
    path = str(tmp_path / "bare.safetensors")
    safetensors_numpy.save_file(sd, path)
    with pytest.raises(CheckpointError, match=r"'patch_embed.norm.weight' \(a norm of the patch embeddings\)"):
        keras_vit.from_pretrained(path)


def test_transformers_aimv2_vision_model_gives_its_tokens(tmp_path):
    folder, sd = transformers_folder(tmp_path / "hf")
    model = keras_vit.from_pretrained(folder)
    assert model.vit_config.pooling is None and model.load_report.format == "transformers"
    x = images()
    want = np.stack([ref.tokens(image, sd, 4, 8) for image in x])  # last_hidden_state
    np.testing.assert_allclose(np.asarray(model(x)), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    with pytest.raises(CheckpointError, match=r"image_size=32 \(AIMv2's position table"):
        keras_vit.from_pretrained(folder, image_size=48)


def test_transformers_aimv2_with_biases(tmp_path):
    folder, sd = transformers_folder(tmp_path / "hf", sd=ref.state_dict(bias=True, seed=4), qkv_bias=True, mlp_bias=True)
    model = keras_vit.from_pretrained(folder)
    x = images()
    want = np.stack([ref.tokens(image, sd, 4, 8) for image in x])
    np.testing.assert_allclose(np.asarray(model(x)), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("config, named", [
    (dict(use_head=True), r"use_head=True: AIMv2's attention-pooling head"),
    ({"use_head": None}, r"use_head=None, expected true or false"),
    (dict(is_native=True), r"is_native=True: AIMv2's native-resolution position embeddings"),
    (dict(architectures=["Aimv2Model"], model_type="aimv2"), r"Aimv2Model's image embedding is visual_projection"),
])
def test_what_keras_vit_lacks_is_refused_by_name(tmp_path, config, named):
    folder, _ = transformers_folder(tmp_path / "hf", **config)
    with pytest.raises(CheckpointError, match=named):
        keras_vit.from_pretrained(folder)
