"""A classification head's activation says what its outputs are: softmax and sigmoid heads give probabilities (a
distribution; each class's own), a head without one gives logits. predict and the exports take them as the model
says, never a softmax over a sigmoid's; a builder refuses a softmax over one class (always 1.0)."""

import numpy as np
import pytest
from PIL import Image

import keras_vit
from harness import _randomize
from keras_vit.export import export_model
from keras_vit.inference import predictors

SMALL = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64, num_classes=3)


def test_a_builder_refuses_a_softmax_over_one_class_and_a_file_of_one_still_loads(tmp_path):
    with pytest.raises(ValueError, match=r"A softmax over one class is 1.0 for every image.*Received: num_classes=1"):
        keras_vit.ViT(**dict(SMALL, num_classes=1))
    one = keras_vit.ViTConfig(**dict(SMALL, num_classes=1))  # what a saved file of such a head reads: it loads
    assert one.output == "probabilities"
    assert keras_vit.ViT(**dict(SMALL, num_classes=1), classifier_activation="sigmoid").vit_config.output == "probabilities"


def test_a_one_label_transformers_head_loads_as_its_logit(tmp_path):
    """transformers' num_labels=1 (a regression or binary head) was built with the default softmax: 1.0 always."""
    from foreign_files import transformers_folder
    from helpers import vit_checkpoint

    folder = transformers_folder(tmp_path / "one", vit_checkpoint(num_classes=1), num_classes=1)
    model = keras_vit.from_pretrained(folder)
    assert model.vit_config.classifier_activation is None and model.vit_config.output == "logits"
    assert any("a head of one output gives its logit" in note for note in model.load_report.notes)
    with pytest.raises(ValueError, match="A softmax over one class"):
        keras_vit.from_pretrained(folder, classifier_activation="softmax")


def test_the_heads_outputs_are_named_by_their_activation():
    outputs = {activation: keras_vit.ViTConfig(**SMALL, classifier_activation=activation).output
               for activation in ("softmax", "sigmoid", None, "linear")}
    assert outputs == {"softmax": "probabilities", "sigmoid": "probabilities", None: "logits", "linear": "logits"}


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


def test_a_naflex_tflite_of_a_sigmoid_head_predicts_its_probabilities(tmp_path):
    """The NaFlex .tflite runtime guessed from the values (a softmax over the sigmoid's) where the others read the name."""
    config = keras_vit.ViTConfig(image_size=16, patch_size=4, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64,
                                 num_classes=3, input_mode="naflex", pooling="gap", class_token=False,
                                 classifier_activation="sigmoid")
    model = keras_vit.build_model(config)
    _randomize(model)
    path = str(tmp_path / "image.png")
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(path)
    data = np.random.default_rng(5).uniform(0, 255, (4, 16, 16, 3)).astype("float32")
    report = export_model(model, "tflite", str(tmp_path / "naflex.tflite"), eval_data=data, max_patches=16)
    np.testing.assert_allclose(_predicted(report.path, [path]), _predicted(model, [path]), atol=1e-4)
    assert abs(_predicted(model, [path]).sum() - 1) > 0.05  # not a distribution: a softmax would have changed it
