"""What this machine runs natively, and the mixed-precision policy that follows from it.

``set_precision("mixed")`` and ``keras-vit train --mixed-precision`` ask
:func:`mixed_policy`, which picks the 16-bit type the hardware computes in,
never one it only emulates:

* a CUDA GPU of compute capability 8.0 or later (Ampere, Hopper, ...):
  ``mixed_bfloat16`` (native bfloat16 tensor cores, no loss scaling needed);
* an older CUDA GPU (Volta, Turing): ``mixed_float16``, which Keras trains
  with dynamic loss scaling (``model.compile`` wraps the optimizer);
* a CPU with ``avx512_bf16`` or ``amx_bf16``: ``mixed_bfloat16`` (oneDNN's
  bfloat16 GEMMs);
* any other CPU (AVX2-only, or AVX-512 without BF16): ``float32``, with a
  notice: bfloat16 would be emulated there and run slower than float32.

The CPU's flags are read from ``/proc/cpuinfo`` (Linux); elsewhere they are
unknown and the CPU is treated as having no native bfloat16.

It also knows when TensorFlow leaves its oneDNN kernels off: TensorFlow 2.21 on
Linux turns them on by default only on CPUs with AVX512_VNNI, AVX512_BF16,
AVX_VNNI or AMX (``DefaultOneDnnPolicy`` in ``tensorflow/core/util/port.cc``).
On an AVX2-only CPU it runs Eigen, and keras_vit's fused attention and MLP
kernels lose to timm there. :func:`onednn_environment` is what the ``keras-vit``
command sets before importing TensorFlow; a program that imports keras_vit as a
library sets ``TF_ENABLE_ONEDNN_OPTS=1`` itself (importing keras_vit changes no
environment variable).
"""

import dataclasses
import os
import sys

# the flags that change what keras_vit should run (Linux /proc/cpuinfo names)
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8", "avx512_vnni", "avx_vnni")
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
# TensorFlow turns oneDNN on by default on Linux only with one of these (tensorflow/core/util/port.cc)
ONEDNN_DEFAULT_CPU_FLAGS = ("avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16")
ONEDNN_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"


@dataclasses.dataclass(frozen=True)
class CPU:
    """The processor: ``model`` name, logical ``cores`` and the relevant ``flags`` it has."""

    model: str
    cores: int
    flags: frozenset
    family: str = None  # /proc/cpuinfo "cpu family" (AMD: 25 = Zen 3/4, 26 = Zen 5), None where unknown

    @property
    def native_bfloat16(self):
        return any(flag in self.flags for flag in BF16_CPU_FLAGS)

    @property
    def isa(self):
        """The widest vector extension: ``"AVX-512"``, ``"AVX2"`` or ``"other"`` (for naming benchmark figures)."""
        return "AVX-512" if "avx512f" in self.flags else "AVX2" if "avx2" in self.flags else "other"


@dataclasses.dataclass(frozen=True)
class GPU:
    """A CUDA GPU: its ``name`` and compute ``capability`` as ``(major, minor)`` (None if unknown)."""

    name: str
    capability: tuple = None

    @property
    def native_bfloat16(self):
        return self.capability is not None and tuple(self.capability) >= (8, 0)


def cpu_info(cpuinfo_path="/proc/cpuinfo"):
    """The :class:`CPU` of this machine (flags from ``/proc/cpuinfo``; empty where it does not exist)."""
    model, family, flags = "unknown", None, set()
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model == "unknown":
                    model = value.strip()
                elif key == "cpu family" and family is None:
                    family = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return CPU(model=model, cores=os.cpu_count() or 1, flags=frozenset(f for f in CPU_FLAGS if f in flags), family=family)


def gpu_info():
    """The CUDA GPUs the current Keras backend sees, as :class:`GPU` (an empty list on a CPU machine)."""
    import keras

    backend = keras.backend.backend()
    gpus = []
    if backend == "tensorflow":
        import tensorflow as tf

        for device in tf.config.list_physical_devices("GPU"):
            details = tf.config.experimental.get_device_details(device)
            gpus.append(GPU(details.get("device_name", device.name), details.get("compute_capability")))
    elif backend == "jax":
        import jax

        for device in jax.devices():
            if device.platform == "gpu":
                capability = getattr(device, "compute_capability", None)
                if isinstance(capability, str):  # "8.0" on CUDA; a ROCm target ("gfx90a") is not a CUDA capability
                    try:
                        capability = tuple(int(v) for v in capability.split("."))
                    except ValueError:
                        capability = None
                gpus.append(GPU(device.device_kind, capability))
    elif backend == "torch":
        import torch

        for i in range(torch.cuda.device_count()):
            gpus.append(GPU(torch.cuda.get_device_name(i), torch.cuda.get_device_capability(i)))
    return gpus


def mixed_policy(cpu=None, gpus=None):
    """``(policy, reason)``: the mixed-precision policy this hardware runs natively.

    Args:
        cpu: a :class:`CPU` (default: :func:`cpu_info`).
        gpus: a list of :class:`GPU` (default: :func:`gpu_info`); where they
            differ, one without native bfloat16 decides (a strategy runs every
            GPU in the same policy).

    Example:
    >>> mixed_policy(CPU("AMD EPYC", 2, frozenset({"avx2"})), gpus=[])[0]
    'float32'
    >>> mixed_policy(gpus=[GPU("NVIDIA H100", (9, 0))])[0]
    'mixed_bfloat16'
    >>> mixed_policy(gpus=[GPU("NVIDIA A100", (8, 0)), GPU("Tesla T4", (7, 5))])[0]
    'mixed_float16'
    """
    gpus = gpu_info() if gpus is None else gpus
    if gpus:
        gpu = next((g for g in gpus if not g.native_bfloat16), gpus[0])
        if gpu.native_bfloat16:
            return "mixed_bfloat16", f"{gpu.name} (compute capability {_cc(gpu)}) has native bfloat16"
        return "mixed_float16", f"{gpu.name} (compute capability {_cc(gpu)}) has no native bfloat16: float16 with loss scaling"
    cpu = cpu_info() if cpu is None else cpu
    if cpu.native_bfloat16:
        flags = ", ".join(f for f in BF16_CPU_FLAGS if f in cpu.flags)
        return "mixed_bfloat16", f"the CPU ({cpu.model}) has native bfloat16 ({flags})"
    return "float32", (
        f"the CPU ({cpu.model}) has no native bfloat16 (no avx512_bf16 or amx_bf16): "
        "training in float32, which is faster there than emulated bfloat16"
    )


def _cc(gpu):
    return "unknown" if gpu.capability is None else ".".join(str(v) for v in gpu.capability)


def onednn_default(cpu=None):
    """Whether TensorFlow turns its oneDNN kernels on by itself on this CPU (Linux x86 rule)."""
    cpu = cpu_info() if cpu is None else cpu
    return any(flag in cpu.flags for flag in ONEDNN_DEFAULT_CPU_FLAGS)


def onednn_environment(cpu=None, environ=None):
    """The environment the ``keras-vit`` command sets before TensorFlow starts: ``{}`` or oneDNN on.

    ``{"TF_ENABLE_ONEDNN_OPTS": "1"}`` on an x86 CPU with AVX2 where TensorFlow
    would leave oneDNN off (no VNNI, BF16 or AMX); ``{}`` where TensorFlow turns
    it on anyway, on other CPUs, and whenever the user has set the variable.

    Example:
    >>> onednn_environment(CPU("AMD EPYC", 2, frozenset({"avx2", "fma"})), environ={})
    {'TF_ENABLE_ONEDNN_OPTS': '1'}
    >>> onednn_environment(CPU("AMD EPYC", 2, frozenset({"avx2", "avx512f", "avx512_vnni"})), environ={})
    {}
    >>> onednn_environment(CPU("AMD EPYC", 2, frozenset({"avx2"})), environ={"TF_ENABLE_ONEDNN_OPTS": "0"})
    {}
    """
    cpu = cpu_info() if cpu is None else cpu
    environ = os.environ if environ is None else environ
    if ONEDNN_VARIABLE in environ or "avx2" not in cpu.flags or onednn_default(cpu):
        return {}
    return {ONEDNN_VARIABLE: "1"}


def onednn_state(cpu=None, environ=None, set_by_keras_vit=False):
    """``(on, why)``: whether TensorFlow runs oneDNN kernels in a process started with ``environ``.

    ``on`` is None where it cannot be told: no variable set and no x86 AVX2 flags
    to apply TensorFlow's rule to (then this process's TensorFlow is asked, if started).

    Where this process's TensorFlow has started and runs otherwise than the rule
    says (an emulator or a VM showing programs other CPU features than
    ``/proc/cpuinfo`` lists), what it runs is reported, and why the two differ.

    ``set_by_keras_vit``: the variable in ``environ`` was set by :func:`onednn_environment`, not the user.
    """
    cpu = cpu_info() if cpu is None else cpu
    environ = os.environ if environ is None else environ
    on, why = _onednn_rule(cpu, environ, set_by_keras_vit)
    running = _tensorflow_onednn() if environ is os.environ else None
    if running is None or running == on:
        return on, why
    if on is None:
        return running, "as this process's TensorFlow runs (the CPU's flags say nothing here)"
    return running, (f"this process's TensorFlow runs it {'on' if running else 'off'}, where the rule says "
                     f"{'on' if on else 'off'} ({why}): the CPU it sees through CPUID is not the one /proc/cpuinfo "
                     "lists (an emulator or a VM)")


def _onednn_rule(cpu, environ, set_by_keras_vit):
    value = environ.get(ONEDNN_VARIABLE)
    # TensorFlow reads it with ReadBoolFromEnvVar: 0/1/true/false, lower-cased, not stripped; anything else is
    # refused (a warning on stderr) and TensorFlow's default stays
    on = {"1": True, "true": True, "0": False, "false": False}.get(value.lower()) if value is not None else None
    if on is not None:
        by = "set by keras-vit: TensorFlow leaves oneDNN off on this CPU" if set_by_keras_vit else "set in the environment"
        return on, f"{ONEDNN_VARIABLE}={value}, {by}"
    if value is not None:
        return onednn_default(cpu), (f"{ONEDNN_VARIABLE}={value!r} is not 0, 1, true or false: TensorFlow ignores it "
                                     "and keeps its default on this CPU")
    if onednn_default(cpu):
        return True, "TensorFlow's default on a CPU with " + ", ".join(f for f in ONEDNN_DEFAULT_CPU_FLAGS if f in cpu.flags)
    if "avx2" not in cpu.flags:  # flags not readable here (no /proc/cpuinfo), or not an AVX2 x86 CPU
        return None, "unknown: the CPU's flags say nothing here, and the rule above is for x86 AVX2 CPUs"
    return False, (f"TensorFlow's default without {'/'.join(ONEDNN_DEFAULT_CPU_FLAGS[:3])} or AMX: Eigen kernels, "
                   f"slower for ViT; the keras-vit command sets {ONEDNN_VARIABLE}=1, set it yourself in a program")


def on_a_terminal(stream=None):
    """Whether ``stream`` (default ``sys.stdout``) is a terminal: progress bars there, plain lines elsewhere."""
    stream = sys.stdout if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _tensorflow_onednn():
    """Whether the TensorFlow of this process runs oneDNN kernels (None: TensorFlow not started)."""
    if "tensorflow" not in sys.modules:
        return None
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


def onednn_notice(cpu=None):
    """A one-line advice when this process's TensorFlow runs without oneDNN on an x86 AVX2 CPU, else None.

    None also where TensorFlow turns oneDNN on by default (VNNI, BF16, AMX): off there, the user turned it off.

    :func:`keras_vit.predict` warns with it once per process for Keras and SavedModel models.
    """
    cpu = cpu_info() if cpu is None else cpu
    if "avx2" not in cpu.flags or onednn_default(cpu) or _tensorflow_onednn() is not False:
        return None  # (oneDNN off on a CPU where TensorFlow turns it on: the user set TF_ENABLE_ONEDNN_OPTS=0)
    return (f"TensorFlow runs without its oneDNN kernels on this CPU ({cpu.model}: no "
            f"{'/'.join(ONEDNN_DEFAULT_CPU_FLAGS[:3])} or AMX), where keras_vit runs 20-25 % slower "
            f"(docs/performance.md, emulated AVX2): start the program with {ONEDNN_VARIABLE}=1, or use the TFLite export")


def describe(cpu=None, gpus=None, environ=None, onednn_set_by_keras_vit=False):
    """Lines for ``keras-vit info``: the CPU and its flags, the GPUs, the mixed-precision choice, oneDNN."""
    cpu = cpu_info() if cpu is None else cpu
    gpus = gpu_info() if gpus is None else gpus
    present = [f for f in CPU_FLAGS if f in cpu.flags]
    lines = [
        f"cpu: {cpu.model}{f' (family {cpu.family})' if cpu.family else ''}, {cpu.cores} logical cores, {cpu.isa}",
        f"cpu flags: {', '.join(present) or 'none of ' + ', '.join(CPU_FLAGS)}",
        "gpu: " + ("; ".join(f"{g.name} (compute capability {_cc(g)})" for g in gpus) if gpus else "none"),
    ]
    policy, reason = mixed_policy(cpu, gpus)
    lines.append(f"--mixed-precision: {policy} ({reason})")
    on, why = onednn_state(cpu, environ, onednn_set_by_keras_vit)
    lines.append(f"tensorflow onednn: {'unknown' if on is None else 'on' if on else 'off'} ({why})")
    return lines
