"""Callbacks, backups and the resumable fit of a training run.

* :func:`make_callbacks` -- ``ModelCheckpoint``, :class:`Backup` (a
  ``BackupAndRestore`` that saves every ``save_freq`` steps, atomically),
  ``TerminateOnNaN``, ``TensorBoard`` and ``CSVLogger`` (appending).
* :class:`Timer` -- the wall time spent training, kept across resumes.
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

import functools
import json
import os
import sys
import time

import keras

from keras_vit.saving import atomic_write


def write_json(path, obj):
    """Write JSON atomically (temporary file + ``os.replace``)."""

    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=2, sort_keys=True)
            f.write("\n")

    atomic_write(path, write)


def read_json(path):
    """The JSON object in ``path``, or ``{}`` when the file is missing or unreadable."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


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
    """

    def __init__(self, backup_dir, save_freq="epoch"):
        super().__init__(backup_dir, save_freq=save_freq, delete_checkpoint=False)

    def on_train_begin(self, logs=None):
        pass  # restored by fit_resumable()

    def on_epoch_begin(self, epoch, logs=None):
        self._current_epoch = epoch  # also right when a resumed run starts mid-epoch

    def on_train_end(self, logs=None):
        pass  # removed by fit_resumable() after the last epoch

    def _save_model(self):
        iterations = int(self.model.optimizer.iterations.numpy())
        atomic_write(self._weights_path, lambda tmp: self.model.save_weights(tmp, overwrite=True))
        write_json(self._training_metadata_path, {"epoch": self._current_epoch, "iterations": iterations})

    def restore(self):
        """Load the last backup into the model; returns the optimizer iterations restored (0 if none)."""
        if not os.path.exists(self._weights_path):
            return 0
        if self.model.optimizer is not None and not self.model.optimizer.built:
            self.model.optimizer.build(self.model.trainable_variables)
        self.model.load_weights(self._weights_path)
        return int(self.model.optimizer.iterations.numpy())

    def remove(self):
        for path in (self._weights_path, self._training_metadata_path):
            if os.path.exists(path):
                os.remove(path)
        if os.path.isdir(self.backup_dir) and not os.listdir(self.backup_dir):
            os.rmdir(self.backup_dir)


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
    (``ModelCheckpoint``, each epoch), ``TerminateOnNaN``, ``logs/``
    (``TensorBoard``; ``"auto"`` adds it when the ``tensorboard`` package is
    installed, which ``tf.summary`` needs) and ``log.csv`` (``CSVLogger``,
    appending across resumes).
    """
    os.makedirs(output_dir, exist_ok=True)
    callbacks = [Backup(os.path.join(output_dir, "backup"), save_freq=save_freq)] if backup else []
    callbacks.append(keras.callbacks.TerminateOnNaN())
    if checkpoint:
        callbacks.append(
            keras.callbacks.ModelCheckpoint(os.path.join(output_dir, "checkpoint.weights.h5"), save_weights_only=True)
        )
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
    stream = sys.stdout if stream is None else stream
    try:
        return 1 if stream.isatty() else 2
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return 2


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
    ``epochs * steps_per_epoch`` optimizer steps. The backup is removed once
    the run is complete (``remove_backup=False`` leaves that to the caller,
    e.g. after it has saved its outputs).

    Args:
        fit: what trains, called with ``model.fit``'s keyword arguments
            (``initial_epoch``, ``epochs``, ``steps_per_epoch``, ``callbacks``,
            ``validation_data``, ``verbose``) and returning a ``History``;
            default ``model.fit``. The multi-worker job passes
            :meth:`keras_vit.train.distribute.DistributedTrainer.fit`.

    Returns:
        A dict of per-epoch logs (lists) of the epochs run in this call, and
        ``"resumed_from_step"``.
    """
    verbose = progress_verbosity(verbose)
    fit = fit or functools.partial(model.fit, shuffle=False)  # the pipeline shuffles (seeded)
    backup = next((c for c in callbacks if callable(getattr(c, "restore", None)) and callable(getattr(c, "remove", None))), None)
    if backup is not None:
        backup.set_model(model)
    start = backup.restore() if backup is not None else 0
    total = epochs * steps_per_epoch
    history = {"resumed_from_step": start}
    if start > total:
        raise ValueError(
            f"The backup in {backup.backup_dir} has taken {start} steps, more than this run's {total}; "
            "use a new output folder"
        )

    def run(initial_epoch, last_epoch, steps):
        h = fit(
            train,
            initial_epoch=initial_epoch,
            epochs=last_epoch,
            steps_per_epoch=steps,
            callbacks=list(callbacks),
            validation_data=validation_data,
            verbose=verbose,
        )
        for key, values in h.history.items():
            history.setdefault(key, []).extend(values)

    epoch, done = divmod(start, steps_per_epoch)
    if start and verbose:
        print(
            f"{backup.backup_dir}: resuming at step {start} of {total} (epoch {epoch + 1}, {done} steps into it)",
            flush=True,
        )
    if done:
        run(epoch, epoch + 1, steps_per_epoch - done)
        epoch += 1
    if epoch < epochs:
        run(epoch, epochs, steps_per_epoch)
    if backup is not None and remove_backup:
        backup.remove()
    return history
