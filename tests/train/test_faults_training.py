"""Training under faults: divergence, a full disk, a busy output folder, bad flags, kills at random points."""

import csv
import errno
import json
import os
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers import images, small_classifier
from keras_vit.train import divergence
from keras_vit.train import job
from keras_vit.train import model_setup
from keras_vit.train import optimizers
from keras_vit.train import resumable
from keras_vit.train import run_files
from keras_vit.train.backup import Backup

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _strict_json(path):
    """The JSON in ``path``, refusing NaN and Infinity (which ``json.loads`` accepts but JSON does not)."""

    def refuse(constant):
        raise ValueError(f"{path}: {constant} is not JSON")

    return json.loads(open(path).read(), parse_constant=refuse)


def _train_cli(out, *extra):
    from keras_vit import cli

    return cli.main(["train", "--model", "micro", "--epochs", "1", "--steps-per-epoch", "2", "--batch-size", "32",
                     "--output", str(out), "--progress", "0", "--no-tensorboard", *extra])


def _weights_file_is_finite(path):
    import h5py

    arrays = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, item: arrays.append(item[()]) if isinstance(item, h5py.Dataset) else None)
    floats = [a for a in arrays if np.issubdtype(np.asarray(a).dtype, np.floating)]
    return bool(floats) and all(np.all(np.isfinite(a)) for a in floats)


def test_diverged_run_fails_writes_no_outputs_and_keeps_the_last_good_backup(tmp_path, capsys):
    """Item 3: `--lr 1e10` used to exit 0 with an all-NaN model.keras, NaN in metrics.json and no backup."""
    out = tmp_path / "run"
    # warmup: the first step runs at learning rate 0, so the backup of step 1 is good; then the rate explodes
    code = _train_cli(out, "--epochs", "3", "--steps-per-epoch", "4", "--warmup-epochs", "1", "--save-freq", "1",
                      "--lr", "1e10")
    err = capsys.readouterr().err
    assert code == 1, err
    assert "diverged" in err and "--lr" in err and str(out / "backup") in err
    assert "into another --output" in err  # the same --output resumes with the stored learning rate, refusing another
    assert not (out / "model.keras").exists() and not (out / "metrics.json").exists()
    backup = out / "backup" / "latest.weights.h5"
    assert backup.exists(), "the last good backup was deleted"
    assert _weights_file_is_finite(backup)
    saved = json.loads((out / "backup" / "training_metadata.json").read_text())["iterations"]
    assert 1 <= saved < 12
    assert not (out / "checkpoint.weights.h5").exists() or _weights_file_is_finite(out / "checkpoint.weights.h5")


def test_nan_learning_rate_is_refused_before_anything_runs(tmp_path, capsys):
    """A NaN learning rate used to train (and diverge); it is out of the flag's domain: exit 2, nothing written."""
    with pytest.raises(SystemExit) as exit_info:
        _train_cli(tmp_path / "run", "--lr", "nan")
    assert exit_info.value.code == 2
    assert "argument --lr: must be a finite number > 0, got nan" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_metrics_json_is_always_valid_json(tmp_path):
    path = tmp_path / "metrics.json"
    run_files.write_json(path, {"test_loss": float("nan"), "train_loss": float("inf"), "steps": 3,
                                    "nested": [np.float32("-inf"), 0.25]})
    assert _strict_json(path) == {"test_loss": None, "train_loss": None, "steps": 3, "nested": [None, 0.25]}


def _compiled_small(steps=8):
    keras.utils.set_random_seed(0)
    model = small_classifier()
    model_setup.compile_model(model, optimizers.build_optimizer(1e-3, steps, 0), 0.0)
    resumable.build_optimizer_slots(model)  # as fit_resumable does: one trace of the step, not two
    x = images(16, 32).astype("float32")
    y = keras.utils.to_categorical(np.arange(16) % 5, 5)
    return model, tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat()


def test_full_disk_during_a_backup_is_one_line_and_keeps_the_previous_backup(tmp_path, monkeypatch):
    """Item 8: ENOSPC half-way through writing a backup."""
    model, train = _compiled_small()
    backup = Backup(str(tmp_path / "backup"), save_freq=2)
    real_save = model.save_weights
    calls = []

    def save_weights(path, overwrite=True):
        calls.append(path)
        if len(calls) == 1:
            return real_save(path, overwrite=overwrite)
        with open(path, "wb") as f:  # a half-written file, then the disk is full
            f.write(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(model, "save_weights", save_weights)
    weights = tmp_path / "backup" / "latest.weights.h5"
    with pytest.raises(OSError) as raised:
        model.fit(train, epochs=1, steps_per_epoch=4, callbacks=[backup], verbose=0)
    message = str(raised.value)
    assert raised.value.errno == errno.ENOSPC and "\n" not in message
    assert str(weights) in message and "No space left" in message and "step 4" in message
    assert sorted(os.listdir(tmp_path / "backup")) == ["latest.weights.h5", "training_metadata.json"]  # no temporary
    assert json.loads((tmp_path / "backup" / "training_metadata.json").read_text())["iterations"] == 2
    restored, _ = _compiled_small()
    restored.optimizer.build(restored.trainable_variables)
    restored.load_weights(weights)  # the previous backup, intact
    assert int(restored.optimizer.iterations.numpy()) == 2


def test_a_disk_without_room_for_the_backup_is_refused_before_hdf5_writes(tmp_path, monkeypatch):
    """Item 8 on a real full disk: HDF5 printed ~580 lines and crashed; the space is now checked before writing."""
    import collections
    import shutil

    model, train = _compiled_small()
    backup = Backup(str(tmp_path / "backup"), save_freq=2)
    model.fit(train, epochs=1, steps_per_epoch=2, callbacks=[backup], verbose=0)  # a first, good backup
    before = (tmp_path / "backup" / "latest.weights.h5").read_bytes()
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 50_000, 50_000))
    monkeypatch.setattr(model, "save_weights", lambda *a, **k: pytest.fail("HDF5 was asked to write on a full disk"))
    with pytest.raises(OSError, match=r"latest\.weights\.h5.*step 4 \(No space left on device: 50,000 bytes free") as raised:
        model.fit(train, epochs=1, steps_per_epoch=2, callbacks=[backup], verbose=0)
    assert raised.value.errno == errno.ENOSPC and "\n" not in str(raised.value)
    assert (tmp_path / "backup" / "latest.weights.h5").read_bytes() == before


def test_a_nan_step_never_replaces_the_backup(tmp_path):
    model, train = _compiled_small()
    backup = Backup(str(tmp_path / "backup"), save_freq=1)
    stop = divergence.StopOnNonFinite()

    class Poison(keras.callbacks.Callback):  # the weights turn NaN after step 3, as a diverging update leaves them
        def on_train_batch_begin(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == 3:
                head = self.model.get_layer("head")
                head.kernel.assign(np.full(head.kernel.shape, np.nan, "float32"))

    history = resumable.fit_resumable(model, train, epochs=2, steps_per_epoch=4, callbacks=[backup, stop, Poison()], verbose=0)
    assert history["stopped"] and stop.stopped["step"] == 4 and np.isnan(stop.stopped["loss"])
    assert len(history["loss"]) == 1  # the second epoch was not run after the stop
    assert json.loads((tmp_path / "backup" / "training_metadata.json").read_text())["iterations"] == 3
    assert _weights_file_is_finite(tmp_path / "backup" / "latest.weights.h5")
    with pytest.raises(divergence.TrainingDiverged, match=r"step 4 \(epoch 1\): the loss is nan"):
        divergence.check_finite(model, [backup, stop], backup.backup_dir)


def test_resumed_run_writes_each_epoch_once_in_the_log(tmp_path):
    """Item 12: killed after an epoch's row but before a backup of that epoch's end: the row came twice."""
    log = tmp_path / "log.csv"

    def attempt(interrupt_at=None):
        model, train = _compiled_small(12)
        callbacks = [Backup(str(tmp_path / "backup"), save_freq=3), keras.callbacks.CSVLogger(str(log), append=True)]

        class Interrupt(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                if int(self.model.optimizer.iterations.numpy()) == interrupt_at:
                    raise KeyboardInterrupt("simulated kill")

        callbacks.append(Interrupt())
        return resumable.fit_resumable(model, train, epochs=3, steps_per_epoch=4, callbacks=callbacks, verbose=0)

    with pytest.raises(KeyboardInterrupt):
        attempt(interrupt_at=5)  # epoch 0's row is written at step 4; the last backup is of step 3
    assert [r["epoch"] for r in csv.DictReader(open(log))] == ["0"]
    history = attempt()
    assert history["resumed_from_step"] == 3
    assert [r["epoch"] for r in csv.DictReader(open(log))] == ["0", "1", "2"]


class _KillAtEpochEnd(keras.callbacks.Callback):
    """Raises at the end of epoch ``epoch``: between the backup and the log, as a kill during validation is."""

    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.epoch:
            raise KeyboardInterrupt("simulated kill")


@pytest.mark.parametrize("loop", ["model.fit", "multi-worker"])
def test_a_run_killed_at_an_epochs_end_before_its_log_row_runs_that_epoch_again(tmp_path, loop):
    """The backup of an epoch's last batch counted the epoch done before its validation and log row: a run killed in
    between resumed at the next epoch, and the row of that epoch was never written. The same for the multi-worker
    loop's WorkerBackup, whose default backup is every epoch's last batch."""
    from keras_vit.train import distribute

    log, strategy = tmp_path / "log.csv", tf.distribute.get_strategy()

    def attempt(kill_at_end_of=None):
        model, train = _compiled_small(12)
        if loop == "model.fit":
            backup, fit, data = Backup(str(tmp_path / "backup"), save_freq=4), None, train
        else:
            backup = distribute.WorkerBackup(str(tmp_path / "backup"), strategy, save_freq=4, total_steps=12)
            fit, data = distribute.DistributedTrainer(model, strategy, 8).fit, (lambda context: train)
        callbacks = [backup, _KillAtEpochEnd(kill_at_end_of), keras.callbacks.CSVLogger(str(log), append=True)]
        return resumable.fit_resumable(model, data, epochs=3, steps_per_epoch=4, callbacks=callbacks, verbose=0, fit=fit)

    with pytest.raises(KeyboardInterrupt):
        attempt(kill_at_end_of=1)
    assert [r["epoch"] for r in csv.DictReader(open(log))] == ["0"]
    if loop == "model.fit":
        assert json.loads((tmp_path / "backup" / "training_metadata.json").read_text())["iterations"] == 4
    else:
        assert tf.train.latest_checkpoint(str(tmp_path / "backup")).endswith("ckpt-4")
    history = attempt()
    assert history["resumed_from_step"] == 4
    assert [r["epoch"] for r in csv.DictReader(open(log))] == ["0", "1", "2"]


def test_single_class_folder_is_refused(tmp_path, capsys):
    """Item 9: one class trained to a meaningless 100 %."""
    from PIL import Image

    folder = tmp_path / "only-cats"
    (folder / "cat").mkdir(parents=True)
    for i in range(6):
        Image.fromarray(np.full((28, 28, 3), 40 * i, np.uint8)).save(folder / "cat" / f"{i}.png")
    assert _train_cli(tmp_path / "run", "--dataset", str(folder)) == 2
    err = capsys.readouterr().err
    assert str(folder) in err and "at least 2" in err
    assert not (tmp_path / "run").exists()  # nothing written: the folder the run made is gone (it left a lone .lock)


def test_a_failed_run_removes_only_the_folders_it_made_and_left_empty(tmp_path):
    from keras_vit.train.lock import LOCK_NAME, output_lock

    def fail(folder, write=None):
        with pytest.raises(RuntimeError, match="boom"), output_lock(folder):
            if write:
                (folder / write).write_text("x")
            raise RuntimeError("boom")

    fail(tmp_path / "a" / "worker-0")  # a cluster's worker folder inside a new --output: both made, both removed
    assert os.listdir(tmp_path) == []
    (tmp_path / "kept").mkdir()
    fail(tmp_path / "kept")  # the user's folder: kept, only the lock file left, as before
    assert os.listdir(tmp_path / "kept") == [LOCK_NAME]
    fail(tmp_path / "b", write="log.csv")  # something written: kept
    assert sorted(os.listdir(tmp_path / "b")) == [LOCK_NAME, "log.csv"]
    with output_lock(tmp_path / "c"):  # a run that ends well keeps its folder
        pass
    assert os.listdir(tmp_path / "c") == [LOCK_NAME]
    with pytest.raises(ValueError, match="the run's own"), output_lock(tmp_path / "d"):  # the folder gone meanwhile:
        os.remove(tmp_path / "d" / LOCK_NAME)                                            # the run's error is the one
        os.rmdir(tmp_path / "d")                                                         # reported
        raise ValueError("the run's own error")


def test_a_run_that_did_not_get_the_lock_removes_nothing(tmp_path, monkeypatch):
    """Two runs started together on a new --output both found it missing; the one refused (OutputInUse) removed the
    winner's lock file and folder while the winner ran (a reviewer's race: 21 of 30 simultaneous starts), so a third
    run could take the folder too."""
    from keras_vit.train import lock

    folder = tmp_path / "new"
    with lock.output_lock(folder):  # the winner, before it has written anything
        monkeypatch.setattr(lock, "_first_missing", lambda path: str(folder))  # the loser saw the folder missing
        with pytest.raises(lock.OutputInUse), lock.output_lock(folder):
            pass
        assert os.listdir(folder) == [lock.LOCK_NAME]
        monkeypatch.undo()
        with pytest.raises(lock.OutputInUse):  # a third run is still refused
            with lock.output_lock(folder):
                pass


def test_a_lock_file_removed_by_its_holder_is_taken_anew(tmp_path):
    """A run that opened the lock file just before a failed run removed it (and the folder) would lock a file no
    longer in the folder: it checks that the file it locked is the folder's, and takes the lock again if not."""
    from keras_vit.train import lock

    folder = tmp_path / "f"
    folder.mkdir()
    path = folder / lock.LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        assert lock._same_file(fd, str(path))
        os.remove(path)
        assert not lock._same_file(fd, str(path))
        path.write_text("")  # another run's new lock file
        assert not lock._same_file(fd, str(path))
    finally:
        os.close(fd)


@pytest.mark.parametrize("flag, field", [("--save-freq", "save_freq"), ("--steps-per-epoch", "steps_per_epoch")])
@pytest.mark.parametrize("value", [-3, 0])
def test_non_positive_step_counts_are_refused(flag, field, value, capsys):
    """Item 9: `--save-freq -3` was accepted, `--steps-per-epoch -5` got a message about the batch size."""
    from keras_vit import cli

    parser, _ = cli.build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["train", flag, str(value)])
    assert f"argument {flag}: must be a positive int, got {value}" in capsys.readouterr().err
    with pytest.raises(ValueError, match=rf"`{field}` must be a positive int. Received: {field}={value}"):
        job.TrainConfig(model="micro", **{field: value}).resolved()


def test_second_run_into_the_same_output_is_refused_until_the_first_ends(tmp_path, capsys):
    """Item 10: two runs into one folder shared the backup and interleaved log.csv."""
    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen(  # another run: holds the folder's lock, as `keras-vit train` does
        [sys.executable, "-c",
         "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
         "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, b'%d\\n' % os.getpid()); print('held', flush=True); time.sleep(600)",
         str(out / ".lock")],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert _train_cli(out) == 1
        err = capsys.readouterr().err
        assert str(out) in err and f"pid {holder.pid}" in err and "in use" in err
        assert not (out / "log.csv").exists() and not (out / "backup").exists()
    finally:
        holder.send_signal(signal.SIGKILL)  # a crash: the OS drops its lock, no stale lock is left
        holder.wait()
    assert _train_cli(out) == 0
    assert (out / "model.keras").exists()


def _check_state(out):
    """What a kill leaves: model.keras absent or loadable, metrics.json absent or valid, the backup loadable."""
    import keras_vit

    if (out / "model.keras").exists():
        assert keras_vit.load_model(out / "model.keras").output_shape == (None, 10)
    if (out / "metrics.json").exists():
        assert _strict_json(out / "metrics.json")["steps"] == 40
    backup = out / "backup" / "latest.weights.h5"
    if backup.exists():
        assert _weights_file_is_finite(backup)
        assert json.loads((out / "backup" / "training_metadata.json").read_text())["iterations"] % 3 == 0
    if (out / "checkpoint.weights.h5").exists():
        assert _weights_file_is_finite(out / "checkpoint.weights.h5")
    if (out / "log.csv").exists():
        epochs = [r["epoch"] for r in csv.DictReader(open(out / "log.csv"))]
        assert epochs == [str(i) for i in range(len(epochs))], epochs
    # a kill between mkstemp and os.replace may leave a .tmp-* file: the next run removes it (checked at the end)


@pytest.mark.slow
def test_training_killed_at_random_points_leaves_the_old_state_or_the_new(tmp_path):
    """Beyond the list: SIGKILL `keras-vit train` after random delays; every state left must be whole."""
    out = tmp_path / "run"
    command = [sys.executable, "-m", "keras_vit.cli", "train", "--model", "micro", "--epochs", "4", "--steps-per-epoch",
               "10", "--batch-size", "32", "--save-freq", "3", "--output", str(out), "--progress", "2", "--no-tensorboard"]
    env = dict(os.environ, PYTHONPATH=ROOT)
    rng = np.random.default_rng(14)
    for delay in rng.uniform(4.0, 36.0, size=5):
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        finished = process.poll() is not None
        process.send_signal(signal.SIGKILL)
        _, err = process.communicate()
        assert not finished or process.returncode == 0, err[-2000:]
        _check_state(out)
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=500)
    assert result.returncode == 0, result.stderr[-2000:]
    _check_state(out)
    assert _strict_json(out / "metrics.json")["steps"] == 40
    assert not (out / "backup").exists() and not list(out.rglob(".tmp-*"))


def test_a_backup_of_the_other_layout_is_named_not_ignored(tmp_path, capsys):
    """An interrupted run resumed with --strategy multi-worker (backups in <output>/worker-<i>/backup) started the
    default job afresh over the interrupted one's log, leaving its backup behind; and the other way round."""
    out = tmp_path / "run"
    (out / "backup").mkdir(parents=True)
    assert _train_cli(out, "--strategy", "multi-worker") == 2
    err = capsys.readouterr().err
    assert "holds the backup of an interrupted run of another layout" in err and "resume it with a --strategy other" in err
    (out / "backup").rmdir()
    (out / "worker-0" / "backup").mkdir(parents=True)
    assert _train_cli(out) == 2
    assert "resume it with --strategy multi-worker" in capsys.readouterr().err
    assert sorted(os.listdir(out)) == ["worker-0"]  # nothing written


def test_a_run_killed_after_its_last_epoch_keeps_its_train_metrics_when_resumed(tmp_path, monkeypatch):
    """Killed in the final evaluation (after the last backup), the resumed run trains no step: metrics.json had
    train and validation loss and accuracy null, though log.csv held them."""
    from helpers import image_folder

    folder = str(image_folder(tmp_path / "pets", per_class=10, size=(28, 28)))
    config = job.TrainConfig(model="micro", dataset=folder, validation_fraction=0.25, epochs=1, batch_size=4,
                             tensorboard=False, output=str(tmp_path / "run"), verbose=0)
    evaluate = model_setup.evaluate

    def killed(*args, **kwargs):
        monkeypatch.setattr(model_setup, "evaluate", evaluate)  # once
        raise KeyboardInterrupt("killed in the test evaluation")

    monkeypatch.setattr(model_setup, "evaluate", killed)
    with pytest.raises(KeyboardInterrupt):
        job.run(config)
    metrics = job.run(config)
    with open(tmp_path / "run" / "log.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    for key, column in (("train_loss", "loss"), ("train_accuracy", "accuracy"), ("validation_loss", "val_loss")):
        assert metrics[key] == pytest.approx(float(row[column]), rel=1e-6), key


def test_fit_resumable_refuses_data_that_would_run_out_in_an_epoch(tmp_path):
    """18 batches for epochs of 10 steps: Keras restarts a finite dataset at an epoch's end only, so the second epoch
    ran out after 8 steps; the run took 28 of 30 steps, reported stopped=False and deleted the backup."""
    model = small_classifier()
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="sparse_categorical_crossentropy")

    def batches(n):
        return tf.data.Dataset.from_tensor_slices((images(n, 32), np.zeros(n, "int32"))).batch(1)

    with pytest.raises(ValueError, match=r"`train` yields 18 batches, not a whole number of epochs of 10 \(10 steps\)"):
        resumable.fit_resumable(model, batches(18), epochs=3, steps_per_epoch=10, callbacks=[Backup(str(tmp_path / "b"))])
    assert int(model.optimizer.iterations) == 0
    history = resumable.fit_resumable(model, batches(20), epochs=3, steps_per_epoch=10, verbose=0,
                                      callbacks=[Backup(str(tmp_path / "c"))])  # two epochs a pass: every step runs
    assert int(model.optimizer.iterations) == 30 and not history.stopped
