"""keras_vit's benchmark suite: throughput against peers and against the machine's GEMM limit.

Run ``python -m benchmarks --help`` (or ``make bench``). Every measurement runs
in its own subprocess (so its peak memory is its own), all of them in one run so
that ratios compare like with like. See ``benchmarks/README.md``.
"""
