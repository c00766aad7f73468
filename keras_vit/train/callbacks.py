"""Callbacks, backups and the resumable fit of a training run.

* :func:`make_callbacks` -- :class:`EpochWeights`, :class:`Backup` (a
  ``BackupAndRestore`` that saves every ``save_freq`` steps, atomically),
  :class:`StopOnNonFinite` (``TerminateOnNaN``), ``TensorBoard`` and
  ``CSVLogger`` (appending, one row per epoch across resumes).
* :func:`check_finite` -- a run that stopped on a non-finite loss is not a
  finished one: :class:`TrainingDiverged`, and no backup or weights file is
  overwritten by non-finite weights.
* :class:`Timer` -- the wall time spent training, kept across resumes.
* :class:`EMAValidation` -- validation on the weight EMA (``use_ema``) during ``fit``.
* :func:`fit_resumable` -- ``model.fit`` (or another function with its
  arguments, such as :meth:`keras_vit.train.distribute.DistributedTrainer.fit`)
  that restarts from the last backup *mid-epoch*: the number of optimizer
  steps already taken decides where the run goes on, so an interrupted run
  ends with exactly as many steps as an uninterrupted one.
* :func:`progress_verbosity` -- a progress bar on a terminal, one line per
  epoch in a log file or a pipe.

Example:
>>> import io
>>> progress_verbosity("auto", io.StringIO())  # not a terminal: one line per epoch
2
>>> callbacks = make_callbacks("runs/demo", save_freq=10, tensorboard=False)   # doctest: +SKIP
>>> fit_resumable(model, train, 30, 62, callbacks=callbacks)                   # doctest: +SKIP
"""

import csv
import errno
import functools
import json
import os
import shutil
import time

import keras
import numpy as np

from keras_vit.hardware.terminal import on_a_terminal
from keras_vit.saving import atomic_write
from keras_vit.train.accumulation import accumulate_steps
from keras_vit.train.accumulation import batches_taken


class TrainingDiverged(RuntimeError):
    """Training stopped on a non-finite loss (or left non-finite weights): the run is not finished."""


def _finite_or_none(obj):
    """``obj`` with every NaN or infinite float replaced by None (JSON has no NaN)."""
    if isinstance(obj, dict):
        return {key: _finite_or_none(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_or_none(value) for value in obj]
    if isinstance(obj, (float, np.floating)) and not np.isfinite(obj):
        return None
    return obj


def write_json(path, obj):
    """Write JSON atomically (temporary file + ``os.replace``); NaN and infinities are written as ``null``.

    Example:
    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "m.json")
    >>> write_json(path, {"loss": float("nan"), "accuracy": 0.5})
    >>> read_json(path)
    {'accuracy': 0.5, 'loss': None}
    """

    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(_finite_or_none(obj), f, indent=2, sort_keys=True, allow_nan=False)
            f.write("\n")

    atomic_write(path, write)


def read_json(path):
    """The JSON object in ``path``, or ``{}`` when the file is missing or unreadable."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


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


def check_space(path, model):
    """Raise ``OSError(ENOSPC)`` naming ``path`` when its disk cannot hold the model's weights and optimizer state.

    HDF5 does not fail cleanly on a full disk: pages of errors, then a
    segmentation fault when the half-written file is closed. So the space a
    weights file needs (the bytes of every variable plus 10 %, and 2 KiB of
    structure per variable) is checked before it is written.
    """
    variables = list(model.weights) + (list(model.optimizer.variables) if model.optimizer is not None else [])
    need = 1.1 * sum(int(np.prod(v.shape)) * _itemsize(v.dtype) for v in variables) + 2048 * len(variables)
    free = shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free
    if free < need:
        raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)}: {free:,} bytes free, about {int(need):,} needed", path)


def _itemsize(dtype):
    try:
        return np.dtype(dtype).itemsize
    except TypeError:  # bfloat16 and other types NumPy does not name
        return 4


def save_weights(model, path):
    """``model.save_weights(path)`` atomically, after :func:`check_space`."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    check_space(path, model)
    atomic_write(path, lambda tmp: model.save_weights(tmp, overwrite=True))


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
    backup in ``backup_dir`` stays in place (:class:`Backup` never saves a
    non-finite state).
    """
    stop = next((c.stopped for c in callbacks if isinstance(c, StopOnNonFinite) and c.stopped), None)
    reason = nonfinite(model)
    if stop is None and reason is None:
        return
    where = f"at step {stop['step']} (epoch {stop['epoch'] + 1}): the loss is {stop['loss']}" if stop else f": {reason}"
    raise TrainingDiverged(
        f"Training diverged {where}. No model.keras or metrics.json written; the last good backup in "
        f"{backup_dir!r} is kept (if one was saved). Lower the learning rate (--lr) and run again."
    )


class Backup(keras.callbacks.BackupAndRestore):
    """``BackupAndRestore`` that writes atomically and resumes mid-epoch.

    Every ``save_freq`` steps (or each epoch) it writes the weights with the
    optimizer state (``latest.weights.h5``) and ``training_metadata.json``
    (epoch and optimizer iterations) through temporary files and
    ``os.replace``, so a kill at any moment leaves the previous backup
    intact. Restoring is done by :func:`fit_resumable` before ``fit`` (it
    needs the step count to cut the interrupted epoch short); the backup is
    kept at the end of ``fit`` and removed by :func:`fit_resumable` when
    the whole run is done.

    A state whose loss or weights are NaN or infinite (:func:`nonfinite`) is
    not saved: the last good backup stays. A write that fails (a full disk)
    raises one ``OSError`` naming the backup, which is left as it was.
    """

    def __init__(self, backup_dir, save_freq="epoch"):
        super().__init__(backup_dir, save_freq=save_freq, delete_checkpoint=False)
        self._loss = None
        self._warned = False

    def on_train_batch_end(self, batch, logs=None):
        self._loss = (logs or {}).get("loss")
        super().on_train_batch_end(batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        self._loss = (logs or {}).get("loss")
        super().on_epoch_end(epoch, logs)

    def on_train_begin(self, logs=None):
        pass  # restored by fit_resumable()

    def on_epoch_begin(self, epoch, logs=None):
        self._current_epoch = epoch  # also right when a resumed run starts mid-epoch

    def on_train_end(self, logs=None):
        pass  # removed by fit_resumable() after the last epoch

    def _save_model(self):
        iterations = int(self.model.optimizer.iterations.numpy())
        batches = batches_taken(self.model.optimizer)
        reason = nonfinite(self.model, self._loss)
        if reason is not None:
            if not self._warned:
                print(f"{self.backup_dir}: no backup at step {iterations} ({reason}); the last good one is kept", flush=True)
                self._warned = True
            return
        try:
            save_weights(self.model, self._weights_path)
            metadata = {"epoch": self._current_epoch, "iterations": iterations}
            if batches != iterations:  # gradient accumulation: the batches, mid-update too
                metadata["batches"] = batches
            write_json(self._training_metadata_path, metadata)
        except OSError as error:  # e.g. ENOSPC: one line, not pages of h5py errors; the old backup is intact
            raise OSError(
                error.errno,
                f"Cannot write the backup {self._weights_path!r} at step {iterations} "
                f"({error.strerror or error}); the previous backup is kept: make room and run the same command "
                "again to resume from it",
            ) from None

    def restore(self):
        """Load the last backup into the model; returns the batches the optimizer had taken (0 if none).

        The batches are the optimizer's updates (``iterations``) unless it
        accumulates gradients (:func:`keras_vit.train.accumulation.batches_taken`);
        the sums of a backup taken mid-update are restored with it.
        """
        if not os.path.exists(self._weights_path):
            return 0
        if self.model.optimizer is not None and not self.model.optimizer.built:
            with self.model.distribute_strategy.scope():  # mirrored slots under MirroredStrategy
                self.model.optimizer.build(self.model.trainable_variables)
        self.model.load_weights(self._weights_path)
        return batches_taken(self.model.optimizer)

    def remove(self):
        for path in (self._weights_path, self._training_metadata_path):
            if os.path.exists(path):
                os.remove(path)
        if os.path.isdir(self.backup_dir) and not os.listdir(self.backup_dir):
            os.rmdir(self.backup_dir)


class EpochWeights(keras.callbacks.Callback):
    """The model's weights after each epoch in ``path``, written atomically; a non-finite state is not written."""

    def __init__(self, path):
        super().__init__()
        self.path = os.fspath(path)

    def on_epoch_end(self, epoch, logs=None):
        if nonfinite(self.model, (logs or {}).get("loss")) is None:
            save_weights(self.model, self.path)


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


class _KeepRawWeights(keras.callbacks.Callback):
    """Undo the EMA weights that ``model.fit`` puts into the model when it ends (``finalize_variable_values``).

    :func:`fit_resumable` may call ``fit`` twice (the rest of an interrupted
    epoch, then the other epochs), and training goes on from the raw weights,
    as a backup does. The raw weights are copied after the last epoch of each
    ``fit`` (or the one a callback stopped) and put back when it ends.
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


class Timer(keras.callbacks.Callback):
    """Wall time spent in ``fit``, kept across resumes in ``path`` (a JSON file written each epoch)."""

    def __init__(self, path):
        super().__init__()
        self.path = os.fspath(path)
        self.already = float(read_json(self.path).get("train_seconds", 0.0))
        self.elapsed, self.start = 0.0, None

    def on_train_begin(self, logs=None):
        self.start = time.time()

    def on_train_end(self, logs=None):
        self.elapsed += time.time() - self.start
        self.start = None

    def on_epoch_end(self, epoch, logs=None):
        write_json(self.path, {"train_seconds": self.total()})

    def total(self):
        """Seconds spent training, this run and the interrupted ones before it."""
        running = time.time() - self.start if self.start else 0.0
        return self.already + self.elapsed + running

    def remove(self):
        """Delete the file (and its folder when that is left empty)."""
        if os.path.exists(self.path):
            os.remove(self.path)
        folder = os.path.dirname(self.path)
        if os.path.isdir(folder) and not os.listdir(folder):
            os.rmdir(folder)


def make_callbacks(output_dir, *, save_freq="epoch", tensorboard="auto", checkpoint=True, backup=True):
    """The standard callbacks of a run in ``output_dir``.

    ``backup/`` (:class:`Backup`, every ``save_freq`` steps; ``backup=False``
    leaves backups to the caller), ``checkpoint.weights.h5``
    (:class:`EpochWeights`, each epoch), :class:`StopOnNonFinite`, ``logs/``
    (``TensorBoard``; ``"auto"`` adds it when the ``tensorboard`` package is
    installed, which ``tf.summary`` needs) and ``log.csv`` (``CSVLogger``,
    appending across resumes; :func:`fit_resumable` drops the rows of the
    epochs a resumed run does again).
    """
    os.makedirs(output_dir, exist_ok=True)
    callbacks = [Backup(os.path.join(output_dir, "backup"), save_freq=save_freq)] if backup else []
    callbacks.append(StopOnNonFinite())
    if checkpoint:
        callbacks.append(EpochWeights(os.path.join(output_dir, "checkpoint.weights.h5")))
    callbacks.append(keras.callbacks.CSVLogger(os.path.join(output_dir, "log.csv"), append=True))
    if tensorboard == "auto":
        import importlib.util

        tensorboard = importlib.util.find_spec("tensorboard") is not None  # tf.summary needs the package
    if tensorboard:
        callbacks.append(keras.callbacks.TensorBoard(os.path.join(output_dir, "logs"), write_graph=False))
    return callbacks


def progress_verbosity(verbose="auto", stream=None):
    """Keras' ``verbose`` for ``model.fit``: ``"auto"`` is a progress bar (1) on a terminal, one line per epoch (2) otherwise.

    Keras' own ``"auto"`` draws the bar everywhere, and a bar written to a log
    file or a pipe is a wall of carriage returns and escape codes.
    """
    if verbose != "auto":
        return int(verbose)
    return 1 if on_a_terminal(stream) else 2


class _RunProgbar(keras.callbacks.ProgbarLogger):
    """Keras' progress logger with ``Epoch e/N`` counting the ``N`` epochs of the whole run.

    :func:`fit_resumable` finishes an interrupted epoch with a ``fit`` of that one epoch, for which
    Keras' own logger prints ``Epoch e/e`` (and no header at all when it is the first epoch).
    """

    def __init__(self, epochs):
        super().__init__()
        self.run_epochs = epochs

    def set_params(self, params):
        super().set_params(params)
        self.epochs = self.run_epochs


def fit_resumable(
    model,
    train,
    epochs,
    steps_per_epoch,
    *,
    callbacks=(),
    validation_data=None,
    verbose="auto",
    remove_backup=True,
    fit=None,
):
    """``model.fit`` for ``epochs`` epochs of ``steps_per_epoch`` steps, resuming from a backup.

    ``train`` must repeat (``make_pipeline(..., repeat=True)``). If the
    callbacks hold a backup (a callback with ``restore()`` and ``remove()``:
    :class:`Backup`, or :class:`keras_vit.train.distribute.WorkerBackup`) with
    a saved state, the model and optimizer are restored and training goes on
    from the optimizer's step count: first the rest of the interrupted epoch,
    then the remaining epochs. The run therefore always ends after
    ``epochs * steps_per_epoch`` optimizer steps. Steps are optimizer
    updates: an optimizer that accumulates N batches per update
    (:mod:`keras_vit.train.accumulation`) takes ``N * steps_per_epoch``
    batches per epoch, and a backup taken mid-update resumes mid-update. With a
    weight EMA (``use_ema``) the model holds the raw weights at the end, as
    the backups do (``model.fit`` alone would leave the average in it):
    ``model.optimizer.finalize_variable_values(model.trainable_variables)``
    puts the average in. The backup is removed once
    the run is complete (``remove_backup=False`` leaves that to the caller,
    e.g. after it has saved its outputs). A run that a callback stopped
    (``model.stop_training``, e.g. :class:`StopOnNonFinite`) is not complete:
    it goes no further and its backup is kept.

    A ``CSVLogger`` that appends keeps one row per epoch: when the run
    resumes in epoch ``e``, rows of epochs ``e`` and later (written after the
    last backup by the interrupted run) are dropped before training goes on.

    Args:
        fit: what trains, called with ``model.fit``'s keyword arguments
            (``initial_epoch``, ``epochs``, ``steps_per_epoch`` in batches, ``callbacks``,
            ``validation_data``, ``verbose``) and returning a ``History``;
            default ``model.fit``. The multi-worker job passes
            :meth:`keras_vit.train.distribute.DistributedTrainer.fit`.

    Returns:
        A dict of per-epoch logs (lists) of the epochs run in this call,
        ``"resumed_from_step"`` and ``"stopped"`` (True when a callback stopped the run early).
    """
    verbose = progress_verbosity(verbose)
    fit = fit or functools.partial(model.fit, shuffle=False)  # the pipeline shuffles (seeded)
    backup = next((c for c in callbacks if callable(getattr(c, "restore", None)) and callable(getattr(c, "remove", None))), None)
    if backup is not None:
        backup.set_model(model)
    per_update = accumulate_steps(model.optimizer)
    if getattr(getattr(model.optimizer, "inner_optimizer", model.optimizer), "use_ema", False):
        callbacks = [*callbacks, _KeepRawWeights()]
    start = backup.restore() if backup is not None else 0  # batches
    total = epochs * steps_per_epoch
    history = {"resumed_from_step": start // per_update}
    if start > total * per_update:
        raise ValueError(
            f"The backup in {backup.backup_dir} has taken {start // per_update} steps, more than this run's {total}; "
            "use a new output folder"
        )

    progbar = [] if not verbose or any(isinstance(c, keras.callbacks.ProgbarLogger) for c in callbacks) else [_RunProgbar(epochs)]

    def run(initial_epoch, last_epoch, steps):
        h = fit(
            train,
            initial_epoch=initial_epoch,
            epochs=last_epoch,
            steps_per_epoch=steps,
            callbacks=[*callbacks, *progbar],
            validation_data=validation_data,
            verbose=verbose,
        )
        for key, values in h.history.items():
            history.setdefault(key, []).extend(values)

    batches_per_epoch = steps_per_epoch * per_update
    epoch, done = divmod(start, batches_per_epoch)
    if start and verbose:
        summed = f" and {start % per_update} of its {per_update} batches" if start % per_update else ""
        print(
            f"{backup.backup_dir}: resuming at step {start // per_update} of {total}{summed} "
            f"(epoch {epoch + 1}, {done // per_update} steps into it)",
            flush=True,
        )
    for logger in callbacks:
        if isinstance(logger, keras.callbacks.CSVLogger) and logger.append:
            _drop_log_rows(logger.filename, first_epoch=epoch, separator=logger.sep)
    model.stop_training = False
    if done:
        run(epoch, epoch + 1, batches_per_epoch - done)
        epoch += 1
    if epoch < epochs and not model.stop_training:  # fit() would reset the flag of a stopped run
        run(epoch, epochs, batches_per_epoch)
    history["stopped"] = bool(model.stop_training)
    if backup is not None and remove_backup and not history["stopped"]:
        backup.remove()
    return history


def _drop_log_rows(path, *, first_epoch, separator=","):
    """Rewrite the CSV log ``path`` (atomically) without the rows of epochs ``first_epoch`` and later."""
    if not os.path.isfile(path):
        return
    with open(path, newline="") as f:
        rows = list(csv.reader(f, delimiter=separator))
    if not rows or "epoch" not in rows[0]:
        return
    column = rows[0].index("epoch")

    def kept(row):
        try:
            return len(row) == len(rows[0]) and int(row[column]) < first_epoch
        except ValueError:
            return False

    body = [row for row in rows[1:] if kept(row)]
    if len(body) == len(rows) - 1:
        return

    def write(tmp):
        with open(tmp, "w", newline="") as f:
            csv.writer(f, delimiter=separator).writerows([rows[0], *body])

    atomic_write(path, write)
