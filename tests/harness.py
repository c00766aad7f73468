"""The checks every keras_vit model gets from one call, in the spirit of keras-hub's ``run_backbone_test``.

``run_model_test(config)`` builds the model a :class:`keras_vit.ViTConfig` describes and checks what every
architecture must do: the model carries its configuration, its outputs have the shape the configuration
says, its parameter count is the one counted from the configuration alone, and a Keras config round trip
(``get_config`` / ``from_config``) rebuilds the same model. ``run_model_saving_test`` saves it as ``.keras``
and loads it back with its configuration, weights and class names. A new variant or family adds one row to
the parametrisation of tests/architecture/test_every_architecture.py (or calls these from its own tests).
"""

import numpy as np

import keras
import keras_vit
from keras_vit.architecture.params import count_config_params


def model_inputs(config, batch=2, seed=0):
    """Images the model of ``config`` takes: its input size, or its native size for ``image_size=None``."""
    h, w = config.image_size or config.native_image_size
    pixels = np.random.default_rng(seed).uniform(0, 255, (batch, h, w, 3)).astype("float32")
    return pixels if config.include_preprocessing else pixels / 127.5 - 1


def expected_output_shape(config, batch):
    if config.include_top:
        return (batch, config.num_classes)
    if config.pooling is None:
        return (batch, config.num_tokens, config.hidden_size)
    return (batch, config.representation_size or config.hidden_size)


def run_model_test(config, batch=2, atol=1e-5):
    """Build ``config`` and check the model against it; returns ``(model, inputs, outputs)``."""
    config = keras_vit.ViTConfig.from_dict(config)
    model = keras_vit.build_model(config)
    assert isinstance(model, keras_vit.VisionTransformer) and model.vit_config == config
    _randomize(model)
    inputs = model_inputs(config, batch)
    outputs = np.asarray(model(inputs, training=False))
    assert outputs.shape == expected_output_shape(config, batch)
    assert np.all(np.isfinite(outputs))
    assert model.count_params() == count_config_params(config)
    # a Keras config round trip: the same graph, the same configuration, the same outputs
    clone = keras_vit.VisionTransformer.from_config(model.get_config())
    assert clone.vit_config == config and [l.name for l in clone.layers] == [l.name for l in model.layers]
    clone.set_weights(model.get_weights())
    np.testing.assert_allclose(np.asarray(clone(inputs, training=False)), outputs, rtol=atol, atol=atol)
    return model, inputs, outputs


def run_model_saving_test(model, inputs, tmp_path, atol=1e-5):
    """Save as ``.keras`` with class names, load with keras_vit and with Keras: same class, configuration, outputs."""
    path = str(tmp_path / f"{model.name}.keras")
    names = [f"class_{i}" for i in range(model.output_shape[-1])] if model.vit_config.include_top else None
    keras_vit.save_model(model, path, metadata={"class_names": names} if names else None)
    expected = np.asarray(model(inputs, training=False))
    ours = keras_vit.load_model(path)
    for loaded in (ours, keras.saving.load_model(path, safe_mode=True)):
        assert isinstance(loaded, keras_vit.VisionTransformer) and loaded.vit_config == model.vit_config
        np.testing.assert_allclose(np.asarray(loaded(inputs, training=False)), expected, rtol=atol, atol=atol)
    if names:
        assert ours.class_names == names
    return path


def _randomize(model, seed=0):
    """Weights of order one everywhere (the zero head would hide a wrong graph behind zero logits)."""
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        if variable.trainable:
            variable.assign(rng.normal(0, 0.2, size=tuple(variable.shape)).astype(variable.dtype))
