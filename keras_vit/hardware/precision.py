"""The mixed-precision policy this hardware runs natively.

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
"""

from keras_vit.hardware import cpu as cpu_lib
from keras_vit.hardware import gpu as gpu_lib


def mixed_policy(cpu=None, gpus=None):
    """``(policy, reason)``: the mixed-precision policy this hardware runs natively.

    Args:
        cpu: a :class:`~keras_vit.hardware.cpu.CPU` (default: :func:`~keras_vit.hardware.cpu.cpu_info`).
        gpus: a list of :class:`~keras_vit.hardware.gpu.GPU` (default:
            :func:`~keras_vit.hardware.gpu.gpu_info`); where they differ, one
            without native bfloat16 decides (a strategy runs every GPU in the same policy).

    Example:
    >>> from keras_vit.hardware.cpu import CPU
    >>> from keras_vit.hardware.gpu import GPU
    >>> mixed_policy(CPU("AMD EPYC", 2, frozenset({"avx2"})), gpus=[])[0]
    'float32'
    >>> mixed_policy(gpus=[GPU("NVIDIA H100", (9, 0))])[0]
    'mixed_bfloat16'
    >>> mixed_policy(gpus=[GPU("NVIDIA A100", (8, 0)), GPU("Tesla T4", (7, 5))])[0]
    'mixed_float16'
    """
    gpus = gpu_lib.gpu_info() if gpus is None else gpus
    if gpus:
        gpu = next((g for g in gpus if not g.native_bfloat16), gpus[0])
        if gpu.native_bfloat16:
            return "mixed_bfloat16", f"{gpu.name} (compute capability {gpu.capability_label}) has native bfloat16"
        return "mixed_float16", (f"{gpu.name} (compute capability {gpu.capability_label}) has no native bfloat16: "
                                 "float16 with loss scaling")
    cpu = cpu_lib.cpu_info() if cpu is None else cpu
    if cpu.native_bfloat16:
        flags = ", ".join(f for f in cpu_lib.BF16_CPU_FLAGS if f in cpu.flags)
        return "mixed_bfloat16", f"the CPU ({cpu.model}) has native bfloat16 ({flags})"
    return "float32", (
        f"the CPU ({cpu.model}) has no native bfloat16 (no avx512_bf16 or amx_bf16): "
        "training in float32, which is faster there than emulated bfloat16"
    )
