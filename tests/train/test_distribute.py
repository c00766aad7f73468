"""Data-parallel training: batch splitting, MirroredStrategy on 2 CPU devices, two workers on localhost."""

import json
import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from keras_vit.train import distribute
from keras_vit.train import job
from keras_vit.train import recipes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT = 540  # seconds; a hung collective must not hang the suite


def _env(**extra):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), TF_CPP_MIN_LOG_LEVEL="2",
               CUDA_VISIBLE_DEVICES="", KERAS_BACKEND="tensorflow")
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


class _FakeStrategy:
    num_replicas_in_sync = 3


def test_batch_size_must_split_over_replicas():
    assert distribute.check_batch_size(12, _FakeStrategy()) == 4
    with pytest.raises(ValueError, match=r"replicas \(3\).*batch_size=10"):
        distribute.check_batch_size(10, _FakeStrategy())


def test_worker_info(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert distribute.worker_info() == (0, 1)
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}))
    assert distribute.worker_info() == (1, 2)


MIRRORED = textwrap.dedent(
    """
    import sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from keras_vit import cli
    common = ["train", "--strategy", "mirrored", "--model", "micro", "--epochs", "1", "--steps-per-epoch", "3",
              "--progress", "0", "--no-tensorboard", "--output", sys.argv[1]]
    assert cli.main(common + ["--batch-size", "33"]) == 2
    sys.exit(cli.main(common + ["--batch-size", "32"]))
    """
)


@pytest.mark.slow  # a TensorFlow process training with two replicas (~40 s on 2 cores); in the fast suite: the same
# job under MirroredStrategy in process (tests/train/test_job.py::test_one_job_for_every_strategy[mirrored]) and the
# refusal of a batch that does not split over the replicas (test_batch_size_must_split_over_replicas above)
def test_mirrored_strategy_on_two_cpu_devices(tmp_path):
    """model.fit under MirroredStrategy with 2 logical CPU devices; an odd batch is refused."""
    out = tmp_path / "mirrored"
    result = subprocess.run([sys.executable, "-c", MIRRORED, str(out)], env=_env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "replicas (2)" in result.stderr and "batch_size=33" in result.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["replicas"] == 2 and metrics["steps"] == 3 and metrics["num_test_examples"] == 1000
    assert set(metrics) == set(job.METRICS) and metrics["strategy"] == "mirrored"


@pytest.mark.slow  # two TensorFlow processes (~35 s); the multi-worker loop itself runs in the fast suite, one worker
# in process (tests/train/test_job.py::test_one_job_for_every_strategy[multi-worker])
def test_two_workers_on_localhost_end_with_identical_weights(tmp_path):
    """MultiWorkerMirroredStrategy through the custom loop (model.fit fails there: keras#20585)."""
    ports = _free_ports(2)
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    out = tmp_path / "mw"
    command = [sys.executable, "-m", "keras_vit.cli", "train", "--strategy", "multi-worker", "--model", "micro",
               "--epochs", "2", "--steps-per-epoch", "3", "--batch-size", "32", "--warmup-epochs", "0", "--lr", "0.01",
               "--output", str(out)]
    workers = _start_workers(command, cluster, tmp_path)
    logs = _finish(workers)
    for worker, log in zip(workers, logs):
        assert worker.returncode == 0, log[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["workers"] == 2 and metrics["replicas"] == 2 and metrics["steps"] == 6
    assert metrics["num_test_examples"] == 1000  # each worker evaluated its half
    assert set(metrics) == set(job.METRICS) and metrics["strategy"] == "multi-worker"
    for log in logs:  # piped: one plain line per epoch on every worker, no progress bar
        assert "\r" not in log and "\x1b" not in log, repr(log[-500:])
        assert len([line for line in log.splitlines() if " - loss: " in line and " - accuracy: " in line]) == 2, log
    weights = []
    for i in range(2):
        model = recipes.build_model("micro", 10)
        model.load_weights(str(out / f"worker-{i}" / "final.weights.h5"))
        weights.append(model.get_weights())
    # exact on purpose: replicas in sync hold the same bits. Both start from the same weights and apply the
    # same all-reduced gradients (one sum per element, sent to both) with elementwise updates
    for a, b in zip(*weights):
        np.testing.assert_array_equal(a, b)
    # and they trained: different from a fresh model with the same seed
    import keras

    keras.utils.set_random_seed(0)
    fresh = recipes.build_model("micro", 10).get_weights()
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(weights[0], fresh)) > 1e-3


def _start_workers(command, cluster, cwd):
    return [
        subprocess.Popen(command, env=_env(TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(cwd))
        for i in range(2)
    ]


def _finish(workers, timeout=TIMEOUT):
    logs = []
    try:
        for worker in workers:
            logs.append(worker.communicate(timeout=timeout)[0])
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    return logs


@pytest.mark.slow
def test_killed_workers_resume_from_their_backups(tmp_path):
    """Kill both workers mid-run; started again, they agree on a backup step and finish the same run."""
    import time

    out = tmp_path / "mw"
    command = [sys.executable, "-m", "keras_vit.cli", "train", "--strategy", "multi-worker", "--model", "micro",
               "--epochs", "2", "--steps-per-epoch", "60", "--batch-size", "32", "--save-freq", "10", "--output", str(out)]
    cluster = {"worker": [f"localhost:{p}" for p in _free_ports(2)]}
    workers = _start_workers(command, cluster, tmp_path)
    deadline = time.time() + TIMEOUT

    def saved(i):
        folder = out / f"worker-{i}" / "backup"
        return [int(p.name[5:-6]) for p in folder.glob("ckpt-*.index")] if folder.exists() else []

    try:
        while time.time() < deadline and all(w.poll() is None for w in workers):
            if all(any(step >= 30 for step in saved(i)) for i in range(2)):
                break
            time.sleep(0.1)
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
    steps = [max(saved(i)) for i in range(2)]
    assert all(30 <= s < 120 for s in steps), steps

    cluster = {"worker": [f"localhost:{p}" for p in _free_ports(2)]}
    workers = _start_workers(command, cluster, tmp_path)
    logs = _finish(workers)
    for worker, log in zip(workers, logs):
        assert worker.returncode == 0, log[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps"] == 120 and 30 <= metrics["resumed_from_step"] <= min(steps)
    assert f"resuming at step {metrics['resumed_from_step']}" in logs[1]
    weights = []
    for i in range(2):
        model = recipes.build_model("micro", 10)
        model.load_weights(str(out / f"worker-{i}" / "final.weights.h5"))
        weights.append(model.get_weights())
        assert not (out / f"worker-{i}" / "backup").exists()
    for a, b in zip(*weights):
        np.testing.assert_array_equal(a, b)  # exact on purpose: replicas in sync (see the test above)
