"""The training job behind ``keras-vit train``: one device, ``MirroredStrategy`` or a multi-worker cluster.

:func:`run` takes a :class:`TrainConfig` and does the same steps for every
``strategy`` (``"none"``, ``"mirrored"``, ``"multi-worker"``):

1. data: the dataset (:func:`keras_vit.train.data.load_dataset`) and its
   pipelines; a multi-worker run reads one shard per worker;
2. model: built by name under the strategy's scope
   (:func:`keras_vit.train.recipes.build_model`), the checkpoint's load report
   printed, blocks frozen, the optimizer built, compiled;
3. callbacks: backups, a timer, ``TerminateOnNaN``, and on the chief the CSV
   log, TensorBoard and a per-epoch checkpoint
   (:func:`keras_vit.train.resumable.make_callbacks`);
4. fit through :func:`keras_vit.train.resumable.fit_resumable` with
   validation each epoch: ``model.fit`` on one device and under
   ``MirroredStrategy``, :meth:`keras_vit.train.distribute.DistributedTrainer.fit`
   (the same callbacks and logs) under ``MultiWorkerMirroredStrategy``, where
   ``model.fit`` fails in Keras 3 (keras issue 20585), and under
   ``MirroredStrategy`` with gradient accumulation (``accumulate``), which
   ``model.fit`` cannot run there (:mod:`keras_vit.train.accumulation`). Run the same job again
   in the same folder after an interruption and it goes on from the last
   backup, mid-epoch, and ends after as many steps as an uninterrupted run;
   the backup stores the run's settings, which the resumed run keeps
   (:func:`keras_vit.train.config.reconcile`: fields left None are taken
   from there, fields set otherwise are refused before the backup is read);
5. evaluation on the test split, then the outputs; with ``ema``, both use
   the moving average of the weights (so does validation each epoch:
   :class:`keras_vit.train.ema.EMAValidation`), while the backups
   hold the raw weights and the average (optimizer state) to resume from.

A run that stops on a non-finite loss (``TerminateOnNaN``) is not a finished
one: :func:`run` raises :class:`keras_vit.train.divergence.TrainingDiverged`,
writes no ``model.keras`` or ``metrics.json`` and keeps the last good backup.
Only one run at a time may use an output folder
(:func:`keras_vit.train.lock.output_lock`).

Outputs in ``output``: ``metrics.json`` (the keys of :data:`METRICS`, the
same for every strategy), ``model.keras`` (class names inside:
:func:`keras_vit.saving.read_metadata`; no optimizer state, which only the backups need), ``log.csv``, ``logs/``
(TensorBoard), ``checkpoint.weights.h5``, and ``backup/`` while a run is in
progress. In a multi-worker run (each worker runs the job with its own
``TF_CONFIG``) the chief, worker 0, writes those; each worker backs up to
``worker-<i>/backup`` (:class:`keras_vit.train.distribute.WorkerBackup`:
restarted workers go on from the newest step they all hold) and writes its
final weights to ``worker-<i>/final.weights.h5``.

Example:
>>> config = TrainConfig(model="micro", epochs=2, steps_per_epoch=3, output="runs/micro")
>>> config.resolved().batch_size  # unset fields come from the model's recipe
64
>>> metrics = run(config)                     # doctest: +SKIP
>>> metrics["test_accuracy"]                  # doctest: +SKIP
"""

import dataclasses
import glob
import os
import warnings

import keras

from keras_vit import saving
from keras_vit.hardware.gpu import gpu_info
from keras_vit.inference import naflex_runtime
from keras_vit.models import lora
from keras_vit.train import model_setup
from keras_vit.train import optimizers
from keras_vit.train import recipes
from keras_vit.train import config as config_lib
from keras_vit.train.backup import Backup
from keras_vit.train.backup import stored_settings
from keras_vit.train.disk_space import check_space
from keras_vit.train.divergence import StopOnNonFinite
from keras_vit.train.divergence import check_finite
from keras_vit.train.ema import EMAValidation
from keras_vit.train.lock import output_lock
from keras_vit.train.progress import Timer
from keras_vit.train.resumable import fit_resumable
from keras_vit.train.resumable import make_callbacks
from keras_vit.train.run_files import last_log_row, write_json
from keras_vit.train.choices import STRATEGIES  # noqa: F401  (public here too: the strategies of run)
from keras_vit.train.config import TrainConfig

# deferred below: keras_vit.train.data and .distribute import TensorFlow (tf.data, tf.distribute), and
# `keras-vit` builds its parser from this module (STRATEGIES, TrainConfig) on every Keras backend

# the keys of metrics.json, for every strategy (None where a value does not apply, e.g. no validation split)
METRICS = (
    "test_accuracy", "test_loss", "num_test_examples",
    "train_accuracy", "train_loss", "validation_accuracy", "validation_loss",
    "epochs", "steps_per_epoch", "steps", "resumed_from_step", "train_seconds",
    "dataset", "num_train_examples", "num_validation_examples",
    "model", "parameters", "image_size", "batch_size", "accumulate", "ema", "learning_rate", "optimizer", "layer_decay", "augment",
    "mixed_precision", "jit_compile", "strategy", "workers", "replicas", "naflex",
)  # fmt: skip

def make_strategy(name):
    """The ``tf.distribute`` strategy named ``name`` (one of :data:`STRATEGIES`)."""
    import tensorflow as tf  # deferred: TensorFlow (see the imports above)

    if name == "multi-worker":
        return tf.distribute.MultiWorkerMirroredStrategy()  # reads TF_CONFIG
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "none":
        return tf.distribute.get_strategy()
    raise ValueError(f"Unknown strategy: expected one of {STRATEGIES}. Received: strategy={name!r}")


def run(config):
    """Train, evaluate and save as ``config`` says; returns the metrics (also in ``metrics.json``).

    Every worker of a multi-worker run returns the same metrics; the chief writes them.
    """
    if not isinstance(config, TrainConfig):
        raise TypeError(f"`config` must be a TrainConfig. Received: config of type {type(config).__name__}")
    config.resolved()  # an unknown model fails before anything is written
    folder = _lock_folder(config)
    _refuse_other_layout(config)
    with output_lock(folder):  # one run per output folder (per worker folder in a cluster)
        # a backup to resume: its stored settings fill what this run leaves unset, and refuse what it sets otherwise
        backup_dir = os.path.join(folder, "backup")
        config, taken = config_lib.reconcile(config, stored_settings(backup_dir), where=backup_dir)
        if taken:
            _say(f"resuming with the stored settings: {config_lib.describe(taken)}")
        fit_batch = config.batch_size is None  # the recipe's batch: at most the training images
        config = config.resolved()
        strategy = make_strategy(config.strategy)  # first: a cluster's collectives are configured at start-up
        model_setup.set_precision(config.mixed_precision or "float32")
        try:
            return _train(config, strategy, fit_batch=fit_batch)
        finally:
            keras.mixed_precision.set_global_policy("float32")


def _lock_folder(config):
    if config.strategy != "multi-worker":
        return config.output
    from keras_vit.train import distribute  # deferred: TensorFlow (see the imports above)

    return os.path.join(config.output, f"worker-{distribute.worker_info()[0]}")


def _refuse_other_layout(config):
    """Refuse a run whose --output holds the backup of an interrupted run of the other layout: one worker's
    ``<output>/backup``, a cluster's ``<output>/worker-<i>/backup``. It was not looked for, so the run started afresh
    (the default job, when the flags were left to the backup) over the interrupted one's log."""
    if config.strategy == "multi-worker":
        other, resume = glob.glob(os.path.join(config.output, "backup")), "a --strategy other than multi-worker"
    else:
        other, resume = sorted(glob.glob(os.path.join(config.output, "worker-*", "backup"))), "--strategy multi-worker"
    if other:
        raise ValueError(
            f"--output {config.output!r} holds the backup of an interrupted run of another layout ({other[0]!r}): resume "
            f"it with {resume}, or train into another --output. Received: strategy={config.strategy!r}"
        )


def _batch_that_fits(config, num_train, replicas):
    """``config`` with the recipe's batch lowered to what ``num_train`` images fill (a multiple of ``replicas``)."""
    fits = num_train // config.accumulate // replicas * replicas
    if config.batch_size * config.accumulate <= num_train or fits < 1:
        return config
    _say(
        f"batch size {fits}: the recipe's {config.batch_size} is more than the {num_train} training images "
        f"{f'in {config.accumulate} accumulated batches ' if config.accumulate > 1 else ''}(--batch-size sets it)"
    )
    return dataclasses.replace(config, batch_size=fits)


def _remove_temporaries(*folders):
    """Delete the ``.tmp-*`` files of atomic writes that a killed run left (the lock says no run is writing them)."""
    for folder in folders:
        if os.path.isdir(folder):
            for name in os.listdir(folder):
                if name.startswith(".tmp-") and os.path.isfile(os.path.join(folder, name)):
                    os.remove(os.path.join(folder, name))


def _say(message):
    print(message, flush=True)  # plain lines: readable in a log file or a pipe


def _image_dtype():
    """``"uint8"`` when the backend trains on a GPU (see :func:`keras_vit.train.data.make_pipeline`), else ``"float32"``."""
    return "uint8" if gpu_info() else "float32"


def _pipelines(dataset, config, strategy, *, per_worker, patch_size=None, grid_rule="timm"):
    """``(train, validation or None, test)``: datasets for ``model.fit``, dataset functions for a multi-worker run.

    ``patch_size``, ``grid_rule``: the model's, for a NaFlex run (``config.naflex``).
    """
    from keras_vit.train import data  # deferred: TensorFlow (see the imports above)
    from keras_vit.train.naflex_data import NaFlexBatching  # deferred: TensorFlow (see the imports above)

    # on a GPU the batches go as uint8 (the model rescales inside): a quarter of float32's host-to-device bytes
    common = dict(image_size=config.image_size, num_classes=dataset.num_classes, image_dtype=_image_dtype())
    if config.naflex:
        common["naflex"] = NaFlexBatching(patch_size, config.naflex, grid_rule)
    augmented = dict(
        training=True, augment=config.augment, seed=config.seed, randaugment=config.randaugment,
        mixup=config.mixup, cutmix=config.cutmix, repeat=True,
    )
    eval_batch = max(config.batch_size, 256 - 256 % strategy.num_replicas_in_sync)

    def pipeline(split, batch_size, **options):
        if not per_worker:
            return data.make_pipeline(split, batch_size=batch_size, **common, **options)

        def dataset_fn(context):  # this worker's shard, in per-replica batches
            shard = split.shard(context.num_input_pipelines, context.input_pipeline_id)
            return data.make_pipeline(shard, batch_size=context.get_per_replica_batch_size(batch_size), **common, **options)

        return dataset_fn

    # a builder: each fit() of a resumed run builds the pipeline anew and skips to its batch (resumable.continue_from)
    train = pipeline(dataset.train, config.batch_size, **augmented) if per_worker else (
        lambda skip_batches=0: pipeline(dataset.train, config.batch_size, skip_batches=skip_batches, **augmented))
    validation = pipeline(dataset.validation, eval_batch) if dataset.validation is not None else None
    return train, validation, pipeline(dataset.test, eval_batch)


def _train(config, strategy, *, fit_batch=False):
    from keras_vit.train import data  # deferred: TensorFlow (see the imports above)
    from keras_vit.train import distribute  # deferred: TensorFlow (see the imports above)

    multi_worker = config.strategy == "multi-worker"
    # the custom loop: model.fit fails under MultiWorkerMirroredStrategy, and cannot accumulate under MirroredStrategy
    custom_loop = multi_worker or (config.strategy == "mirrored" and config.accumulate > 1)
    index, num_workers = distribute.worker_info() if multi_worker else (0, 1)
    chief = index == 0
    output = config.output
    os.makedirs(output, exist_ok=True)
    if chief:
        _remove_temporaries(output, os.path.join(output, "backup"))

    dataset = data.load_dataset(config.dataset, data_dir=config.data_dir, validation_fraction=config.validation_fraction)
    _say(data.dataset_summary(dataset))
    if dataset.num_classes < 2:
        raise ValueError(
            f"Dataset {dataset.name!r} has {dataset.num_classes} class(es) {dataset.class_names}: a classifier "
            "needs at least 2 (an image folder needs one subfolder per class)"
        )
    if fit_batch:
        config = _batch_that_fits(config, dataset.num_train, strategy.num_replicas_in_sync)
    distribute.check_batch_size(config.batch_size, strategy)
    with warnings.catch_warnings(record=True) as notices:  # a warm-up longer than the run: said as the job's own line
        warnings.simplefilter("always")
        steps_per_epoch, total_steps, warmup_steps = optimizers.plan_steps(  # in optimizer updates
            dataset.num_train, config.batch_size * config.accumulate, epochs=config.epochs,
            warmup_epochs=config.warmup_epochs, steps_per_epoch=config.steps_per_epoch,
        )
    for notice in notices:
        _say(f"warning: {notice.message}")

    keras.utils.set_random_seed(config.seed)
    with strategy.scope():
        model = recipes.build_model(
            config.model, dataset.num_classes, config.image_size, weights=config.weights, drop_path_rate=config.drop_path,
            naflex=bool(config.naflex),
        )
        report = getattr(model, "load_report", None)
        if config.weights is not None and report is not None:
            _say(report)
        if config.freeze_blocks:
            _say("frozen: " + ", ".join(model_setup.freeze(model, config.freeze_blocks)))
        if config.lora is not None:
            adapted = lora.enable_lora(model, config.lora)
            _say(f"LoRA of rank {config.lora} on {len(adapted)} projections; trainable: the factors and the head")
        optimizer = optimizers.build_optimizer(
            config.lr, total_steps, warmup_steps, name=config.optimizer, weight_decay=config.weight_decay,
            layer_decay=config.layer_decay, model=model, accumulate=config.accumulate, ema=config.ema,
        )
        model_setup.compile_model(model, optimizer, config.label_smoothing, jit_compile=config.jit)
    replicas = strategy.num_replicas_in_sync
    patch_size = model.vit_config.patch_size if config.naflex else None
    rule = naflex_runtime.check_grid_rule(model.vit_config, "keras-vit train --naflex") if config.naflex else "timm"
    train, validation, test = _pipelines(dataset, config, strategy, per_worker=custom_loop, patch_size=patch_size,
                                         grid_rule=rule)
    shape = (f"NaFlex, patch budgets {', '.join(map(str, config.naflex))}" if config.naflex
             else f"input {config.image_size}x{config.image_size}")
    _say(
        f"model {config.model}: {model.count_params():,} parameters, {shape}; "
        f"{config.epochs} epochs x {steps_per_epoch} steps of {config.batch_size * config.accumulate}"
        + (f" ({config.accumulate} accumulated batches of {config.batch_size})" if config.accumulate > 1 else "")
        + (f"; weight EMA, decay {config.ema}" if config.ema is not None else "")
        + (f" on {replicas} replicas" if replicas > 1 else "")
        + (f"; worker {index} of {num_workers}" if multi_worker else "")
    )

    if multi_worker:  # every worker backs up to its own folder
        backup = distribute.WorkerBackup(
            os.path.join(output, f"worker-{index}", "backup"), strategy,
            save_freq=config.save_freq or steps_per_epoch, total_steps=total_steps, settings=config.settings(),
        )
    else:  # save_freq counts batches: a multiple of `accumulate` lands between updates
        save_freq = config.save_freq * config.accumulate if config.save_freq else "epoch"
        backup = Backup(os.path.join(output, "backup"), save_freq=save_freq, settings=config.settings())
    if custom_loop:
        trainer = distribute.DistributedTrainer(
            model, strategy, config.batch_size, label_smoothing=config.label_smoothing, jit_compile=config.jit
        )
        fit, evaluate = trainer.fit, trainer.evaluate
    else:
        fit, evaluate = None, lambda split: model_setup.evaluate(model, split)  # None: model.fit
    timer = Timer(os.path.join(backup.backup_dir, "train_seconds.json"))
    callbacks = [backup, timer]
    if config.ema is not None:
        callbacks.append(EMAValidation())
    if chief:  # the logs and the checkpoint: once per run
        callbacks += make_callbacks(output, tensorboard=config.tensorboard, backup=False)
    else:
        callbacks.append(StopOnNonFinite())

    history = fit_resumable(
        model, train, epochs=config.epochs, steps_per_epoch=steps_per_epoch, callbacks=callbacks, validation_data=validation,
        verbose=config.verbose, fit=fit,
        remove_backup=False,  # until the outputs are written
    )
    check_finite(model, callbacks, backup.backup_dir)  # a diverged run writes nothing more
    if config.ema is not None:  # from here on the model holds the average; the backup keeps the raw weights
        model.optimizer.finalize_variable_values(model.trainable_variables)
    train_seconds = timer.total()
    evaluation = evaluate(test)

    logged = last_log_row(os.path.join(output, "log.csv"))  # a run resumed after its last epoch trains none

    def last(key):
        if history.get(key):
            return float(history[key][-1])
        try:
            return float(logged[key])
        except (KeyError, TypeError, ValueError):  # no such column, or CSVLogger's "NA" for an epoch without it
            return None

    metrics = {
        "test_accuracy": float(evaluation["accuracy"]),
        "test_loss": float(evaluation["loss"]),
        "num_test_examples": int(evaluation["num_examples"]),
        "train_accuracy": last("accuracy"),
        "train_loss": last("loss"),
        "validation_accuracy": last("val_accuracy"),
        "validation_loss": last("val_loss"),
        "epochs": config.epochs,
        "steps_per_epoch": steps_per_epoch,
        "steps": int(model.optimizer.iterations.numpy()),
        "resumed_from_step": history["resumed_from_step"],
        "train_seconds": round(train_seconds, 1),
        "dataset": config_lib.as_path("dataset", dataset.name),  # a folder by its absolute path, as the backups
        "num_train_examples": dataset.num_train,
        "num_validation_examples": dataset.num_validation,
        "model": config.model,
        "parameters": int(model.count_params()),
        "image_size": config.image_size,
        "batch_size": config.batch_size,
        "accumulate": config.accumulate,
        "ema": config.ema,
        "learning_rate": config.lr,
        "optimizer": config.optimizer,
        "layer_decay": config.layer_decay,
        "augment": config.augment,
        "mixed_precision": keras.mixed_precision.global_policy().name,
        "jit_compile": bool(config.jit),
        "strategy": config.strategy,
        "workers": num_workers,
        "replicas": replicas,
        "naflex": list(config.naflex) if config.naflex else None,
    }
    if chief:
        metadata = {"class_names": dataset.class_names, "dataset": metrics["dataset"], "image_size": config.image_size}
        if config.naflex:
            metadata["naflex"] = list(config.naflex)
        check_space(os.path.join(output, "model.keras"), model)  # HDF5 on a full disk: a crash
        saving.save_model(  # the deliverable: no optimizer state (the backups have it)
            model, os.path.join(output, "model.keras"), metadata=dict(metadata, model=config.model), include_optimizer=False
        )
        write_json(os.path.join(output, "metrics.json"), metrics)
    if multi_worker:
        model.save_weights(os.path.join(output, f"worker-{index}", "final.weights.h5"))
    timer.remove()
    backup.remove()  # the run is complete
    _say(
        f"test accuracy {metrics['test_accuracy']:.4f}, test loss {metrics['test_loss']:.4f} "
        f"on {metrics['num_test_examples']} images; trained {train_seconds:.0f} s -> {output}"
    )
    return metrics
