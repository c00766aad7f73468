"""MobileCLIP's image tower (timm's vit_base_mci_224.apple_mclip*: ``num_classes=512``) ends in CLIP's bias-free
projection, which timm's ``_convert_mobileclip`` stores as ``head.weight`` with ``head.bias = torch.zeros(...)``, as
``_convert_openai_clip`` does CLIP's. keras_vit read a zero-bias head as the projection only in pre-norm towers, so
MobileCLIP loaded as a 512-class classifier: the default output was the softmax of the image embedding (0.99
relative off timm's output, rows summing to 1) and ``include_top=False`` dropped the projection. A zero-bias head of
a ConvStem tower is now its ``projection_dim``; a head with a bias stays a classifier."""

import json
import os

import numpy as np
import pytest

import keras_vit
import reference_timm

safetensors_numpy = pytest.importorskip("safetensors.numpy")

ARGS = dict(embed_dim=768, depth=1, num_heads=12, img_size=32, patch_size=1, no_embed_class=True, num_classes=8,
            conv_stem=((192, 4), (192, 2), (768, 2)))


def _write(folder, zero_bias):
    state = reference_timm.state_dict(ARGS, seed=5, scale=0.05)
    if zero_bias:
        state["head.bias"] = np.zeros_like(state["head.bias"])
    os.makedirs(folder)
    safetensors_numpy.save_file(state, os.path.join(folder, "model.safetensors"))
    config = {"architecture": "vit_base_mci_224", "num_classes": 8, "model_args": {"depth": 1, "img_size": 32},
              "pretrained_cfg": {"input_size": [3, 32, 32], "mean": [0.0] * 3, "std": [1.0] * 3, "num_classes": 8}}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    return state


def _images():
    return np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")


def test_mobileclips_zero_bias_head_is_its_clip_projection(tmp_path):
    state = _write(tmp_path / "mclip", zero_bias=True)
    model = keras_vit.from_pretrained(str(tmp_path / "mclip"))  # the default activation: nothing to apply to an embedding
    assert model.vit_config.projection_dim == 8
    assert "CLIP's bias-free projection" in str(model.load_report)
    x = _images()
    ref = np.stack([reference_timm.forward(image, state, ARGS, mean=(0.0,) * 3, std=(1.0,) * 3) for image in x])
    y = np.asarray(model(x), np.float64)
    assert np.max(np.abs(y - ref)) <= 1e-4 * np.max(np.abs(ref))


def test_a_conv_stem_head_with_a_bias_stays_a_classifier(tmp_path):
    _write(tmp_path / "cls", zero_bias=False)
    model = keras_vit.from_pretrained(str(tmp_path / "cls"))
    assert model.vit_config.projection_dim is None and model.vit_config.num_classes == 8
    np.testing.assert_allclose(np.asarray(model(_images())).sum(-1), 1.0, rtol=1e-5)  # softmax, as before
