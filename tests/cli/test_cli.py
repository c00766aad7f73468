"""The installed ``keras-vit`` command, run as users run it."""

import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(sys.executable), "keras-vit")


def _run(*args, **env):
    full_env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    full_env.update(env)
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, env=full_env, timeout=300)


@pytest.mark.skipif(not os.path.exists(SCRIPT), reason="keras-vit is not installed beside this Python")
def test_command_starts_without_tensorflow_start_up_lines():
    quiet = _run("info")
    assert quiet.returncode == 0
    assert "R50+B/16" in quiet.stdout
    # and the machine: CPU, flags, the mixed-precision choice, oneDNN's state
    out = quiet.stdout
    assert "\ncpu: " in out and "\ncpu flags: " in out and "\n--mixed-precision: " in out
    assert "\ntensorflow onednn: on (" in out or "\ntensorflow onednn: off (" in out
    assert "absl::InitializeLog" not in quiet.stderr and "oneDNN custom operations" not in quiet.stderr
    # asking TensorFlow for its log brings the lines back: nothing else is hidden
    loud = _run("info", TF_CPP_MIN_LOG_LEVEL="0")
    assert loud.returncode == 0
    assert "oneDNN custom operations" in loud.stderr or "absl::InitializeLog" in loud.stderr


@pytest.mark.skipif(not os.path.exists(SCRIPT), reason="keras-vit is not installed beside this Python")
def test_command_errors_still_reach_stderr():
    result = _run("predict", "no-such-model.keras", "no-such-image.jpg")
    assert result.returncode != 0
    assert result.stderr.strip()
