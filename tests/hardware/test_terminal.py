"""The native stderr filter: TensorFlow's and LiteRT's C++ lines below TF_CPP_MIN_LOG_LEVEL dropped, the rest kept."""

import os

from keras_vit.hardware import terminal

NOISE = (
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    b"I0000 00:00:1795543993.046214    1776 port.cc:153] oneDNN custom operations are on.\n"
    b"E0000 00:00:1795544005.885630    1900 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error\n"
    b"INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\n"
)
REAL = (
    b"E0000 00:00:1795544005.885630    1900 op_kernel.cc:1] OOM when allocating tensor\n"
    b"Traceback (most recent call last):\n"
)


def test_filter_drops_start_up_notices_below_the_level_and_keeps_errors(capfd, monkeypatch):
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    monkeypatch.setattr(terminal, "NVIDIA_DRIVER", "/no/such/driver")  # cuInit cannot succeed: information
    with terminal.native_stderr_filtered():
        os.write(2, NOISE + REAL)
    err = capfd.readouterr().err
    assert err == REAL.decode()


def test_filter_keeps_everything_at_level_0_and_a_cuinit_error_where_a_driver_is_installed(capfd, monkeypatch):
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    with terminal.native_stderr_filtered():
        os.write(2, NOISE)
    assert capfd.readouterr().err == NOISE.decode()
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    monkeypatch.setattr(terminal, "NVIDIA_DRIVER", os.devnull)  # a driver: a failing cuInit is a real error
    with terminal.native_stderr_filtered():
        os.write(2, NOISE)
    assert "failed call to cuInit" in capfd.readouterr().err


def test_filter_restores_stderr_and_writes_back_before_an_exception_leaves(capfd, monkeypatch):
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        with terminal.native_stderr_filtered():
            os.write(2, REAL)
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    os.write(2, b"after\n")
    assert capfd.readouterr().err == REAL.decode() + "after\n"


def test_blocks_of_two_threads_do_not_leave_stderr_captured(capfd, monkeypatch):
    import threading
    import time

    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")

    def block(text):
        with terminal.native_stderr_filtered():
            time.sleep(0.05)
            os.write(2, text)

    threads = [threading.Thread(target=block, args=(f"real {i}\n".encode(),)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    os.write(2, b"after\n")
    err = capfd.readouterr().err
    assert sorted(err.splitlines()) == ["after", "real 0", "real 1", "real 2", "real 3"] and err.endswith("after\n")
