"""Data-parallel training with ``tf.distribute``, including multi-worker.

``model.fit`` works under ``MirroredStrategy`` (one machine, several
devices) but not under ``MultiWorkerMirroredStrategy`` in Keras 3 (keras
issue 20585). :class:`DistributedTrainer` is the path that works for both: a
``tf.function`` train step run on every replica with ``strategy.run``; the
loss is averaged over the *global* batch (``tf.nn.compute_average_loss``),
the Keras optimizer all-reduces (sums) the gradients across replicas and
workers in ``apply_gradients``, and ``strategy.reduce`` sums loss and
accuracy counts. The model, the optimizer (same recipe as ``model.fit``:
:func:`keras_vit.train.training.build_optimizer`) and the variables are created
under ``strategy.scope()``, so every worker starts from, and keeps, the same
weights.

Multi-worker usage: on each machine set ``TF_CONFIG`` (the same ``cluster``,
its own ``task.index``) and run the same command::

    TF_CONFIG='{"cluster": {"worker": ["host1:12345", "host2:12345"]},
                "task": {"type": "worker", "index": 0}}' \\
        keras-vit train --strategy multi-worker --output runs/mw

Worker 0 (the chief) writes ``metrics.json`` and ``model.keras`` to
``--output``; every worker writes its final weights to
``<output>/worker-<i>/final.weights.h5``. Every ``--save-freq`` steps (default:
each epoch) each worker saves model and optimizer to
``<output>/worker-<i>/backup`` (``tf.train.CheckpointManager``); start the same
commands again after a failure and every worker restores its backup and goes
on from that step, so the run still ends after ``epochs * steps_per_epoch``
steps.
"""

import json
import os
import shutil
import time

import keras
import numpy as np
import tensorflow as tf


def check_batch_size(batch_size, strategy):
    """The global batch must split evenly over the strategy's replicas."""
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
    """A custom training loop for any ``tf.distribute`` strategy.

    Build the model and optimizer inside ``strategy.scope()``, then::

        trainer = DistributedTrainer(model, optimizer, strategy, global_batch_size=64)
        trainer.fit(dataset_fn, steps=1000)        # dataset_fn(input_context) -> per-replica batches
        trainer.evaluate(eval_dataset_fn)

    Args:
        model: a Keras model built under ``strategy.scope()`` (softmax output).
        optimizer: a Keras optimizer created under the same scope.
        strategy: the ``tf.distribute.Strategy``.
        global_batch_size: batch size summed over all replicas.
        label_smoothing: for the categorical cross-entropy (one-hot labels).
        jit_compile: XLA-compile the per-replica step.
    """

    def __init__(self, model, optimizer, strategy, global_batch_size, label_smoothing=0.0, jit_compile=False):
        check_batch_size(global_batch_size, strategy)
        self.model = model
        self.optimizer = optimizer
        self.strategy = strategy
        self.global_batch_size = global_batch_size
        self.loss = keras.losses.CategoricalCrossentropy(label_smoothing=label_smoothing, reduction=None)
        self.jit_compile = jit_compile
        self._train_step = None
        self._eval_step = None

    def _distribute(self, dataset_fn):
        return self.strategy.distribute_datasets_from_function(dataset_fn)

    def _make_train_step(self):
        model, optimizer, loss_fn, gbs = self.model, self.optimizer, self.loss, self.global_batch_size

        @tf.function(jit_compile=self.jit_compile)
        def replica_step(images, labels):
            with tf.GradientTape() as tape:
                probs = model(images, training=True)
                per_example = loss_fn(labels, probs)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=gbs)
                if model.losses:
                    loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
            grads = tape.gradient(loss, model.trainable_variables)
            correct = tf.reduce_sum(tf.cast(tf.argmax(probs, -1) == tf.argmax(labels, -1), tf.float32))
            return grads, loss, correct

        def step_fn(images, labels):
            grads, loss, correct = replica_step(images, labels)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss, correct

        @tf.function
        def train_step(iterator):
            images, labels = next(iterator)
            loss, correct = self.strategy.run(step_fn, args=(images, labels))
            return (
                self.strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None),
                self.strategy.reduce(tf.distribute.ReduceOp.SUM, correct, axis=None),
            )

        return train_step

    def fit(self, dataset_fn, steps, log_every=0, callback=None):
        """Run ``steps`` optimizer steps on ``dataset_fn`` (must repeat); returns the mean loss and accuracy."""
        if self._train_step is None:
            self._train_step = self._make_train_step()
        iterator = iter(self._distribute(dataset_fn))
        total_loss, total_correct, start = 0.0, 0.0, time.time()
        for step in range(1, steps + 1):
            loss, correct = self._train_step(iterator)
            total_loss += float(loss)
            total_correct += float(correct)
            if log_every and step % log_every == 0:
                print(f"step {step}/{steps}: loss {total_loss / step:.4f}, "
                      f"accuracy {total_correct / (step * self.global_batch_size):.4f}, {time.time() - start:.0f}s", flush=True)
            if callback is not None:
                callback(step)
        return {"loss": total_loss / steps, "accuracy": total_correct / (steps * self.global_batch_size)}

    def evaluate(self, dataset_fn):
        """Loss and accuracy over a finite dataset (every example counted once)."""
        model, loss_fn = self.model, self.loss

        def step_fn(images, labels):
            probs = model(images, training=False)
            correct = tf.reduce_sum(tf.cast(tf.argmax(probs, -1) == tf.argmax(labels, -1), tf.float32))
            return tf.reduce_sum(loss_fn(labels, probs)), correct, tf.cast(tf.shape(labels)[0], tf.float32)

        @tf.function
        def eval_step(batch):
            out = self.strategy.run(step_fn, args=batch)
            return [self.strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None) for v in out]

        loss = correct = count = 0.0
        for batch in self._distribute(dataset_fn):
            l, c, n = eval_step(batch)
            loss, correct, count = loss + float(l), correct + float(c), count + float(n)
        return {"loss": loss / max(count, 1.0), "accuracy": correct / max(count, 1.0), "num_examples": int(count)}


def run_multi_worker(args, settings):
    """``keras-vit train --strategy multi-worker``: one worker of a ``TF_CONFIG`` cluster."""
    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # first: collectives are configured at startup
    from keras_vit.train import data as data_lib
    from keras_vit.train import recipes
    from keras_vit import saving
    from keras_vit.train import training

    index, num_workers = worker_info()
    dataset = data_lib.load_dataset(args.dataset, data_dir=args.data_dir, validation_fraction=args.validation_fraction)
    batch_size = settings["batch_size"]
    check_batch_size(batch_size, strategy)
    steps_per_epoch, total, warmup = training.plan_steps(
        dataset.num_train, batch_size, settings["epochs"], settings["warmup_epochs"], args.steps_per_epoch
    )
    size = settings["image_size"]

    def train_fn(context):
        per_replica = context.get_per_replica_batch_size(batch_size)
        shard = dataset.train.shard(context.num_input_pipelines, context.input_pipeline_id)
        return data_lib.make_pipeline(
            shard, size, per_replica, training=True, augment=settings["augment"], num_classes=dataset.num_classes,
            seed=args.seed, repeat=True,
        )

    def test_fn(context):
        shard = dataset.test.shard(context.num_input_pipelines, context.input_pipeline_id)
        return data_lib.make_pipeline(shard, size, 256, num_classes=dataset.num_classes)

    keras.utils.set_random_seed(args.seed)
    with strategy.scope():
        model = recipes.build_model(args.model, dataset.num_classes, size, weights=args.weights, drop_path_rate=settings["drop_path"])
        if args.freeze_blocks:
            training.freeze(model, args.freeze_blocks)
        optimizer = training.build_optimizer(
            settings["lr"], total, warmup, name=settings["optimizer"], weight_decay=settings["weight_decay"],
            layer_decay=args.layer_decay, model=model,
        )
        trainer = DistributedTrainer(model, optimizer, strategy, batch_size, settings["label_smoothing"], jit_compile=settings["jit"])
        optimizer.build(model.trainable_variables)  # so that a backup restores every slot
    # each worker backs up to its own folder (same step on every worker); restored on restart
    worker_dir = os.path.join(args.output, f"worker-{index}")
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    manager = tf.train.CheckpointManager(checkpoint, os.path.join(worker_dir, "backup"), max_to_keep=2)
    save_every = args.save_freq or steps_per_epoch
    common = common_backup_step(strategy, manager, save_every, total)
    if common:
        path = os.path.join(manager.directory, f"ckpt-{common}")
        checkpoint.restore(path).assert_existing_objects_matched()
    done = int(optimizer.iterations.numpy())
    if done > total:
        raise ValueError(f"The backup in {worker_dir} has taken {done} steps, more than this run's {total}; use a new output folder")
    print(f"worker {index}/{num_workers}: {strategy.num_replicas_in_sync} replicas, {total} steps of {batch_size}"
          + (f", resuming at step {done}" if done else ""), flush=True)

    def backup(step):
        if (done + step) % save_every == 0 and done + step < total:
            manager.save(checkpoint_number=done + step)

    start = time.time()
    trained = {"loss": float("nan")}
    if done < total:
        trained = trainer.fit(train_fn, total - done, log_every=steps_per_epoch if index == 0 else 0, callback=backup)
    seconds = time.time() - start
    evaluation = trainer.evaluate(test_fn)
    os.makedirs(worker_dir, exist_ok=True)
    model.save_weights(os.path.join(worker_dir, "final.weights.h5"))
    if index == 0:
        metrics = {
            "test_accuracy": evaluation["accuracy"],
            "test_loss": evaluation["loss"],
            "num_test_examples": evaluation["num_examples"],
            "epochs": settings["epochs"],
            "steps": int(optimizer.iterations.numpy()),
            "train_seconds": round(seconds, 1),
            "train_loss": trained["loss"],
            "dataset": dataset.name,
            "model": args.model,
            "workers": num_workers,
            "replicas": strategy.num_replicas_in_sync,
            "batch_size": batch_size,
            "resumed_from_step": done,
        }
        saving.save_model(model, os.path.join(args.output, "model.keras"), metadata={"class_names": dataset.class_names, "dataset": dataset.name, "image_size": size, "model": args.model})
        training.write_json(os.path.join(args.output, "metrics.json"), metrics)
        print(json.dumps({k: metrics[k] for k in ("test_accuracy", "test_loss", "num_test_examples", "train_seconds")}))
    shutil.rmtree(os.path.join(worker_dir, "backup"), ignore_errors=True)  # the run is complete
    return 0


def common_backup_step(strategy, manager, save_every, total):
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


def weights_digest(model):
    """A float summary of all weights (for comparing workers)."""
    return float(sum(np.sum(np.abs(np.asarray(w, "float64"))) for w in model.get_weights()))
