"""The training recipe: optimizers and schedules, model switches, callbacks and resumable fit, fine-tuning from a checkpoint."""

import csv
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit import saving
from keras_vit.train import data
from keras_vit.train import model_setup
from keras_vit.train import optimizers
from keras_vit.train import recipes
from keras_vit.train import resumable
from keras_vit.train import run_files
from helpers import images, save_npz, small_classifier, tiny_vit, vit_checkpoint


def _dataset(n=32, num_classes=5, size=32, seed=0):
    x = images(n, size, seed=seed).astype("uint8")
    y = (np.arange(n) % num_classes).astype("int32")
    return tf.data.Dataset.from_tensor_slices((x, y))


def test_warmup_cosine_schedule():
    schedule = optimizers.warmup_cosine(1e-3, total_steps=100, warmup_steps=10)
    lr = [float(schedule(s)) for s in (0, 5, 10, 55, 100)]
    # lr[0] exactly 0: the warmup is target * step / warmup_steps and 0 times anything is 0. The others are
    # float32 values read back as Python floats: float32 keeps ~7 digits (2^-24 = 6e-8 relative per
    # rounding), so rel=1e-6 leaves room for the few roundings of the warmup arithmetic
    assert lr[0] == 0.0 and lr[1] == pytest.approx(5e-4, rel=1e-6) and lr[2] == pytest.approx(1e-3, rel=1e-6)
    assert lr[3] == pytest.approx(5e-4, rel=1e-3) and lr[4] == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError, match="warmup_steps=100, total_steps=100"):
        optimizers.warmup_cosine(1e-3, 100, 100)


def test_a_warm_up_longer_than_the_run_is_cut_with_a_warning():
    """1 epoch against the recipe's 2-epoch warm-up: the rate rose all run, never decayed, and nothing said so."""
    import warnings

    with pytest.warns(UserWarning, match=r"warm-up of 2 epoch\(s\) \(124 steps\) does not end before the run's 1 epoch\(s\) "
                      r"\(62 steps\) do: .* never decays\. Pass fewer --warmup-epochs or more --epochs"):
        assert optimizers.plan_steps(4000, 64, epochs=1, warmup_epochs=2) == (62, 62, 61)
    with pytest.warns(UserWarning, match=r"warm-up of 1 epoch\(s\) \(62 steps\)"):  # as long as the run: no decay either
        optimizers.plan_steps(4000, 64, epochs=1, warmup_epochs=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert optimizers.plan_steps(4000, 64, epochs=3, warmup_epochs=2) == (62, 186, 124)
    with pytest.raises(ValueError, match="warmup_steps=62, total_steps=62"):  # build_optimizer refuses it outright
        optimizers.build_optimizer(1e-3, 62, 62)


def test_weight_decay_skips_biases_norms_and_embeddings():
    model = tiny_vit()
    optimizer = optimizers.build_optimizer(1e-3, 100, 10, weight_decay=0.1)
    assert optimizer.global_clipnorm == 1.0
    decayed = {v.path: optimizer._use_weight_decay(v) for v in model.trainable_variables}
    assert decayed["transformer_block_0/mlp_dense_1/kernel"] and decayed["head/kernel"]
    assert decayed["patch_encoder/projection/kernel"]
    for path, used in decayed.items():
        leaf = path.split("/")[-1]
        if leaf in ("bias", "gamma", "beta", "class_token", "position_embedding"):
            assert not used, path
    # and it is really skipped when applied: a zero gradient leaves a bias alone but shrinks a kernel
    optimizer = optimizers.build_optimizer(0.1, 100, 0, name="sgd", weight_decay=0.5, momentum=0.0)
    head = model.get_layer("head")
    head.kernel.assign(np.ones(head.kernel.shape))
    head.bias.assign(np.ones(head.bias.shape))
    optimizer.apply_gradients([(tf.zeros(head.kernel.shape), head.kernel), (tf.zeros(head.bias.shape), head.bias)])
    # exact on purpose: without decay the bias moves by lr * 0 = 0, so 1.0 stays exactly 1.0 (decay would
    # make it 0.95)
    assert np.all(np.asarray(head.kernel) < 1.0) and np.all(np.asarray(head.bias) == 1.0)


def test_layer_decay_scales_each_layers_step():
    model = tiny_vit()
    multipliers = optimizers.layer_decay_multipliers(model, 0.5)
    # exact on purpose, here and in test_build_model_names: powers of 0.5 are exact in binary floating point
    assert multipliers["head"] == 1.0 and multipliers["encoder_norm"] == 1.0
    assert multipliers["transformer_block_1"] == 0.5 and multipliers["transformer_block_0"] == 0.25
    assert multipliers["patch_encoder"] == 0.125
    optimizer = optimizers.build_optimizer(0.1, 100, 0, name="sgd", weight_decay=0.0, momentum=0.0, layer_decay=0.5, model=model, clipnorm=None)
    assert isinstance(optimizer, optimizers.LayerDecaySGD)
    variables = [model.get_layer(n).weights[0] for n in ("head", "transformer_block_1", "patch_encoder")]
    before = [np.asarray(v).copy() for v in variables]
    optimizer.apply_gradients([(tf.ones(v.shape), v) for v in variables])
    steps = [float(np.mean(b - np.asarray(v))) for b, v in zip(before, variables)]
    np.testing.assert_allclose(steps, [0.1, 0.05, 0.0125], rtol=1e-4)
    config = optimizer.get_config()
    assert keras.optimizers.deserialize(keras.optimizers.serialize(optimizer)).lr_multipliers == config["lr_multipliers"]
    with pytest.raises(ValueError, match="layer_decay=1.5"):
        optimizers.layer_decay_multipliers(model, 1.5)


def test_freeze_embedding_and_first_blocks():
    model = tiny_vit()
    frozen = model_setup.freeze(model, 1)
    assert frozen == ["patch_encoder", "transformer_block_0"]
    paths = {v.path.split("/")[0] for v in model.trainable_variables}
    assert paths == {"transformer_block_1", "encoder_norm", "head"}
    # layer decay still counts the frozen block: block 1 of 2 is one below the head
    assert optimizers.layer_decay_multipliers(model, 0.5) == {"transformer_block_1": 0.5, "encoder_norm": 1.0, "head": 1.0}
    with pytest.raises(ValueError, match="num_blocks=3"):
        model_setup.freeze(tiny_vit(), 3)


def _cpu_has_native_bfloat16():
    """Whether /proc/cpuinfo lists avx512_bf16 or amx_bf16 (read here, independently of keras_vit.hardware)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:  # not Linux: nothing known, no native bfloat16 assumed
        return False
    return bool({"avx512_bf16", "amx_bf16"} & set(flags))


def test_set_precision():
    try:
        # "mixed" depends on the CPU: bfloat16 where it is native (AVX512_BF16 or AMX), float32 with a one-line
        # notice elsewhere (every case with mocked hardware: test_hardware.py); gpus=[]: this CPU decides
        native = _cpu_has_native_bfloat16()
        notices = []
        assert model_setup.set_precision("mixed", gpus=[], notify=notices.append) == ("mixed_bfloat16" if native else "float32")
        assert len(notices) == (0 if native else 1)
        # the rest asks for bfloat16 by name, which runs on every CPU (emulated where it is not native: slower,
        # not wrong, and this is one image through a tiny model)
        assert model_setup.set_precision("mixed_bfloat16") == "mixed_bfloat16"
        model = tiny_vit()
        assert model.get_layer("transformer_block_0").compute_dtype == "bfloat16"
        assert model(images(1), training=False).dtype == "float32"
        with pytest.raises(ValueError, match="fp8"):
            model_setup.set_precision("fp8")
    finally:
        keras.mixed_precision.set_global_policy("float32")


def _run(output, epochs, steps, interrupt_at=None, seed=0, verbose=0, ema=None, model_fn=small_classifier, lr=1e-3):
    keras.utils.set_random_seed(seed)
    model = model_fn()
    optimizer = optimizers.build_optimizer(lr, epochs * steps, 2, ema=ema)
    model_setup.compile_model(model, optimizer, 0.1)
    def train():  # a builder, as the training job passes it
        return data.make_pipeline(_dataset(), 32, 8, training=True, num_classes=5, seed=seed, repeat=True)
    callbacks = resumable.make_callbacks(str(output), save_freq=2, tensorboard=False)

    class Interrupt(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == interrupt_at:
                raise KeyboardInterrupt("simulated kill")

    if interrupt_at:
        callbacks.append(Interrupt())
    history = resumable.fit_resumable(model, train, epochs=epochs, steps_per_epoch=steps, callbacks=callbacks, verbose=verbose)
    return model, history


def test_interrupted_run_resumes_mid_epoch_with_the_same_step_count(tmp_path, capsys):
    epochs, steps = 3, 4
    reference, _ = _run(tmp_path / "straight", epochs, steps)
    assert int(reference.optimizer.iterations.numpy()) == epochs * steps

    out = tmp_path / "killed"
    with pytest.raises(KeyboardInterrupt):
        _run(out, epochs, steps, interrupt_at=7)  # in epoch 1, after step 3 of 4
    with open(out / "backup" / "training_metadata.json") as f:
        assert json.load(f) == {"epoch": 1, "iterations": 6}  # last backup: every 2 steps
    log_before = (out / "log.csv").read_text()
    assert log_before.count("\n") == 2  # header + epoch 0
    assert not [p for p in os.listdir(out / "backup") if ".tmp-" in p]  # temporaries are .<name>.tmp-<pid>-<random>

    capsys.readouterr()
    model, history = _run(out, epochs, steps, verbose=2)  # the log a file gets: one line per epoch
    assert history["resumed_from_step"] == 6
    log = capsys.readouterr().out
    assert "\r" not in log and "\x1b" not in log and "\b" not in log
    # the resumed epoch is named out of the run's epochs, not out of the one-epoch fit() that finishes it
    assert [line for line in log.splitlines() if line.startswith("Epoch ")] == ["Epoch 2/3", "Epoch 3/3"], log
    assert int(model.optimizer.iterations.numpy()) == epochs * steps
    assert len(history["loss"]) == 2  # the rest of epoch 1, then epoch 2
    assert isinstance(history, keras.callbacks.History) and history.model is model  # what model.fit returns
    assert history.epoch == [1, 2] and len(history.history["loss"]) == 2 and history.history["loss"] == history["loss"]
    assert (history.resumed_from_step, history.stopped) == (6, False)
    assert history.params["epochs"] == epochs and history.params["steps"] == steps
    rows = list(csv.DictReader(open(out / "log.csv")))
    assert [r["epoch"] for r in rows] == ["0", "1", "2"]
    assert (out / "log.csv").read_text().startswith(log_before)  # nothing written before is lost
    assert (out / "checkpoint.weights.h5").exists() and not (out / "backup").exists()
    # the same run: the resumed epoch went on with the batches the uninterrupted run took (it replayed the stream's
    # first ones, and every later epoch had another shuffle)
    for got, want in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_a_run_with_ema_killed_twice_is_the_uninterrupted_run():
    """The second kill falls after the backup that ends the resumed epoch's fit(): written once fit() had put the
    average into the model, it held the average as the raw weights (3e-2 off at the end)."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        reference, _ = _run(os.path.join(folder, "straight"), 3, 4, ema=0.9)
        out = os.path.join(folder, "killed")
        for kill in (7, 9):  # backups at steps 6 and 8: 8 ends the resumed epoch 1
            with pytest.raises(KeyboardInterrupt):
                _run(out, 3, 4, interrupt_at=kill, ema=0.9)
        model, _ = _run(out, 3, 4, ema=0.9)
    for got, want in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_save_model_keeps_class_names_and_writes_atomically(tmp_path):
    model = tiny_vit()
    path = tmp_path / "run" / "model.keras"
    saving.save_model(model, path, metadata={"class_names": ["a", "b", "c", "d", "e"]})
    loaded, metadata = keras_vit.load_model(path), saving.read_metadata(path)
    assert metadata["class_names"] == ["a", "b", "c", "d", "e"]
    x = images(2)
    np.testing.assert_allclose(loaded(x), model(x), atol=1e-6)
    assert os.listdir(path.parent) == ["model.keras"]
    run_files.write_json(tmp_path / "run" / "metrics.json", {"test_accuracy": 0.5})
    assert json.loads((tmp_path / "run" / "metrics.json").read_text()) == {"test_accuracy": 0.5}


def test_fine_tune_from_checkpoint_at_higher_resolution(tmp_path):
    """Sec. 3.2: new zero head, 2-D interpolated position embeddings."""
    path = save_npz(tmp_path / "ckpt.npz", vit_checkpoint(patch_size=7, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=5, grid=(2, 2)))
    model = recipes.build_model("micro", num_classes=10, image_size=28, weights=path)
    report = model.load_report
    assert "Transformer/posembed_input/pos_embedding" in report.resized
    assert report.resized["Transformer/posembed_input/pos_embedding"][1] == (1, 17, 32)
    assert set(report.skipped) == {"head/kernel", "head/bias"}
    assert not np.any(np.asarray(model.get_layer("head").kernel))
    block = model.get_layer("transformer_block_1").mlp_dense_2.kernel
    np.testing.assert_allclose(np.asarray(block), vit_checkpoint(patch_size=7, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=5, grid=(2, 2))["Transformer/encoderblock_1/MlpBlock_3/Dense_1/kernel"])
    with pytest.raises(ValueError, match="conv stem"):
        recipes.build_model("mnist", 10, weights=path)
    # a head of the same number of classes is zeroed too: its classes are not the new data's (the paper's zero head)
    same = recipes.build_model("micro", num_classes=5, image_size=28, weights=path)
    assert not any(np.any(np.asarray(v)) for v in same.get_layer("head").weights)
    assert "head: the checkpoint's zeroed for the new classes (fine-tuning)" in str(same.load_report)


def test_fine_tuning_a_distilled_model_zeroes_both_heads(tmp_path):
    """--weights zeroed `head` only: a distilled model's output averages its two heads, so half kept the old classes."""
    import keras_vit

    source = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64,
                           num_classes=5, distillation_token=True)
    for name in ("head", "head_distillation"):
        for variable in source.get_layer(name).weights:
            variable.assign(np.full(variable.shape, 0.3, "float32"))
    path = str(tmp_path / "distilled.keras")
    keras_vit.save_model(source, path)
    model = recipes.build_model("pretrained", 5, weights=path)
    assert not any(np.any(np.asarray(v)) for name in ("head", "head_distillation") for v in model.get_layer(name).weights)


def test_build_model_names():
    assert recipes.build_model("micro", 10).output_shape == (None, 10)
    model = recipes.build_model("mnist", 3)
    assert model.get_layer("stem_conv_1").strides == (2, 2) and model.output_shape == (None, 3)
    assert optimizers.layer_decay_multipliers(model, 0.5)["stem_conv_0"] == 0.5 ** 5
    assert {"B/16", "Ti/16", "R50+B/16", "mnist", "tiny"} <= set(recipes.model_names())
    with pytest.raises(ValueError, match="Unknown model.*'X/99'"):
        recipes.build_model("X/99", 10)


def test_short_real_run_on_offline_mnist_learns(tmp_path):
    """A few hundred steps of the micro ViT on the offline MNIST subset: far above 10 % chance."""
    keras.utils.set_random_seed(0)
    dataset = data.load_mnist()
    model = recipes.build_model("micro", 10)
    steps = 300
    model_setup.compile_model(model, optimizers.build_optimizer(3e-3, steps, 30), label_smoothing=0.0)
    train = data.make_pipeline(dataset.train, 28, 64, training=True, augment="none", num_classes=10, seed=0, repeat=True)
    model.fit(train, steps_per_epoch=steps, epochs=1, verbose=0)
    result = model.evaluate(data.make_pipeline(dataset.test, 28, 500, num_classes=10), verbose=0, return_dict=True)
    assert result["accuracy"] > 0.6, result


def _masked_model():
    """A classifier with a stochastic-depth branch and dropout: masks drawn from seed generators."""
    from keras_vit.layers import StochasticDepth

    inputs = keras.Input((32, 32, 3))
    x = keras.layers.Dense(16)(keras.layers.Flatten()(keras.layers.Rescaling(1 / 255)(inputs)))
    x = x + StochasticDepth(0.5, seed=1, name="drop_path")(keras.layers.Dense(16)(x))
    x = keras.layers.Dropout(0.5, seed=2)(x)
    return keras.Model(inputs, keras.layers.Dense(5, activation="softmax", name="head")(x))


def test_a_resumed_run_draws_the_uninterrupted_runs_drop_path_and_dropout_masks(tmp_path):
    """``model.save_weights`` leaves the layers' seed generators out, so a run resumed from a backup drew its masks
    from the generators' first states again: every ``keras-vit train`` recipe but fine-tuning's has drop_path=0.1, and
    a resumed CLI run ended 1e-2 off the uninterrupted run's weights (exact with --drop-path 0). Backup's
    seeds-BATCHES.npz keeps them."""
    run = dict(epochs=3, steps=4, model_fn=_masked_model, lr=1e-2)
    reference, _ = _run(tmp_path / "straight", **run)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "killed", interrupt_at=7, **run)  # the backup of step 6
    assert sorted(p.name for p in (tmp_path / "killed" / "backup").glob("seeds-*.npz")) == ["seeds-6.npz"]
    model, _ = _run(tmp_path / "killed", **run)
    for got, want in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert not (tmp_path / "killed" / "backup").exists()
