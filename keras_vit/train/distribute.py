"""Data-parallel training with ``tf.distribute``, including multi-worker.

``model.fit`` works under ``MirroredStrategy`` (one machine, several
devices) but not under ``MultiWorkerMirroredStrategy`` in Keras 3 (keras
issue 20585). :class:`DistributedTrainer` is the path that works for both: a
``tf.function`` train step run on every replica with ``strategy.run``; the
loss is averaged over the *global* batch (``tf.nn.compute_average_loss``),
the Keras optimizer all-reduces (sums) the gradients across replicas and
workers in ``apply_gradients``, and ``strategy.reduce`` sums loss and
accuracy counts. Its :meth:`~DistributedTrainer.fit` takes ``model.fit``'s
arguments and calls the same Keras callbacks (progress, CSV log,
TensorBoard, checkpoints, ``TerminateOnNaN``) with the same logs
(``loss``, ``accuracy``, ``val_loss``, ``val_accuracy``), so the training job
(:mod:`keras_vit.train.job`) runs one way for every strategy.

:class:`WorkerBackup` is the multi-worker backup: each worker saves model and
optimizer to its own folder (``tf.train.CheckpointManager``) every
``save_freq`` steps, and on a restart the workers agree on the newest step
that all of them hold (:func:`common_backup_step`) and go on from there.

Multi-worker usage: on each machine set ``TF_CONFIG`` (the same ``cluster``,
its own ``task.index``) and run the same command::

    TF_CONFIG='{"cluster": {"worker": ["host1:12345", "host2:12345"]},
                "task": {"type": "worker", "index": 0}}' \\
        keras-vit train --strategy multi-worker --output runs/mw
"""

import functools
import json
import os
import shutil

import keras
import numpy as np
import tensorflow as tf

from keras_vit.train.accumulation import accumulate_steps
from keras_vit.train.accumulation import batches_taken
from keras_vit.train.backup import SETTINGS_FILE
from keras_vit.train.divergence import nonfinite
from keras_vit.train.run_files import write_json


def check_batch_size(batch_size, strategy):
    """The global batch must split evenly over the strategy's replicas; returns the per-replica batch."""
    replicas = strategy.num_replicas_in_sync
    if batch_size % replicas:
        raise ValueError(
            f"The batch size must be divisible by the number of replicas ({replicas}) of "
            f"{type(strategy).__name__}. Received: batch_size={batch_size}"
        )
    return batch_size // replicas


def worker_info():
    """``(task_index, num_workers)`` from ``TF_CONFIG`` (``(0, 1)`` without it)."""
    config = json.loads(os.environ.get("TF_CONFIG", "{}") or "{}")
    workers = config.get("cluster", {}).get("worker", [])
    task = config.get("task", {})
    return int(task.get("index", 0)), max(len(workers), 1)


class DistributedTrainer:
    """A custom training loop for any ``tf.distribute`` strategy, with ``model.fit``'s interface.

    Build and compile the model inside ``strategy.scope()``, then::

        trainer = DistributedTrainer(model, strategy, global_batch_size=64, label_smoothing=0.1)
        trainer.fit(dataset_fn, epochs=3, steps_per_epoch=100, callbacks=[...])
        trainer.evaluate(eval_dataset_fn)

    ``dataset_fn(input_context)`` returns the per-replica batches of one input
    pipeline (``strategy.distribute_datasets_from_function``).

    Args:
        model: a Keras model built and compiled under ``strategy.scope()``
            (softmax output); it trains with ``model.optimizer`` (a
            ``LossScaleOptimizer`` under ``mixed_float16`` scales the loss).
        strategy: the ``tf.distribute.Strategy``.
        global_batch_size: batch size summed over all replicas.
        label_smoothing: for the categorical cross-entropy (one-hot labels).
        jit_compile: XLA-compile the per-replica step.
    """

    def __init__(self, model, strategy, global_batch_size, *, label_smoothing=0.0, jit_compile=False):
        check_batch_size(global_batch_size, strategy)
        if model.optimizer is None:
            raise ValueError("Compile the model under the strategy's scope first. Received: model.optimizer=None")
        if getattr(model.optimizer, "gradient_accumulation_steps", None):
            raise ValueError(
                "Keras' gradient_accumulation_steps cannot run under a distribution strategy (its cond holds the "
                "gradient all-reduce); use keras_vit.build_optimizer(..., accumulate=N). Received: "
                f"gradient_accumulation_steps={model.optimizer.gradient_accumulation_steps}"
            )
        if accumulate_steps(model.optimizer) > 1 and isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer):
            raise ValueError(
                "Gradient accumulation with mixed_float16 loss scaling is not supported by DistributedTrainer: "
                "use bfloat16 (or float32), or no accumulation"
            )
        self.model = model
        self.strategy = strategy
        self.global_batch_size = global_batch_size
        self.loss = keras.losses.CategoricalCrossentropy(label_smoothing=label_smoothing, reduction=None)
        self.jit_compile = jit_compile
        self._train_step = None
        self._eval_step = None

    def _distribute(self, dataset_fn):
        return self.strategy.distribute_datasets_from_function(dataset_fn)

    def _make_train_step(self):
        model, optimizer, loss_fn, gbs = self.model, self.model.optimizer, self.loss, self.global_batch_size

        @tf.function(jit_compile=self.jit_compile)
        def replica_step(images, labels):
            with tf.GradientTape() as tape:
                probs = model(images, training=True)
                per_example = loss_fn(labels, probs)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=gbs)
                if model.losses:
                    loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
                scaled = optimizer.scale_loss(loss)  # the loss itself, or times the loss scale (mixed_float16)
            grads = tape.gradient(scaled, model.trainable_variables)
            correct = tf.reduce_sum(tf.cast(tf.argmax(probs, -1) == tf.argmax(labels, -1), tf.float32))
            return grads, loss, correct

        def step_fn(images, labels, update):
            grads, loss, correct = replica_step(images, labels)
            if accumulate_steps(optimizer) == 1:
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
            elif update:  # the last batch of an update; decided in Python: a cond may not hold the all-reduce
                optimizer.apply_accumulated(grads, model.trainable_variables)
            else:
                optimizer.accumulate(grads, model.trainable_variables)
            return loss, correct

        @tf.function
        def train_step(iterator, update):  # a Python bool: one trace per value
            images, labels = next(iterator)
            loss, correct = self.strategy.run(functools.partial(step_fn, update=update), args=(images, labels))
            return (
                self.strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None),
                self.strategy.reduce(tf.distribute.ReduceOp.SUM, correct, axis=None),
            )

        return train_step

    def fit(self, x, *, epochs, steps_per_epoch, initial_epoch=0, callbacks=(), validation_data=None, verbose=0):
        """Train like ``model.fit`` on ``x`` (a dataset function whose pipelines repeat).

        Runs epochs ``initial_epoch`` to ``epochs - 1`` of ``steps_per_epoch``
        batches on one iterator, calling the callbacks (and a progress line or
        bar for ``verbose`` 2 or 1) as ``model.fit`` does; after each epoch
        ``validation_data`` (a dataset function, finite) is evaluated, between
        the callbacks' ``on_test_begin`` and ``on_test_end``, and its
        loss and accuracy are logged as ``val_loss`` and ``val_accuracy``.
        Stops after the epoch in which a callback sets ``model.stop_training``.
        An optimizer that accumulates N batches per update
        (:mod:`keras_vit.train.accumulation`) updates on every Nth batch it
        has taken.

        Returns:
            The ``keras.callbacks.History`` of the run.
        """
        optimizer = self.model.optimizer
        if not optimizer.built:  # its slots, sums and EMA: mirrored variables, made in the strategy's scope
            with self.strategy.scope():
                optimizer.build(self.model.trainable_variables)
        if self._train_step is None:
            self._train_step = self._make_train_step()
        per_update, batches = accumulate_steps(optimizer), batches_taken(optimizer)
        history = keras.callbacks.History()
        callbacks = keras.callbacks.CallbackList(
            [*callbacks, history], add_progbar=bool(verbose), model=self.model,
            verbose=verbose, epochs=epochs, steps=steps_per_epoch,
        )
        iterator = iter(self._distribute(x))
        self.model.stop_training = False
        logs = {}
        callbacks.on_train_begin()
        for epoch in range(initial_epoch, epochs):
            callbacks.on_epoch_begin(epoch)
            total_loss = total_correct = 0.0
            for step in range(steps_per_epoch):
                callbacks.on_train_batch_begin(step)
                batches += 1
                loss, correct = self._train_step(iterator, batches % per_update == 0)
                total_loss, total_correct = total_loss + float(loss), total_correct + float(correct)
                logs = {"accuracy": total_correct / ((step + 1) * self.global_batch_size), "loss": total_loss / (step + 1)}
                callbacks.on_train_batch_end(step, logs)
                if self.model.stop_training:
                    break
            if validation_data is not None:
                callbacks.on_test_begin()
                result = self.evaluate(validation_data)
                callbacks.on_test_end({"accuracy": result["accuracy"], "loss": result["loss"]})
                logs = dict(logs, val_accuracy=result["accuracy"], val_loss=result["loss"])
            callbacks.on_epoch_end(epoch, logs)
            if self.model.stop_training:
                break
        callbacks.on_train_end(logs)
        return history

    def evaluate(self, dataset_fn):
        """Loss and accuracy over a finite dataset function (every example counted once), and ``num_examples``."""
        if self._eval_step is None:
            model, loss_fn = self.model, self.loss

            def step_fn(images, labels):
                probs = model(images, training=False)
                correct = tf.reduce_sum(tf.cast(tf.argmax(probs, -1) == tf.argmax(labels, -1), tf.float32))
                return tf.reduce_sum(loss_fn(labels, probs)), correct, tf.cast(tf.shape(labels)[0], tf.float32)

            @tf.function
            def eval_step(batch):
                out = self.strategy.run(step_fn, args=batch)
                return [self.strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None) for v in out]

            self._eval_step = eval_step
        loss = correct = count = 0.0
        for batch in self._distribute(dataset_fn):
            l, c, n = self._eval_step(batch)
            loss, correct, count = loss + float(l), correct + float(c), count + float(n)
        return {"loss": loss / max(count, 1.0), "accuracy": correct / max(count, 1.0), "num_examples": int(count)}


class WorkerBackup(keras.callbacks.Callback):
    """One worker's backup of model and optimizer, every ``save_freq`` optimizer steps.

    Each worker writes ``tf.train.CheckpointManager`` checkpoints
    (``ckpt-<step>``, the last two kept) to its own ``backup_dir``. On a
    restart :meth:`restore` (called by
    :func:`keras_vit.train.resumable.fit_resumable` on every worker at the
    same point: it is a collective) finds the newest step that every worker
    holds and restores it, so the workers go on from the same step with the
    same weights. Nothing is saved at the last step: the run is then done. The
    backup of an epoch's last batch is written after the epoch's validation and
    log row, at the next epoch's start.

    Args:
        backup_dir: this worker's folder.
        strategy: the ``tf.distribute.Strategy`` the model was built under.
        save_freq: optimizer steps between backups.
        total_steps: optimizer steps of the whole run.
        settings: the run's settings, written beside the checkpoints
            (:func:`keras_vit.train.backup.stored_settings` reads them).
    """

    def __init__(self, backup_dir, strategy, *, save_freq, total_steps, settings=None):
        super().__init__()
        self.settings = settings
        if save_freq < 1:
            raise ValueError(f"`save_freq` must be at least 1 step. Received: save_freq={save_freq!r}")
        self.backup_dir = os.fspath(backup_dir)
        self.strategy = strategy
        self.save_freq = int(save_freq)
        self.total_steps = int(total_steps)
        self._manager = None
        self._deferred = None  # the step of an epoch's last batch, saved after the epoch's callbacks

    def _checkpoint(self):
        if self._manager is None:
            checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.model.optimizer)
            self._manager = tf.train.CheckpointManager(checkpoint, self.backup_dir, max_to_keep=2)
        return self._manager

    def restore(self):
        """Restore the newest backup that every worker holds; returns the batches taken then (0 if none)."""
        optimizer = self.model.optimizer
        if not optimizer.built:
            with self.strategy.scope():
                optimizer.build(self.model.trainable_variables)  # so that a backup restores every slot
        manager = self._checkpoint()
        step = common_backup_step(self.strategy, manager, save_every=self.save_freq, total=self.total_steps)
        if step:
            manager.checkpoint.restore(os.path.join(self.backup_dir, f"ckpt-{step}")).assert_existing_objects_matched()
        return batches_taken(optimizer)

    def on_train_batch_end(self, batch, logs=None):
        optimizer = self.model.optimizer
        step = int(optimizer.iterations.numpy())
        # with accumulation, only right after an update: the sums, local to each replica, are zero then
        update_done = batches_taken(optimizer) % accumulate_steps(optimizer) == 0
        if update_done and step % self.save_freq == 0 and step < self.total_steps:
            if nonfinite(self.model, (logs or {}).get("loss")) is None:  # a diverged state never replaces a good one
                self._deferred = step
                if batch + 1 != (self.params or {}).get("steps"):  # an epoch's last batch: after its log row
                    self._save_deferred()

    def _save_deferred(self):
        """The backup of an epoch's last batch counts the epoch done: written once its validation and the callbacks
        after this one (the log's row) are, at the next epoch's start or the run's end (as :class:`Backup` does)."""
        step, self._deferred = self._deferred, None
        if step is not None:
            if self.settings is not None:  # the run's settings, which a resumed run keeps (stored_settings)
                write_json(os.path.join(self.backup_dir, SETTINGS_FILE), {"settings": self.settings})
            self._checkpoint().save(checkpoint_number=step)

    def on_epoch_begin(self, epoch, logs=None):
        self._save_deferred()

    def on_train_end(self, logs=None):
        self._save_deferred()

    def remove(self):
        """Delete this worker's backups (the run is complete)."""
        shutil.rmtree(self.backup_dir, ignore_errors=True)


def common_backup_step(strategy, manager, *, save_every, total):
    """The newest backup step that every worker holds (0 if none).

    Workers save at the same steps, but a failure can strike between one
    worker's save and another's; each keeps its last two backups, and they
    agree on the newest step all of them have (a sum over replicas of
    "I have step k" flags).
    """
    slots = total // save_every + 1
    have = np.zeros(slots, "float32")
    for path in manager.checkpoints:
        step = int(path.rsplit("-", 1)[1])
        if step % save_every == 0 and step // save_every < slots:
            have[step // save_every] = 1.0
    flags = tf.constant(have)
    counts = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.identity(flags)), axis=None)
    shared = np.flatnonzero(np.asarray(counts) >= strategy.num_replicas_in_sync)
    return int(shared.max()) * save_every if len(shared) else 0
