"""The weights a run keeps while it trains: the resumable backup and the per-epoch checkpoint.

* :class:`Backup` -- a ``BackupAndRestore`` that saves every ``save_freq``
  steps, atomically, and that :func:`keras_vit.train.resumable.fit_resumable`
  restores mid-epoch.
* :class:`EpochWeights` -- the model's weights after each epoch.

Neither writes a state whose loss or weights are NaN or infinite
(:func:`keras_vit.train.divergence.nonfinite`): the last good file stays.

Example:
>>> backup = Backup("runs/demo/backup", save_freq=10)   # doctest: +SKIP
"""

import glob
import os

import keras
import numpy as np

from keras_vit.models import lora
from keras_vit.saving import atomic_write
from keras_vit.train.accumulation import batches_taken
from keras_vit.train.disk_space import save_weights
from keras_vit.train.divergence import nonfinite
from keras_vit.train.run_files import read_json
from keras_vit.train.run_files import write_json


METADATA_FILE = "training_metadata.json"  # BackupAndRestore's: the step, the epoch and the run's settings
SETTINGS_FILE = "settings.json"  # where a multi-worker backup (tf.train.CheckpointManager) keeps them


def stored_settings(backup_dir):
    """The run settings stored with the backup in ``backup_dir``, or None (no backup to resume, or none recorded).

    :class:`Backup` writes them into its ``training_metadata.json`` with each
    backup; :class:`keras_vit.train.distribute.WorkerBackup` beside its checkpoints.
    """
    backup_dir = os.fspath(backup_dir)
    if os.path.isfile(os.path.join(backup_dir, "latest.weights.h5")):
        return read_json(os.path.join(backup_dir, METADATA_FILE)).get("settings")
    if os.path.isfile(os.path.join(backup_dir, "checkpoint")):  # tf.train.CheckpointManager's index
        return read_json(os.path.join(backup_dir, SETTINGS_FILE)).get("settings")
    return None


class Backup(keras.callbacks.BackupAndRestore):
    """``BackupAndRestore`` that writes atomically and resumes mid-epoch.

    Every ``save_freq`` steps (or each epoch) it writes the weights with the
    optimizer state (``latest.weights.h5``) and ``training_metadata.json``
    (epoch, optimizer iterations and the run's ``settings``, which
    :func:`stored_settings` reads back) through temporary files and
    ``os.replace``, so a kill at any moment leaves the previous backup
    intact. Restoring is done by :func:`keras_vit.train.resumable.fit_resumable`
    before ``fit`` (it needs the step count to cut the interrupted epoch short);
    the backup is kept at the end of ``fit`` and removed by ``fit_resumable`` when
    the whole run is done.

    A model with LoRA factors (``--lora``, :func:`keras_vit.enable_lora`) also gets ``lora-STEP.npz``, its
    frozen kernels and factors unmerged (:func:`keras_vit.models.lora.lora_state`), written before the
    weights: the weights file holds the merged kernels, and Keras zeroes both factors when it loads one,
    which would leave the resumed run without a gradient to follow (a silent stall).

    The states of the model's seed generators (stochastic depth, dropout: ``seeds-BATCHES.npz``, written before the
    weights) are restored with them: the weights file leaves them out, and a resumed run drew its drop-path and
    dropout masks from the generators' first states again (another run than the uninterrupted one, 1e-2 off).

    A state whose loss or weights are NaN or infinite (:func:`~keras_vit.train.divergence.nonfinite`) is
    not saved: the last good backup stays. A write that fails (a full disk)
    raises one ``OSError`` naming the backup, which is left as it was.
    """

    def __init__(self, backup_dir, save_freq="epoch", *, settings=None):
        super().__init__(backup_dir, save_freq=save_freq, delete_checkpoint=False)
        self.settings = settings
        self._loss = None
        self._warned = False
        self._epoch_end = self._deferred = False

    def on_train_batch_end(self, batch, logs=None):
        self._loss = (logs or {}).get("loss")
        self._epoch_end = batch + 1 == (self.params or {}).get("steps")  # this fit's epoch: its last batch
        super().on_train_batch_end(batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        self._loss = (logs or {}).get("loss")
        super().on_epoch_end(epoch, logs)

    def _save_at_epoch_end(self):
        """The backup of an epoch's last batch counts the epoch done: written once its validation and the callbacks
        after this one (the log's row) are, at the next epoch's start or the run's end, not before them (a run killed
        in between resumed at the next epoch without that row)."""
        if self._deferred:
            self._deferred = self._epoch_end = False
            self._save_model()

    def on_train_begin(self, logs=None):
        pass  # restored by fit_resumable()

    def on_epoch_begin(self, epoch, logs=None):
        self._save_at_epoch_end()
        self._current_epoch = epoch  # also right when a resumed run starts mid-epoch

    def on_train_end(self, logs=None):
        self._save_at_epoch_end()  # removed by fit_resumable() after the last epoch

    def _save_model(self):
        if self._epoch_end:  # the epoch's end: written after the epoch's other callbacks (_save_at_epoch_end)
            self._deferred = True
            return
        iterations = int(self.model.optimizer.iterations.numpy())
        batches = batches_taken(self.model.optimizer)
        reason = nonfinite(self.model, self._loss)
        if reason is not None:
            if not self._warned:
                print(f"{self.backup_dir}: no backup at step {iterations} ({reason}); the last good one is kept", flush=True)
                self._warned = True
            return
        try:
            adapters = lora.lora_state(self.model)
            if adapters:
                atomic_write(self._lora_path(iterations), lambda tmp: _write_npz(tmp, adapters))
            seeds = seed_states(self.model)
            if seeds:
                atomic_write(self._seeds_path(batches), lambda tmp: _write_npz(tmp, seeds))
            save_weights(self.model, self._weights_path)
            metadata = {"epoch": self._current_epoch, "iterations": iterations}
            if batches != iterations:  # gradient accumulation: the batches, mid-update too
                metadata["batches"] = batches
            if self.settings is not None:  # the run's settings, which a resumed run keeps (stored_settings)
                metadata["settings"] = self.settings
            write_json(self._training_metadata_path, metadata)
            for old in self._lora_files():
                if old != self._lora_path(iterations):
                    os.remove(old)
            for old in self._seeds_files():
                if old != self._seeds_path(batches):
                    os.remove(old)
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
        try:
            self.model.load_weights(self._weights_path)
        except ValueError as error:  # Keras' message lists every array it could not load: kilobytes
            first = str(error).strip().splitlines()[0][:200]
            raise ValueError(
                f"The backup {self._weights_path!r} does not fit this model ({first}): it was made by another model "
                "or with other settings; train into another output folder, or delete the backup to start again"
            ) from None
        if lora.lora_layers(self.model):
            self._restore_lora()
        batches = batches_taken(self.model.optimizer)
        if os.path.isfile(self._seeds_path(batches)):  # absent from the backups of older keras_vit versions
            with np.load(self._seeds_path(batches)) as arrays:
                restore_seed_states(self.model, dict(arrays))
        return batches

    def _seeds_path(self, batches):
        return os.path.join(self.backup_dir, f"seeds-{batches}.npz")

    def _seeds_files(self):
        return glob.glob(os.path.join(glob.escape(self.backup_dir), "seeds-*.npz"))

    def _lora_path(self, iterations):
        return os.path.join(self.backup_dir, f"lora-{iterations}.npz")

    def _lora_files(self):
        return glob.glob(os.path.join(glob.escape(self.backup_dir), "lora-*.npz"))

    def _restore_lora(self):
        iterations = int(self.model.optimizer.iterations.numpy())
        path = self._lora_path(iterations)
        if not os.path.isfile(path):
            raise ValueError(
                f"The backup {self._weights_path!r} (step {iterations}) has no LoRA factors {path!r}: it was made "
                "without --lora or by an older keras_vit; train into another output folder, or delete the backup"
            )
        with np.load(path) as arrays:
            lora.restore_lora_state(self.model, dict(arrays), where=path)

    def remove(self):
        for path in (self._weights_path, self._training_metadata_path, *self._lora_files(), *self._seeds_files()):
            if os.path.exists(path):
                os.remove(path)
        if os.path.isdir(self.backup_dir) and not os.listdir(self.backup_dir):
            os.rmdir(self.backup_dir)


def _seed_generators(model):
    """The seed generators of ``model``'s layers (stochastic depth, dropout), in the layers' order, each once."""
    generators, seen = [], set()
    for layer in model._flatten_layers(include_self=True):
        for generator in getattr(layer, "_seed_generators", None) or ():
            if id(generator) not in seen:
                seen.add(id(generator))
                generators.append(generator)
    return generators


def seed_states(model):
    """``{index: state}`` of ``model``'s seed generators, which ``model.save_weights`` leaves out."""
    return {str(i): keras.ops.convert_to_numpy(g.state.value) for i, g in enumerate(_seed_generators(model))}


def restore_seed_states(model, states):
    """Put back the states :func:`seed_states` gave (a model with other generators: left as they are)."""
    generators = _seed_generators(model)
    if sorted(states, key=int) != [str(i) for i in range(len(generators))]:
        return
    for i, generator in enumerate(generators):
        generator.state.assign(states[str(i)])


def _write_npz(path, arrays):
    with open(path, "wb") as file:
        np.savez(file, **arrays)


class EpochWeights(keras.callbacks.Callback):
    """The model's weights after each epoch in ``path``, written atomically; a non-finite state is not written."""

    def __init__(self, path):
        super().__init__()
        self.path = os.fspath(path)

    def on_epoch_end(self, epoch, logs=None):
        if nonfinite(self.model, (logs or {}).get("loss")) is None:
            save_weights(self.model, self.path)
