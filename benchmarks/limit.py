"""The machine's limit: measured GEMM throughput (GFLOP/s) in float32 and bfloat16.

Each backend reports its best rate over a square GEMM and the shape of ViT's
MLP GEMM at batch 8 (1576 x 768 @ 768 x 3072); the suite takes the best
backend of each precision as the limit every result is compared with.
"""

import numpy as np

from benchmarks import common

SHAPES = ((2048, 2048, 2048), (1576, 768, 3072))
QUICK_SHAPES = ((256, 256, 256),)


def _shapes(task):
    return QUICK_SHAPES if task.get("quick") else SHAPES


def _best(run, task):
    """Best GFLOP/s of ``run(m, k, n)`` (seconds per GEMM) over the task's shapes."""
    best, best_shape = 0.0, None
    for m, k, n in _shapes(task):
        seconds = run(m, k, n)
        rate = 2.0 * m * k * n / seconds / 1e9
        if rate > best:
            best, best_shape = rate, f"{m}x{k}x{n}"
    record = common.make_record(task, status="ok", gflops_per_second=round(best, 2), shape=best_shape)
    return record


def _median_seconds(fn, task):
    seconds, _ = common.time_calls(fn, warmup=2, min_iters=5, min_seconds=task.get("min_seconds", 2.0))
    return seconds


def tensorflow_gemm(task):
    """``tf.linalg.matmul`` under ``tf.function``, with XLA (``runtime='tf-xla'``) or oneDNN (``'tf-graph'``)."""
    from benchmarks import tf_setup

    tf = tf_setup.tensorflow(task)
    dtype = {"float32": tf.float32, "bfloat16": tf.bfloat16}[task["precision"]]
    fn = tf.function(lambda a, b: tf.linalg.matmul(a, b), jit_compile=task["runtime"].startswith("tf-xla"))

    def run(m, k, n):
        a = tf.cast(tf.random.normal((m, k)), dtype)
        b = tf.cast(tf.random.normal((k, n)), dtype)
        return _median_seconds(lambda: fn(a, b).numpy(), task)

    return _best(run, task)


def numpy_gemm(task):
    """NumPy's BLAS (float32 only)."""
    rng = np.random.default_rng(0)

    def run(m, k, n):
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        return _median_seconds(lambda: a @ b, task)

    record = _best(run, task)
    try:
        from threadpoolctl import threadpool_info

        record["blas"] = ",".join(f"{i.get('internal_api')}:{i.get('architecture')}" for i in threadpool_info())
    except ImportError:
        pass
    return record


def torch_gemm(task):
    """``torch.matmul`` on CPU (run in the peer environment)."""
    import torch

    torch.set_num_threads(int(task.get("threads", 2)))
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[task["precision"]]

    def run(m, k, n):
        a = torch.randn(m, k).to(dtype)
        b = torch.randn(k, n).to(dtype)
        with torch.inference_mode():
            return _median_seconds(lambda: torch.matmul(a, b), task)

    return _best(run, task)

