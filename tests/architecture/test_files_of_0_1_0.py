"""`.keras` files written by keras_vit 0.1.0 (the flat layout, commit 3ed6e4b) load in this version and compute the same.

tests/fixtures/v0.1.0 was written by that commit's code (a ViT, a GAP model with pre-logits,
a hybrid and the main job's conv-stem model, with class names inside the archive), with the
outputs it computed on inputs.npy.
"""

import json
import os

import numpy as np
import pytest

import keras_vit
from keras_vit import saving

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "v0.1.0")
OUTPUTS = json.load(open(os.path.join(FIXTURES, "outputs.json")))


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_models_saved_by_0_1_0_load_and_compute_the_same(name):
    path = os.path.join(FIXTURES, f"{name}.keras")
    model, metadata = keras_vit.load_model(path), saving.read_metadata(path)
    x = np.load(os.path.join(FIXTURES, "inputs.npy"))
    size = model.input_shape[1]
    # same weights, same graph: float32 rounding of the same ops (the fused kernels may order sums differently by CPU)
    np.testing.assert_allclose(np.asarray(model(x[:, :size, :size])), np.asarray(OUTPUTS[name]), rtol=1e-5, atol=1e-5)
    assert metadata["class_names"][0] == "c0" and len(metadata["class_names"]) == model.output_shape[-1]


def test_fixture_layers_are_the_current_classes():
    model = keras_vit.load_model(os.path.join(FIXTURES, "hybrid.keras"))
    kinds = {type(layer) for layer in model.layers}
    assert keras_vit.TransformerBlock in kinds and keras_vit.StdConv2D in kinds and keras_vit.PatchEncoder in kinds
