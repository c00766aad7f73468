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


def test_fit_resumable_traces_the_train_step_once():
    """Keras builds an unbuilt optimizer inside the first trace of the train step (when no strategy is set), and
    the slot variables made there make tf.function trace the whole step again: twice the start-up of every run."""
    traces = []

    class Counted(keras.Sequential):
        def train_step(self, data):
            traces.append(1)  # Python runs here only while tf.function traces the step
            return super().train_step(data)

    keras.utils.set_random_seed(0)
    model = Counted([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    x, y = np.random.default_rng(0).normal(size=(8, 3)), np.zeros((8, 2))
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(4).repeat()
    history = resumable.fit_resumable(model, train, epochs=2, steps_per_epoch=2, verbose=0)
    assert len(traces) == 1 and len(history["loss"]) == 2
    assert int(model.optimizer.iterations.numpy()) == 4  # the slots built up front are the ones trained
    assert all(np.any(np.asarray(v) != 0) for v in model.optimizer.variables if "momentum" in v.path)
