"""A resumed run draws the uninterrupted run's stochastic-depth and dropout masks (Backup's seeds-BATCHES.npz).

``model.save_weights`` leaves the layers' seed generators out, so a run resumed from a backup drew its masks from
the generators' first states again: every ``keras-vit train`` recipe but fine-tuning's has drop_path=0.1, and a
resumed CLI run ended 1e-2 off the uninterrupted run's weights (exact with --drop-path 0).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import images
from keras_vit.layers import StochasticDepth
from keras_vit.train import data, model_setup, optimizers, resumable


def _model():
    inputs = keras.Input((32, 32, 3))
    x = keras.layers.Dense(16)(keras.layers.Flatten()(keras.layers.Rescaling(1 / 255)(inputs)))
    x = x + StochasticDepth(0.5, seed=1, name="drop_path")(keras.layers.Dense(16)(x))
    x = keras.layers.Dropout(0.5, seed=2)(x)
    return keras.Model(inputs, keras.layers.Dense(5, activation="softmax", name="head")(x))


def _run(output, interrupt_at=None, epochs=3, steps=4):
    keras.utils.set_random_seed(0)
    model = _model()
    model_setup.compile_model(model, optimizers.build_optimizer(1e-2, epochs * steps, 2), 0.1)
    dataset = tf.data.Dataset.from_tensor_slices((images(32, 32, seed=0).astype("uint8"), np.arange(32, dtype="int32") % 5))

    def train():
        return data.make_pipeline(dataset, 32, 8, training=True, num_classes=5, seed=0, repeat=True)

    callbacks = resumable.make_callbacks(str(output), save_freq=2, tensorboard=False)

    class Interrupt(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == interrupt_at:
                raise KeyboardInterrupt("simulated kill")

    if interrupt_at:
        callbacks.append(Interrupt())
    resumable.fit_resumable(model, train, epochs=epochs, steps_per_epoch=steps, callbacks=callbacks, verbose=0)
    return model


def test_a_resumed_run_draws_the_uninterrupted_runs_drop_path_and_dropout_masks(tmp_path):
    reference = _run(tmp_path / "straight")
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "killed", interrupt_at=7)  # the backup of step 6
    assert sorted(p.name for p in (tmp_path / "killed" / "backup").glob("seeds-*.npz")) == ["seeds-6.npz"]
    model = _run(tmp_path / "killed")
    for got, want in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert not (tmp_path / "killed" / "backup").exists()
