"""keras_vit, timm and each library's GEMM timed turn by turn, for ratios on a machine shared with other work.

    python -m benchmarks.paired_peer --model B/16 --batch 8 --rounds 30 --json out.json
    python -m benchmarks.paired_peer --emulate-avx2 ...        # with benchmarks.emulate_avx2's caps
    TF_ENABLE_ONEDNN_OPTS=1 python -m benchmarks.paired_peer --emulate-avx2 ...

``python -m benchmarks`` runs each measurement in its own subprocess, one after the other, so on a
machine whose other work comes and goes (a load average of 4 to 6 on 2 cores while other engineers
run tests) two rows of one run can see a different machine; and the load hurts PyTorch's OpenMP
threads more than TensorFlow's pool. Here every runtime is a long-lived worker process (same
thread pinning, same environment as the suite's workers), and a round asks each in turn for one
timed call while the others wait on a pipe, the order rotating each round. Each round gives a ratio
keras_vit / timm and a fraction of the best GEMM measured in that round; the report is their
medians over the rounds, beside each runtime's median images/s (or GFLOP/s).

GEMM workers (the ``limit`` of this run): TensorFlow ``tf.function`` MatMul (oneDNN or Eigen, as the
environment says) and the same under XLA, PyTorch, NumPy; each call is three GEMMs of ViT's MLP
shape at batch 8 (1576x768 @ 768x3072), the shape the suite's ``limit`` also measures.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import common

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNTIMES = ("keras-function", "keras-xla", "timm", "gemm-tf", "gemm-tf-xla", "gemm-torch", "gemm-numpy")
EXPORT_RUNTIMES = ("tflite-float32", "onnxruntime")  # built by keras_vit.export in the worker (not in the default list)
TORCH_RUNTIMES = ("timm", "gemm-torch")
M, K, N = 1576, 768, 3072
GEMM_GFLOP = 3 * 2.0 * M * K * N / 1e9


def build_export(runtime, model, batch, path):
    """Write ``runtime``'s file for ``model`` to ``path`` with keras_vit.export (run alone: tf2onnx needs GBs)."""
    from benchmarks import tf_setup

    tf_setup.tensorflow({"threads": 2})
    keras_model = tf_setup.build_model(model)
    if runtime == "tflite-float32":
        from keras_vit.export import tflite

        content = tflite.convert(keras_model, "float32", None, batch_size=batch)
    else:
        from keras_vit.export import onnx

        content = onnx.convert(keras_model).SerializeToString()
    with open(path, "wb") as f:
        f.write(content)


def _worker_step(runtime, model, batch, threads, artifact=None):
    """Build ``runtime`` in this process; return a function that runs one timed unit of work."""
    if runtime in ("keras-function", "keras-xla"):
        import numpy as np

        from benchmarks import tf_setup

        tf = tf_setup.tensorflow({"threads": threads})
        keras_model = tf_setup.build_model(model)
        x = tf.constant(tf_setup.images(keras_model, batch))
        fn = tf.function(lambda images: keras_model(images, training=False), jit_compile=runtime == "keras-xla")
        return lambda: np.asarray(fn(x))
    if runtime in EXPORT_RUNTIMES:  # the file build_export wrote; no TensorFlow in this process
        import numpy as np

        size = common.MODELS[model]["image_size"]
        x = np.random.default_rng(0).uniform(0, 255, (batch, size, size, 3)).astype("float32")
        if runtime == "tflite-float32":
            from keras_vit.export import tflite

            it = tflite.interpreter(artifact, num_threads=threads)
            detail, out = it.get_input_details()[0], it.get_output_details()[0]["index"]

            def step():
                it.set_tensor(detail["index"], x)
                it.invoke()
                np.asarray(it.get_tensor(out))

            return step
        from keras_vit.export import onnx

        session = onnx.session(artifact, num_threads=threads)
        name = session.get_inputs()[0].name
        return lambda: session.run(None, {name: x})
    if runtime == "timm":
        from benchmarks import peer_timm

        torch, device = peer_timm._setup({"threads": threads})
        timm_model = peer_timm._model({"model": model}, torch, device).eval()
        size = common.MODELS[model]["image_size"]
        x = torch.rand(batch, 3, size, size)

        def step():
            with torch.inference_mode():
                timm_model(x)

        return step
    if runtime in ("gemm-tf", "gemm-tf-xla"):
        from benchmarks import tf_setup

        tf = tf_setup.tensorflow({"threads": threads})
        a, b = tf.random.normal((M, K)), tf.random.normal((K, N))
        fn = tf.function(lambda a, b: tf.linalg.matmul(a, b), jit_compile=runtime == "gemm-tf-xla")
        return lambda: [fn(a, b).numpy() for _ in range(3)]
    if runtime == "gemm-torch":
        import torch

        torch.set_num_threads(threads)
        a, b = torch.randn(M, K), torch.randn(K, N)

        def step():
            with torch.inference_mode():
                for _ in range(3):
                    torch.matmul(a, b)

        return step
    if runtime == "gemm-numpy":
        import numpy as np

        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)
        return lambda: [a @ b for _ in range(3)]
    raise ValueError(f"Unknown runtime: expected one of {RUNTIMES + EXPORT_RUNTIMES}. Received: runtime={runtime!r}")


def worker(runtime, model, batch, threads, artifact=None):
    """Child side: build, warm up, print ``ready``; then one timed call per ``run`` line on stdin."""
    common.pin_threads(threads)
    step = _worker_step(runtime, model, batch, threads, artifact)
    for _ in range(3):  # the first call traces and compiles
        step()
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        start = time.perf_counter()
        step()
        print(f"{time.perf_counter() - start:.6f}", flush=True)


def _env(runtime, emulate):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if runtime == "gemm-numpy" and not emulate:  # as benchmarks.plan does for the NumPy GEMM
        env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None) if runtime == "gemm-numpy" else None
    return env


def run(args, on_round=lambda summary, rounds: None):
    """All rounds; ``on_round(summary, rounds)`` after each (the JSON is rewritten, so a cut-off run keeps its rounds)."""
    procs, logs, artifacts = {}, {}, {}
    folder = tempfile.mkdtemp(prefix="paired-peer-")
    for runtime in args.runtimes:  # exports first, each in its own process, before any worker holds memory
        if runtime in EXPORT_RUNTIMES:
            artifacts[runtime] = os.path.join(folder, runtime + (".tflite" if runtime.startswith("tflite") else ".onnx"))
            code = (f"from benchmarks.paired_peer import build_export; "
                    f"build_export({runtime!r}, {args.model!r}, {args.batch}, {artifacts[runtime]!r})")
            subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(runtime, args.emulate_avx2), check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for runtime in args.runtimes:
        python = args.peers_python if runtime in TORCH_RUNTIMES else sys.executable
        code = (f"from benchmarks.paired_peer import worker; "
                f"worker({runtime!r}, {args.model!r}, {args.batch}, {args.threads}, {artifacts.get(runtime)!r})")
        procs[runtime] = subprocess.Popen([python, "-c", code], cwd=ROOT, env=_env(runtime, args.emulate_avx2),
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                          stderr=logs.setdefault(runtime, tempfile.TemporaryFile("w+")))
        if procs[runtime].stdout.readline().strip() != "ready":  # one at a time: builds do not overlap
            procs[runtime].kill()
            logs[runtime].seek(0)
            raise RuntimeError(f"worker {runtime} did not start: {logs[runtime].read()[-2000:]}")
    gflop = common.forward_gflop(args.model) * args.batch
    rounds = []
    try:
        for i in range(args.rounds):
            order = list(args.runtimes[i % len(args.runtimes):]) + list(args.runtimes[:i % len(args.runtimes)])
            seconds = {}
            for runtime in order:
                time.sleep(0.05)
                procs[runtime].stdin.write("run\n")
                procs[runtime].stdin.flush()
                seconds[runtime] = float(procs[runtime].stdout.readline())
            rounds.append({"order": order, "seconds": seconds, "load_average": round(os.getloadavg()[0], 2)})
            print(f"round {i + 1}: " + ", ".join(f"{r} {_rate(r, s, args.batch):.2f}" for r, s in seconds.items())
                  + f" (load {rounds[-1]['load_average']})", file=sys.stderr, flush=True)
            on_round(*summarize(rounds, args, gflop))
    finally:
        for proc in procs.values():
            proc.stdin.close()
            proc.wait(timeout=60)
    return summarize(rounds, args, gflop)


def _rate(runtime, seconds, batch):
    return GEMM_GFLOP / seconds if runtime.startswith("gemm-") else batch / seconds


def summarize(rounds, args, gflop):
    med = statistics.median
    out = {"rates": {}, "per_round": {}}
    for runtime in args.runtimes:
        values = [_rate(runtime, r["seconds"][runtime], args.batch) for r in rounds]
        out["rates"][runtime] = {"median": round(med(values), 3), "min": round(min(values), 3),
                                 "max": round(max(values), 3), "unit": "GFLOP/s" if runtime.startswith("gemm-") else "img/s"}
    gemms = [r for r in args.runtimes if r.startswith("gemm-")]
    for runtime in ("keras-function", "keras-xla", *EXPORT_RUNTIMES):
        if runtime not in args.runtimes:
            continue
        if "timm" in args.runtimes:
            ratios = [r["seconds"]["timm"] / r["seconds"][runtime] for r in rounds]
            out["per_round"][f"{runtime} / timm"] = round(med(ratios), 3)
        if gemms:
            fractions = [gflop / r["seconds"][runtime] / max(GEMM_GFLOP / r["seconds"][g] for g in gemms) for r in rounds]
            out["per_round"][f"{runtime} / best GEMM of the round"] = round(med(fractions), 3)
        if runtime in EXPORT_RUNTIMES and "keras-function" in args.runtimes:
            ratios = [r["seconds"]["keras-function"] / r["seconds"][runtime] for r in rounds]
            out["per_round"][f"{runtime} / keras-function"] = round(med(ratios), 3)
    if gemms:
        best = [max(gemms, key=lambda g: GEMM_GFLOP / r["seconds"][g]) for r in rounds]
        out["best_gemm_counts"] = {g: best.count(g) for g in gemms}
        out["best_gemm_gflops_median"] = round(med(max(GEMM_GFLOP / r["seconds"][g] for g in gemms) for r in rounds), 2)
    out["model_gflop_per_batch"] = round(gflop, 2)
    out["load_average"] = {"median": med(r["load_average"] for r in rounds), "min": min(r["load_average"] for r in rounds),
                           "max": max(r["load_average"] for r in rounds)}
    return out, rounds


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.paired_peer", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="B/16", choices=[m for m in common.MODELS])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--runtimes", type=lambda t: [v for v in t.split(",") if v], default=list(RUNTIMES))
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--peers-python", default=os.path.join(ROOT, ".venv-peers", "bin", "python"))
    p.add_argument("--emulate-avx2", action="store_true", help="apply benchmarks.emulate_avx2's caps to every worker")
    p.add_argument("--json", dest="json_path")
    args = p.parse_args(argv)
    from benchmarks import cli

    argv_text = " ".join(sys.argv[1:] if argv is None else argv)
    emulation = None
    if args.emulate_avx2:
        from benchmarks import emulate_avx2

        env = emulate_avx2.apply_environment()
        emulation = {"cpu_isa": "AVX2", "environment": env, "libraries_report": emulate_avx2.check(args.peers_python),
                     "not_emulated": list(emulate_avx2.NOT_EMULATED)}
    else:
        from keras_vit.hardware.onednn import onednn_environment

        os.environ.update(onednn_environment())  # as the keras-vit command runs on an AVX2-only CPU
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    machine = cli.machine(args.peers_python)
    if emulation:
        machine["emulation"] = emulation

    def write(summary, rounds, complete=False):
        if not args.json_path:
            return
        machine["load_average"] = os.getloadavg()
        doc = {"command": "python -m benchmarks.paired_peer " + argv_text, "started": started, "complete": complete,
               "model": args.model, "batch_size": args.batch, "threads": args.threads, "machine": machine,
               "summary": summary, "rounds": rounds}
        os.makedirs(os.path.dirname(os.path.abspath(args.json_path)), exist_ok=True)
        with open(args.json_path + ".tmp", "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(args.json_path + ".tmp", args.json_path)

    summary, rounds = run(args, on_round=write)
    write(summary, rounds, complete=True)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
