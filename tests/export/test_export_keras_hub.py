"""keras-hub presets out: the files and variable paths keras-hub's save_to_preset writes (checked against the
independent layout of tests/reference_keras_hub.py and its NumPy keras-hub forward), the round trip through
keras_vit's reader, the refusals before anything is written, and `keras-vit export --format keras-hub`."""

import json
import os

import numpy as np
import pytest

import reference_keras_hub as khub
from helpers import images

import keras_vit
from keras_vit import cli
from keras_vit.export import export_model

TINY = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=5)
# the Keras float32 model against keras-hub's computation in float64 NumPy (and the preset read back): the
# float32 round-off of logits of random N(0, 0.2) weights, which are larger than a trained model's
REFERENCE_ATOL = 5e-5


def h5_arrays(path):
    import h5py

    found = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: found.__setitem__(name, np.asarray(obj[()])) if isinstance(obj, h5py.Dataset) else None)
    return found


def randomized(model, seed=1):
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.normal(0, 0.2, weight.shape).astype("float32") + (1.0 if "gamma" in weight.path else 0.0))
    return model


@pytest.mark.parametrize("overrides", [
    {"classifier_activation": None, "input_mean": (0.485, 0.456, 0.406), "input_std": (0.229, 0.224, 0.225)},
    {"classifier_activation": "softmax", "pooling": "gap", "representation_size": 24, "layer_norm_epsilon": 1e-5},
])
def test_the_preset_has_keras_hubs_layout_and_keras_hubs_logits(tmp_path, overrides):
    model = randomized(keras_vit.ViT(**TINY, **overrides))
    model.class_names = ["ant", "bee", "cat", "dog", "eel"]
    out = tmp_path / "preset"
    report = export_model(model, "keras-hub", str(out))
    assert report.passed and report.path == str(out)
    assert sorted(os.listdir(out)) == ["README.md", "config.json", "image_converter.json", "metadata.json",
                                       "model.weights.h5", "preprocessor.json", "task.json", "task.weights.h5"]
    config = json.loads((out / "config.json").read_text())
    task = json.loads((out / "task.json").read_text())
    converter = json.loads((out / "image_converter.json").read_text())["config"]
    assert (config["class_name"], config["registered_name"], task["registered_name"]) == (
        "ViTBackbone", "keras_hub>ViTBackbone", "keras_hub>ViTImageClassifier")
    assert task["config"]["backbone"] == config
    # every variable where keras-hub's layers put it (the test's own layout, written from keras-hub's source)
    backbone, head = h5_arrays(out / "model.weights.h5"), h5_arrays(out / "task.weights.h5")
    c = config["config"]
    want_backbone, want_head = khub.random_preset_weights(c, intermediate_dim=task["config"]["intermediate_dim"])
    assert {k: v.shape for k, v in backbone.items()} == {k: v.shape for k, v in want_backbone.items()}
    assert {k: v.shape for k, v in head.items()} == {k: v.shape for k, v in want_head.items()}
    # keras-hub's computation on those files (NumPy) gives the keras_vit model's outputs on [0, 255] pixels
    expected = khub.logits(images(), c, backbone, head, task["config"], scale=converter["scale"], offset=converter["offset"])
    np.testing.assert_allclose(expected, np.asarray(model(images())), atol=REFERENCE_ATOL)
    # and keras_vit reads it back: the same outputs, the class names
    back = keras_vit.from_pretrained(str(out), classifier_activation=overrides["classifier_activation"])
    np.testing.assert_allclose(np.asarray(back(images())), np.asarray(model(images())), atol=REFERENCE_ATOL)
    assert back.class_names == ["ant", "bee", "cat", "dog", "eel"]
    assert "exported by keras_vit" in (out / "README.md").read_text()


def test_a_backbone_without_top_is_a_backbone_preset(tmp_path):
    model = randomized(keras_vit.ViT(**TINY, include_top=False, pooling=None))
    export_model(model, "keras-hub", str(tmp_path / "bb"))
    assert sorted(os.listdir(tmp_path / "bb")) == ["README.md", "config.json", "image_converter.json", "metadata.json", "model.weights.h5"]


@pytest.mark.parametrize("build, reason", [
    (lambda: keras_vit.HybridViT(block_units=(1,), width=0.5, image_size=32, hidden_size=32, num_layers=1,
                                 num_heads=2, mlp_dim=64, num_classes=3), r"stem='resnet': ViTBackbone cuts the image"),
    (lambda: keras_vit.ViT(**dict(TINY, image_size=None)), r"image_size=None: ViTBackbone has a fixed image_shape"),
    (lambda: keras_vit.ViT(**dict(TINY, image_size=(32, 48))), r"image_size=\(32, 48\): ViTBackbone takes square images only"),
    (lambda: keras_vit.ViT(**TINY, layer_scale_init=1e-5, qkv_bias=False),
     r"layer_scale_init=1e-05: LayerScale; qkv_bias=False: query/key/value without biases"),
])
def test_what_keras_hub_cannot_express_is_refused_before_anything_is_written(tmp_path, build, reason):
    with pytest.raises(ValueError, match=r"keras-hub's ViTBackbone / ViTImageClassifier cannot express model .*" + reason):
        export_model(build(), "keras-hub", str(tmp_path / "out"))
    assert os.listdir(tmp_path) == []


def test_an_any_size_model_is_exported_at_the_size_asked(tmp_path):
    model = randomized(keras_vit.ViT(**dict(TINY, image_size=None, native_image_size=32)))
    export_model(model, "keras-hub", str(tmp_path / "p"), image_size=48)
    assert json.loads((tmp_path / "p" / "config.json").read_text())["config"]["image_shape"] == [48, 48, 3]


def test_an_existing_output_is_left_alone(tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "mine.txt").write_text("keep")
    with pytest.raises(FileExistsError, match=r"'.*p' exists; a keras-hub preset is written into a new folder"):
        export_model(keras_vit.ViT(**TINY), "keras-hub", str(tmp_path / "p"))
    assert os.listdir(tmp_path / "p") == ["mine.txt"] and sorted(os.listdir(tmp_path)) == ["p"]


def test_cli_export_format_keras_hub(tmp_path, capsys):
    path = tmp_path / "m.keras"
    keras_vit.saving.save_model(randomized(keras_vit.ViT(**TINY)), str(path), metadata={"class_names": list("abcde")})
    code = cli.main(["export", str(path), "--format", "keras-hub", "--output", str(tmp_path / "p")])
    assert code == 0, capsys.readouterr().err
    assert "PASSED" in capsys.readouterr().out
    assert json.loads((tmp_path / "p" / "metadata.json").read_text())["class_names"] == list("abcde")


@pytest.mark.parametrize("activation", ["sigmoid", None, "softmax"])
def test_the_heads_activation_survives_the_round_trip(tmp_path, activation):
    """task.json's activation is the head's: from_pretrained builds it for the source's own head (a sigmoid
    multi-label model once came back with softmax), and a new head keeps keras_vit's default."""
    model = randomized(keras_vit.ViT(**TINY, classifier_activation=activation))
    export_model(model, "keras-hub", str(tmp_path / "p"))
    loaded = keras_vit.from_pretrained(str(tmp_path / "p"))
    x = images(2, 32)
    assert loaded.vit_config.classifier_activation == activation
    np.testing.assert_allclose(np.asarray(loaded(x)), np.asarray(model(x)), rtol=1e-5, atol=1e-6)  # same weights, same graph: round-off
    assert f"classifier_activation={activation!r}: the head's activation the source declares" in str(loaded.load_report)
    other = keras_vit.from_pretrained(str(tmp_path / "p"), num_classes=7)
    assert other.vit_config.classifier_activation == "softmax"
