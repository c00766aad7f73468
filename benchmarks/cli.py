"""``python -m benchmarks``: run the suite, print a table, write JSON.

Examples::

    python -m benchmarks                                  # everything (an hour or more on 2 cores)
    python -m benchmarks --only limit,inference --models B/16 --batch-sizes 8
    python -m benchmarks --quick --json /tmp/bench.json   # tiny model, seconds: proves the harness
    python -m benchmarks --gpu                            # CUDA: mixed precision + XLA vs timm AMP + torch.compile
"""

import argparse
import datetime
import functools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

from benchmarks import common, plan, report
from keras_vit.hardware import cpu as cpu_lib
from keras_vit.hardware import onednn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_PEERS = os.path.join(ROOT, ".venv-peers", "bin", "python")


def _csv(kind=str):
    return lambda text: [kind(v.strip()) for v in text.split(",") if v.strip()]


def build_parser():
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--only", type=_csv(), default=list(plan.SECTIONS),
                   help=f"comma-separated sections (default: all): {','.join(plan.SECTIONS)}")
    p.add_argument("--models", type=_csv(), default=["S/16", "B/16"], help="inference models (default S/16,B/16)")
    p.add_argument("--batch-sizes", type=_csv(int), default=[1, 8, 32], help="inference batch sizes (default 1,8,32)")
    p.add_argument("--precisions", type=_csv(), default=["float32", "bfloat16"], help="Keras precisions")
    p.add_argument("--runtimes", type=_csv(), default=list(plan.KERAS_RUNTIMES), help="Keras inference runtimes")
    p.add_argument("--onednn-xla", action="store_true", help="also run XLA with XLA_FLAGS=--xla_cpu_use_onednn=true")
    p.add_argument("--export-models", type=_csv(), default=["B/16"], help="models exported (default B/16)")
    p.add_argument("--export-batch-sizes", type=_csv(int), default=[1, 8], help="export batch sizes (default 1,8)")
    p.add_argument("--train-models", type=_csv(), default=["S/16", "main"], help="training models (default S/16,main)")
    p.add_argument("--train-batch-size", type=int, default=16, help="training batch for ViT models (default 16)")
    p.add_argument("--main-batch-size", type=int, default=128, help="training batch of the main-job model (default 128)")
    p.add_argument("--trained-model", default=os.path.join(ROOT, "runs", "mnist", "model.keras"),
                   help="a trained main-job model for the agreement section (default: what `make train` writes)")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="threads of every runtime (default: all cores)")
    p.add_argument("--min-seconds", type=float, default=5.0, help="time each measurement at least this long")
    p.add_argument("--no-peers", dest="peers", action="store_false", help="skip timm and keras-hub")
    p.add_argument("--peers-python", default=os.environ.get("BENCH_PEERS_PYTHON", DEFAULT_PEERS),
                   help="Python of the peer environment with torch, timm, keras-hub (`make peers`)")
    p.add_argument("--gpu", action="store_true", help="GPU mode; fails when no CUDA device is visible")
    p.add_argument("--quick", action="store_true", help="tiny model and sizes: checks the harness in seconds")
    p.add_argument("--filter", type=_csv(), default=None,
                   help="keep only measurements whose name contains one of these comma-separated strings")
    p.add_argument("--repeat", type=int, default=1,
                   help="run the whole plan this many times, interleaved (A B A B...); each row is the median run")
    p.add_argument("--in-process", action="store_true",
                   help="run Keras measurements in this process (faster start; peak memory is then cumulative)")
    p.add_argument("--timeout", type=float, default=900, help="seconds before a measurement is abandoned")
    p.add_argument("--work-dir", help="folder for exported files (default: a temporary folder)")
    p.add_argument("--json", dest="json_path", help="write the records as JSON here")
    p.add_argument("--list", action="store_true", help="print the plan and exit")
    return p


def _apply_quick(args):
    args.models = ["tiny"]
    args.export_models = ["tiny"]
    args.train_models = ["tiny"]
    if args.batch_sizes == [1, 8, 32]:  # the defaults; sizes given on the command line stay
        args.batch_sizes = [1, 2]
    if args.export_batch_sizes == [1, 8]:
        args.export_batch_sizes = [1]
    if args.train_batch_size == 16:
        args.train_batch_size = 2
    args.min_seconds = 0.05


def _check_args(args):
    unknown = set(args.only) - set(plan.SECTIONS)
    if unknown:
        raise SystemExit(f"--only: unknown section(s) {sorted(unknown)}; expected some of {plan.SECTIONS}")
    for model in args.models + args.export_models + args.train_models:
        if model not in common.MODELS and model != "main":
            raise SystemExit(f"Unknown model {model!r}: expected one of {sorted(common.MODELS) + ['main']}")
    from benchmarks.tf_setup import PRECISION_POLICIES

    bad = [p for p in args.precisions if p not in PRECISION_POLICIES]
    if bad:
        raise SystemExit(f"--precisions: unknown {bad}; expected some of {tuple(PRECISION_POLICIES)}")
    bad = [r for r in args.runtimes if r not in plan.KERAS_RUNTIMES]
    if bad:
        raise SystemExit(f"--runtimes: unknown {bad}; expected some of {plan.KERAS_RUNTIMES}")
    if any(b < 1 for b in args.batch_sizes + args.export_batch_sizes):
        raise SystemExit(f"Batch sizes must be positive. Received: {args.batch_sizes + args.export_batch_sizes}")


def gpu_available():
    """Whether TensorFlow sees a GPU, asked in a child process (this one stays free of TensorFlow); an empty
    ``CUDA_VISIBLE_DEVICES`` hides every CUDA device, which needs no process to tell."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return False
    code = "import tensorflow as tf; print(len(tf.config.list_physical_devices('GPU')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    try:
        return int(out.stdout.strip().splitlines()[-1]) > 0
    except (ValueError, IndexError):
        return False


def _skipped(task, reason):
    record = {key: task.get(key) for key in ("name", "model", "runtime", "precision", "batch_size")}
    record.update(images_per_second=None, latency_ms=None, peak_memory_mb=None, status="skipped", reason=reason)
    return record


def run_task(task, args):
    """Run one task in a fresh subprocess; return its records (an error or skip record on failure)."""
    python = sys.executable
    if task.get("peer"):
        if not args.peers_python or not os.path.exists(args.peers_python):
            return [_skipped(task, f"no peer environment at {args.peers_python} (run `make peers`)")]
        python = args.peers_python
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for key, value in task.get("env", {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    if not task.get("peer"):
        # keras_vit is measured as the keras-vit command runs it: oneDNN on where TensorFlow leaves it off
        # (AVX2 CPUs); peers (keras-hub) keep TensorFlow's default, as their users get it
        env.update(onednn.onednn_environment(environ=env))
    start = time.perf_counter()
    if args.in_process and not task.get("peer") and not task.get("env"):
        return [_in_process(task, start)]
    try:
        proc = subprocess.run([python, "-m", "benchmarks.worker", json.dumps(task)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        record = _skipped(task, f"timed out after {args.timeout:.0f} s")
        record["status"] = "error"
        return [record]
    records = [json.loads(line[len(common.MARKER):]) for line in proc.stdout.splitlines() if line.startswith(common.MARKER)]
    if not records:
        record = _skipped(task, f"worker exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
        record["status"] = "error"
        records = [record]
    for record in records:
        record.setdefault("tf_onednn", env.get(onednn.ONEDNN_VARIABLE, "default"))
        if record.get("status") == "error" and task.get("peer") == "keras-hub" and "ModuleNotFoundError" in str(record.get("error")):
            record.update(status="skipped", reason=f"keras-hub is not installed in {python}")
        record["section"] = task["section"]
        record["wall_s"] = round(time.perf_counter() - start, 1)
    return records


def _in_process(task, start):
    """Run a task in this process (``--in-process``): faster, but peak memory is the run's high-water mark."""
    import importlib
    import traceback

    common.pin_threads(task.get("threads", 2))
    try:
        module = importlib.import_module(f"benchmarks.{task['module']}")
        record = getattr(module, task["function"])(task)
    except Exception as error:
        traceback.print_exc()
        record = common.make_record(task, status="error", error=f"{type(error).__name__}: {error}"[:500])
    record.update(section=task["section"], wall_s=round(time.perf_counter() - start, 1), in_process=True)
    return record


def _progress(record):
    ips = record.get("images_per_second")
    value = (f"{ips:.2f} img/s" if ips else f"{record['gflops_per_second']:.1f} GFLOP/s" if record.get("gflops_per_second")
             else record.get("status"))
    print(f"  {record['name']}: {value} ({record.get('wall_s')} s)", file=sys.stderr, flush=True)


def write_json(args, argv, started, records, final=False):
    """Write the JSON document (also after each measurement, so a cut-off run keeps what it measured)."""
    if not args.json_path:
        return
    limit = report.limits(records)
    report.add_fractions(records, limit)
    out = {
        "command": "python -m benchmarks " + " ".join(argv if argv is not None else sys.argv[1:]),
        "started": started,
        "complete": final,
        "machine": machine(args.peers_python),
        "limit_gflops_per_second": limit,
        "bars": report.bars(records, limit, model="tiny" if args.quick else "B/16", batch=2 if args.quick else 8),
        "records": records,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.json_path)), exist_ok=True)
    tmp = args.json_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, args.json_path)


def collapse_repeats(records):
    """One record per measurement name: the run with the median images/s (all values kept in ``repeats``)."""
    groups = {}
    for record in records:
        groups.setdefault(record["name"], []).append(record)
    out = []
    for rows in groups.values():
        if len(rows) == 1:
            out.append(rows[0])
            continue
        ok = [r for r in rows if r.get("status") == "ok" and (r.get("images_per_second") or r.get("gflops_per_second"))]
        key = lambda r: r.get("images_per_second") or r.get("gflops_per_second")
        chosen = dict(sorted(ok, key=key)[(len(ok) - 1) // 2] if ok else rows[0])
        chosen["repeats"] = [key(r) for r in ok]
        out.append(chosen)
    return out


def run(args, on_record=lambda records: None):
    base = plan.build(args)
    tasks = [dict(task) for _ in range(max(1, args.repeat)) for task in base]
    for task in tasks:
        task.update(threads=args.threads, quick=args.quick, min_seconds=args.min_seconds)
        if args.quick:
            task["min_iters"] = 2
    if args.list:
        for task in tasks:
            print(task["name"])
        return []
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="keras-vit-bench-")
    records = []
    print(f"{len(tasks)} measurements, {args.threads} threads, exports in {work_dir}", file=sys.stderr, flush=True)
    for task in tasks:
        if task["section"] == "export":
            build = dict(task, function="build", work_dir=work_dir)
            built = run_task(build, args)[0]
            if built.get("status") != "built":
                records.append(built)
                _progress(built)
                on_record(records)
                continue
            task.update(path=built["path"], size_bytes=built["size_bytes"], build_s=built.get("build_s"))
        for record in run_task(task, args):
            if task.get("build_s") is not None:
                record["build_s"] = task["build_s"]
            records.append(record)
            _progress(record)
        on_record(records)
    return records


_VERSIONS_CODE = """
import importlib.metadata as m, json
names = {names!r}
out = {{}}
for n in names:
    try:
        out[n] = m.version(n)
    except m.PackageNotFoundError:
        pass
print(json.dumps(out))
"""


@functools.lru_cache(maxsize=None)  # asked once per run, not after every measurement
def library_versions(python=None, names=("tensorflow", "keras", "numpy", "keras-vit", "ai-edge-litert", "onnxruntime")):
    """``{distribution: version}`` of the libraries that run the measurements, as ``python`` sees them."""
    try:
        out = subprocess.run([python or sys.executable, "-c", _VERSIONS_CODE.format(names=tuple(names))],
                             capture_output=True, text=True, timeout=60)
        return json.loads(out.stdout) if out.returncode == 0 else {}
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return {}


def machine(peers_python=None):
    """The machine a results file was measured on: CPU model, ISA class and the flags that matter, cores, versions.

    ``cpu_isa`` ("AVX-512" or "AVX2") is what the README's tables name beside each figure;
    ``onednn`` says whether TensorFlow's oneDNN kernels were on in keras_vit's measurements
    (TensorFlow enables them by default only on CPUs with AVX512_VNNI, AVX512_BF16 or AMX; the
    ``keras-vit`` command and these benchmarks set ``TF_ENABLE_ONEDNN_OPTS=1`` on other AVX2 CPUs;
    the environment's value overrides).
    """

    cpu = cpu_lib.cpu_info()
    info = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "cpu": cpu.model,
        "cpu_family": cpu.family,
        "cpu_isa": cpu.isa,
        "cpu_flags": sorted(cpu.flags),
        # as keras_vit's measurements ran: the environment's value, else what the keras-vit command sets on this
        # CPU (run_task applies the same; peers keep TensorFlow's default)
        "onednn": os.environ.get(onednn.ONEDNN_VARIABLE, onednn.onednn_environment().get(onednn.ONEDNN_VARIABLE, "default")),
        "load_average": os.getloadavg(),
        "versions": library_versions(),
    }
    if peers_python and os.path.exists(peers_python):
        info["peer_versions"] = library_versions(peers_python, ("torch", "timm", "keras-hub", "tensorflow", "keras", "numpy"))
    return info


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.quick:
        _apply_quick(args)
    _check_args(args)
    if args.gpu and not gpu_available():
        print("benchmarks: --gpu asked for, but TensorFlow sees no CUDA device here; nothing was run.", file=sys.stderr)
        return 2
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    records = run(args, on_record=lambda records: write_json(args, argv, started, collapse_repeats(records)))
    if args.list:
        return 0
    records = collapse_repeats(records)
    limit = report.limits(records)
    report.add_fractions(records, limit)
    results = report.bars(records, limit, model="tiny" if args.quick else "B/16", batch=2 if args.quick else 8)
    print(report.table(records))
    print()
    print(f"GEMM limit (best measured): {limit}")
    print(report.bars_table(results))
    write_json(args, argv, started, records, final=True)
    return 0 if records and all(r.get("status") in ("ok", "skipped") for r in records) else 1
