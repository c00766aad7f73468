# The README's two commands: `make train` (set up + main job) and `make test` (set up + tests).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
OUTPUT ?= runs/mnist

# the fast suite's pytest arguments: make test runs them, make test-avx2 the same on QEMU's CPU
FAST_SUITE = -m pytest -m "not slow" -q -p no:cacheprovider -n 2 --dist worksteal --doctest-modules keras_vit tests

.PHONY: install train test test-slow test-avx2 test-avx512-no-bf16 peers bench clean

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

install: $(VENV)/.installed

train: install
	$(VENV)/bin/keras-vit train --output $(OUTPUT)

# the package's floors (the import-linter contracts in setup.cfg), then the tests and every docstring
# example in keras_vit/ as a doctest; --dist worksteal: an idle worker takes tests queued for the other, so a long
# test near the end does not leave one of the two cores idle. Bytecode is written even where the environment says
# PYTHONDONTWRITEBYTECODE (some CI images do): each worker's collection rewrites the asserts of ~230 test modules
# (~4 s) and each of the tests' Python processes compiles keras_vit (~1 s) unless an earlier one left the .pyc
test: install
	$(VENV)/bin/lint-imports
	PYTHONDONTWRITEBYTECODE= $(PY) $(FAST_SUITE)

test-slow: install
	$(PY) -m pytest -m slow -q -p no:cacheprovider

# the fast suite on an emulated AVX2-only CPU (QEMU `-cpu max`: no AVX-512, no bfloat16), child processes
# included; needs qemu-user (apt-get install qemu-user) and runs ~9x slower than make test (tools/qemu-avx2)
test-avx2: install
	KERAS_VIT_QEMU_PYTHON=$(abspath $(PY)) PYTHONPATH=$(CURDIR)/tools/qemu-avx2 tools/qemu-avx2/python $(FAST_SUITE)

# the fast suite as on an Intel Xeon with AVX-512 and VNNI but no bfloat16 or AMX, on an AMD CPU with AVX-512 VNNI:
# /proc/cpuinfo without the bf16 / AMX flags, oneDNN and XLA capped at that class's instructions; CPUID (XNNPACK,
# NumPy) still tells this CPU (tools/avx512-no-bf16/run says what is and is not emulated)
test-avx512-no-bf16: install
	tools/avx512-no-bf16/run $(MAKE) --no-print-directory test

# the benchmarks' peers (timm with torch + torchvision, keras-hub) live in their own venv, not in the test venv
PEERS ?= .venv-peers
$(PEERS)/.installed: benchmarks/requirements-peers.txt
	$(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install --quiet --upgrade pip
	$(PEERS)/bin/python -m pip install --quiet -r benchmarks/requirements-peers.txt
	touch $@

peers: $(PEERS)/.installed

bench: install peers
	$(PY) -m benchmarks --peers-python $(PEERS)/bin/python $(BENCH_ARGS)

clean:
	rm -rf $(VENV) runs *.egg-info
