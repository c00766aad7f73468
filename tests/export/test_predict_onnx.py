"""predict runs the .onnx files export writes, in onnxruntime as the export verified them, with their class names."""

import numpy as np
import pytest
from PIL import Image

from helpers import TINY, tiny_vit
from keras_vit import cli
from keras_vit.export import export_model
from keras_vit.inference import predictors, runtimes

NAMES = ["ant", "bee", "cat"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("onnx")
    model = tiny_vit(num_classes=3)
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.5, head.kernel.shape))  # not a uniform zero head
    size = TINY["image_size"]
    rng = np.random.default_rng(1)
    images = []
    for i in range(3):
        path = folder / f"{i}.png"
        Image.fromarray(rng.integers(0, 255, (size + 5, size - 3, 3), dtype=np.uint8)).save(path)
        images.append(str(path))
    path = str(folder / "m.onnx")
    export_model(model, "onnx", path, labels=NAMES, eval_data=rng.uniform(0, 255, (4, size, size, 3)), num_images=4)
    return model, path, images


def test_model_format_knows_onnx(exported):
    assert runtimes.model_format(exported[1]) == "onnx"


def test_predict_runs_onnx_as_keras_does(exported):
    model, path, images = exported
    by_onnx = predictors.predict(path, images, top_k=3)
    by_keras = predictors.predict(model, images, top_k=3, labels=NAMES)
    for onnx_result, keras_result in zip(by_onnx, by_keras):
        onnx_scores = {p["label"]: p["probability"] for p in onnx_result["predictions"]}
        keras_scores = {p["label"]: p["probability"] for p in keras_result["predictions"]}
        assert set(onnx_scores) == set(NAMES)  # the names stored in the file's metadata
        for name in NAMES:
            assert onnx_scores[name] == pytest.approx(keras_scores[name], abs=1e-4)


def test_predict_command_takes_onnx(exported, capsys):
    _, path, images = exported
    assert cli.main(["predict", path, images[0], "--top-k", "1"]) == 0
    out = capsys.readouterr().out
    assert images[0] in out and any(f"  {name}" in out for name in NAMES)
