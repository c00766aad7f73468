"""The training recipe: optimizer, schedule, fine-tuning switches, callbacks, resumable fit.

The pieces follow the paper and its follow-ups (AugReg, DeiT):

* :func:`build_optimizer` -- AdamW (or SGD with momentum, which the paper
  used for fine-tuning) on a linear-warmup + cosine schedule
  (``keras.optimizers.schedules.CosineDecay(warmup_target=...)``), gradients
  clipped at global norm 1, decoupled weight decay that skips biases,
  LayerNorm and the class/position embeddings, and optional layer-wise
  learning-rate decay (:class:`LayerDecayAdamW`, :class:`LayerDecaySGD`).
* :func:`freeze` -- freeze the embedding and the first blocks for fine-tuning.
* :func:`set_precision` -- the 16-bit type the hardware runs natively, else float32.
* :func:`make_callbacks` -- ``ModelCheckpoint``, :class:`Backup` (a
  ``BackupAndRestore`` that saves every ``save_freq`` steps, atomically),
  ``TerminateOnNaN``, ``TensorBoard`` and ``CSVLogger`` (appending).
* :func:`fit_resumable` -- ``model.fit`` that restarts from the last backup
  *mid-epoch*: the number of optimizer steps already taken decides where the
  run goes on, so an interrupted run ends with exactly as many steps as an
  uninterrupted one.
* saving (``model.keras`` with class names inside) is :mod:`keras_vit.saving`.

Example:
>>> model = keras_vit.ViT(image_size=28, patch_size=4, hidden_size=64,   # doctest: +SKIP
...                       num_layers=4, num_heads=4, mlp_dim=128, num_classes=10)
>>> optimizer = build_optimizer(1e-3, total_steps=1000, warmup_steps=100)  # doctest: +SKIP
>>> compile_model(model, optimizer, label_smoothing=0.1)                   # doctest: +SKIP
"""

import json
import os
import re
import sys

import keras
import numpy as np

from keras_vit.saving import atomic_write

NO_WEIGHT_DECAY = ("bias", "gamma", "beta", "class_token", "position_embedding")
OPTIMIZERS = ("adamw", "sgd")
_HEAD_LAYERS = ("encoder_norm", "pool", "pre_logits", "head", "predictions")
_BLOCK = re.compile(r"^transformer_block_(\d+)$")


# ------------------------------------------------------------------ optimizer


def warmup_cosine(learning_rate, total_steps, warmup_steps=0, end_fraction=0.0):
    """Linear warmup from 0 to ``learning_rate``, then cosine decay to ``end_fraction * learning_rate``."""
    if total_steps < 1 or not 0 <= warmup_steps < total_steps:
        raise ValueError(
            "Need 0 <= warmup_steps < total_steps. "
            f"Received: warmup_steps={warmup_steps}, total_steps={total_steps}"
        )
    if warmup_steps == 0:
        return keras.optimizers.schedules.CosineDecay(learning_rate, total_steps, alpha=end_fraction)
    return keras.optimizers.schedules.CosineDecay(
        0.0,
        total_steps - warmup_steps,
        alpha=end_fraction,
        warmup_target=learning_rate,
        warmup_steps=warmup_steps,
    )


def plan_steps(num_train, batch_size, epochs, warmup_epochs, steps_per_epoch=None):
    """``(steps_per_epoch, total_steps, warmup_steps)`` of a run; an epoch is one pass by default."""
    steps_per_epoch = steps_per_epoch or num_train // batch_size
    if steps_per_epoch < 1:
        raise ValueError(f"`--batch-size` {batch_size} is larger than the {num_train} training images")
    total = steps_per_epoch * epochs
    return steps_per_epoch, total, min(int(warmup_epochs * steps_per_epoch), total - 1)


def layer_id(path, num_layers):
    """Depth of a variable for layer-wise decay: 0 embedding, i+1 block i, L+1 head."""
    top = path.split("/")[0]
    match = _BLOCK.match(top)
    if match:
        return int(match.group(1)) + 1
    if top in _HEAD_LAYERS:
        return num_layers + 1
    return 0  # patches, patch encoder, a hybrid's stem


def layer_decay_multipliers(model, decay):
    """``{first path component: decay ** (L + 1 - depth)}`` for every trainable variable's layer."""
    if not 0.0 < decay <= 1.0:
        raise ValueError(f"`layer_decay` must be in (0, 1]. Received: layer_decay={decay!r}")
    names = {v.path.split("/")[0] for v in model.trainable_variables}
    num_layers = sum(1 for layer in model.layers if _BLOCK.match(layer.name))  # frozen blocks count too
    return {n: float(decay ** (num_layers + 1 - layer_id(n, num_layers))) for n in sorted(names)}


class _LayerDecay:
    """Scale each variable's learning rate (and its weight decay) by a per-layer multiplier.

    ``lr_multipliers`` maps the first component of a variable's path (its
    top-level layer, e.g. ``transformer_block_3``) to a factor; missing
    layers get 1.
    """

    def __init__(self, *args, lr_multipliers=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lr_multipliers = dict(lr_multipliers or {})
        self._multiplier_of = {}

    def build(self, var_list):
        super().build(var_list)
        for variable in var_list:
            top = variable.path.split("/")[0]
            self._multiplier_of[self._var_key(variable)] = float(self.lr_multipliers.get(top, 1.0))

    def _multiplier(self, variable):
        return self._multiplier_of.get(self._var_key(variable), 1.0)

    def update_step(self, gradient, variable, learning_rate):
        scale = self._multiplier(variable)
        if scale != 1.0:
            learning_rate = keras.ops.multiply(learning_rate, scale)
        return super().update_step(gradient, variable, learning_rate)

    def _apply_weight_decay(self, variables):
        if self.weight_decay is None:
            return
        import tensorflow as tf

        def decay(variable, scale):
            if self._use_weight_decay(variable):
                lr = tf.cast(self.learning_rate, variable.dtype) * scale
                wd = tf.cast(self.weight_decay, variable.dtype)
                variable.assign_sub(variable * wd * lr)

        def apply(distribution, variables):
            for variable in variables:
                scale = self._multiplier(variable)
                if isinstance(variable, keras.Variable):
                    variable = variable.value
                distribution.extended.update(variable, decay, args=(scale,), group=False)

        tf.__internal__.distribute.interim.maybe_merge_call(apply, self._distribution_strategy, variables)

    def get_config(self):
        config = super().get_config()
        config["lr_multipliers"] = dict(self.lr_multipliers)
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class LayerDecayAdamW(_LayerDecay, keras.optimizers.AdamW):
    """``keras.optimizers.AdamW`` with per-layer learning-rate multipliers (``lr_multipliers``)."""


@keras.saving.register_keras_serializable(package="keras_vit")
class LayerDecaySGD(_LayerDecay, keras.optimizers.SGD):
    """``keras.optimizers.SGD`` with per-layer learning-rate multipliers (``lr_multipliers``)."""


def build_optimizer(
    learning_rate,
    total_steps,
    warmup_steps=0,
    name="adamw",
    weight_decay=0.05,
    momentum=0.9,
    clipnorm=1.0,
    layer_decay=None,
    model=None,
    no_weight_decay=NO_WEIGHT_DECAY,
):
    """The paper's optimizer: warmup + cosine, global-norm clipping, selective weight decay.

    Args:
        learning_rate: peak learning rate, reached after ``warmup_steps``.
        total_steps: optimizer steps of the whole run (schedule length).
        warmup_steps: linear warmup steps.
        name: ``"adamw"`` (pre-training, from-scratch runs) or ``"sgd"``
            (with ``momentum``; the paper's fine-tuning optimizer).
        weight_decay: decoupled weight decay; not applied to variables whose
            name contains any of ``no_weight_decay`` (biases, LayerNorm
            ``gamma``/``beta``, class token, position embedding).
        clipnorm: global gradient norm clip (1 in the paper); None disables.
        layer_decay: optional layer-wise learning-rate decay in (0, 1]: block
            ``i`` of ``L`` gets ``layer_decay ** (L - i)``, the embedding
            ``layer_decay ** (L + 1)``, the head 1. Needs ``model``.
        model: the model, for ``layer_decay``.

    Returns:
        A Keras optimizer.
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"Unknown optimizer: expected one of {OPTIMIZERS}. Received: name={name!r}")
    if learning_rate <= 0:
        raise ValueError(f"`learning_rate` must be positive. Received: learning_rate={learning_rate!r}")
    schedule = warmup_cosine(learning_rate, total_steps, warmup_steps)
    kwargs = dict(learning_rate=schedule, weight_decay=weight_decay or None, global_clipnorm=clipnorm)
    if layer_decay is not None and layer_decay != 1.0:
        if model is None:
            raise ValueError("`layer_decay` needs the model to assign variables to layers. Received: model=None")
        multipliers = layer_decay_multipliers(model, layer_decay)
        cls = LayerDecayAdamW if name == "adamw" else LayerDecaySGD
        kwargs["lr_multipliers"] = multipliers
    else:
        cls = keras.optimizers.AdamW if name == "adamw" else keras.optimizers.SGD
    if name == "sgd":
        kwargs["momentum"] = momentum
    optimizer = cls(**kwargs)
    if weight_decay and no_weight_decay:
        optimizer.exclude_from_weight_decay(var_names=list(no_weight_decay))
    return optimizer


# ------------------------------------------------------------- model switches


def set_precision(mode, cpu=None, gpus=None, notify=print):
    """Set the global dtype policy: ``"float32"``, ``"mixed"`` or a policy name.

    ``"mixed"`` picks what the hardware runs natively (:func:`keras_vit.hardware.mixed_policy`):
    bfloat16 on GPUs of compute capability 8.0+ and on CPUs with AVX512_BF16 or
    AMX, float16 with loss scaling on older GPUs, and float32 on CPUs without
    native bfloat16, where ``notify`` (default ``print``) receives a one-line
    notice saying so. Call before building the model. Returns the policy name set.

    Args:
        mode: ``"float32"`` (or None/False), ``"mixed"`` (or True), or one of
            ``"mixed_bfloat16"``, ``"mixed_float16"``, ``"bfloat16"``.
        cpu, gpus: the hardware to decide for (default: this machine's).
        notify: called with the notice when ``"mixed"`` falls back to float32.
    """
    if mode in (None, False, "float32", "none"):
        policy = "float32"
    elif mode in (True, "mixed", "auto"):
        from keras_vit import hardware

        policy, reason = hardware.mixed_policy(cpu, gpus)
        if policy == "float32" and notify is not None:
            notify(f"mixed precision: float32, since {reason}")
    elif mode in ("mixed_bfloat16", "mixed_float16", "bfloat16"):
        policy = mode
    else:
        raise ValueError(
            "Unknown precision: expected 'float32', 'mixed', 'mixed_bfloat16' or 'mixed_float16'. "
            f"Received: mixed_precision={mode!r}"
        )
    keras.mixed_precision.set_global_policy(policy)
    return policy


def freeze(model, num_blocks):
    """Freeze the embedding (and any stem) and the first ``num_blocks`` Transformer blocks.

    ``num_blocks=-1`` freezes every block (a linear probe: only the final
    norm and the head train). Returns the names of the frozen layers.
    """
    blocks = sorted(int(m.group(1)) for m in (_BLOCK.match(layer.name) for layer in model.layers) if m)
    if num_blocks < 0:
        num_blocks = len(blocks)
    if num_blocks > len(blocks):
        raise ValueError(f"The model has {len(blocks)} blocks. Received: num_blocks={num_blocks}")
    frozen = []
    seen_block = False
    for layer in model.layers:
        match = _BLOCK.match(layer.name)
        if match:
            seen_block = True
            if int(match.group(1)) < num_blocks:
                layer.trainable = False
                frozen.append(layer.name)
        elif not seen_block and layer.weights:
            layer.trainable = False
            frozen.append(layer.name)
    return frozen


def compile_model(model, optimizer, label_smoothing=0.1, jit_compile=False):
    """Compile with categorical cross-entropy (one-hot labels, label smoothing) and accuracy."""
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.CategoricalCrossentropy(label_smoothing=label_smoothing),
        metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")],
        jit_compile=jit_compile,
    )
    return model


# ------------------------------------------------------------------ callbacks


def write_json(path, obj):
    """Write JSON atomically (temporary file + ``os.replace``)."""

    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=2, sort_keys=True)
            f.write("\n")

    atomic_write(path, write)


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


def make_callbacks(output_dir, save_freq="epoch", tensorboard="auto", checkpoint=True):
    """The standard callbacks of a run in ``output_dir``.

    ``backup/`` (:class:`Backup`, every ``save_freq`` steps), ``checkpoint.weights.h5``
    (``ModelCheckpoint``, each epoch), ``TerminateOnNaN``, ``logs/``
    (``TensorBoard``; ``"auto"`` adds it when the ``tensorboard`` package is
    installed, which ``tf.summary`` needs) and ``log.csv`` (``CSVLogger``,
    appending across resumes).
    """
    os.makedirs(output_dir, exist_ok=True)
    callbacks = [Backup(os.path.join(output_dir, "backup"), save_freq=save_freq), keras.callbacks.TerminateOnNaN()]
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
    model, train, epochs, steps_per_epoch, callbacks=(), validation_data=None, verbose="auto", remove_backup=True
):
    """``model.fit`` for ``epochs`` epochs of ``steps_per_epoch`` steps, resuming from a :class:`Backup`.

    ``train`` must repeat (``make_pipeline(..., repeat=True)``). If the
    callbacks hold a :class:`Backup` with a saved state, the model and
    optimizer are restored and training goes on from the optimizer's step
    count: first the rest of the interrupted epoch, then the remaining
    epochs. The run therefore always ends after ``epochs * steps_per_epoch``
    optimizer steps. The backup is removed once the run is complete
    (``remove_backup=False`` leaves that to the caller, e.g. after it has
    saved its outputs).

    Returns:
        A dict of per-epoch logs (lists) of the epochs run in this call, and
        ``"resumed_from_step"``.
    """
    verbose = progress_verbosity(verbose)
    backup = next((c for c in callbacks if isinstance(c, Backup)), None)
    if backup is not None:
        backup.set_model(model)
    start = backup.restore() if backup is not None else 0
    total = epochs * steps_per_epoch
    history = {"resumed_from_step": start}
    if start > total:
        raise ValueError(f"The backup has taken {start} steps, more than this run's {total}; use a new output folder")

    def run(initial_epoch, last_epoch, steps):
        h = model.fit(
            train,
            initial_epoch=initial_epoch,
            epochs=last_epoch,
            steps_per_epoch=steps,
            callbacks=list(callbacks),
            validation_data=validation_data,
            verbose=verbose,
            shuffle=False,  # the pipeline shuffles (seeded); fit cannot shuffle a tf.data.Dataset anyway
        )
        for key, values in h.history.items():
            history.setdefault(key, []).extend(values)

    epoch, done = divmod(start, steps_per_epoch)
    if start and verbose:
        print(f"Resuming from {backup.backup_dir}: step {start} of {total} (epoch {epoch + 1}, {done} steps into it)")
    if done:
        if backup is not None:
            backup._current_epoch = epoch
        run(epoch, epoch + 1, steps_per_epoch - done)
        epoch += 1
    if epoch < epochs:
        run(epoch, epochs, steps_per_epoch)
    if backup is not None and remove_backup:
        backup.remove()
    return history


def evaluate(model, dataset):
    """``model.evaluate`` as a dict, plus the number of examples seen."""
    count = 0
    for _, labels in dataset:
        count += int(np.shape(labels)[0])
    result = model.evaluate(dataset, verbose=0, return_dict=True)
    result["num_examples"] = count
    return result
