"""fit_resumable returns what model.fit returns: a keras.callbacks.History (with the resume facts added)."""

import numpy as np
import tensorflow as tf

import keras

from keras_vit.train import resumable


def test_fit_resumable_returns_a_history():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.random.default_rng(0).normal(size=(8, 3)), np.zeros((8, 2))
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(4).repeat()
    history = resumable.fit_resumable(model, train, epochs=3, steps_per_epoch=2, verbose=0)
    assert isinstance(history, keras.callbacks.History) and history.model is model
    assert history.epoch == [0, 1, 2] and len(history.history["loss"]) == 3
    assert history.params["epochs"] == 3 and history.params["steps"] == 2
    assert (history.resumed_from_step, history.stopped) == (0, False)
    # read as the dict fit_resumable returned before (the training job reads it so)
    assert history["loss"] == history.history["loss"] and history.get("val_loss") is None
    assert history["resumed_from_step"] == 0 and history.get("stopped") is False and "loss" in history
