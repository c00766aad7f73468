"""NaFlex training: images of mixed shapes as patch dicts batched by sequence length (keras_vit.train.naflex_data),
through make_pipeline and `keras-vit train --naflex`, and a killed NaFlex run resumed from its backup."""

import contextlib
import io
import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import keras_vit
from keras_vit import saving
from keras_vit.inference import naflex_input
from keras_vit.layers import naflex_grid
from keras_vit.train import data, job, naflex_data, resumable
from keras_vit.train import config as config_lib
from keras_vit.train.naflex_data import NaFlexBatching

SHAPES = ((28, 28), (16, 48), (60, 20), (33, 47))  # 1:1, 1:3 wide, 3:1 tall, other


def _mixed(count=24, seed=0):
    rng = np.random.default_rng(seed)
    images = [rng.integers(0, 255, SHAPES[i % len(SHAPES)] + (3,)).astype("uint8") for i in range(count)]
    return images, tf.data.Dataset.from_generator(
        lambda: ((image, i % 3) for i, image in enumerate(images)),
        output_signature=(tf.TensorSpec((None, None, 3), tf.uint8), tf.TensorSpec((), tf.int32)))


def test_each_training_batch_has_one_budget_and_fills_its_tokens():
    _, ds = _mixed()
    naflex = NaFlexBatching(7, (8, 16))
    sizes = naflex_data.batch_sizes(naflex.budgets, 4)
    assert sizes == {8: 8, 16: 4}
    train = data.make_pipeline(ds, 28, 4, training=True, augment="inception", num_classes=3, seed=1, repeat=True, naflex=naflex)
    batches = list(train.take(8))
    seen = set()
    for x, y in batches:
        budget = x["patches"].shape[1]
        seen.add(budget)
        assert x["patches"].shape == (sizes[budget], budget, 7 * 7 * 3) and y.shape == (sizes[budget], 3)
        assert x["patch_coord"].shape == (sizes[budget], budget, 2) and x["patch_valid"].shape == (sizes[budget], budget)
        valid = x["patch_valid"].numpy()
        assert valid.any(axis=1).all() and (x["patches"].numpy()[~valid] == 0).all()
    assert seen == {8, 16}
    again = list(data.make_pipeline(ds, 28, 4, training=True, augment="inception", num_classes=3, seed=1, repeat=True,
                                    naflex=naflex).take(8))
    for (a, _), (b, _) in zip(batches, again):  # seeded: the same batches each time the pipeline is built
        np.testing.assert_allclose(a["patches"].numpy(), b["patches"].numpy(), rtol=0, atol=0)


def test_evaluation_keeps_each_aspect_ratio_at_the_largest_budget():
    images, ds = _mixed(8)
    test = data.make_pipeline(ds, 28, 8, num_classes=3, naflex=NaFlexBatching(7, (8, 16)))
    (x, y), = list(test)
    assert x["patches"].shape == (8, 16, 147)
    for image, valid, coords in zip(images, x["patch_valid"].numpy(), x["patch_coord"].numpy()):
        rows, cols = naflex_grid.grid_for(image.shape[:2], 7, 16)  # the NumPy rule: no crop, the image's own ratio
        assert valid.sum() == rows * cols and coords[valid].max(axis=0).tolist() == [rows - 1, cols - 1]
    expected = naflex_input.batch([image.astype("float32") for image in images], 7, 16)
    # the pipeline's resize in tf.data's graph against the same resize run eagerly: float32 round-off of pixels in
    # [0, 255] (tests/inference/test_naflex_input.py measured 3.7e-4 for such a pair, ~24 ulps)
    np.testing.assert_allclose(x["patches"].numpy(), expected["patches"], rtol=0, atol=1e-3)


def test_the_pipeline_cuts_by_the_model_s_grid_rule():
    """NaFlexBatching's rule reaches the tf.data map: a 1 x 1,000,000 strip under 2 patches of 4 (a scale timm's rule
    refuses) gets SigLIP 2's 1 x 2 grid, the patches of naflex_input.batch by that rule, in training and evaluation."""
    strip = np.random.default_rng(3).integers(0, 255, (1, 1_000_000, 3)).astype("uint8")
    ds = tf.data.Dataset.from_tensors((strip, 0))
    expected = naflex_input.batch([strip.astype("float32")], 4, 2, rule="siglip2")
    for training in (False, True):
        (x, _), = list(data.make_pipeline(ds, 16, 1, num_classes=3, training=training, drop_remainder=False,
                                          naflex=NaFlexBatching(4, (2,), "siglip2")).take(1))
        assert x["patch_valid"].numpy().sum() == 2
        np.testing.assert_allclose(x["patches"].numpy(), expected["patches"], rtol=0, atol=1e-3)  # as above
    with pytest.raises(tf.errors.InvalidArgumentError, match="No scale"):  # timm's rule, the default
        list(data.make_pipeline(ds, 16, 1, num_classes=3, naflex=NaFlexBatching(4, (2,))))
    with pytest.raises(ValueError, match="rule='bogus'"):
        NaFlexBatching(4, (2,), "bogus")


def test_naflex_refuses_batch_augmentations_and_strategies_by_name():
    _, ds = _mixed(8)
    with pytest.raises(ValueError, match="RandAugment, MixUp and CutMix"):
        data.make_pipeline(ds, 28, 4, training=True, num_classes=3, mixup=0.5, naflex=NaFlexBatching(7, (8,)))
    with pytest.raises(ValueError, match=r"--naflex .* Received: naflex=\(8, 16\), strategy='mirrored'"):
        job.TrainConfig(naflex=[16, 8], strategy="mirrored")
    with pytest.raises(ValueError, match="`naflex` must be positive ints"):
        job.TrainConfig(naflex=[0])
    from keras_vit.train import recipes

    with pytest.raises(ValueError, match="Model 'mnist' has no NaFlex form"):
        recipes.build_model("mnist", 10, naflex=True)


def test_train_flag_becomes_the_config():
    from keras_vit import cli
    from keras_vit.cli import train as train_command

    parser, _ = cli.build_parser()
    config = train_command.config_from_args(parser.parse_args(["train", "--model", "micro", "--naflex", "16,8"]))
    assert config.naflex == (8, 16) and "naflex" in config_lib.RUN_SETTINGS


def _folder(root):
    """Two classes of images of four shapes (no two of one size in a row), as a user's photos come."""
    rng = np.random.default_rng(0)
    for c, name in enumerate(("cat", "dog")):
        (root / name).mkdir(parents=True)
        for i in range(10):
            h, w = SHAPES[(i + c) % len(SHAPES)]
            Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(root / name / f"{i:03d}.png")
    return str(root)


def _run(config):
    stream = io.StringIO()
    with contextlib.redirect_stdout(stream):
        metrics = job.run(config)
    return metrics, stream.getvalue()


def test_stored_budgets_are_the_run_s_own():
    """The backup stores the budgets as JSON (a list): the same budgets given again are the stored run's."""
    stored = json.loads(json.dumps(job.TrainConfig(model="micro", naflex=(8, 16)).resolved().settings()))
    resumed, taken = config_lib.reconcile(job.TrainConfig(naflex=[16, 8]), stored, where="b")
    assert resumed.naflex == (8, 16) and "naflex" not in taken
    resumed, taken = config_lib.reconcile(job.TrainConfig(), stored, where="b")
    assert resumed.naflex == (8, 16) and taken["naflex"] == [8, 16]
    with pytest.raises(ValueError, match=r"--naflex: stored \[8, 16\], given \(8, 32\)"):
        config_lib.reconcile(job.TrainConfig(naflex=(8, 32)), stored, where="b")


@pytest.mark.slow
def test_killed_naflex_run_resumes_with_its_budgets(tmp_path, monkeypatch):
    """A NaFlex run on images of mixed shapes, killed after step 4 of 6, resumed without its flags."""
    dataset, out = _folder(tmp_path / "pets"), tmp_path / "run"
    settings = dict(model="micro", naflex=(8, 16), epochs=2, steps_per_epoch=3, batch_size=4, save_freq=1)

    def interrupted(model, train, *, callbacks, **options):
        class Kill(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                if int(self.model.optimizer.iterations.numpy()) == 4:
                    raise KeyboardInterrupt("simulated kill")

        return resumable.fit_resumable(model, train, callbacks=[*callbacks, Kill()], **options)

    with monkeypatch.context() as patch:
        patch.setattr(job, "fit_resumable", interrupted)
        with pytest.raises(KeyboardInterrupt):
            _run(job.TrainConfig(dataset=dataset, output=str(out), verbose=0, tensorboard=False, **settings))
    assert not (out / "model.keras").exists()

    metrics, printed = _run(job.TrainConfig(dataset=dataset, output=str(out), verbose=0, tensorboard=False))
    assert "resuming with the stored settings: " in printed and "naflex=[8, 16]" in printed
    assert "NaFlex, patch budgets 8, 16" in printed
    assert metrics["resumed_from_step"] == 4 and metrics["steps"] == 6 and metrics["naflex"] == [8, 16]
    model = keras_vit.load_model(out / "model.keras")
    assert model.vit_config.input_mode == "naflex" and saving.read_metadata(out / "model.keras")["naflex"] == [8, 16]
    image = np.random.default_rng(3).uniform(0, 255, (20, 60, 3)).astype("float32")
    probabilities = np.asarray(model(naflex_input.batch([image], 7, 16)))
    assert probabilities.shape == (1, 2) and abs(float(probabilities.sum()) - 1.0) < 1e-5
