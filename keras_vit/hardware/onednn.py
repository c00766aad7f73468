"""Whether TensorFlow runs its oneDNN kernels, and the environment that turns them on where it would not.

TensorFlow 2.21 on Linux turns them on by default only on CPUs with
AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX (``DefaultOneDnnPolicy`` in
``tensorflow/core/util/port.cc``). On an AVX2-only CPU it runs Eigen, where
keras_vit's fused attention and MLP kernels run slower (measured in
docs/performance.md, "AVX2-only CPUs"). :func:`onednn_environment` is what the
``keras-vit`` command sets before importing TensorFlow; a program that imports
keras_vit as a library sets ``TF_ENABLE_ONEDNN_OPTS=1`` itself (importing
keras_vit changes no environment variable).

This module imports neither Keras nor TensorFlow: the command calls it before
TensorFlow starts.

Example:
>>> from keras_vit.hardware.cpu import CPU
>>> onednn_environment(CPU("AMD EPYC", 2, frozenset({"avx2", "fma"})), environ={})
{'TF_ENABLE_ONEDNN_OPTS': '1'}
"""

import os
import sys

from keras_vit.hardware import cpu as cpu_lib

# TensorFlow turns oneDNN on by default on Linux only with one of these (tensorflow/core/util/port.cc)
ONEDNN_DEFAULT_CPU_FLAGS = ("avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16")
ONEDNN_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"


def onednn_default(cpu=None):
    """Whether TensorFlow turns its oneDNN kernels on by itself on this CPU (Linux x86 rule)."""
    cpu = cpu_lib.cpu_info() if cpu is None else cpu
    return any(flag in cpu.flags for flag in ONEDNN_DEFAULT_CPU_FLAGS)


def onednn_environment(cpu=None, environ=None):
    """The environment the ``keras-vit`` command sets before TensorFlow starts: ``{}`` or oneDNN on.

    ``{"TF_ENABLE_ONEDNN_OPTS": "1"}`` on an x86 CPU with AVX2 where TensorFlow
    would leave oneDNN off (no VNNI, BF16 or AMX); ``{}`` where TensorFlow turns
    it on anyway, on other CPUs, and whenever the user has set the variable.

    Example:
    >>> from keras_vit.hardware.cpu import CPU
    >>> onednn_environment(CPU("AMD EPYC", 2, frozenset({"avx2", "fma"})), environ={})
    {'TF_ENABLE_ONEDNN_OPTS': '1'}
    >>> onednn_environment(CPU("AMD EPYC", 2, frozenset({"avx2", "avx512f", "avx512_vnni"})), environ={})
    {}
    >>> onednn_environment(CPU("AMD EPYC", 2, frozenset({"avx2"})), environ={"TF_ENABLE_ONEDNN_OPTS": "0"})
    {}
    """
    cpu = cpu_lib.cpu_info() if cpu is None else cpu
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
    cpu = cpu_lib.cpu_info() if cpu is None else cpu
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


def _tensorflow_onednn():
    """Whether the TensorFlow of this process runs oneDNN kernels (None: TensorFlow not started)."""
    if "tensorflow" not in sys.modules:
        return None
    from tensorflow.python.util import _pywrap_util_port  # deferred: asks a started TensorFlow, never starts one

    return bool(_pywrap_util_port.IsMklEnabled())


def onednn_notice(cpu=None):
    """A one-line advice when this process's TensorFlow runs without oneDNN on an x86 AVX2 CPU, else None.

    None also where TensorFlow turns oneDNN on by default (VNNI, BF16, AMX): off there, the user turned it off.

    :func:`keras_vit.predict` warns with it once per process for Keras and SavedModel models.
    """
    cpu = cpu_lib.cpu_info() if cpu is None else cpu
    if "avx2" not in cpu.flags or onednn_default(cpu) or _tensorflow_onednn() is not False:
        return None  # (oneDNN off on a CPU where TensorFlow turns it on: the user set TF_ENABLE_ONEDNN_OPTS=0)
    return (f"TensorFlow runs without its oneDNN kernels on this CPU ({cpu.model}: no "
            f"{'/'.join(ONEDNN_DEFAULT_CPU_FLAGS[:3])} or AMX), where keras_vit runs slower "
            f"(docs/performance.md, AVX2-only CPUs): start the program with {ONEDNN_VARIABLE}=1, or use the TFLite export")
