"""The hardware-aware precision choice, `keras-vit info`'s machine lines, and readable training logs.

The CPU and GPU are mocked, so every case runs on every machine.
"""

import io
import os
import subprocess
import sys
import warnings

import keras
import pytest

from keras_vit.hardware import cpu as cpu_lib
from keras_vit.hardware import gpu as gpu_lib
from keras_vit.hardware import onednn
from keras_vit.hardware.cpu import CPU
from keras_vit.hardware.gpu import GPU
from keras_vit.hardware.precision import mixed_policy
from keras_vit.hardware.report import describe
from keras_vit.train import progress
from keras_vit.train import model_setup

ZEN4 = CPU("AMD Ryzen 9 7950X", 2, frozenset({"avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni"}))
SAPPHIRE_RAPIDS = CPU("Intel Xeon Platinum 8480+", 2, frozenset({"avx2", "avx512f", "amx_tile", "amx_bf16"}))
EPYC_AVX2 = CPU("AMD EPYC 7B12", 2, frozenset({"avx2", "fma"}))
SKYLAKE = CPU("Intel Xeon Gold 6148", 2, frozenset({"avx2", "fma", "avx512f"}))  # AVX-512 without BF16
H100 = GPU("NVIDIA H100 80GB HBM3", (9, 0))
A100 = GPU("NVIDIA A100-SXM4-40GB", (8, 0))
T4 = GPU("Tesla T4", (7, 5))


@pytest.fixture(autouse=True)
def _float32_after():
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize(
    "cpu, gpus, expected",
    [
        (ZEN4, [], "mixed_bfloat16"),
        (SAPPHIRE_RAPIDS, [], "mixed_bfloat16"),
        (EPYC_AVX2, [], "float32"),
        (SKYLAKE, [], "float32"),
        (EPYC_AVX2, [H100], "mixed_bfloat16"),
        (EPYC_AVX2, [A100], "mixed_bfloat16"),
        (ZEN4, [T4], "mixed_float16"),
        (ZEN4, [GPU("unknown GPU")], "mixed_float16"),  # capability unknown: the safe float16 + loss scaling
        # a strategy runs every GPU in one policy: one without native bfloat16 decides, wherever it is listed
        (ZEN4, [A100, T4], "mixed_float16"),
        (ZEN4, [T4, H100], "mixed_float16"),
        (ZEN4, [A100, H100], "mixed_bfloat16"),
    ],
)
def test_mixed_precision_follows_the_native_16_bit_type(cpu, gpus, expected):
    notices = []
    assert model_setup.set_precision("mixed", cpu=cpu, gpus=gpus, notify=notices.append) == expected
    assert keras.mixed_precision.global_policy().name == expected
    if expected == "float32":
        assert len(notices) == 1 and "float32" in notices[0] and cpu.model in notices[0] and "no native bfloat16" in notices[0]
    else:
        assert notices == []


def test_explicit_policies_are_kept_and_unknown_ones_rejected():
    assert model_setup.set_precision("mixed_bfloat16", cpu=EPYC_AVX2, gpus=[]) == "mixed_bfloat16"  # asked for by name
    assert model_setup.set_precision("float32") == "float32"
    with pytest.raises(ValueError, match="Received: mixed_precision='fp8'"):
        model_setup.set_precision("fp8")


def test_mixed_float16_training_scales_the_loss():
    from helpers import images, tiny_vit

    model_setup.set_precision("mixed", cpu=ZEN4, gpus=[T4])
    model = tiny_vit(num_classes=3)
    model_setup.compile_model(model, keras.optimizers.SGD(0.01), 0.0)
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    model.fit(images(4), keras.utils.to_categorical([0, 1, 2, 0], 3), epochs=1, verbose=0)


def test_cpu_info_reads_proc_cpuinfo(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(
        "processor\t: 0\nmodel name\t: AMD EPYC 7B12\nflags\t\t: fpu sse avx avx2 fma bmi2\n\n"
        "processor\t: 1\nmodel name\t: AMD EPYC 7B12\nflags\t\t: fpu sse avx avx2 fma bmi2\n"
    )
    cpu = cpu_lib.cpu_info(path)
    assert cpu.model == "AMD EPYC 7B12" and cpu.flags == {"avx2", "fma"} and cpu.isa == "AVX2"
    assert not cpu.native_bfloat16
    assert cpu_lib.cpu_info(tmp_path / "missing").flags == frozenset()  # not Linux: nothing known, float32


def test_describe_names_cpu_flags_gpu_and_policy():
    lines = describe(EPYC_AVX2, [])
    assert lines[0].startswith("cpu: AMD EPYC 7B12") and "AVX2" in lines[0]
    assert lines[1] == "cpu flags: avx2, fma" and lines[2] == "gpu: none"
    assert lines[3].startswith("--mixed-precision: float32")
    assert "NVIDIA H100 80GB HBM3 (compute capability 9.0)" in describe(EPYC_AVX2, [H100])[2]


class _Stream(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self._tty = tty

    def isatty(self):
        return self._tty


def test_progress_bar_on_a_terminal_one_line_per_epoch_elsewhere():
    assert progress.progress_verbosity("auto", _Stream(True)) == 1
    assert progress.progress_verbosity("auto", _Stream(False)) == 2
    assert progress.progress_verbosity("0", _Stream(True)) == 0
    assert progress.progress_verbosity(1, _Stream(False)) == 1


def test_onednn_on_where_tensorflow_leaves_it_off():
    assert onednn.onednn_environment(EPYC_AVX2, environ={}) == {"TF_ENABLE_ONEDNN_OPTS": "1"}
    assert onednn.onednn_environment(ZEN4, environ={}) == {}  # TensorFlow turns it on itself (VNNI, BF16)
    assert onednn.onednn_environment(SAPPHIRE_RAPIDS, environ={}) == {}  # AMX
    assert onednn.onednn_environment(EPYC_AVX2, environ={"TF_ENABLE_ONEDNN_OPTS": "0"}) == {}  # the user decides
    assert onednn.onednn_environment(CPU("arm", 2, frozenset()), environ={}) == {}
    assert describe(EPYC_AVX2, [], environ={})[4].startswith("tensorflow onednn: off (TensorFlow's default")
    assert describe(ZEN4, [], environ={})[4] == (
        "tensorflow onednn: on (TensorFlow's default on a CPU with avx512_vnni, avx512_bf16)")
    line = describe(EPYC_AVX2, [], environ={"TF_ENABLE_ONEDNN_OPTS": "1"}, onednn_set_by_keras_vit=True)[4]
    assert line.startswith("tensorflow onednn: on (TF_ENABLE_ONEDNN_OPTS=1, set by keras-vit")


_COMMAND_ON_AVX2 = """
import os
from keras_vit import cli
from keras_vit.hardware import cpu
cpu.cpu_info = lambda: cpu.CPU("AMD EPYC 7B12", 2, frozenset({"avx2", "fma"}))
cli.quiet_tensorflow()
from tensorflow.python.util import _pywrap_util_port
print(os.environ.get("TF_ENABLE_ONEDNN_OPTS"), _pywrap_util_port.IsMklEnabled(), cli.ENVIRONMENT_SET)
"""


def test_keras_vit_command_turns_onednn_on_before_tensorflow_starts():
    # the real process start: TensorFlow reads the variable once, when it loads; an AVX2 CPU is simulated
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    out = subprocess.run([sys.executable, "-c", _COMMAND_ON_AVX2], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split("\n")[-2] == "1 True {'TF_ENABLE_ONEDNN_OPTS': '1'}"


def test_predict_advises_onednn_once_where_tensorflow_runs_without_it(monkeypatch):
    from helpers import tiny_vit
    from keras_vit.inference import predictors

    monkeypatch.setattr(cpu_lib, "cpu_info", lambda: EPYC_AVX2)
    monkeypatch.setattr(onednn, "_tensorflow_onednn", lambda: False)  # as TensorFlow's default on EPYC_AVX2
    monkeypatch.setattr(predictors, "_ADVISED", [])
    model = tiny_vit(num_classes=3)
    with pytest.warns(UserWarning, match="TF_ENABLE_ONEDNN_OPTS=1"):
        predictors.load_predictor(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        predictors.load_predictor(model)  # once per process
    monkeypatch.setattr(onednn, "_tensorflow_onednn", lambda: True)
    assert onednn.onednn_notice(EPYC_AVX2) is None and onednn.onednn_notice(ZEN4) is None


@pytest.mark.parametrize(
    "cpu, value, on",
    [
        (EPYC_AVX2, "TRUE", True), (ZEN4, "False", False),  # TensorFlow lower-cases the value
        # anything but 0, 1, true or false is refused by TensorFlow (ReadBoolFromEnvVar), which keeps its
        # default: off on an AVX2-only CPU, on with VNNI/BF16 (checked on a real process: IsMklEnabled())
        (EPYC_AVX2, "yes", False), (ZEN4, "no", True), (EPYC_AVX2, " 1", False), (ZEN4, " 0", True), (ZEN4, "", True),
    ],
)
def test_onednn_state_reads_the_variable_as_tensorflow_does(cpu, value, on):
    line = describe(cpu, [], environ={"TF_ENABLE_ONEDNN_OPTS": value})[4]
    assert line.startswith(f"tensorflow onednn: {'on' if on else 'off'} ("), line


def test_no_onednn_advice_where_the_user_turned_it_off_on_a_cpu_tensorflow_turns_it_on(monkeypatch):
    # TF_ENABLE_ONEDNN_OPTS=0 on a VNNI/BF16 CPU: the user's choice, and the notice's "no VNNI, BF16 or AMX" is false
    monkeypatch.setattr(onednn, "_tensorflow_onednn", lambda: False)
    assert onednn.onednn_notice(ZEN4) is None and onednn.onednn_notice(SAPPHIRE_RAPIDS) is None
    assert "TF_ENABLE_ONEDNN_OPTS=1" in onednn.onednn_notice(EPYC_AVX2)
    assert "TF_ENABLE_ONEDNN_OPTS=1" in onednn.onednn_notice(SKYLAKE)  # AVX-512 without VNNI: TensorFlow leaves it off


def test_predict_advises_onednn_only_for_what_runs_on_tensorflow(monkeypatch, tmp_path):
    from helpers import tiny_vit
    from keras_vit.inference import predictors, runtimes

    model = tiny_vit(num_classes=3)
    monkeypatch.setattr(cpu_lib, "cpu_info", lambda: EPYC_AVX2)
    monkeypatch.setattr(predictors, "_ADVISED", [])
    # the JAX backend: a Keras model runs on XLA, not on TensorFlow's kernels, even when TensorFlow is loaded
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    monkeypatch.setattr(onednn, "_tensorflow_onednn", lambda: False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        predictors.load_predictor(model)
    # a SavedModel does run on TensorFlow, which its loading starts (not yet loaded when predict is called)
    tensorflow = {"onednn": None}
    monkeypatch.setattr(onednn, "_tensorflow_onednn", lambda: tensorflow["onednn"])

    def saved_model_runtime(path, include_preprocessing=None, image_size=None):  # runtimes.saved_model_runtime's signature
        tensorflow["onednn"] = False  # TensorFlow starts, without oneDNN (its default on EPYC_AVX2)
        return runtimes.keras_runtime(model, include_preprocessing)

    monkeypatch.setattr(runtimes, "model_format", lambda path: "saved_model")
    monkeypatch.setattr(runtimes, "saved_model_runtime", saved_model_runtime)
    with pytest.warns(UserWarning, match="TF_ENABLE_ONEDNN_OPTS=1"):
        predictors.load_predictor(str(tmp_path), labels=["a", "b", "c"])


def test_keras_vit_command_turns_onednn_on_under_another_backend_too():
    # KERAS_BACKEND=jax: the command does not start TensorFlow, but what it runs may (a SavedModel to predict
    # with, an export, tf.data), and `keras-vit info` says the command set the variable
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    code = _COMMAND_ON_AVX2.split("from tensorflow")[0] + (
        "import sys\nprint(os.environ.get('TF_ENABLE_ONEDNN_OPTS'), 'tensorflow' in sys.modules, cli.ENVIRONMENT_SET)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(env, KERAS_BACKEND="jax"))
    assert out.stdout.split("\n")[-2] == "1 False {'TF_ENABLE_ONEDNN_OPTS': '1'}"


def test_a_rocm_target_is_no_cuda_capability(monkeypatch):
    """JAX reports a ROCm GPU's target ("gfx90a") where CUDA GPUs have "8.0": unknown, not a crash."""
    import types

    jax = types.SimpleNamespace(devices=lambda: [
        types.SimpleNamespace(platform="gpu", device_kind="AMD Instinct MI210", compute_capability="gfx90a"),
        types.SimpleNamespace(platform="gpu", device_kind="NVIDIA A100", compute_capability="8.0"),
        types.SimpleNamespace(platform="cpu", device_kind="cpu")])
    monkeypatch.setitem(sys.modules, "jax", jax)
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    assert gpu_lib.gpu_info() == [GPU("AMD Instinct MI210", None), GPU("NVIDIA A100", (8, 0))]
    assert mixed_policy(ZEN4)[0] == "mixed_float16"


def test_onednn_state_where_the_cpu_flags_say_nothing(monkeypatch):
    """No /proc/cpuinfo (macOS, Windows) or an ARM CPU: TensorFlow's x86 rule does not apply, nothing is claimed."""
    unknown = CPU("unknown", 2, frozenset())
    line = describe(unknown, [], environ={})[4]
    assert line.startswith("tensorflow onednn: unknown (") and "keras-vit command sets" not in line, line
    monkeypatch.setattr(onednn, "_tensorflow_onednn", lambda: True)  # this process's TensorFlow, asked
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    assert onednn.onednn_state(unknown) == (True, "as this process's TensorFlow runs (the CPU's flags say nothing here)")
    assert onednn.onednn_environment(unknown, environ={}) == {}  # and the command sets nothing there


def test_onednn_state_says_when_the_running_tensorflow_disagrees_with_the_rule(monkeypatch):
    """QEMU's AVX2-only CPU on a VNNI host (make test-avx2): /proc/cpuinfo lists VNNI, TensorFlow sees none."""
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    monkeypatch.setattr(onednn, "_tensorflow_onednn", lambda: False)
    on, why = onednn.onednn_state(ZEN4)
    assert on is False and "rule says on" in why and "emulator or a VM" in why
    assert onednn.onednn_state(ZEN4, environ={})[0] is True  # another process's environment: the rule alone
    monkeypatch.setattr(onednn, "_tensorflow_onednn", lambda: True)
    assert onednn.onednn_state(ZEN4) == (True, "TensorFlow's default on a CPU with avx512_vnni, avx512_bf16")
