"""Caps YNNPACK (XLA:CPU's dots in TensorFlow) and XNNPACK (TFLite, in ai_edge_litert) at AVX2+FMA3 kernels.

Used only by ``python -m benchmarks.emulate_avx2``, which puts this folder on ``PYTHONPATH`` and sets
``KERAS_VIT_BENCH_YNN_CAP=<libtensorflow_cc path>:<flags offset>:<guard offset>:<flags>`` (hex offsets
of ``ynn::get_supported_arch_flags()::flags`` and its C++ static-initialisation guard, from ``nm``).
YNNPACK reads CPUID once into that static and has no switch of its own; after ``import tensorflow``
this writes the flags an AVX2+FMA3 CPU would have produced and marks the static initialised, before
XLA compiles anything.

``KERAS_VIT_BENCH_XNN_CAP=<libpywrap_litert_common path>:<cpuinfo_initialize>:<cpuinfo_isa>:<offsets>``
does the same for ai_edge_litert's XNNPACK: after ``import ai_edge_litert.interpreter`` it runs that
library's own copy of cpuinfo once, then clears the ``struct cpuinfo_x86_isa`` booleans at the given
offsets (``+``-separated hex: the AVX-512 family and AVX-VNNI), before XNNPACK reads them. Without the
variables, nothing happens.
"""

import os
import sys


def _cap_ynnpack(spec):
    import ctypes

    path, flags_off, guard_off, value = spec.rsplit(":", 3)
    base = _base(path)
    if base is None:
        print(f"emulate_avx2: {path} is not loaded; YNNPACK not capped", file=sys.stderr)
        return
    flags = ctypes.c_uint64.from_address(base + int(flags_off, 16))
    guard = ctypes.c_uint8.from_address(base + int(guard_off, 16))
    if guard.value:
        print(f"emulate_avx2: YNNPACK flags already initialised ({flags.value:#x}); overwritten", file=sys.stderr)
    flags.value = int(value, 16)
    guard.value = 1
    os.environ["KERAS_VIT_BENCH_YNN_CAPPED"] = f"{flags.value:#x}"


def _cap_xnnpack(spec):
    import ctypes

    path, init_off, isa_off, offsets = spec.rsplit(":", 3)
    base = _base(path)
    if base is None:
        print(f"emulate_avx2: {path} is not loaded; XNNPACK not capped", file=sys.stderr)
        return
    if not ctypes.CFUNCTYPE(ctypes.c_bool)(base + int(init_off, 16))():
        print("emulate_avx2: cpuinfo_initialize failed; XNNPACK not capped", file=sys.stderr)
        return
    isa = base + int(isa_off, 16)
    before = []
    for off in offsets.split("+"):
        byte = ctypes.c_uint8.from_address(isa + int(off, 16))
        before.append(byte.value)
        byte.value = 0
    os.environ["KERAS_VIT_BENCH_XNN_CAPPED"] = "".join(str(v) for v in before)


def _base(path):
    real = os.path.realpath(path)
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split()
            if len(parts) >= 6 and int(parts[2], 16) == 0 and os.path.realpath(parts[5]) == real:
                return int(parts[0].split("-")[0], 16)
    return None


class _After:
    """A meta-path finder that runs ``cap(spec)`` right after the module ``name`` is imported."""

    def __init__(self, name, cap, spec):
        self.name, self.cap, self.spec = name, cap, spec

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        import importlib.util

        found = importlib.util.find_spec(fullname)
        if found is None or found.loader is None:
            return found
        exec_module = found.loader.exec_module

        def exec_then_cap(module):
            exec_module(module)
            self.cap(self.spec)

        found.loader.exec_module = exec_then_cap
        return found


if os.environ.get("KERAS_VIT_BENCH_YNN_CAP"):
    sys.meta_path.insert(0, _After("tensorflow", _cap_ynnpack, os.environ["KERAS_VIT_BENCH_YNN_CAP"]))
if os.environ.get("KERAS_VIT_BENCH_XNN_CAP"):
    sys.meta_path.insert(0, _After("ai_edge_litert.interpreter", _cap_xnnpack, os.environ["KERAS_VIT_BENCH_XNN_CAP"]))
