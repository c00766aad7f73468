"""A run that survives interruptions: its standard callbacks, and the fit that resumes mid-epoch.

* :func:`make_callbacks` -- :class:`~keras_vit.train.backup.EpochWeights`,
  :class:`~keras_vit.train.backup.Backup` (a ``BackupAndRestore`` that saves
  every ``save_freq`` steps, atomically),
  :class:`~keras_vit.train.divergence.StopOnNonFinite` (``TerminateOnNaN``),
  ``TensorBoard`` and ``CSVLogger`` (appending, one row per epoch across resumes).
* :func:`fit_resumable` -- ``model.fit`` (or another function with its
  arguments, such as :meth:`keras_vit.train.distribute.DistributedTrainer.fit`)
  that restarts from the last backup *mid-epoch*: the number of optimizer
  steps already taken decides where the run goes on, so an interrupted run
  ends with exactly as many steps as an uninterrupted one.

Example:
>>> callbacks = make_callbacks("runs/demo", save_freq=10, tensorboard=False)                 # doctest: +SKIP
>>> fit_resumable(model, train, epochs=30, steps_per_epoch=62, callbacks=callbacks)           # doctest: +SKIP
"""

import functools
import importlib.util
import inspect
import os

import keras

from keras_vit.train.accumulation import accumulate_steps
from keras_vit.train.backup import Backup
from keras_vit.train.backup import EpochWeights
from keras_vit.train.divergence import StopOnNonFinite
from keras_vit.train.ema import KeepRawWeights
from keras_vit.train.progress import RunProgbar
from keras_vit.train.progress import progress_verbosity
from keras_vit.train.run_files import drop_log_rows


def make_callbacks(output_dir, *, save_freq="epoch", tensorboard="auto", checkpoint=True, backup=True):
    """The standard callbacks of a run in ``output_dir``.

    ``backup/`` (:class:`~keras_vit.train.backup.Backup`, every ``save_freq``
    steps; ``backup=False`` leaves backups to the caller), ``checkpoint.weights.h5``
    (:class:`~keras_vit.train.backup.EpochWeights`, each epoch),
    :class:`~keras_vit.train.divergence.StopOnNonFinite`, ``logs/``
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
        tensorboard = importlib.util.find_spec("tensorboard") is not None  # tf.summary needs the package
    if tensorboard:
        callbacks.append(keras.callbacks.TensorBoard(os.path.join(output_dir, "logs"), write_graph=False))
    return callbacks


class ResumableHistory(keras.callbacks.History):
    """What :func:`fit_resumable` returns: the ``History`` of the one or two ``fit`` calls it made, as one.

    ``history`` (the per-epoch logs, lists), ``epoch`` (the epochs' indices in the run), ``model`` and
    ``params`` as ``model.fit``'s ``History`` has them; and ``resumed_from_step`` (optimizer steps taken
    before this call: 0 for a fresh run) and ``stopped`` (a callback stopped the run). ``history["loss"]``,
    ``history["resumed_from_step"]`` and ``history.get(...)`` read the logs and those two, as the dict
    ``fit_resumable`` returned before did.

    Example:
    >>> history = ResumableHistory(None, resumed_from_step=6)
    >>> isinstance(history, keras.callbacks.History), history.history, history["resumed_from_step"]
    (True, {}, 6)
    """

    def __init__(self, model, *, resumed_from_step=0):
        super().__init__()
        if model is not None:
            self.set_model(model)
        self.epoch = []
        self.resumed_from_step = int(resumed_from_step)
        self.stopped = False

    def add(self, history):
        """Append one ``fit`` call's ``History`` (its logs, epochs and params)."""
        for key, values in history.history.items():
            self.history.setdefault(key, []).extend(values)
        self.epoch.extend(getattr(history, "epoch", ()))
        self.params = getattr(history, "params", None) or self.params

    def _extra(self):
        return {"resumed_from_step": self.resumed_from_step, "stopped": self.stopped}

    def __getitem__(self, key):
        extra = self._extra()
        return extra[key] if key in extra else self.history[key]

    def __contains__(self, key):
        return key in self._extra() or key in self.history

    def get(self, key, default=None):
        return self[key] if key in self else default


def build_optimizer_slots(model):
    """Build ``model.optimizer``'s slots for the trainable variables now, if ``model.fit`` would build them later.

    Without a distribution strategy Keras builds the optimizer inside the first trace of the train step;
    the variables created there make ``tf.function`` trace the whole step a second time, about twice the
    start-up of a run of a small model. Built here, under the model's strategy as ``Backup.restore`` builds
    it, the step is traced once.
    """
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and not optimizer.built:
        with model.distribute_strategy.scope():
            optimizer.build(model.trainable_variables)


def continue_from(train, batches):
    """What one ``fit`` call trains on, from the run's batch ``batches`` on (a resumed run: the batches the
    uninterrupted run would have taken, not the stream's first ones again).

    A seeded pipeline (:func:`keras_vit.train.data.make_pipeline`) built anew gives the same batches, while each
    iterator Keras opens on one ``tf.data.Dataset`` draws new shuffles; so ``train`` is best a builder: a function of
    no argument returning the pipeline, built for each call and skipped (its skipped batches are read and augmented
    again: the data's cost, not the model's; a run resumed mid-epoch skips twice, for the rest of the epoch and for
    the later epochs, so about twice the data up to where it stopped is read before it trains), or one of a keyword
    ``skip_batches`` that starts the pipeline there itself (:func:`keras_vit.train.data.make_pipeline`'s, which
    neither augments the skipped images nor reads those of an image folder: the job's builder). A per-worker
    ``dataset_fn(context)`` skips, in each worker's pipeline, the batches its replicas took; a ``tf.data.Dataset``
    is skipped (the rest of an interrupted epoch exactly, the later epochs a new iterator's shuffles); other data
    (arrays) is given as it is.

    Example:
    >>> import tensorflow as tf
    >>> [int(v) for v in continue_from(lambda: tf.data.Dataset.range(5), 2)]
    [2, 3, 4]
    """
    if not callable(train):
        return train.skip(batches) if batches and hasattr(train, "skip") else train
    parameters = inspect.signature(train).parameters
    if "skip_batches" in parameters:  # a builder that starts its pipeline at a batch itself (make_pipeline's skip_batches)
        return train(skip_batches=batches)
    if not parameters:  # a builder
        return train().skip(batches) if batches else train()
    if not batches:
        return train

    def dataset_fn(context):  # tf.distribute: each input pipeline gives its worker's replicas one batch each per step
        return train(context).skip(batches * (context.num_replicas_in_sync // context.num_input_pipelines))

    return dataset_fn


def fit_resumable(
    model,
    train,
    *,
    epochs,
    steps_per_epoch,
    callbacks=(),
    validation_data=None,
    verbose="auto",
    remove_backup=True,
    fit=None,
):
    """``model.fit`` for ``epochs`` epochs of ``steps_per_epoch`` steps, resuming from a backup.

    ``train`` must repeat (``make_pipeline(..., repeat=True)``): a dataset, or best a function of no argument that
    builds it (:func:`continue_from`). If the
    callbacks hold a backup (a callback with ``restore()`` and ``remove()``:
    :class:`~keras_vit.train.backup.Backup`, or
    :class:`keras_vit.train.distribute.WorkerBackup`) with
    a saved state, the model and optimizer are restored and training goes on
    from the optimizer's step count: first the rest of the interrupted epoch,
    then the remaining epochs, on the batches the uninterrupted run would have
    taken (:func:`continue_from`). The run therefore always ends after
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
    (``model.stop_training``, e.g. :class:`~keras_vit.train.divergence.StopOnNonFinite`)
    is not complete: it goes no further and its backup is kept.

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
        A :class:`ResumableHistory`: a ``keras.callbacks.History`` (``history.history``: the per-epoch
        logs, lists, of the epochs run in this call; ``history.epoch``: their indices in the run;
        ``history.model``, ``history.params``) that also says ``resumed_from_step`` and ``stopped``
        (True when a callback stopped the run early).
    """
    verbose = progress_verbosity(verbose)
    keras_fit = fit is None
    fit = fit or functools.partial(model.fit, shuffle=False)  # the pipeline shuffles (seeded)
    backup = next((c for c in callbacks if callable(getattr(c, "restore", None)) and callable(getattr(c, "remove", None))), None)
    if backup is not None:
        backup.set_model(model)
    per_update = accumulate_steps(model.optimizer)
    if getattr(getattr(model.optimizer, "inner_optimizer", model.optimizer), "use_ema", False):
        # first: fit() puts the average in before on_train_end, and the raw weights go back before a backup is
        # written there (Backup writes an epoch's last one at the end of a fit)
        callbacks = [KeepRawWeights(), *callbacks]
    start = backup.restore() if backup is not None else 0  # batches
    if keras_fit:  # a custom loop builds its optimizer itself (DistributedTrainer)
        build_optimizer_slots(model)
    total = epochs * steps_per_epoch
    history = ResumableHistory(model, resumed_from_step=start // per_update)
    if start > total * per_update:
        raise ValueError(
            f"The backup in {backup.backup_dir} has taken {start // per_update} steps, more than this run's {total}; "
            "use a new output folder"
        )
    count = int(train.cardinality()) if hasattr(train, "cardinality") else -1  # tf.data: negative, infinite or unknown
    if count >= 0 and count % (steps_per_epoch * per_update):  # Keras restarts a finite dataset at an epoch's end only:
        raise ValueError(  # an epoch that runs out ends early, and the run looks finished
            f"`train` yields {count} batches, not a whole number of epochs of {steps_per_epoch * per_update} "
            f"({steps_per_epoch} steps{f' of {per_update} batches' if per_update > 1 else ''}): an epoch would run "
            "out of data and end early. Make it repeat (make_pipeline(..., repeat=True), dataset.repeat()). "
            f"Received: a dataset of {count} batches, steps_per_epoch={steps_per_epoch}"
        )

    progbar = [] if not verbose or any(isinstance(c, keras.callbacks.ProgbarLogger) for c in callbacks) else [RunProgbar(epochs)]

    def run(initial_epoch, last_epoch, steps, taken):
        h = fit(
            continue_from(train, taken),  # each fit() opens its own iterator: from the batch the run has reached
            initial_epoch=initial_epoch,
            epochs=last_epoch,
            steps_per_epoch=steps,
            callbacks=[*callbacks, *progbar],
            validation_data=validation_data,
            verbose=verbose,
        )
        history.add(h)

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
            drop_log_rows(logger.filename, first_epoch=epoch, separator=logger.sep)
    model.stop_training = False
    if done:
        run(epoch, epoch + 1, batches_per_epoch - done, start)
        epoch += 1
    if epoch < epochs and not model.stop_training:  # fit() would reset the flag of a stopped run
        run(epoch, epochs, batches_per_epoch, epoch * batches_per_epoch)
    history.stopped = bool(model.stop_training)
    if backup is not None and remove_backup and not history.stopped:
        backup.remove()
    return history
