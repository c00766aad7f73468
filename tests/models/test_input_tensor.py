"""``input_tensor`` computed by other layers, as ``keras.applications`` takes it: the model's input is the
``keras.Input`` it comes from and the layers in between are part of the model.

Before the fix the model's input was a clone of the intermediate tensor: the user's layers (a ``Rescaling``, an
augmentation) were silently left out of the model, and ``keras.Model(inputs, model.output)`` failed with
"Output ... is not connected to `inputs`".
"""

import numpy as np

import keras
import keras_vit
from helpers import TINY, images


def test_an_intermediate_input_tensor_keeps_the_layers_before_it(tmp_path):
    inputs = keras.Input((32, 32, 3))
    model = keras_vit.ViT(**TINY, num_classes=3, input_tensor=keras.layers.Rescaling(0.5, name="halve")(inputs))
    assert model.inputs[0] is inputs and "halve" in [layer.name for layer in model.layers]
    plain = keras_vit.ViT(**TINY, num_classes=3)
    for weight in model.get_layer("head").weights:
        weight.assign(np.random.default_rng(0).normal(size=weight.shape).astype("float32"))
    plain.set_weights(model.get_weights())
    x = images(2)
    np.testing.assert_allclose(model.predict(x, verbose=0), plain.predict(x * 0.5, verbose=0), atol=1e-6)
    larger = keras.Model(inputs, keras.layers.Dense(2)(model.output))
    assert larger.predict(x, verbose=0).shape == (2, 2)
    model.save(tmp_path / "model.keras")
    loaded = keras_vit.load_model(tmp_path / "model.keras")
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0), atol=1e-6)
    assert keras.models.clone_model(model).vit_config == model.vit_config

