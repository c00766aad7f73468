"""make_pipeline's checks and its evaluation crop: arguments refused up front by their domains, labels outside the
classes, float32 batches under a 16-bit policy, the model's aspect ratio kept; a split folder without test/."""

import os

import numpy as np
import pytest
import tensorflow as tf

from keras_vit.train import data


def test_center_crop_keeps_a_non_square_models_aspect_ratio():
    """A 32 x 64 model sees the image's central 1:2 box, as keras_vit.predict's whole-image resize does for a 1:2
    image; it used to cut the central square and stretch it to 1:2."""
    image = np.zeros((40, 80, 3), "uint8")
    image[:, :20] = 255  # the left quarter
    ds = tf.data.Dataset.from_tensors((image, np.int32(0)))
    out = np.asarray(next(iter(data.make_pipeline(ds, (32, 64), 1)))[0])[0, ..., 0]
    assert out.shape == (32, 64) and abs((out > 127).mean() - 0.25) < 0.02


@pytest.mark.parametrize("argument, value, message", [
    ("image_size", 32.0, r"`image_size` must be a positive int or a \(height, width\) pair of them\. Received: image_size=32\.0"),
    ("image_size", (32,), r"Received: image_size=\(32,\)"),
    ("image_size", 0, r"Received: image_size=0"),
    ("crop_fraction", 0, r"`crop_fraction` must be in \(0, 1\]\. Received: crop_fraction=0"),
    ("shuffle_buffer", 0, r"`shuffle_buffer` must be a positive int"),
    ("num_classes", True, r"`num_classes` must be a positive int\. Received: num_classes=True"),
    ("mixup", 1.5, r"`mixup` must be in \[0, 1\]\. Received: mixup=1\.5"),
    ("seed", "abc", r"`seed` must be an int in \[0, 4294967295\]"),
])
def test_pipeline_arguments_outside_their_domain_are_named_up_front(argument, value, message):
    """They used to fail as a bare TypeError, or only when the data was iterated, deep in tf.data."""
    ds = tf.data.Dataset.from_tensor_slices((np.zeros((2, 8, 8, 3), "uint8"), np.zeros(2, "int32")))
    with pytest.raises(ValueError, match=message):
        data.make_pipeline(ds, **{"image_size": 8, "batch_size": 2, "num_classes": 3, argument: value})
    assert next(iter(data.make_pipeline(ds, 8, np.int64(2))))[0].shape == (2, 8, 8, 3)  # a NumPy int is an int


def test_a_label_outside_num_classes_stops_the_pipeline_not_a_zero_target():
    """tf.one_hot gives an all-zero row for label >= depth: an image that counted as no class, silently."""
    ds = tf.data.Dataset.from_tensor_slices((np.zeros((4, 8, 8, 3), "uint8"), np.array([0, 1, 2, 3], "int64")))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"make_pipeline\(num_classes=2\): a label is outside \[0, 2\)"):
        list(data.make_pipeline(ds, 8, 2, num_classes=2))
    labels = np.concatenate([np.asarray(y) for _, y in data.make_pipeline(ds, 8, 2, num_classes=4)])
    np.testing.assert_allclose(labels, np.eye(4))
    from keras_vit.train.naflex_data import NaFlexBatching

    naflex = NaFlexBatching(4, (4, 8))  # the NaFlex pipeline's own labels: the same check
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"make_pipeline\(num_classes=2\): a label is outside"):
        list(data.make_pipeline(ds, 8, 2, num_classes=2, naflex=naflex))


@pytest.mark.parametrize("mixing", [{"mixup": 1.0}, {"cutmix": 1.0}, {"randaugment": True}])
def test_batch_augmentation_under_a_16_bit_policy_keeps_float32(mixing):
    """Under mixed_bfloat16 (keras-vit train --mixed-precision on a CPU with avx512_bf16, an Ampere GPU) the layers
    cast the batch to bfloat16: MixUp and CutMix failed on the float32 labels, RandAugment fed bfloat16 images."""
    import keras

    ds = tf.data.Dataset.from_tensor_slices((np.zeros((4, 8, 8, 3), "uint8"), np.arange(4) % 2))
    policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        images, labels = next(iter(data.make_pipeline(ds, 8, 4, training=True, num_classes=2, **mixing)))
    finally:
        keras.mixed_precision.set_global_policy(policy)
    assert (images.dtype, labels.dtype) == (tf.float32, tf.float32)


def test_a_split_folder_without_test_says_so(tmp_path):
    """train/ and validation/ without test/ were read as two classes 'train' and 'validation' holding no images."""
    from helpers import image_folder

    image_folder(tmp_path / "pets" / "train", per_class=2)
    image_folder(tmp_path / "pets" / "validation", per_class=2)
    (tmp_path / "pets" / ".ipynb_checkpoints").mkdir()  # hidden: no class, as the class listing has it
    with pytest.raises(ValueError, match=r"has train/, validation/ but no test/: a split folder needs train/ and test/"):
        data.load_dataset(str(tmp_path / "pets"))
    image_folder(tmp_path / "vehicles", per_class=5)  # a class may be called train, beside others
    os.rename(tmp_path / "vehicles" / "cat", tmp_path / "vehicles" / "train")
    assert "train" in data.load_dataset(str(tmp_path / "vehicles")).class_names
