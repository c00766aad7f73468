"""Run ``python -m benchmarks`` as if on an AVX2-only x86-64 CPU, on an AVX-512 one (an emulation).

    python -m benchmarks.emulate_avx2 [the options of python -m benchmarks]
    TF_ENABLE_ONEDNN_OPTS=1 python -m benchmarks.emulate_avx2 ...   # oneDNN forced, as a user of such a CPU could

Nothing here changes the instructions a CPU *has*; it caps the instruction set that each library
*dispatches to* at run time, with the switches the libraries themselves offer. Every measurement
subprocess inherits these variables (``benchmarks.cli.run_task`` copies ``os.environ``):

* ``TF_ENABLE_ONEDNN_OPTS``: set to ``0`` unless given. TensorFlow 2.9+ turns its oneDNN ops on by
  default only on CPUs with AVX512_VNNI, AVX512_BF16, AVX-VNNI or AMX, so ``0`` is its default on an AVX2-only
  CPU; this CPU has them, so without this TensorFlow would take the oneDNN path here.
* ``ONEDNN_MAX_CPU_ISA=AVX2``: TensorFlow's oneDNN ops, *and* its "Eigen" MatMul (with
  ``TF_ENABLE_ONEDNN_OPTS=0`` TensorFlow's Eigen contraction calls oneDNN's ``sgemm`` for its blocks,
  which dispatches by CPU), and PyTorch's oneDNN. ``ONEDNN_VERBOSE=1`` prints ``isa:Intel AVX2``.
* ``XLA_FLAGS=--xla_cpu_max_isa=AVX2``: XLA's LLVM code generation (appended to a task's own
  ``XLA_FLAGS``).
* YNNPACK, which runs XLA:CPU's dots in TensorFlow 2.21 (``perf``: ``ynn::dot_fp32_5x64x1_1x16x1_avx512f``
  natively), ignores ``--xla_cpu_max_isa`` and has no switch: ``emulate_site/sitecustomize.py`` (put on
  ``PYTHONPATH``) writes the arch flags an AVX2+FMA3 CPU gives (``0x7f``: sse2 .. fma3) into its cached
  ``ynn::get_supported_arch_flags()`` static right after ``import tensorflow``, at offsets read with
  ``nm`` (``perf`` then shows ``ynn::dot_fp32_6x16x1_1x8x1_fma3``). Without ``nm`` or the symbols,
  XLA's dots stay AVX-512 (``emulation.libraries_report.xla_ynnpack_arch_flags`` is then not ``0x7f``).
* ``ATEN_CPU_CAPABILITY=avx2``: PyTorch's vectorized kernels (GELU, LayerNorm, softmax, attention).
  PyTorch's float32 GEMMs are MKL's, and MKL takes its ``def ... _zen`` AVX2/FMA kernels on every AMD
  CPU, AVX-512 or not (``perf``: ``mkl_blas_def_sgemm_kernel_0_zen``, ymm registers only);
  ``MKL_ENABLE_INSTRUCTIONS=AVX2`` is set as well, for an Intel CPU.
* ``OPENBLAS_CORETYPE=Haswell``: NumPy's OpenBLAS, kept for the NumPy GEMM of the ``limit`` section
  (``benchmarks.plan`` otherwise removes it there).
* ai_edge_litert's XNNPACK (TFLite) has no switch either: ``emulate_site`` runs that library's copy of
  cpuinfo once and clears its AVX-512 and AVX-VNNI booleans before XNNPACK reads them (offsets of
  ai_edge_litert 2.3.0's ``struct cpuinfo_x86_isa``, read from its ``init_hardware_config``; the check
  records the bytes it cleared: on the Zen 5 this was written on, ``1100111111111110100`` = avx_vnni,
  avx512f, (pf, er absent), cd, dq, bw, vl, ifma, vbmi, vbmi2, bitalg, vpopcntdq, vnni, bf16, (fp16
  absent), vp2intersect, (4vnniw, 4fmaps absent): the CPU's flags; ``perf`` then shows
  ``xnn_f32_gemm_minmax_ukernel_6x16__asm_amd64_fma3_broadcast`` instead of ``..._7x32__avx512f_broadcast``).

Not emulated: ONNX Runtime's MLAS reads CPUID itself, has no cap and its library has no symbols, so
its rows run AVX-512 kernels; nor the clock, caches and memory of a real AVX2 machine, nor the
256-bit data path of an older core. The JSON's ``machine`` says so under
``emulation``, with the capabilities each library reported in a check subprocess.
"""

import json
import os
import subprocess
import sys

from benchmarks import cli, plan

ISA_ENV = {
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "OPENBLAS_CORETYPE": "Haswell",
}
XLA_CAP = "--xla_cpu_max_isa=AVX2"
# ynn::arch_flag bits of TensorFlow 2.21's YNNPACK: sse2 ssse3 sse41 avx f16c avx2 fma3 (avx512f is 1 << 7)
YNN_AVX2_FLAGS = 0x7F
YNN_SYMBOLS = ("_ZZN3ynn24get_supported_arch_flagsEvE5flags", "_ZGVZN3ynn24get_supported_arch_flagsEvE5flags")
# ai_edge_litert 2.3.0's struct cpuinfo_x86_isa: avxvnni at 0x17, avx512f .. avx512_4fmaps at 0x1d .. 0x2e
XNN_ISA_OFFSETS = ("17", *(f"{o:x}" for o in range(0x1D, 0x2F)))
XNN_SYMBOLS = ("cpuinfo_initialize", "cpuinfo_isa")
SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "emulate_site")
NOT_EMULATED = (
    "ONNX Runtime (MLAS) dispatches on CPUID with no cap: onnxruntime rows use its AVX-512 kernels",
    "TFLite XNNPACK where emulation.libraries_report.xnnpack_cleared is not all 1s for avx512f and the rest",
    "XLA's dots (YNNPACK) where emulation.libraries_report.xla_ynnpack_arch_flags is not 0x7f",
    "clock, caches, memory bandwidth and core width of a real AVX2 CPU",
)

_TF_CHECK = """
import os, json, subprocess, sys
code = "import tensorflow as tf; a = tf.ones((64, 64)); tf.function(lambda a: a @ a)(a).numpy()"
out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ, ONEDNN_VERBOSE="1"))
isa = [l.split("isa:", 1)[1] for l in out.stdout.splitlines() if ",info,cpu,isa:" in l]
info = {"tensorflow_onednn_isa": isa[0] if isa else None}
code = "import os, tensorflow as tf; a = tf.ones((64, 64)); tf.function(lambda a: a @ a, jit_compile=True)(a).numpy(); print(os.environ.get('KERAS_VIT_BENCH_YNN_CAPPED'))"
out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
info["xla_ynnpack_arch_flags"] = (out.stdout.strip().splitlines() or [None])[-1]
code = "import os; from ai_edge_litert.interpreter import Interpreter; print(os.environ.get('KERAS_VIT_BENCH_XNN_CAPPED'))"
out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
info["xnnpack_cleared"] = (out.stdout.strip().splitlines() or [None])[-1]
env = dict(os.environ); env.pop("OPENBLAS_L2_SIZE", None)
code = "import numpy, threadpoolctl, json; print(json.dumps([i.get('architecture') for i in threadpoolctl.threadpool_info()]))"
out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
info["numpy_blas_architecture"] = json.loads(out.stdout) if out.returncode == 0 else None
print(json.dumps(info))
"""

_TORCH_CHECK = """
import json, torch
print(json.dumps({"torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}))
"""


def apply_environment(environ=os.environ):
    """Set the caps in ``environ`` (``TF_ENABLE_ONEDNN_OPTS`` only where not set); return what was set."""
    environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    environ.update(ISA_ENV)
    flags = environ.get("XLA_FLAGS", "")
    if XLA_CAP not in flags:
        environ["XLA_FLAGS"] = (flags + " " + XLA_CAP).strip()
    ynn, xnn = ynn_cap(), xnn_cap()
    if ynn:
        environ["KERAS_VIT_BENCH_YNN_CAP"] = ynn
    if xnn:
        environ["KERAS_VIT_BENCH_XNN_CAP"] = xnn
    if ynn or xnn:
        environ["PYTHONPATH"] = os.pathsep.join(p for p in (SITE, environ.get("PYTHONPATH")) if p)
    names = ("TF_ENABLE_ONEDNN_OPTS", "XLA_FLAGS", *ISA_ENV,
             "KERAS_VIT_BENCH_YNN_CAP", "KERAS_VIT_BENCH_XNN_CAP", "PYTHONPATH")
    return {name: environ[name] for name in names if name in environ}


def _symbols(package, library, names):
    """``(path, {name: hex offset})`` of ``names`` in ``library`` of ``package`` (``nm``), or None."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin:
        return None
    lib = os.path.join(os.path.dirname(spec.origin), library)
    try:
        out = subprocess.run(["nm", lib], capture_output=True, text=True, timeout=600).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    offsets = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] in names:
            offsets[parts[2]] = parts[0]
    return (lib, offsets) if len(offsets) == len(names) else None


def ynn_cap():
    """``path:flags_offset:guard_offset:flags`` for ``emulate_site``, or None (no TensorFlow, ``nm`` or symbols)."""
    found = _symbols("tensorflow", "libtensorflow_cc.so.2", YNN_SYMBOLS)
    if not found:
        return None
    lib, offsets = found
    return f"{lib}:{offsets[YNN_SYMBOLS[0]]}:{offsets[YNN_SYMBOLS[1]]}:{YNN_AVX2_FLAGS:x}"


def xnn_cap():
    """``path:cpuinfo_initialize:cpuinfo_isa:offsets`` for ``emulate_site``, or None."""
    found = _symbols("ai_edge_litert", "libpywrap_litert_common.so", XNN_SYMBOLS)
    if not found:
        return None
    lib, offsets = found
    return f"{lib}:{offsets[XNN_SYMBOLS[0]]}:{offsets[XNN_SYMBOLS[1]]}:{'+'.join(XNN_ISA_OFFSETS)}"


def _patch_plan():
    """Keep the caps in the tasks that set their own environment (XLA with oneDNN, the NumPy GEMM)."""
    plan.ONEDNN_XLA = {"XLA_FLAGS": plan.ONEDNN_XLA["XLA_FLAGS"] + " " + XLA_CAP}
    limit_tasks = plan.limit_tasks

    def capped_limit_tasks(args):
        tasks = limit_tasks(args)
        for task in tasks:
            if task["function"] == "numpy_gemm":
                task["env"] = dict(task.get("env", {}), OPENBLAS_CORETYPE=ISA_ENV["OPENBLAS_CORETYPE"])
        return tasks

    plan.limit_tasks = capped_limit_tasks


def check(peers_python=None):
    """What each library says it dispatches to under this environment (run in subprocesses)."""
    found = {}
    for python, code in ((sys.executable, _TF_CHECK), (peers_python, _TORCH_CHECK)):
        if not python or not os.path.exists(python):
            continue
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
        try:
            found.update(json.loads(out.stdout.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            found[os.path.basename(python) + "_check_error"] = out.stderr.strip()[-300:]
    return found


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    env = apply_environment()
    _patch_plan()
    args = cli.build_parser().parse_args(argv)
    checked = check(args.peers_python)
    print(f"emulated AVX2: {env}\n  libraries report: {checked}", file=sys.stderr, flush=True)
    machine = cli.machine

    def emulated_machine(peers_python=None):
        info = machine(peers_python)
        info["emulation"] = {"cpu_isa": "AVX2", "command": "python -m benchmarks.emulate_avx2 " + " ".join(argv),
                             "environment": env, "libraries_report": checked, "not_emulated": list(NOT_EMULATED)}
        return info

    cli.machine = emulated_machine
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
