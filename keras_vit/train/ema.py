"""The weight EMA (``use_ema``) during ``fit``: validate on the average, train on with the raw weights.

* :class:`EMAValidation` -- validation on the optimizer's moving average.
* :class:`KeepRawWeights` -- undoes the average that ``model.fit`` puts into
  the model when it ends, so a run that :func:`keras_vit.train.resumable.fit_resumable`
  splits into two ``fit`` calls goes on from the raw weights, as a backup does.
"""

import keras


def _trainable_values(model):
    return [keras.ops.convert_to_numpy(v) for v in model.trainable_variables]


def _assign_trainable(model, values):
    for variable, value in zip(model.trainable_variables, values or ()):
        variable.assign(value)


class EMAValidation(keras.callbacks.Callback):
    """Validate on the optimizer's moving average of the weights (``use_ema``); train on with the raw weights.

    ``fit`` wraps each validation in ``on_test_begin`` / ``on_test_end``: the
    EMA weights are put into the model there and the raw ones back after, so
    training, backups and resumes go on from the raw weights.
    """

    def __init__(self):
        super().__init__()
        self._raw = None

    def on_test_begin(self, logs=None):
        self._raw = _trainable_values(self.model)
        self.model.optimizer.finalize_variable_values(self.model.trainable_variables)

    def on_test_end(self, logs=None):
        _assign_trainable(self.model, self._raw)
        self._raw = None


class KeepRawWeights(keras.callbacks.Callback):
    """Undo the EMA weights that ``model.fit`` puts into the model when it ends (``finalize_variable_values``).

    :func:`keras_vit.train.resumable.fit_resumable` may call ``fit`` twice (the
    rest of an interrupted epoch, then the other epochs), and training goes on
    from the raw weights, as a backup does. The raw weights are copied after
    the last epoch of each ``fit`` (or the one a callback stopped) and put back
    when it ends.
    """

    def __init__(self):
        super().__init__()
        self._raw = None

    def on_train_begin(self, logs=None):
        self._raw = None

    def on_epoch_end(self, epoch, logs=None):
        if epoch == (self.params or {}).get("epochs", 0) - 1 or self.model.stop_training:
            self._raw = _trainable_values(self.model)

    def on_train_end(self, logs=None):
        _assign_trainable(self.model, self._raw)
