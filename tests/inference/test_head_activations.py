"""A classification head's activation says what its outputs are: softmax and sigmoid heads give probabilities (a
distribution; each class's own), a head without one gives logits. predict and the exports take them as the model
says, never a softmax over a sigmoid's; an activation that gives no class score is refused when the model is built."""

import numpy as np
import pytest
from PIL import Image

import keras_vit
from harness import _randomize
from keras_vit.export import export_model
from keras_vit.inference import predictors

SMALL = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64, num_classes=3)


@pytest.mark.parametrize("fields, message", [
    (dict(classifier_activation="relu"), r"Unknown `classifier_activation`.*Received: classifier_activation='relu'"),
    (dict(num_classes=1), r"A softmax over one class is 1.0 for every image.*Received: num_classes=1"),
])
def test_a_head_whose_outputs_are_no_class_scores_is_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.ViT(**{**SMALL, **fields})


def test_the_heads_outputs_are_named_by_their_activation():
    outputs = {activation: keras_vit.ViTConfig(**SMALL, classifier_activation=activation).output
               for activation in ("softmax", "sigmoid", None, "linear")}
    assert outputs == {"softmax": "probabilities", "sigmoid": "probabilities", None: "logits", "linear": "logits"}
    assert keras_vit.ViTConfig(**dict(SMALL, num_classes=1), classifier_activation="sigmoid").output == "probabilities"


@pytest.fixture(scope="module")
def sigmoid(tmp_path_factory):
    """A sigmoid head whose outputs do not sum to 1 (each class's own probability), its image files and outputs."""
    model = keras_vit.ViT(**SMALL, classifier_activation="sigmoid")
    _randomize(model)
    folder = tmp_path_factory.mktemp("sigmoid")
    pixels = np.random.default_rng(0).integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    files = []
    for i, image in enumerate(pixels):
        files.append(str(folder / f"{i}.png"))
        Image.fromarray(image).save(files[-1])
    want = np.asarray(model.predict(pixels.astype("float32"), verbose=0), "float64")
    assert np.all(np.abs(want.sum(-1) - 1) > 0.05)  # not a distribution: a softmax over them would change them
    return model, folder, files, want


def _predicted(source, files):
    rows = []
    for result in keras_vit.predict(source, files, top_k=3):
        row = np.zeros(3)
        for p in result["predictions"]:
            row[p["index"]] = p["probability"]
        rows.append(row)
    return np.stack(rows)


def test_predict_gives_a_sigmoid_heads_probabilities_as_they_are(sigmoid):
    model, _, files, want = sigmoid
    np.testing.assert_allclose(_predicted(model, files), want, atol=1e-5)


@pytest.mark.parametrize("export_format", ["saved_model", "tflite"])
def test_an_export_of_a_sigmoid_head_serves_and_predicts_its_probabilities(sigmoid, export_format, tmp_path):
    model, _, files, want = sigmoid
    output = tmp_path / ("vit.tflite" if export_format == "tflite" else "base")
    report = export_model(model, export_format, str(output), num_images=4)
    assert report.details["output"] == "probabilities"
    np.testing.assert_allclose(_predicted(report.path, files), want, atol=1e-4)


def test_to_probabilities_takes_what_the_model_says():
    sigmoid_rows = np.array([[0.9, 0.8, 0.1]])
    np.testing.assert_array_equal(predictors.to_probabilities(sigmoid_rows, output="probabilities"), sigmoid_rows)
    np.testing.assert_allclose(predictors.to_probabilities(np.log([[1.0, 3.0]]), output="logits"), [[0.25, 0.75]])
    distribution = np.array([[0.2, 0.8]])  # unsaid: a distribution is taken as it is, anything else as logits
    np.testing.assert_array_equal(predictors.to_probabilities(distribution), distribution)
