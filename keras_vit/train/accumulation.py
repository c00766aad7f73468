"""Gradient accumulation: one optimizer update every N batches, with the mean of their gradients.

:class:`AccumulatingAdamW` and :class:`AccumulatingSGD` (registered as
``keras_vit>AccumulatingAdamW`` and ``keras_vit>AccumulatingSGD``; the
layer-decay optimizers of :mod:`keras_vit.train.optimizers` accumulate too)
take ``accumulate_steps=N``: N batches of B give the update of one batch of
N x B (the mean of the N gradients, clipped and applied once). The state
lives in optimizer variables, so a backup of the optimizer holds it: one
accumulator per trainable variable and a batch counter (:attr:`batches`).

What counts in updates: ``optimizer.iterations``, and with it the
learning-rate schedule, the decoupled weight decay and the weight EMA
(``use_ema``), which move once per update, never per batch.

Keras 3's own ``gradient_accumulation_steps`` is not used: it calls the
learning-rate schedule with the batch count (so a schedule planned in updates
runs N times too fast), moves the EMA after every batch, and cannot run under
``tf.distribute`` (its ``cond`` holds the gradient all-reduce, a
synchronisation point: ``model.fit`` under ``MirroredStrategy`` fails with
"merge_call called while defining a new graph or a tf.function").

``apply`` decides in the graph (a ``cond``) whether a batch ends an update,
which suits one device. A loop under a distribution strategy decides in
Python and calls :meth:`~_Accumulation.accumulate` for the first N-1 batches
and :meth:`~_Accumulation.apply_accumulated` for the last
(:class:`keras_vit.train.distribute.DistributedTrainer` does).

Example:
>>> import keras
>>> w = keras.Variable([1.0])
>>> optimizer = AccumulatingSGD(learning_rate=0.5, accumulate_steps=2)
>>> optimizer.apply([keras.ops.convert_to_tensor([2.0])], [w])  # batch 1: summed, w unchanged
>>> float(w.numpy()[0]), int(optimizer.iterations.numpy())
(1.0, 0)
>>> optimizer.apply([keras.ops.convert_to_tensor([4.0])], [w])  # batch 2: w -= 0.5 * (2 + 4) / 2
>>> float(w.numpy()[0]), int(optimizer.iterations.numpy()), batches_taken(optimizer)
(-0.5, 1, 2)
"""

import keras
from keras import ops

from keras_vit.domains import POSITIVE_INT


class _Accumulation:
    """Update the weights once every ``accumulate_steps`` batches with the mean of their gradients."""

    def __init__(self, *args, accumulate_steps=1, **kwargs):
        accumulate_steps = POSITIVE_INT.check(accumulate_steps, "accumulate_steps")
        super().__init__(*args, **kwargs)
        self.accumulate_steps = accumulate_steps
        self._batches = None
        self._accumulators = []
        self._accumulator_index = {}

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        if self.accumulate_steps > 1:
            self._batches = self.add_variable(
                (), initializer="zeros", dtype="int", aggregation="only_first_replica", name="batches"
            )
            self._accumulators = self.add_optimizer_variables(var_list, "accumulator")
            self._accumulator_index = {self._var_key(v): i for i, v in enumerate(var_list)}

    @property
    def batches(self):
        """Batches taken: ``iterations`` (updates) times ``accumulate_steps``, plus the ones summed since."""
        return self.iterations if self._batches is None else self._batches

    def _checked(self, grads, trainable_variables):
        if self.accumulate_steps == 1:
            raise ValueError("Nothing to accumulate: this optimizer has accumulate_steps=1; call apply()")
        if trainable_variables is None:
            if not self.built:
                raise ValueError("Pass the variables on the first call (the optimizer is not built yet)")
            trainable_variables = self._trainable_variables
        trainable_variables = list(trainable_variables)
        if not self.built:
            self.build(trainable_variables)
        return list(grads), trainable_variables

    def _accumulator(self, variable):
        index = self._accumulator_index.get(self._var_key(variable))
        if index is None:
            raise ValueError(f"Unknown variable {variable.path!r}: the optimizer was built on other variables")
        return self._accumulators[index]  # None for a variable overwritten with its gradient (float8 scales)

    def accumulate(self, grads, trainable_variables=None):
        """Add one batch's gradients to the sums; the weights stay (batches 1 to N-1 of an update)."""
        grads, trainable_variables = self._checked(grads, trainable_variables)
        for grad, variable in zip(grads, trainable_variables):
            accumulator = self._accumulator(variable)
            if grad is not None and accumulator is not None:
                self.assign_add(accumulator, grad)
        self.assign_add(self._batches, 1)

    def apply_accumulated(self, grads, trainable_variables=None):
        """The last batch of an update: Keras' ``apply`` with the mean of the N batches' gradients; new sums start."""
        grads, trainable_variables = self._checked(grads, trainable_variables)
        accumulators = [self._accumulator(v) for v in trainable_variables]
        means = [
            grad if grad is None or total is None else (grad + total) / self.accumulate_steps
            for grad, total in zip(grads, accumulators)
        ]
        super().apply(means, trainable_variables)  # clipping, weight decay, the step, the EMA, iterations + 1
        for total in accumulators:
            if total is not None:
                self.assign(total, ops.zeros(total.shape, dtype=total.dtype))
        self.assign_add(self._batches, 1)

    def apply(self, grads, trainable_variables=None):
        if self.accumulate_steps == 1:
            return super().apply(grads, trainable_variables)
        grads, trainable_variables = self._checked(grads, trainable_variables)
        last = ops.equal(ops.mod(self._batches + 1, self.accumulate_steps), 0)
        ops.cond(
            last,
            lambda: self.apply_accumulated(grads, trainable_variables),
            lambda: self.accumulate(grads, trainable_variables),
        )

    def get_config(self):
        config = super().get_config()
        config["accumulate_steps"] = self.accumulate_steps
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class AccumulatingAdamW(_Accumulation, keras.optimizers.AdamW):
    """``keras.optimizers.AdamW`` that updates once every ``accumulate_steps`` batches (:mod:`keras_vit.train.accumulation`)."""


@keras.saving.register_keras_serializable(package="keras_vit")
class AccumulatingSGD(_Accumulation, keras.optimizers.SGD):
    """``keras.optimizers.SGD`` that updates once every ``accumulate_steps`` batches (:mod:`keras_vit.train.accumulation`)."""


def accumulate_steps(optimizer):
    """Batches per update of ``optimizer`` (also inside a ``LossScaleOptimizer``): 1 unless it accumulates."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    return int(getattr(inner, "accumulate_steps", 1))


def batches_taken(optimizer):
    """Batches ``optimizer`` has taken: its updates times the batches per update, plus any summed since."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    return int(keras.ops.convert_to_numpy(getattr(inner, "batches", inner.iterations)))
