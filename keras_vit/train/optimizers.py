"""Optimizers and learning-rate schedules: the paper's recipe and its fine-tuning variants.

* :func:`warmup_cosine` -- linear warmup + cosine decay
  (``keras.optimizers.schedules.CosineDecay(warmup_target=...)``).
* :func:`plan_steps` -- steps per epoch, total steps and warmup steps of a run.
* :func:`build_optimizer` -- AdamW (or SGD with momentum, which the paper used
  for fine-tuning) on that schedule, gradients clipped at global norm 1,
  decoupled weight decay that skips biases, LayerNorm and the class/position
  embeddings, optional layer-wise learning-rate decay
  (:class:`LayerDecayAdamW`, :class:`LayerDecaySGD`, registered as
  ``keras_vit>LayerDecayAdamW`` and ``keras_vit>LayerDecaySGD``), gradient
  accumulation (:mod:`keras_vit.train.accumulation`) and a weight EMA.

Example:
>>> schedule = warmup_cosine(1e-3, total_steps=100, warmup_steps=10)
>>> round(float(schedule(10)), 6)
0.001
>>> plan_steps(4000, 64, epochs=30, warmup_epochs=2)
(62, 1860, 124)
"""

import warnings

import keras

from keras_vit.domains import FRACTION, NON_NEGATIVE, NON_NEGATIVE_INT, POSITIVE, POSITIVE_INT, Choice, Interval, Optional
from keras_vit.domains import check_arguments
from keras_vit.train.accumulation import AccumulatingAdamW
from keras_vit.train.choices import ARGUMENT_DOMAINS, EMA_DECAY, OPTIMIZERS  # noqa: F401  (their names here too)
from keras_vit.train.accumulation import AccumulatingSGD
from keras_vit.train.model_setup import block_number

# timm's no_weight_decay(): the tokens and position embeddings, and every 1-D weight (biases, norms, LayerScale,
# differential attention's lambda_q1 / lambda_k1 / lambda_q2 / lambda_k2 vectors)
NO_WEIGHT_DECAY = ("bias", "gamma", "beta", "class_token", "distillation_token", "register_tokens", "probe", "position_embedding",
                   "lambda_")
_HEAD_LAYERS = ("encoder_norm", "pool", "pool_distillation", "map_head", "fc_norm", "projection", "pre_logits", "head",
                "head_distillation", "head_average", "predictions")


def warmup_cosine(learning_rate, total_steps, warmup_steps=0, *, end_fraction=0.0):
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


def plan_steps(num_train, batch_size, *, epochs, warmup_epochs, steps_per_epoch=None):
    """``(steps_per_epoch, total_steps, warmup_steps)`` of a run; an epoch is one pass by default.

    A warm-up as long as the run or longer is cut to end one step before it, with a warning: the
    learning rate then rises all run and never decays.
    """
    steps_per_epoch = steps_per_epoch or num_train // batch_size
    if steps_per_epoch < 1:
        raise ValueError(
            f"The global batch of {batch_size} images (--batch-size times --accumulate) is larger than the {num_train} "
            f"training images: pass a smaller --batch-size, or --steps-per-epoch. Received: batch_size={batch_size}"
        )
    total = steps_per_epoch * epochs
    warmup = int(warmup_epochs * steps_per_epoch)
    if warmup >= total:
        warnings.warn(
            f"The warm-up of {warmup_epochs:g} epoch(s) ({warmup} steps) does not end before the run's {epochs} epoch(s) "
            f"({total} steps) do: the learning rate rises all run, reaches its peak only at the last step and never "
            f"decays. Pass fewer --warmup-epochs or more --epochs. Received: warmup_epochs={warmup_epochs}, epochs={epochs}",
            stacklevel=2,
        )
    return steps_per_epoch, total, min(warmup, total - 1)


def layer_id(path, num_layers):
    """Depth of a variable for layer-wise decay: 0 embedding, i+1 block i, L+1 head."""
    top = path.split("/")[0]
    block = block_number(top)
    if block is not None:
        return block + 1
    if top in _HEAD_LAYERS:
        return num_layers + 1
    return 0  # patches, patch encoder, a hybrid's stem


def layer_decay_multipliers(model, decay):
    """``{first path component: decay ** (L + 1 - depth)}`` for every trainable variable's layer."""
    decay = ARGUMENT_DOMAINS["layer_decay"].domain.check(decay, "layer_decay")
    names = {v.path.split("/")[0] for v in model.trainable_variables}
    num_layers = sum(1 for layer in model.layers if block_number(layer.name) is not None)  # frozen blocks count too
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
        import tensorflow as tf  # deferred: only the TensorFlow backend runs this; the module loads on every backend

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
class LayerDecayAdamW(_LayerDecay, AccumulatingAdamW):
    """``keras.optimizers.AdamW`` with per-layer learning-rate multipliers (``lr_multipliers``) and ``accumulate_steps``."""


@keras.saving.register_keras_serializable(package="keras_vit")
class LayerDecaySGD(_LayerDecay, AccumulatingSGD):
    """``keras.optimizers.SGD`` with per-layer learning-rate multipliers (``lr_multipliers``) and ``accumulate_steps``."""


def build_optimizer(
    learning_rate,
    total_steps,
    warmup_steps=0,
    *,
    name="adamw",
    weight_decay=0.05,
    momentum=0.9,
    clipnorm=1.0,
    layer_decay=None,
    model=None,
    no_weight_decay=NO_WEIGHT_DECAY,
    accumulate=1,
    ema=None,
):
    """The paper's optimizer: warmup + cosine, global-norm clipping, selective weight decay.

    Args:
        learning_rate: peak learning rate, reached after ``warmup_steps``.
        total_steps: optimizer updates of the whole run (schedule length).
        warmup_steps: linear warmup updates.
        name: ``"adamw"`` (pre-training, from-scratch runs) or ``"sgd"``
            (with ``momentum``; the paper's fine-tuning optimizer).
        weight_decay: decoupled weight decay; not applied to variables whose
            name contains any of ``no_weight_decay`` (biases, LayerNorm
            ``gamma``/``beta``, class token, position embedding, differential
            attention's lambdas).
        clipnorm: global gradient norm clip (1 in the paper); None disables.
        layer_decay: optional layer-wise learning-rate decay in (0, 1]: block
            ``i`` of ``L`` gets ``layer_decay ** (L - i)``, the embedding
            ``layer_decay ** (L + 1)``, the head 1. Needs ``model``.
        model: the model, for ``layer_decay``.
        accumulate: batches per update (gradient accumulation,
            :mod:`keras_vit.train.accumulation`): each update applies the
            mean gradient of ``accumulate`` batches, like one batch that many
            times larger. ``iterations``, the schedule and ``total_steps``
            count updates.
        ema: keep an exponential moving average of the weights with this
            decay in [0, 1) (None or 0: no average), updated after each update: ``ema = ema * d + (1 - d) * w``
            (the first update sets it to ``w``). ``optimizer.finalize_variable_values(
            model.trainable_variables)`` puts it into the model.
            :data:`EMA_DECAY` (0.9998) is timm's default.

    Each argument is checked against its domain (:data:`ARGUMENT_DOMAINS`) first.

    Returns:
        A Keras optimizer.
    """
    checked = check_arguments(
        ARGUMENT_DOMAINS, learning_rate=learning_rate, total_steps=total_steps, warmup_steps=warmup_steps, name=name,
        weight_decay=weight_decay, momentum=momentum, clipnorm=clipnorm, layer_decay=layer_decay, accumulate=accumulate,
        ema=ema,
    )
    learning_rate, ema = checked["learning_rate"], checked["ema"] or None
    own = [f"{arg}={value!r}" for arg, value, plain in (("layer_decay", layer_decay, (None, 1.0)), ("accumulate", accumulate, (1,)))
           if value not in plain]
    if own and keras.backend.backend() != "tensorflow":  # their update steps are TensorFlow's (tf.distribute)
        raise ValueError(
            f"build_optimizer's {' and '.join(own)} run on the TensorFlow backend only (keras_vit's training uses "
            f"TensorFlow); this is Keras' {keras.backend.backend()!r} backend. Keras' own "
            "keras.optimizers.AdamW(..., gradient_accumulation_steps=N) accumulates on every backend."
        )
    schedule = warmup_cosine(learning_rate, total_steps, warmup_steps)
    kwargs = dict(learning_rate=schedule, weight_decay=weight_decay or None, global_clipnorm=clipnorm)
    if layer_decay is not None and layer_decay != 1.0:
        if model is None:
            raise ValueError("`layer_decay` needs the model to assign variables to layers. Received: model=None")
        multipliers = layer_decay_multipliers(model, layer_decay)
        cls = LayerDecayAdamW if name == "adamw" else LayerDecaySGD
        kwargs["lr_multipliers"] = multipliers
    elif accumulate != 1:
        cls = AccumulatingAdamW if name == "adamw" else AccumulatingSGD
    else:
        cls = keras.optimizers.AdamW if name == "adamw" else keras.optimizers.SGD
    if accumulate != 1:
        kwargs["accumulate_steps"] = accumulate  # checked by the class
    if ema is not None:
        kwargs.update(use_ema=True, ema_momentum=float(ema))
    if name == "sgd":
        kwargs["momentum"] = momentum
    optimizer = cls(**kwargs)
    if weight_decay and no_weight_decay:
        optimizer.exclude_from_weight_decay(var_names=list(no_weight_decay))
    return optimizer
