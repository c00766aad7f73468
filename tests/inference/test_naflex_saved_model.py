"""`predict` on a NaFlex SavedModel (its serving_default on each image's patch dict, cut at the budget) and
`max_patches` / `--max-patches` on every NaFlex file, refused by name where it cannot apply.

The fast tests run on SavedModel and TFLite files of a small TensorFlow function with the NaFlex inputs (no Keras
model to trace); the real export of a tiny NaFlex model, against its .keras file on 1:1, 16:9 and 1:3 images, is
the slow test at the end.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from keras_vit import cli
from keras_vit.architecture.config import ViTConfig
from keras_vit.inference import naflex_input, naflex_runtime
from keras_vit.inference.predictors import load_predictor, predict
from keras_vit.layers.naflex_grid import KEYS
from helpers import png_files, randomized

SIZES = ((48, 48), (45, 80), (90, 30))  # 1:1, 16:9, 1:3
PATCH = 8
WEIGHTS = np.random.default_rng(3).normal(0, 0.01, (PATCH * PATCH * 3, 3)).astype("float32")


def reference(patches, patch_coord, patch_valid):
    """Class probabilities that depend on the pixels, the grid and the mask: what each file's cut must give."""
    valid = np.asarray(patch_valid, "float32")[..., None]
    mean = (np.asarray(patches) * valid).sum(1) / valid.sum(1)
    rows = (np.asarray(patch_coord, "float32")[..., :1] * valid).max(1)  # the last row: the grid's height - 1
    logits = mean @ WEIGHTS + rows * np.array([0.3, -0.2, 0.1], "float32")
    exp = np.exp(logits - logits.max(-1, keepdims=True))
    return exp / exp.sum(-1, keepdims=True)


def _served(patches, patch_coord, patch_valid):
    valid = tf.cast(patch_valid, tf.float32)[..., None]
    mean = tf.reduce_sum(patches * valid, 1) / tf.reduce_sum(valid, 1)
    rows = tf.reduce_max(tf.cast(patch_coord, tf.float32)[..., :1] * valid, axis=1)
    logits = tf.matmul(mean, WEIGHTS) + rows * tf.constant([0.3, -0.2, 0.1])
    return tf.nn.softmax(logits, axis=-1)


def _specs(length, dtypes=("float32", "int32", "bool"), batch=None):
    shapes = {"patches": (batch, length, PATCH * PATCH * 3), "patch_coord": (batch, length, 2),
              "patch_valid": (batch, length)}
    return [tf.TensorSpec(shapes[key], dtype, name=key) for key, dtype in zip(KEYS, dtypes)]


def naflex_saved_model(folder, length=None, metadata=None):
    """A SavedModel whose serving_default takes the NaFlex dict (any length, or ``length``), with keras_vit's
    metadata file when ``metadata`` is given."""
    module = tf.Module()
    module.serve = tf.function(lambda patches, patch_coord, patch_valid: {
        "probabilities": _served(patches, patch_coord, patch_valid)}, input_signature=_specs(length))
    tf.saved_model.save(module, str(folder), signatures={"serving_default": module.serve})
    if metadata is not None:
        os.makedirs(folder / "assets", exist_ok=True)
        (folder / "assets" / "keras_vit.json").write_text(json.dumps(metadata))
    return str(folder)


def naflex_tflite(path, length):
    """A .tflite file with the NaFlex inputs (float32, batch 1) at the fixed budget ``length``."""
    fn = tf.function(lambda patches, patch_coord, patch_valid: _served(patches, patch_coord, patch_valid > 0.5),
                     input_signature=_specs(length, ("float32", "float32", "float32"), batch=1))
    content = tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()], fn).convert()
    path.write_bytes(content)
    return str(path)


def config_dict(max_patches=None):
    return ViTConfig(image_size=32, patch_size=PATCH, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
                     num_classes=3, class_token=False, pooling="gap", input_mode="naflex",
                     max_patches=max_patches).to_dict()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return png_files(tmp_path_factory.mktemp("shapes"), SIZES)


def expected(paths, budget):
    pixels = [np.asarray(Image.open(p).convert("RGB"), "float32") for p in paths]
    return reference(**naflex_input.batch(pixels, PATCH, budget))


def probabilities(results):
    return np.array([[p["probability"] for p in sorted(r["predictions"], key=lambda p: p["index"])] for r in results])


def test_a_naflex_saved_model_is_run_on_each_image_at_its_budget(files, tmp_path):
    """Before: its serving_default's three inputs were refused ("one image input"). Now: the budget it was exported
    at (recorded beside it), or max_patches=, each image cut by the grid rule as the .keras model's predict cuts it."""
    path = naflex_saved_model(tmp_path / "sm", metadata={"vit_config": config_dict(), "max_patches": 24,
                                                         "image_size": [32, 32], "output": "probabilities"})
    predictor = load_predictor(path)
    assert (predictor.format, predictor.naflex) == ("saved_model", ((8, 8), 24))
    results = predict(path, files, top_k=3, labels=["a", "b", "c"])
    np.testing.assert_allclose(probabilities(results), expected(files, 24), rtol=0, atol=1e-5)
    assert [naflex_input.batch([np.zeros(s + (3,))], PATCH, 24)["patch_valid"].sum() for s in SIZES] == [16, 24, 24]
    # another budget: serving_default takes any length from a model without max_patches
    np.testing.assert_allclose(probabilities(predict(path, files, top_k=3, max_patches=40)), expected(files, 40),
                               rtol=0, atol=1e-5)


def test_a_saved_model_of_a_fixed_budget_takes_that_budget_only(files, tmp_path):
    path = naflex_saved_model(tmp_path / "fixed", length=20,
                              metadata={"vit_config": config_dict(20), "max_patches": 20, "image_size": [32, 32]})
    np.testing.assert_allclose(probabilities(predict(path, files, top_k=3)), expected(files, 20), rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match=r"max_patches=20 patches per image only\. Received: max_patches=30"):
        load_predictor(path, max_patches=30)


def test_another_exporter_s_naflex_saved_model_needs_its_budget_named(files, tmp_path):
    """No keras_vit metadata: recognised by its inputs, the patch size read from the patches' width."""
    path = naflex_saved_model(tmp_path / "bare")
    with pytest.raises(ValueError, match=r"records no budget.*--max-patches N"):
        load_predictor(path)
    np.testing.assert_allclose(probabilities(predict(path, files, top_k=3, max_patches=12)), expected(files, 12),
                               rtol=0, atol=1e-5)


def test_a_naflex_tflite_takes_the_budget_it_was_exported_at_only(files, tmp_path):
    path = naflex_tflite(tmp_path / "n.tflite", 24)
    np.testing.assert_allclose(probabilities(predict(path, files, top_k=3, max_patches=24)), expected(files, 24),
                               rtol=0, atol=1e-4)
    with pytest.raises(ValueError, match=r"takes max_patches=24 patches per image only: its budget was fixed at "
                                         r"export \(keras-vit export --max-patches\).*Received: max_patches=32"):
        load_predictor(path, max_patches=32)


@pytest.mark.parametrize("value", [0, -3, 2.5, True, "16"])
def test_max_patches_must_be_a_positive_int(value):
    with pytest.raises(ValueError, match=r"`max_patches` must be .*Received: max_patches="):
        load_predictor("missing.keras", max_patches=value)
    with pytest.raises(ValueError, match=r"`max_patches` must be a positive int"):
        naflex_runtime.budget_of(ViTConfig.from_dict(config_dict()), value)


def test_max_patches_and_image_size_are_refused_where_they_would_be_ignored(files, tmp_path):
    """Before: max_patches on an image model and image_size on a NaFlex model were dropped without a word."""
    import keras_vit

    image_model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
                                num_classes=3)
    with pytest.raises(ValueError, match=r"--max-patches.*is not a NaFlex model.*Received: max_patches=16"):
        load_predictor(image_model, max_patches=16)
    path = naflex_saved_model(tmp_path / "sm", metadata={"vit_config": config_dict(), "image_size": [32, 32]})
    with pytest.raises(ValueError, match=r"NaFlex model .* no image size.*Received: image_size=\(64, 64\)"):
        load_predictor(path, image_size=(64, 64))
    predictor = load_predictor(path, max_patches=16)
    assert load_predictor(predictor, max_patches=16) is predictor
    with pytest.raises(ValueError, match=r"loaded at max_patches=16.*Received: max_patches=20"):
        load_predictor(predictor, max_patches=20)


def test_the_cli_flag(files, tmp_path, capsys):
    path = naflex_saved_model(tmp_path / "sm", metadata={"vit_config": config_dict(), "image_size": [32, 32]})
    assert cli.main(["predict", path, *files, "--json", "--max-patches", "12"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [os.path.basename(r["path"]) for r in document["results"]] == [os.path.basename(f) for f in files]
    assert sorted(document["results"][0]["predictions"][0]) == ["index", "label", "probability"]
    np.testing.assert_allclose(probabilities(document["results"]), expected(files, 12), rtol=0, atol=1e-5)
    with pytest.raises(SystemExit) as stop:
        cli.main(["predict", path, *files, "--max-patches", "0"])
    assert stop.value.code == 2 and "argument --max-patches: must be a positive int, got 0" in capsys.readouterr().err
    assert "--max-patches N" in cli.build_parser(("predict",))[0]._subparsers._group_actions[0].choices[
        "predict"].format_help()


@pytest.mark.slow
def test_the_exported_saved_model_agrees_with_the_keras_model_on_three_aspect_ratios(files, tmp_path):
    """A tiny NaFlex model (32 x 32, patches of 8, width 32, 2 blocks) exported for TF Serving, run by predict: the
    .keras file's probabilities within 1e-5 on 1:1, 16:9 and 1:3 files, at the exported budget and at another."""
    import keras_vit
    from keras_vit.export import export_model

    model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
                          num_classes=3, class_token=False, pooling="gap", input_mode="naflex")
    randomized(model)
    keras_file = str(tmp_path / "naflex.keras")
    model.save(keras_file)
    eval_data = np.random.default_rng(0).uniform(0, 255, (3, 32, 32, 3)).astype("float32")
    report = export_model(keras_file, "saved_model", str(tmp_path / "serving"), eval_data=eval_data, warmup=False,
                          max_patches=24)
    assert report.passed, report.summary()
    for budget in (None, 40):  # None: the budget the export recorded, 24
        served = probabilities(predict(report.path, files, top_k=3, max_patches=budget))
        keras = probabilities(predict(keras_file, files, top_k=3, max_patches=budget or 24))
        np.testing.assert_allclose(served, keras, rtol=0, atol=1e-5)
