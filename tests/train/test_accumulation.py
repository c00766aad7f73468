"""Gradient accumulation and the weight EMA: the update of one large batch, the EMA's definition, resuming mid-update."""

import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_vit.train import accumulation
from keras_vit.train import ema
from keras_vit.train import job
from keras_vit.train import model_setup
from keras_vit.train import optimizers
from keras_vit.train import resumable
from keras_vit.train.backup import Backup
from helpers import images, small_classifier, tiny_vit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _data(n, seed=0):
    x = images(n, 32, seed=seed)
    y = np.eye(5, dtype="float32")[np.arange(n) % 5]
    return x, y


def _one_block():
    """The tiny ViT with one transformer block: every kind of variable (embeddings, norms, attention, MLP, head),
    traced in a quarter less time than two blocks."""
    return tiny_vit(num_layers=1)


def _model(optimizer, seed=0, build=tiny_vit, slots=True):
    """Compiled; ``slots``: the optimizer built now, as fit_resumable builds it (model.fit then traces its step once,
    not twice); ``slots=False`` leaves it to Keras, which builds it inside the first trace, as a bare model.fit does."""
    keras.utils.set_random_seed(seed)
    model = build()  # no dropout: the same batches give the same gradients
    model_setup.compile_model(model, optimizer, label_smoothing=0.0)
    if slots:
        resumable.build_optimizer_slots(model)
    return model


def _weights(model):
    return [np.asarray(v) for v in model.trainable_variables]


def _averages(model):
    """The optimizer's moving averages, read by putting them into a copy of the weights."""
    raw = _weights(model)
    model.optimizer.finalize_variable_values(model.trainable_variables)
    averages = _weights(model)
    for variable, value in zip(model.trainable_variables, raw):
        variable.assign(value)
    return averages


CLIPNORM = 0.5  # below the first update's gradient norm (asserted), so the update of 16 is a clipped one


@pytest.mark.parametrize("name", optimizers.OPTIMIZERS)
def test_accumulated_batches_give_the_update_of_one_large_batch(name):
    """4 batches of 4 per update == 1 batch of 16, over 2 updates: warmup + cosine, clipping, weight decay, momentum."""
    x, y = _data(32)
    settings = dict(name=name, weight_decay=0.05, clipnorm=CLIPNORM)

    def train(batch_size, accumulate):
        model = _model(optimizers.build_optimizer(0.01, 4, 1, accumulate=accumulate, **settings), build=_one_block)
        start = _weights(model)  # both models start from these (the same seed)
        with tf.GradientTape() as tape:  # the first update's gradient, of the first 16 examples
            loss = model.compute_loss(x=x[:16], y=y[:16], y_pred=model(x[:16], training=True))
        norm = float(tf.linalg.global_norm(tape.gradient(loss, model.trainable_variables)))
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)
        model.fit(dataset, epochs=1, verbose=0, shuffle=False)
        return model, start, norm

    (accumulated, fresh, norm), (large, _, _) = train(4, accumulate=4), train(16, accumulate=1)
    # clipping must act for the comparison to test it (clipnorm 1.0 never did: the norm is 0.8-0.95)
    assert norm > 1.3 * CLIPNORM, norm
    assert isinstance(accumulated.optimizer, accumulation.AccumulatingAdamW if name == "adamw" else accumulation.AccumulatingSGD)
    assert int(accumulated.optimizer.iterations.numpy()) == int(large.optimizer.iterations.numpy()) == 2
    assert accumulation.batches_taken(accumulated.optimizer) == 8
    # the same learning rate: the schedule counts updates (at step 2 of 4, past the 1-step warmup)
    np.testing.assert_allclose(float(accumulated.optimizer.learning_rate), float(large.optimizer.learning_rate), rtol=1e-6)
    for a, b in zip(_weights(accumulated), _weights(large)):
        # float32: a mean of 4 means of 4 is not summed in the order of one mean of 16, and AdamW divides by
        # sqrt(v), which amplifies that on near-zero gradients: the largest difference seen was 1.1e-8 (AdamW;
        # 3.5e-10 with SGD; 2.3e-8 and 4e-10 with two blocks). 1e-7 is 10x that and 400x below the median weight
        # change of these 2 updates (4e-5), so a schedule, clipping or decay applied per batch instead of per
        # update fails
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    changes = np.concatenate([np.abs(a - w0).ravel() for a, w0 in zip(_weights(accumulated), fresh)])
    assert changes.max() > 1e-3  # it trained


class _Record(keras.callbacks.Callback):
    """The weights after every batch, and at the start of every epoch."""

    def __init__(self):
        super().__init__()
        self.after, self.epoch_start = [], []

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch_start.append(_weights(self.model))

    def on_train_batch_end(self, batch, logs=None):
        self.after.append(_weights(self.model))


def test_ema_moves_once_per_update_by_its_definition():
    """ema = w after the first update, then ema = d * ema + (1 - d) * w after each update, never after a summed batch."""
    decay, per_update, updates = 0.5, 2, 3
    x, y = _data(4 * per_update * updates)
    model = _model(optimizers.build_optimizer(0.05, 10, 0, name="sgd", accumulate=per_update, ema=decay), build=small_classifier)
    fresh = _weights(model)
    record = _Record()
    model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(4), epochs=1, verbose=0, shuffle=False, callbacks=[record])
    assert int(model.optimizer.iterations.numpy()) == updates
    for before, summed, updated in zip([fresh] + record.after[1::2], record.after[0::2], record.after[1::2]):
        for w0, w1 in zip(before, summed):
            np.testing.assert_array_equal(w1, w0)  # exact on purpose: a summed batch assigns nothing to the weights
        assert max(float(np.max(np.abs(w2 - w1))) for w1, w2 in zip(summed, updated)) > 1e-4  # its update moves them

    expected = record.after[1]  # after update 1
    for after in record.after[3::2]:  # updates 2 and 3
        expected = [decay * e + (1 - decay) * w for e, w in zip(expected, after)]
    per_batch = record.after[0]  # what an EMA moved after every batch would hold
    for after in record.after[1:]:
        per_batch = [decay * e + (1 - decay) * w for e, w in zip(per_batch, after)]
    averages = _averages(model)
    for got, want in zip(averages, expected):
        # float32 of a few multiply-adds in another order than NumPy's float32: a few ulps
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    gap = max(float(np.max(np.abs(g - p))) for g, p in zip(averages, per_batch))
    assert gap > 1e-4, gap  # the test tells the two apart


def test_validation_sees_the_average_and_training_goes_on_from_the_raw_weights():
    x, y = _data(16)
    model = _model(optimizers.build_optimizer(0.05, 10, 0, name="sgd", ema=0.5), build=small_classifier, slots=False)  # Keras' own build
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    validation = tf.data.Dataset.from_tensor_slices((x[:8], y[:8])).batch(8)
    record = _Record()
    history = model.fit(train, epochs=2, verbose=0, shuffle=False, validation_data=validation,
                        callbacks=[ema.EMAValidation(), record])
    for start, last in zip(record.epoch_start[1], record.after[3]):
        np.testing.assert_array_equal(start, last)  # exact on purpose: the raw weights are put back as they were
    ema_loss = model.evaluate(validation, verbose=0, return_dict=True)["loss"]  # model.fit ends with the average in
    for variable, value in zip(model.trainable_variables, record.after[-1]):
        variable.assign(value)
    raw_loss = model.evaluate(validation, verbose=0, return_dict=True)["loss"]
    # the same weights and batch: equal up to float32 summation in the two evaluations
    assert history.history["val_loss"][-1] == pytest.approx(ema_loss, rel=1e-5)
    assert abs(raw_loss - ema_loss) > 1e-5  # and it is not the raw weights' loss


def _resumable_run(output, *, interrupt_at=None):
    """2 epochs of 2 updates of 3 batches (AdamW, EMA), a backup every 4 batches: the first lands mid-update."""
    x, y = _data(4)
    model = _model(optimizers.build_optimizer(0.01, 4, 1, accumulate=3, ema=0.5), build=small_classifier)
    # every batch holds the same images: a resumed run, which restarts the pipeline, sees what the first run would have
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(4).repeat()
    callbacks = [Backup(str(output / "backup"), save_freq=4)]

    class Interrupt(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if accumulation.batches_taken(self.model.optimizer) == interrupt_at:
                raise KeyboardInterrupt("simulated kill")

    if interrupt_at:
        callbacks.append(Interrupt())
    history = resumable.fit_resumable(model, train, epochs=2, steps_per_epoch=2, callbacks=callbacks, verbose=0)
    return model, history


def test_resume_mid_accumulation_restores_the_sums_and_the_count(tmp_path):
    straight, _ = _resumable_run(tmp_path / "straight")
    assert int(straight.optimizer.iterations.numpy()) == 4 and accumulation.batches_taken(straight.optimizer) == 12

    with pytest.raises(KeyboardInterrupt):
        _resumable_run(tmp_path / "killed", interrupt_at=5)
    with open(tmp_path / "killed" / "backup" / "training_metadata.json") as f:
        assert json.load(f) == {"epoch": 0, "iterations": 1, "batches": 4}  # 1 update and 1 batch summed

    restored = _model(optimizers.build_optimizer(0.01, 4, 1, accumulate=3, ema=0.5), build=small_classifier)
    backup = Backup(str(tmp_path / "killed" / "backup"))
    backup.set_model(restored)
    assert backup.restore() == 4 and int(restored.optimizer.iterations.numpy()) == 1
    sums = [v for v in restored.optimizer.variables if v.name.endswith("_accumulator")]
    assert len(sums) == len(restored.trainable_variables) and any(np.any(np.asarray(v) != 0) for v in sums)

    resumed, history = _resumable_run(tmp_path / "killed")
    assert history["resumed_from_step"] == 1 and len(history["loss"]) == 2  # the rest of epoch 0, then epoch 1
    assert accumulation.batches_taken(resumed.optimizer) == 12 and int(resumed.optimizer.iterations.numpy()) == 4
    for a, b in zip(_weights(resumed) + _averages(resumed), _weights(straight) + _averages(straight)):
        # the same operations on the same values; 1e-6 leaves room for a different thread split of the reductions
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_build_optimizer_checks_and_serialises_accumulation_and_ema():
    model = tiny_vit()
    optimizer = optimizers.build_optimizer(1e-3, 100, 10, accumulate=4, ema=0.999, layer_decay=0.75, model=model)
    assert isinstance(optimizer, optimizers.LayerDecayAdamW) and optimizer.accumulate_steps == 4
    assert optimizer.use_ema and optimizer.ema_momentum == pytest.approx(0.999)  # stored as a Python float
    again = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert type(again) is optimizers.LayerDecayAdamW and again.accumulate_steps == 4 and again.use_ema
    plain = optimizers.build_optimizer(1e-3, 100, 10, name="sgd")
    assert type(plain) is keras.optimizers.SGD and accumulation.accumulate_steps(plain) == 1
    with pytest.raises(ValueError, match="accumulate=0"):
        optimizers.build_optimizer(1e-3, 100, accumulate=0)
    with pytest.raises(ValueError, match="ema=1.0"):
        optimizers.build_optimizer(1e-3, 100, ema=1.0)
    with pytest.raises(ValueError, match="accumulate=0"):
        job.TrainConfig(model="micro", accumulate=0).resolved()
    with pytest.raises(ValueError, match="ema=1.5"):
        job.TrainConfig(model="micro", ema=1.5).resolved()


def test_train_flags():
    from keras_vit import cli
    from keras_vit.cli import train as train_command

    parser, _ = cli.build_parser()
    config = train_command.config_from_args(parser.parse_args(["train", "--accumulate", "4", "--ema"]))
    assert config.accumulate == 4 and config.ema == optimizers.EMA_DECAY == 0.9998
    config = train_command.config_from_args(parser.parse_args(["train", "--ema", "0.99", "--epochs", "3"]))
    assert config.ema == 0.99 and config.accumulate is None and config.epochs == 3  # None: not given
    assert config.resolved().accumulate == 1


@pytest.mark.slow
@pytest.mark.parametrize("strategy", job.STRATEGIES)
def test_job_accumulates_and_saves_the_average(tmp_path, strategy):
    """The one job with --accumulate 2 --ema: steps in updates; model.keras holds the average, not the raw weights."""
    import keras_vit

    out = tmp_path / "run"
    metrics = job.run(job.TrainConfig(
        model="micro", epochs=2, steps_per_epoch=2, batch_size=16, accumulate=2, ema=0.9, strategy=strategy,
        validation_fraction=0.1, tensorboard=False, verbose=0, output=str(out),
    ))
    assert metrics["steps"] == 4 and metrics["accumulate"] == 2 and metrics["ema"] == 0.9
    assert metrics["validation_accuracy"] is not None and set(metrics) == set(job.METRICS)
    # model.keras has no optimizer (the deliverable); checkpoint.weights.h5 has the last epoch's raw weights and
    # the optimizer state with its averages: the same optimizer, loaded with them, gives model.keras' weights
    weights = _weights(keras_vit.load_model(out / "model.keras"))
    raw = keras_vit.load_model(out / "model.keras")
    model_setup.compile_model(raw, optimizers.build_optimizer(1e-3, 4, 0, accumulate=2, ema=0.9), 0.1)
    raw.optimizer.build(raw.trainable_variables)
    raw.load_weights(out / "checkpoint.weights.h5")
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(weights, _weights(raw))) > 1e-6
    raw.optimizer.finalize_variable_values(raw.trainable_variables)
    for w, average in zip(weights, _weights(raw)):
        np.testing.assert_array_equal(w, average)  # exact on purpose: model.keras holds the average's values
    assert not (out / "backup").exists() and not (out / "worker-0" / "backup").exists()


MIRRORED = textwrap.dedent(
    """
    import sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    import numpy as np
    from keras_vit.train import accumulation, distribute, model_setup, optimizers

    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 6)).astype("float32")
    y = np.eye(3, dtype="float32")[rng.integers(0, 3, 64)]

    def train(name, batch_size, accumulate):
        strategy = tf.distribute.MirroredStrategy()
        keras.utils.set_random_seed(0)
        with strategy.scope():
            model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="gelu"),
                                      keras.layers.Dense(3, activation="softmax")])
            optimizer = optimizers.build_optimizer(0.1, 4, 1, name=name, accumulate=accumulate, ema=0.5)
            model_setup.compile_model(model, optimizer, 0.0)

        def dataset_fn(context):
            per_replica = context.get_per_replica_batch_size(batch_size)
            return tf.data.Dataset.from_tensor_slices((x, y)).batch(per_replica).repeat()

        distribute.DistributedTrainer(model, strategy, batch_size).fit(dataset_fn, epochs=1, steps_per_epoch=4 * accumulate)
        assert strategy.num_replicas_in_sync == 2 and int(optimizer.iterations.numpy()) == 4
        raw = [np.asarray(v) for v in model.trainable_variables]
        optimizer.finalize_variable_values(model.trainable_variables)
        return raw + [np.asarray(v) for v in model.trainable_variables]

    for name in ("sgd", "adamw"):
        for a, b in zip(train(name, 8, 2), train(name, 16, 1)):
            # float32 sums in another order: the largest difference seen was 1.5e-7 on weights up to 0.9, within
            # rtol 1e-6; a per-batch schedule or clipping would move them by ~1e-3 (lr 0.1)
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    """
)
# a process of its own: TensorFlow reuses collective instance keys across MirroredStrategy objects, and
# models of other shapes in one process then fail with "Shape mismatch in the collective instance"
MIRRORED_JOB = textwrap.dedent(
    """
    import sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from keras_vit import cli
    sys.exit(cli.main(["train", "--strategy", "mirrored", "--model", "micro", "--epochs", "1", "--steps-per-epoch", "2",
                       "--batch-size", "16", "--accumulate", "2", "--ema", "0.9", "--progress", "0", "--no-tensorboard",
                       "--output", sys.argv[1]]))
    """
)


def _two_devices(script, *args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), CUDA_VISIBLE_DEVICES="")
    env.pop("TF_CONFIG", None)
    result = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, timeout=540)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.slow  # make test-slow: over 9 s on 2 cores; the same path is tested fast elsewhere
def test_mirrored_strategy_accumulates_on_two_cpu_devices():
    """model.fit cannot accumulate under MirroredStrategy: DistributedTrainer does, with the big batch's update."""
    _two_devices(MIRRORED)


@pytest.mark.slow
def test_mirrored_train_command_accumulates(tmp_path):
    out = tmp_path / "mirrored"
    _two_devices(MIRRORED_JOB, str(out))
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["replicas"] == 2 and metrics["steps"] == 2 and metrics["accumulate"] == 2 and metrics["ema"] == 0.9
