"""`max_patches` / `keras-vit export --max-patches` and the image model's options a NaFlex export would not read:
each refused by name before any work, where before they were dropped without a word."""

import numpy as np
import pytest

import keras_vit
from keras_vit import cli
from keras_vit.export import export_model

EVAL = np.random.default_rng(5).uniform(0, 255, (3, 32, 32, 3)).astype("float32")


def tiny(**naflex):
    return keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
                         num_classes=3, class_token=False, pooling="gap", **naflex)


def test_max_patches_is_refused_for_an_image_model(tmp_path):
    with pytest.raises(ValueError, match=r"--max-patches.*model 'vit' is not a NaFlex model.*Received: max_patches=64"):
        export_model(tiny(), "tflite", str(tmp_path / "m.tflite"), eval_data=EVAL, max_patches=64)
    assert not (tmp_path / "m.tflite").exists()


@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_max_patches_must_be_a_positive_int(value, tmp_path):
    with pytest.raises(ValueError, match=r"`max_patches` must be a positive int\. Received: max_patches="):
        export_model(tiny(input_mode="naflex"), "tflite", str(tmp_path / "m.tflite"), eval_data=EVAL, max_patches=value)


def test_a_naflex_export_refuses_image_size_and_a_tflite_batch(tmp_path):
    model = tiny(input_mode="naflex")
    with pytest.raises(ValueError, match=r"is a NaFlex model.*--max-patches.*Received: image_size=64"):
        export_model(model, "saved_model", str(tmp_path / "sm"), eval_data=EVAL, image_size=64)
    with pytest.raises(ValueError, match=r"one image at a time \(batch 1.*Received: batch_size=4"):
        export_model(model, "tflite", str(tmp_path / "m.tflite"), eval_data=EVAL, batch_size=4)
    with pytest.raises(ValueError, match=r"takes max_patches=16 patches per image only\. Received: max_patches=32"):
        export_model(tiny(input_mode="naflex", max_patches=16), "tflite", str(tmp_path / "m.tflite"), eval_data=EVAL,
                     max_patches=32)
    assert not list(tmp_path.iterdir())


def test_the_export_flag(tmp_path, capsys):
    path = str(tmp_path / "image.keras")
    tiny().save(path)
    code = cli.main(["export", path, "--format", "tflite", "--output", str(tmp_path / "m.tflite"), "--max-patches", "64"])
    assert code == 2 and "is not a NaFlex model" in capsys.readouterr().err
    parser = cli.build_parser(("export",))[0]
    help_text = parser._subparsers._group_actions[0].choices["export"].format_help()
    assert "--max-patches N" in help_text and "NaFlex" in help_text


@pytest.mark.slow
def test_the_export_flag_sets_the_tflite_budget(tmp_path):
    path = str(tmp_path / "naflex.keras")
    tiny(input_mode="naflex").save(path)
    output = str(tmp_path / "n.tflite")
    images = tmp_path / "images"
    images.mkdir()
    from PIL import Image

    for i, size in enumerate(((40, 40), (27, 48), (60, 20))):
        Image.fromarray(np.random.default_rng(i).integers(0, 255, size + (3,), dtype=np.uint8)).save(images / f"{i}.png")
    assert cli.main(["export", path, "--format", "tflite", "--output", output, "--max-patches", "24",
                     "--eval-data", str(images)]) == 0
    from keras_vit.inference.predictors import load_predictor

    assert load_predictor(output).naflex == ((8, 8), 24)
