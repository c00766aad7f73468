"""Which images verify and calibrate an export: the given ones, the model's own training data, or MNIST said so; int8
without calibration images of the model's own kind is refused, naming the argument that gives them."""

import os

import numpy as np
import pytest

from helpers import TINY, image_folder, tiny_vit
from keras_vit import saving
from keras_vit.export import data, export_model

SHAPE = (TINY["image_size"], TINY["image_size"], 3)


@pytest.fixture
def plain_model(tmp_path):
    path = str(tmp_path / "plain.keras")
    tiny_vit(num_classes=3).save(path)  # no keras_vit metadata: no training dataset recorded
    return path


def test_int8_without_calibration_images_is_refused_before_any_work(plain_model, tmp_path):
    out = tmp_path / "m.tflite"
    with pytest.raises(ValueError, match=r"records no training dataset: pass representative_data= "
                                         r"\(keras-vit export --representative-data DIR\)"):
        export_model(plain_model, "tflite", str(out), quantize="int8", num_images=4)
    with pytest.raises(ValueError, match="representative_data="):  # a model object records nothing either
        export_model(saving.load_model(plain_model), "tflite", str(out), quantize="int8", num_images=4)
    assert os.listdir(tmp_path) == ["plain.keras"]


def test_a_tfds_or_missing_dataset_is_named_in_the_refusal(tmp_path):
    with pytest.raises(ValueError, match=r"trained on 'tfds:oxford_flowers102', which export does not load"):
        data.calibration_images(None, SHAPE, 4, dataset="tfds:oxford_flowers102")
    with pytest.raises(ValueError, match=r"which is not a folder on this machine"):
        data.calibration_images(None, SHAPE, 4, dataset=str(tmp_path / "gone"))


def test_a_relative_dataset_record_is_not_resolved_against_this_directory(tmp_path, monkeypatch):
    """A model trained on --dataset data recorded 'data': an export run where another 'data' folder lay calibrated
    its int8 file on that folder's images, and said they were the model's own."""
    image_folder(tmp_path / "data", per_class=5)  # another folder of the same name, here
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"trained on 'data', a path relative to where it was trained, which is not "
                                         r"known here"):
        data.calibration_images(None, SHAPE, 4, dataset="data")
    assert "NOT the model's own" in data.eval_images(None, SHAPE, 2, dataset="data").source
    assert "the folder the model was trained on" in data.eval_images(None, SHAPE, 2, dataset=str(tmp_path / "data")).source


@pytest.mark.slow  # MNIST digits read and resized: the folder and array tests below run the same path fast
def test_mnist_stand_in_for_verification_says_it_is_not_the_models_data():
    images = data.eval_images(None, SHAPE, 5, dataset=None)
    assert images.pixels.shape == (5, *SHAPE)
    assert "NOT the model's own" in images.source and "--eval-data" in images.source
    assert images.describe().startswith("5 images: MNIST digits")


@pytest.mark.slow  # MNIST digits read and resized: the folder and array tests below run the same path fast
def test_recorded_mnist_calibrates_on_training_digits_and_verifies_on_held_out_ones():
    calibration = data.calibration_images(None, SHAPE, 6, dataset="mnist")
    verification = data.eval_images(None, SHAPE, 6, dataset="mnist")
    assert "training split: the model's training data" in calibration.source
    assert "held-out test split: the model's training data" in verification.source
    assert not any(np.allclose(c, v, atol=1e-3) for c in calibration.pixels for v in verification.pixels)


def test_recorded_image_folder_gives_its_own_images_split_as_training_split_it(tmp_path):
    folder = str(image_folder(tmp_path / "flowers", classes=("daisy", "rose", "tulip"), per_class=10))
    test_files = data.folder_split(folder, "test")
    train_files = data.folder_split(folder, "train")
    assert len(test_files) == 6 and len(train_files) == 24 and not set(test_files) & set(train_files)
    assert {os.path.basename(os.path.dirname(f)) for f in test_files} == {"daisy", "rose", "tulip"}
    calibration = data.calibration_images(None, SHAPE, 12, dataset=folder)
    verification = data.eval_images(None, SHAPE, 100, dataset=folder)
    assert calibration.pixels.shape == (12, *SHAPE) and verification.pixels.shape == (6, *SHAPE)
    assert folder in calibration.source and "trained on" in calibration.source
    assert "held-out test images" in verification.source


def test_the_export_holds_out_the_images_training_held_out_whatever_the_folder_holds(tmp_path):
    """The export listed subfolders of a class and hidden folders, which training does not read: its every-fifth
    image was another image than training's, and an empty class folder stopped it."""
    from keras_vit.train.image_folder import load_image_folder

    folder = image_folder(tmp_path / "flowers", classes=("daisy", "rose"), per_class=7)
    image_folder(folder / "rose" / "nested", classes=("deeper",), per_class=3)  # not read by training
    image_folder(folder / ".ipynb_checkpoints", classes=("daisy",), per_class=2)  # a hidden folder: no class
    (folder / "tulip").mkdir()  # a class with no image: training warns, and still reads the others
    with pytest.warns(UserWarning, match=r"the class subfolder\(s\) \['tulip'\] hold no image"):
        trained = load_image_folder(str(folder))
    test_files = sorted(data.folder_split(str(folder), "test"))
    assert len(test_files) == trained.num_test == 2  # the 5th of each class's 7: daisy's and rose's own
    assert len(data.folder_split(str(folder), "train")) == trained.num_train == 12
    assert not any("nested" in f or ".ipynb" in f for f in test_files)


def test_recorded_dataset_is_read_from_the_keras_file(tmp_path):
    path = str(tmp_path / "trained.keras")
    saving.save_model(tiny_vit(num_classes=3), path, metadata={"dataset": "mnist", "class_names": ["a", "b", "c"]})
    assert data.recorded_dataset(path) == "mnist"
    assert data.recorded_dataset(tiny_vit(num_classes=3)) is None


def test_given_images_are_named_in_the_report_source(tmp_path):
    pixels = np.full((3, *SHAPE), 100.0, "float32")
    assert data.eval_images(pixels, SHAPE, 3).source == "eval_data (an array)"
    folder = image_folder(tmp_path / "imgs", per_class=2)
    given = data.calibration_images(str(folder), SHAPE, 3)
    assert given.source == f"representative_data={str(folder)!r} (--representative-data)" and len(given.pixels) == 3


@pytest.mark.slow  # MNIST digits read and resized: the folder and array tests below run the same path fast
def test_float_export_report_prints_where_its_images_came_from(plain_model, tmp_path):
    report = export_model(plain_model, "onnx", str(tmp_path / "m.onnx"), num_images=4)
    assert report.eval_images.startswith("4 images: MNIST digits") and "NOT the model's own" in report.eval_images
    assert report.calibration_images is None
    assert f"  verified on    {report.eval_images}" in report.summary()


def test_int8_export_reports_its_calibration_images_and_calibration_progress(plain_model, tmp_path):
    stages = []
    calibration = np.random.default_rng(0).uniform(0, 255, (6, *SHAPE)).astype("float32")
    report = export_model(plain_model, "tflite", str(tmp_path / "m.tflite"), quantize="int8", num_images=6,
                          eval_data=calibration, representative_data=calibration, float_ops=(), min_top1_agreement=0.0,
                          progress=lambda stage, done=None, total=None: stages.append((stage, done, total)))
    assert report.calibration_images == "6 images: representative_data (an array)"
    assert "  calibrated on  6 images: representative_data (an array)" in report.summary()
    counts = [done for stage, done, total in stages if stage == "calibrating"]
    assert counts and counts[-1] == 6 and all(total == 6 for stage, _, total in stages if stage == "calibrating")
    names = [stage for stage, done, _ in stages if done is None]
    assert any(s.startswith("converting to TFLite int8") for s in names) and any(s.startswith("verifying on 6") for s in names)
