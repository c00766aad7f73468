"""The one training job (keras_vit.train.job) for every strategy, and `keras-vit train` on top of it."""

import argparse
import contextlib
import csv
import io
import json
import os

import pytest

import keras_vit
from keras_vit import saving
from keras_vit.train import job
from helpers import image_folder, save_npz, vit_checkpoint


def _micro_checkpoint(tmp_path):
    return save_npz(tmp_path / "ckpt.npz", vit_checkpoint(patch_size=7, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=5, grid=(2, 2)))


def _run_captured(config):
    """``job.run(config)`` with stdout captured in a stream that is not a terminal; returns (metrics, printed text)."""
    stream = io.StringIO()
    with contextlib.redirect_stdout(stream):
        metrics = job.run(config)
    return metrics, stream.getvalue()


def assert_readable_log(text, epochs):
    """Issue 11: a log file or pipe gets plain lines, one per epoch with its metrics, no progress bar."""
    assert "\r" not in text and "\x1b" not in text and "\b" not in text, repr(text[-500:])
    lines = [line for line in text.splitlines() if " - loss: " in line and " - accuracy: " in line]
    assert len(lines) == epochs, text


@pytest.fixture(scope="module")
def command_run(tmp_path_factory):
    """``(exit code, output folder, printed text)`` of the strategy-'none' run made once through `keras-vit train`.

    The command is ``config_from_args`` then ``job.run`` (test_train_flags_become_the_config holds the two to the same
    config), so the job's checks for one device and the command's own read the same run.
    """
    from keras_vit import cli

    tmp_path = tmp_path_factory.mktemp("command_run")
    stream = io.StringIO()
    with contextlib.redirect_stdout(stream):  # not a terminal: --progress auto prints one line per epoch
        code = cli.main(["train", "--model", "micro", "--epochs", "2", "--steps-per-epoch", "3", "--batch-size", "32",
                         "--strategy", "none", "--weights", str(_micro_checkpoint(tmp_path)), "--freeze-blocks", "1",
                         "--layer-decay", "0.75", "--validation-fraction", "0.1", "--output", str(tmp_path / "run")])
    return code, tmp_path / "run", stream.getvalue()


@pytest.mark.parametrize("strategy", job.STRATEGIES)
def test_one_job_for_every_strategy(tmp_path, strategy, request):
    """One device, MirroredStrategy and the multi-worker loop (one worker, in this process) do the same steps.

    The same metrics.json keys, load report, frozen blocks, validation each epoch, CSV log, TensorBoard events,
    model.keras with its class names, and readable one-line-per-epoch output when stdout is not a terminal.
    One device runs through `keras-vit train` (the command_run fixture), the others through job.run itself.
    """
    if strategy == "none":
        code, out, printed = request.getfixturevalue("command_run")
        assert code == 0, printed[-2000:]
        metrics = json.loads((out / "metrics.json").read_text())
        shown = json.loads(printed.splitlines()[-1])  # the command's last line: a few metrics, as JSON
        assert shown == {key: metrics[key] for key in ("test_accuracy", "test_loss", "num_test_examples", "train_seconds")}
    else:
        out = tmp_path / "run"
        config = job.TrainConfig(
            model="micro", epochs=2, steps_per_epoch=3, batch_size=32, strategy=strategy, weights=str(_micro_checkpoint(tmp_path)),
            freeze_blocks=1, layer_decay=0.75, validation_fraction=0.1, tensorboard=True, output=str(out),
        )
        metrics, printed = _run_captured(config)
        assert json.loads((out / "metrics.json").read_text()) == metrics

    assert set(metrics) == set(job.METRICS)
    assert metrics["strategy"] == strategy and metrics["workers"] == 1 and metrics["replicas"] == 1
    assert metrics["steps"] == 6 and metrics["resumed_from_step"] == 0 and metrics["optimizer"] == "sgd"
    assert metrics["num_test_examples"] == 1000 and metrics["num_validation_examples"] == 400
    for key in ("test_accuracy", "train_accuracy", "validation_accuracy"):
        assert 0.0 <= metrics[key] <= 1.0, (key, metrics[key])
    assert "resized Transformer/posembed_input/pos_embedding" in printed  # the load report
    assert "frozen: patch_encoder, transformer_block_0" in printed
    assert_readable_log(printed, epochs=2)
    assert all("val_accuracy" in line for line in printed.splitlines() if " - loss: " in line)

    rows = list(csv.DictReader(open(out / "log.csv")))
    assert [r["epoch"] for r in rows] == ["0", "1"] and {"loss", "accuracy", "val_loss", "val_accuracy"} <= set(rows[0])
    assert list((out / "logs" / "train").glob("events.out.tfevents.*")), "no TensorBoard training events"
    assert list((out / "logs" / "validation").glob("events.out.tfevents.*")), "no TensorBoard validation events"
    assert (out / "checkpoint.weights.h5").exists()
    model, metadata = keras_vit.load_model(out / "model.keras"), saving.read_metadata(out / "model.keras")
    assert metadata["class_names"] == [str(i) for i in range(10)] and model.output_shape == (None, 10)
    assert not (out / "backup").exists() and not (out / "worker-0" / "backup").exists()  # the run is complete
    assert (out / "worker-0" / "final.weights.h5").exists() == (strategy == "multi-worker")


def test_config_fills_the_recipe_and_checks_its_fields():
    config = job.TrainConfig(model="micro").resolved()
    assert (config.optimizer, config.image_size, config.augment) == ("adamw", 28, "digits")
    assert job.TrainConfig(model="micro", weights="w.npz", dataset="tfds:cifar10").resolved().optimizer == "sgd"
    assert job.TrainConfig(model="micro", lr=0.5).resolved().lr == 0.5  # a set field wins over the recipe
    with pytest.raises(ValueError, match="strategy='ring'"):
        job.TrainConfig(strategy="ring").resolved()
    with pytest.raises(ValueError, match="epochs=0"):
        job.TrainConfig(model="micro", epochs=0).resolved()
    with pytest.raises(ValueError, match="model='Q/3'"):
        job.TrainConfig(model="Q/3").resolved()
    with pytest.raises(TypeError):
        job.TrainConfig("micro")  # keyword-only
    with pytest.raises(TypeError, match="Namespace"):
        job.run(argparse.Namespace(model="micro"))  # no argparse below the command line


def _example(name):
    """The module of ``examples/<name>.py``."""
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_fine_tune_example_prints_what_its_header_expects(tmp_path, capsys):
    """examples/fine_tune.py on a micro checkpoint and a small folder: the load report, then the run from metrics.json."""
    folder, out = str(image_folder(tmp_path / "pets", per_class=10, size=(28, 28))), tmp_path / "finetune"
    code = _example("fine_tune").main([_micro_checkpoint(tmp_path), "--model", "micro", "--dataset", folder,
                                       "--image-size", "28", "--epochs", "1", "--output", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    metrics = json.loads((out / "metrics.json").read_text())
    report = printed[printed.index("Loaded "):]  # the 2x2 grid and class token of the checkpoint, 4x4 at 28x28
    assert "pos_embedding: (1, 5, 32) -> (1, 17, 32)" in report and "new head zero-initialised (fine-tuning)" in report
    assert printed.rstrip().endswith(
        f"fine-tuned micro: optimizer sgd, learning rate {metrics['learning_rate']:g}, layer decay 0.75, 1 epochs; "
        f"test accuracy {metrics['test_accuracy']:.4f} on 4 images ({out / 'metrics.json'})")


def test_train_command_writes_metrics_and_model(command_run):
    """`keras-vit train` on the default dataset: what the command adds to the job (checked in
    test_one_job_for_every_strategy[none] on the same run) is the fine-tuning summary of examples/fine_tune.py."""
    code, out, printed = command_run
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("test_accuracy", "test_loss", "epochs", "train_seconds", "dataset", "num_test_examples"):
        assert key in metrics
    assert metrics["num_test_examples"] == 1000 and metrics["dataset"] == "mnist" and metrics["steps"] == 6
    assert metrics["optimizer"] == "sgd"  # the paper's fine-tuning optimizer by default with --weights
    assert metrics["layer_decay"] == pytest.approx(0.75, abs=1e-12)
    assert _example("fine_tune").summary(str(out)).startswith(  # what examples/fine_tune.py prints last
        f"fine-tuned micro: optimizer sgd, learning rate {metrics['learning_rate']:g}, layer decay 0.75, 2 epochs; "
        f"test accuracy {metrics['test_accuracy']:.4f} on 1000 images")
    model, metadata = keras_vit.load_model(out / "model.keras"), saving.read_metadata(out / "model.keras")
    assert metadata["class_names"] == [str(i) for i in range(10)] and model.output_shape == (None, 10)
    assert "test accuracy" in printed
    assert (out / "log.csv").read_text().count("\n") >= 2  # header + the epoch
    assert list((out / "logs").rglob("events.out.tfevents.*")), "TensorBoard wrote no events"


def test_train_command_errors(tmp_path, capsys):
    from keras_vit import cli

    assert cli.main(["train", "--dataset", "nowhere-dataset", "--output", str(tmp_path)]) == 2
    assert "nowhere-dataset" in capsys.readouterr().err
    assert cli.main(["train", "--model", "Q/3", "--output", str(tmp_path), "--epochs", "1"]) == 2
    assert "Q/3" in capsys.readouterr().err


def test_train_command_names_a_data_dir_without_the_tfds_dataset(tmp_path, capsys):
    """`--dataset tfds:cifar10` with a --data-dir that lacks it stops before any download, naming the folder."""
    pytest.importorskip("tensorflow_datasets")
    from keras_vit import cli

    data_dir = tmp_path / "tensorflow_datasets"
    code = cli.main(["train", "--dataset", "tfds:cifar10", "--data-dir", str(data_dir), "--output", str(tmp_path / "run")])
    error = capsys.readouterr().err
    assert code == 2
    assert f"keras-vit train: error: TFDS dataset 'cifar10' is not prepared in {data_dir}" in error
    assert f"keras_vit.load_tfds('cifar10', data_dir={str(data_dir)!r}, download=True)" in error
    assert not data_dir.exists() or not any(data_dir.rglob("*.tfrecord*"))


def test_train_flags_become_the_config():
    from keras_vit import cli
    from keras_vit.cli import train as train_command

    parser, _ = cli.build_parser()
    args = parser.parse_args(["train", "--model", "micro", "--no-tensorboard", "--mixed-precision", "--no-jit",
                              "--strategy", "mirrored", "--epochs", "3", "--mixup", "0.5"])
    config = train_command.config_from_args(args)
    assert config == job.TrainConfig(model="micro", tensorboard=False, mixed_precision=True, jit=False, strategy="mirrored",
                                     epochs=3, mixup=0.5)
    assert train_command.config_from_args(parser.parse_args(["train"])) == job.TrainConfig()  # the same defaults


@pytest.mark.slow
def test_killed_train_command_resumes(tmp_path):
    """SIGKILL `keras-vit train` mid-epoch, run it again without its flags: same step count, earlier log rows kept."""
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    command = [sys.executable, "-m", "keras_vit.cli", "train", "--model", "micro", "--epochs", "4", "--steps-per-epoch", "40",
               "--save-freq", "7", "--output", str(out), "--progress", "2", "--no-tensorboard"]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root)
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metadata = out / "backup" / "training_metadata.json"
    deadline = time.time() + 400
    try:
        while process.poll() is None and time.time() < deadline:
            try:
                if json.loads(metadata.read_text())["iterations"] >= 91:  # 91 = 2 epochs + 11 steps
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.1)
    finally:
        process.kill()
        process.wait()
    saved = json.loads(metadata.read_text())["iterations"]
    assert 91 <= saved < 160 and saved % 40, saved  # mid-epoch, before the end
    before = (out / "log.csv").read_text()
    # resumed without the flags that made the run: the stored settings win, and the command says so
    resume = [arg for arg in command if arg not in ("--model", "micro", "--epochs", "4", "--steps-per-epoch", "40")]
    result = subprocess.run(resume, env=env, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "resuming with the stored settings: model=micro, epochs=4, steps_per_epoch=40" in result.stdout
    assert f"step {saved} of 160" in result.stdout
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps"] == 160 and metrics["resumed_from_step"] == saved
    after = (out / "log.csv").read_text()
    assert after.startswith(before) and [r["epoch"] for r in csv.DictReader(after.splitlines())] == ["0", "1", "2", "3"]


def test_small_folder_run_validates_fits_its_batch_and_saves_no_optimizer(tmp_path, capsys, monkeypatch):
    """Issue 23 item 4 and the two seen beside it, through `keras-vit train` on a 20-image folder.

    --validation-fraction held out nothing on a folder; the default batch of 64 failed on 12 training images; and
    model.keras carried the optimizer state (44 MB for a 5.7 M-parameter model).
    """
    import zipfile

    import h5py

    from keras_vit import cli
    from keras_vit.inference.predictors import predict

    folder, out = str(image_folder(tmp_path / "pets", per_class=10, size=(28, 28))), tmp_path / "run"
    monkeypatch.chdir(tmp_path)  # --dataset pets: recorded by its absolute path, which export reads from anywhere
    code = cli.main(["train", "--model", "micro", "--dataset", "pets", "--validation-fraction", "0.25", "--epochs", "1",
                     "--output", str(out), "--progress", "0", "--no-tensorboard"])
    printed = capsys.readouterr().out
    assert code == 0
    assert "batch size 12: the recipe's 64 is more than the 12 training images (--batch-size sets it)" in printed
    # the recipe's 1-epoch warm-up takes the whole 1-epoch run: the command says so in a line of its own
    assert "warning: The warm-up of 1 epoch(s) (1 steps) does not end before the run's 1 epoch(s) (1 steps) do" in printed
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["num_train_examples"], metrics["num_validation_examples"], metrics["num_test_examples"]) == (12, 4, 4)
    assert metrics["batch_size"] == 12 and metrics["steps"] == 1 and metrics["validation_accuracy"] is not None
    assert metrics["dataset"] == folder == saving.read_metadata(out / "model.keras")["dataset"]

    with zipfile.ZipFile(out / "model.keras") as archive:
        archive.extract("model.weights.h5", tmp_path)
        config = json.loads(archive.read("config.json"))
    with h5py.File(tmp_path / "model.weights.h5") as weights:
        assert "optimizer" not in weights, list(weights)
    assert not config.get("compile_config")
    model = keras_vit.load_model(out / "model.keras")
    assert model.output_shape == (None, 2) and model.class_names == ["cat", "dog"]
    (result, *_) = predict(str(out / "model.keras"), [folder + "/cat"], top_k=1)
    assert result["predictions"][0]["label"] in ("cat", "dog")


def test_an_explicit_batch_larger_than_the_data_names_the_flags(tmp_path):
    folder = str(image_folder(tmp_path / "pets", per_class=10, size=(28, 28)))
    with pytest.raises(ValueError, match=r"global batch of 32 images .* larger than the 16 training images: pass a smaller --batch-size"):
        job.run(job.TrainConfig(model="micro", dataset=folder, batch_size=32, epochs=1, output=str(tmp_path / "run"), verbose=0))
