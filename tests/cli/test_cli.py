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


# two TensorFlow processes (~10 s each here), each command checked for what both share: TensorFlow starts under the
# same filter before any command runs (keras_vit.cli.quiet_tensorflow)
@pytest.mark.skipif(not os.path.exists(SCRIPT), reason="keras-vit is not installed beside this Python")
def test_command_starts_without_tensorflow_start_up_lines_and_errors_still_reach_stderr():
    quiet = _run("predict", "no-such-model.keras", "no-such-image.jpg")
    assert quiet.returncode == 2
    assert "keras-vit predict: error: Model not found: 'no-such-model.keras'" in quiet.stderr.splitlines(), quiet.stderr[-2000:]
    assert "absl::InitializeLog" not in quiet.stderr and "oneDNN custom operations" not in quiet.stderr


@pytest.mark.skipif(not os.path.exists(SCRIPT), reason="keras-vit is not installed beside this Python")
def test_asking_tensorflow_for_its_log_brings_the_lines_back_and_info_describes_the_machine():
    loud = _run("info", TF_CPP_MIN_LOG_LEVEL="0")  # nothing else is hidden
    assert loud.returncode == 0
    assert "oneDNN custom operations" in loud.stderr or "absl::InitializeLog" in loud.stderr
    assert "R50+B/16" in loud.stdout
    # and the machine: CPU, flags, the mixed-precision choice, oneDNN's state
    out = loud.stdout
    assert "\ncpu: " in out and "\ncpu flags: " in out and "\n--mixed-precision: " in out
    assert "\ntensorflow onednn: on (" in out or "\ntensorflow onednn: off (" in out


NOISE = ("failed call to cuInit", "XNNPACK delegate", "WARNING:absl", "absl::InitializeLog", "oneDNN custom operations",
         "Could not find cuda drivers")


def _noise(stderr):
    return [line for line in stderr.splitlines() if any(text in line for text in NOISE)]


@pytest.fixture
def tiny_model_and_image(tmp_path):
    import numpy as np
    from PIL import Image

    from helpers import tiny_vit

    model = tmp_path / "m.keras"
    tiny_vit(num_classes=3).save(model)
    image = tmp_path / "a.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(image)
    return str(model), str(image)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(SCRIPT), reason="keras-vit is not installed beside this Python")
def test_predict_prints_no_tensorflow_noise_and_keeps_real_errors(tiny_model_and_image):
    model, image = tiny_model_and_image
    result = _run("predict", model, image, "no-such-image.png")
    assert result.returncode == 1 and "m.keras" not in result.stderr
    assert _noise(result.stderr) == []  # the cuInit ERROR of a CUDA build on a machine without a driver
    assert "no-such-image.png" in result.stderr  # a real error still shows


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(SCRIPT), reason="keras-vit is not installed beside this Python")
def test_help_info_export_and_tflite_predict_are_quiet_and_verbose_shows_everything(tiny_model_and_image, tmp_path):
    model, image = tiny_model_and_image
    tflite = str(tmp_path / "m.tflite")
    for args in (["--help"], ["info", model], ["export", model, "--format", "tflite", "--output", tflite, "--no-warmup"],
                 ["predict", tflite, image]):
        result = _run(*args)
        assert result.returncode == 0, result.stderr
        assert _noise(result.stderr) == [], (args, result.stderr)
    loud = _run("--verbose", "predict", tflite, image)
    assert loud.returncode == 0 and "Created TensorFlow Lite XNNPACK delegate for CPU." in loud.stderr
    assert "XNNPACK delegate" in _run("predict", tflite, image, KERAS_VIT_VERBOSE="1").stderr
