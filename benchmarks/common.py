"""Pieces shared by the suite and its workers: the record, timing, memory, FLOPs.

Standard library and NumPy only: the peer environments import this module too.
"""

import json
import os
import resource
import statistics
import time

RECORD_FIELDS = (
    "name", "model", "runtime", "precision", "batch_size", "images_per_second", "latency_ms", "peak_memory_mb",
)
MARKER = "BENCH_RECORD "

# width, depth, mlp, heads, patch of the models the suite knows (the paper's Table 1)
MODELS = {
    "Ti/16": dict(hidden_size=192, num_layers=12, mlp_dim=768, num_heads=3, patch_size=16, image_size=224),
    "S/16": dict(hidden_size=384, num_layers=12, mlp_dim=1536, num_heads=6, patch_size=16, image_size=224),
    "B/16": dict(hidden_size=768, num_layers=12, mlp_dim=3072, num_heads=12, patch_size=16, image_size=224),
    # --quick: a tiny ViT so the whole suite runs in seconds
    "tiny": dict(hidden_size=32, num_layers=2, mlp_dim=64, num_heads=4, patch_size=8, image_size=32),
}
TIMM_NAMES = {"Ti/16": "vit_tiny_patch16_224", "S/16": "vit_small_patch16_224", "B/16": "vit_base_patch16_224"}
# the 2025-26 backbones, built on both sides from timm's registration at 224 (keras_vit reads its arguments from
# keras_vit/weights/data/timm_registrations.json; timm from the function registered under the name); the
# sizes here only count the FLOPs: prefix tokens (class + registers) and the MLP's matrices (3 for SwiGLU)
REGISTERED = {
    "DINOv3-B/16": dict(timm="vit_base_patch16_dinov3", hidden_size=768, num_layers=12, mlp_dim=3072,
                        num_heads=12, patch_size=16, image_size=224, prefix=5, mlp_matrices=2),
    "EVA-02-B/14": dict(timm="eva02_base_patch14_224", hidden_size=768, num_layers=12, mlp_dim=2048,
                        num_heads=12, patch_size=14, image_size=224, prefix=1, mlp_matrices=3),
}
MODELS.update({name: {k: v for k, v in row.items() if k not in ("timm", "prefix", "mlp_matrices")}
               for name, row in REGISTERED.items()})
TIMM_NAMES.update({name: row["timm"] for name, row in REGISTERED.items()})


def forward_macs(model, num_classes=1000):
    """Multiply-accumulates of one forward pass for one image (GEMMs and attention only)."""
    if model not in MODELS:
        return None
    c = MODELS[model]
    d, m, p, size = c["hidden_size"], c["mlp_dim"], c["patch_size"], c["image_size"]
    patches = (size // p) ** 2
    n = patches + REGISTERED.get(model, {}).get("prefix", 1)
    per_layer = n * (4 * d * d + REGISTERED.get(model, {}).get("mlp_matrices", 2) * d * m) + 2 * n * n * d
    return patches * p * p * 3 * d + c["num_layers"] * per_layer + d * num_classes


def forward_gflop(model):
    """GFLOP (2 x MACs) of one forward pass for one image; B/16 at 224: 35.1."""
    macs = forward_macs(model)
    return None if macs is None else 2 * macs / 1e9


def pin_threads(threads):
    """Environment for a worker that must use ``threads`` cores (set before importing a runtime)."""
    threads = str(int(threads))
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TF_NUM_INTRAOP_THREADS"):
        os.environ[var] = threads
    os.environ["TF_NUM_INTEROP_THREADS"] = "1"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def peak_memory_mb():
    """Resident-set high-water mark of this process, in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def time_calls(fn, warmup=2, min_iters=3, min_seconds=5.0, max_iters=200):
    """Median wall time (seconds) of ``fn()`` after ``warmup`` calls; ``fn`` must block until done."""
    for _ in range(warmup):
        fn()
    times = []
    start = time.perf_counter()
    while len(times) < min_iters or (time.perf_counter() - start < min_seconds and len(times) < max_iters):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), len(times)


def measure(task, step, **extra):
    """Time ``step``'s first call (trace/compile), then its median over the task's run; return the record."""
    start = time.perf_counter()
    step()
    first_call = time.perf_counter() - start
    seconds, iters = time_calls(step, warmup=1, min_iters=task.get("min_iters", 3), min_seconds=task.get("min_seconds", 5.0))
    return make_record(task, seconds, iters, first_call_s=round(first_call, 2), **extra)


def time_with_probe(step, probe, probe_gflop, warmup=1, min_iters=3, min_seconds=5.0, max_iters=200):
    """Time ``step`` in rounds interleaved with a GEMM ``probe`` of ``probe_gflop`` GFLOP.

    On a shared machine the load changes during a run; the probe measures the
    GEMM rate the step could have had at that very moment. Returns the median
    step time, the rounds, and the median GEMM GFLOP/s of the probes.
    """
    for _ in range(warmup):
        step()
        probe()
    steps, rates = [], []
    start = time.perf_counter()
    while len(steps) < min_iters or (time.perf_counter() - start < min_seconds and len(steps) < max_iters):
        t = time.perf_counter()
        probe()
        rates.append(probe_gflop / (time.perf_counter() - t))
        t = time.perf_counter()
        step()
        steps.append(time.perf_counter() - t)
    return statistics.median(steps), len(steps), statistics.median(rates)


def make_record(task, seconds_per_batch=None, iters=None, **extra):
    """A result record for ``task`` from the median time of one batch."""
    batch = task.get("batch_size")
    record = {key: task.get(key) for key in ("name", "model", "runtime", "precision", "batch_size")}
    record.update(images_per_second=None, latency_ms=None, peak_memory_mb=round(peak_memory_mb(), 1))
    if seconds_per_batch:
        record["latency_ms"] = round(seconds_per_batch * 1e3, 3)
        if batch:
            record["images_per_second"] = round(batch / seconds_per_batch, 3)
    record["iterations"] = iters
    record["threads"] = task.get("threads")
    record["load_average"] = round(os.getloadavg()[0], 2)
    record["status"] = "ok"
    record.update(extra)
    return record


def emit(record):
    """Print a record for the parent process to collect."""
    print(MARKER + json.dumps(record), flush=True)
