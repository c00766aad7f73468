"""`.keras` files written as plain functional models (commit cb27355, before ViTConfig) load and compute the same."""

import json
import os
import zipfile

import numpy as np
import pytest

import keras_vit
from keras_vit import saving

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "functional")
OUTPUTS = json.load(open(os.path.join(FIXTURES, "outputs.json")))


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_functional_models_load_and_compute_the_same(name):
    path = os.path.join(FIXTURES, f"{name}.keras")
    # the file as that commit wrote it (a plain functional model), not one rewritten by the code under test
    assert json.loads(zipfile.ZipFile(path).read("config.json"))["class_name"] == "Functional"
    model, metadata = keras_vit.load_model(path), saving.read_metadata(path)
    x = np.load(os.path.join(FIXTURES, "inputs.npy"))
    h, w = model.input_shape[1:3]
    out = np.asarray(model(x[:, : h or 32, : w or 48]))
    assert np.all(np.isfinite(OUTPUTS[name])) and np.all(np.isfinite(out))  # NaN would equal NaN below
    np.testing.assert_allclose(out, np.asarray(OUTPUTS[name]), rtol=1e-5, atol=1e-5)
    assert metadata["class_names"] == [f"c{i}" for i in range(5)]
