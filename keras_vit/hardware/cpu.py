"""The processor: its model name, logical cores and the flags that change what keras_vit should run.

The flags are read from ``/proc/cpuinfo`` (Linux); elsewhere they are unknown
and the CPU is treated as having none of them.

Example:
>>> cpu = CPU("AMD EPYC 7B12", 2, frozenset({"avx2", "fma"}))
>>> cpu.isa, cpu.native_bfloat16
('AVX2', False)
"""

import dataclasses
import os

# the flags that change what keras_vit should run (Linux /proc/cpuinfo names)
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8", "avx512_vnni", "avx_vnni")
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


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
