# Two entry points: `make demo` and `make test`. Both create .venv and install into it.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# --system-site-packages lets a machine's preinstalled CuPy be seen inside the venv.
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml plugins/klaraptor-bench/pyproject.toml
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@# The evaluation (`klaraptor bench`, the recorded demo's scoring) is a plug-in distribution.
	$(PY) -m pip install -q -e plugins/klaraptor-bench
	$(PY) -m pip install -q -e '.[isa]' || echo "could not install the isa extra; tests/test_isa_* that compile will be skipped"
	@# klaraptor.triton's tests run in Triton's CPU interpreter: torch's CPU build (2.13.0, the file
	@# this kind of machine keeps; plain `torch` would fetch a CUDA build of several GB) and triton.
	@# Skipped where torch and triton are already importable (a GPU machine's own).
	@$(PY) -c 'import torch, triton' >/dev/null 2>&1 || \
	  $(PY) -m pip install -q 'torch==2.13.0' 'triton==3.6.0' || \
	  echo "could not install torch/triton; tests/frontends/test_triton.py will be skipped"
	@if command -v nvidia-smi >/dev/null 2>&1 && ! $(PY) -c 'import cupy' >/dev/null 2>&1; then \
	  echo "GPU found: installing the cuda extra (CuPy)"; \
	  $(PY) -m pip install -q -e '.[cuda]' || echo "could not install CuPy; the demo will use recorded data"; \
	fi
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/klaraptor demo

test: $(STAMP)
	$(VENV)/bin/ruff check src plugins tests benchmarks experiments
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check src plugins tests benchmarks experiments
	$(VENV)/bin/ruff format --check src plugins tests benchmarks experiments

clean:
	rm -rf $(VENV) build *.egg-info plugins/klaraptor-bench/src/*.egg-info
