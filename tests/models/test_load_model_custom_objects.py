"""keras_vit.load_model on a larger model holding a keras_vit backbone and the user's own layers."""

import numpy as np

import keras
import keras_vit
from helpers import TINY, images


class Doubling(keras.layers.Layer):  # a user's own layer, not registered with Keras
    def call(self, x):
        return x * 2


def test_keras_vit_load_model_takes_custom_objects_for_a_larger_model(tmp_path):
    """keras_vit.load_model had no custom_objects: a larger model holding the user's own layers did not load
    ("Corrupt or unreadable model file"), though keras.saving.load_model(path, custom_objects=...) loads it."""
    backbone = keras_vit.ViT(**TINY, include_top=False)
    inputs = keras.Input((32, 32, 3))
    model = keras.Model(inputs, Doubling()(backbone(inputs)))
    model.save(tmp_path / "larger.keras")
    x = images(2)
    loaded = keras_vit.load_model(tmp_path / "larger.keras", custom_objects={"Doubling": Doubling})
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0), atol=1e-6)
