"""A run whose loss or weights went NaN or infinite: detected, stopped, and never taken for a finished one.

* :func:`nonfinite` -- why a model's state is not worth keeping (None when all is finite).
* :class:`StopOnNonFinite` -- ``TerminateOnNaN`` that remembers where it stopped.
* :func:`check_finite` -- raise :class:`TrainingDiverged` after ``fit`` when it did.

Example:
>>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, name="dense")], name="net")
>>> nonfinite(model, 0.5) is None, nonfinite(model, float("nan"))
(True, 'the loss is nan')
"""

import keras
import numpy as np


class TrainingDiverged(RuntimeError):
    """Training stopped on a non-finite loss (or left non-finite weights): the run is not finished."""


def nonfinite(model, loss=None):
    """Why the model's state is not worth keeping: the loss or a weight is NaN or infinite; None when all is finite.

    Example:
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, name="dense")], name="net")
    >>> nonfinite(model, 0.5) is None, nonfinite(model, float("nan"))
    (True, 'the loss is nan')
    >>> _ = model.get_layer("dense").bias.assign([float("inf")])
    >>> nonfinite(model)
    "weight 'net/dense/bias' holds NaN or inf"
    """
    if loss is not None and not np.isfinite(float(loss)):
        return f"the loss is {float(loss)}"
    for variable in model.weights:
        if not np.all(np.isfinite(keras.ops.convert_to_numpy(variable))):
            return f"weight {variable.path!r} holds NaN or inf"
    return None


class StopOnNonFinite(keras.callbacks.TerminateOnNaN):
    """``TerminateOnNaN`` that remembers where it stopped, for :func:`check_finite`.

    Attributes:
        stopped: None, or ``{"epoch", "step", "loss"}`` of the first batch
            whose loss was NaN or infinite (``step``: the optimizer's count).
    """

    def __init__(self):
        super().__init__()
        self.stopped = None
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_batch_end(self, batch, logs=None):
        super().on_batch_end(batch, logs)
        loss = (logs or {}).get("loss")
        if self.stopped is None and loss is not None and not np.isfinite(float(loss)):
            step = int(self.model.optimizer.iterations.numpy()) if self.model.optimizer is not None else None
            self.stopped = {"epoch": self._epoch, "step": step, "loss": float(loss)}


def check_finite(model, callbacks, backup_dir):
    """Raise :class:`TrainingDiverged` if training stopped on a non-finite loss or left non-finite weights.

    Keras' ``TerminateOnNaN`` stops ``fit`` gracefully, and a stopped run is
    not a finished one: the caller writes no outputs, and the last good
    backup in ``backup_dir`` stays in place (:class:`keras_vit.train.backup.Backup`
    never saves a non-finite state).
    """
    stop = next((c.stopped for c in callbacks if isinstance(c, StopOnNonFinite) and c.stopped), None)
    reason = nonfinite(model)
    if stop is None and reason is None:
        return
    where = f"at step {stop['step']} (epoch {stop['epoch'] + 1}): the loss is {stop['loss']}" if stop else f": {reason}"
    raise TrainingDiverged(
        f"Training diverged {where}. No model.keras or metrics.json written; the last good backup in "
        f"{backup_dir!r} is kept (if one was saved). Train with a lower learning rate (--lr) into another --output "
        f"(a run resumed from that backup keeps its learning rate: delete {backup_dir!r} to start this folder again)."
    )
