# The README's two commands: `make train` (set up + main job) and `make test` (set up + tests).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
OUTPUT ?= runs/mnist

.PHONY: install train test test-slow bench clean

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

install: $(VENV)/.installed

train: install
	$(VENV)/bin/keras-vit train --output $(OUTPUT)

test: install
	$(PY) -m pytest -m "not slow" -q -p no:cacheprovider

test-slow: install
	$(PY) -m pytest -m slow -q -p no:cacheprovider

bench: install
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) runs *.egg-info
