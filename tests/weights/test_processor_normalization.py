"""A transformers ``preprocessor_config.json`` of the paper's ViT: what its image processor feeds the model,
``(x * rescale_factor - image_mean) / image_std`` with ``do_rescale`` and ``do_normalize`` honoured, is what the
loaded model computes on [0, 255] pixels (once ``do_normalize=false`` fell back to [-1, 1] silently)."""

import json
import os

import numpy as np
import pytest

import keras_vit
from helpers import images, save_npz, vit_checkpoint

pytest.importorskip("safetensors.numpy")
from foreign_files import transformers_folder  # noqa: E402


@pytest.mark.parametrize("processor, feeds", [
    ({"do_normalize": False}, lambda x: x / 255.0),
    ({"do_rescale": True, "rescale_factor": 1 / 127.5, "image_mean": [1, 1, 1], "image_std": [1, 1, 1]},
     lambda x: x / 127.5 - 1.0),
    ({"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]},
     lambda x: (x / 255.0 - np.array([0.485, 0.456, 0.406])) / np.array([0.229, 0.224, 0.225])),
    # a float for every channel, which transformers' processors broadcast (it used to be refused)
    ({"image_mean": 0.45, "image_std": 0.25}, lambda x: (x / 255.0 - 0.45) / 0.25),
])
def test_the_vit_processor_is_what_the_model_computes(tmp_path, processor, feeds):
    params = vit_checkpoint(num_classes=5)
    folder = transformers_folder(str(tmp_path / "vit"), params, eps=1e-6, image_size=32)
    with open(os.path.join(folder, "preprocessor_config.json"), "w") as f:
        json.dump(processor, f)
    model = keras_vit.from_pretrained(folder, classifier_activation=None)
    # the same weights without keras_vit's input scaling, fed what transformers' processor computes
    bare = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
                         num_classes=5, layer_norm_epsilon=1e-6, include_preprocessing=False, classifier_activation=None,
                         weights=save_npz(tmp_path / "c.npz", params))
    x = images()
    expected = np.asarray(bare(feeds(x.astype(np.float64)).astype(np.float32)))
    np.testing.assert_allclose(np.asarray(model(x)), expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))
