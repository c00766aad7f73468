"""On the PYTHONPATH of `make test-avx2` only: the tests start Python with ``sys.executable``; make that the
QEMU wrapper, so that child processes (CLI runs, workers, exports checked in a fresh process) run on the
emulated AVX2-only CPU as well, not on the machine's own."""
import os
import sys

if os.environ.get("KERAS_VIT_QEMU_PYTHON"):
    sys.executable = os.path.join(os.path.dirname(os.path.abspath(__file__)), "python")
