"""A .tflite's label file (``<stem>.labels.txt``) is its own: never read as another model's labels, never written over
a label file of no .tflite."""

import numpy as np
import pytest
from PIL import Image

import keras_vit
from keras_vit.export import export_model

SMALL = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64, num_classes=2)


def test_a_keras_file_is_not_labelled_by_a_label_file_of_its_stem(tmp_path):
    """vit.keras took the classes of vit.labels.txt, which a vit.tflite export of another model had written."""
    model = keras_vit.ViT(**SMALL)
    model.save(str(tmp_path / "vit.keras"))
    (tmp_path / "vit.labels.txt").write_text("a\nb\n")
    image = tmp_path / "image.png"
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(image)
    names = {p["label"] for p in keras_vit.predict(str(tmp_path / "vit.keras"), [str(image)], top_k=2)[0]["predictions"]}
    assert names == {"class_0", "class_1"}


def test_an_export_does_not_write_over_a_label_file_of_no_tflite(tmp_path):
    (tmp_path / "mine.labels.txt").write_text("cat\ndog\n")
    with pytest.raises(FileExistsError, match=r"mine.labels.txt' exists beside no 'mine.tflite'"):
        export_model(keras_vit.ViT(**SMALL), "tflite", str(tmp_path / "mine.tflite"), num_images=4)
    assert (tmp_path / "mine.labels.txt").read_text() == "cat\ndog\n" and not (tmp_path / "mine.tflite").exists()
