"""The machine lines of ``keras-vit info``: the CPU and its flags, the GPUs, the mixed-precision choice, oneDNN.

Example:
>>> from keras_vit.hardware.cpu import CPU
>>> describe(CPU("AMD EPYC 7B12", 2, frozenset({"avx2", "fma"})), [], environ={})[1]
'cpu flags: avx2, fma'
"""

from keras_vit.hardware import cpu as cpu_lib
from keras_vit.hardware import gpu as gpu_lib
from keras_vit.hardware.onednn import onednn_state
from keras_vit.hardware.precision import mixed_policy


def describe(cpu=None, gpus=None, *, environ=None, onednn_set_by_keras_vit=False):
    """Lines for ``keras-vit info``: the CPU and its flags, the GPUs, the mixed-precision choice, oneDNN."""
    cpu = cpu_lib.cpu_info() if cpu is None else cpu
    gpus = gpu_lib.gpu_info() if gpus is None else gpus
    present = [f for f in cpu_lib.CPU_FLAGS if f in cpu.flags]
    lines = [
        f"cpu: {cpu.model}{f' (family {cpu.family})' if cpu.family else ''}, {cpu.cores} logical cores, {cpu.isa}",
        f"cpu flags: {', '.join(present) or 'none of ' + ', '.join(cpu_lib.CPU_FLAGS)}",
        "gpu: " + ("; ".join(f"{g.name} (compute capability {g.capability_label})" for g in gpus) if gpus else "none"),
    ]
    policy, reason = mixed_policy(cpu, gpus)
    lines.append(f"--mixed-precision: {policy} ({reason})")
    on, why = onednn_state(cpu, environ, onednn_set_by_keras_vit)
    lines.append(f"tensorflow onednn: {'unknown' if on is None else 'on' if on else 'off'} ({why})")
    return lines
