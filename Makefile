# Two entry points on a fresh clone: `make demo` (the main job) and `make test`.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
PY := $(VENV)/bin/python
# bytecode cached once: with PYTHONDONTWRITEBYTECODE set, each kernel and child process the
# tests start compiles all it imports again
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test lint wheel bench bench-quick browser

# --no-compile: a module's bytecode is written when it is first imported, not for every
# installed file (torch and what it needs: 5,400 files, 30 s of CPU; `import torch` reads 730)
$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile $(TORCH)
	$(PY) -m pip install -q --no-compile -e ".[dev,torch]"
	touch $@

demo: $(VENV)/.installed
	$(PY) tools/demo.py

test: $(VENV)/.installed
	$(PY) -m pytest $(PYTEST_ARGS)

# The wheel to upload to Colab (`!pip install colab_gpu_guard-*.whl`): pip only, no .venv.
wheel:
	rm -f dist/colab_gpu_guard-*.whl
	$(PYTHON) -m pip wheel --no-deps -w dist .

lint: $(VENV)/.installed
	$(PY) -m ruff format --check .
	$(PY) -m ruff check .

# The peers the benchmarks compare against. Installed without their declared dependencies:
# ipyexperiments asks for the deprecated `pynvml` package (nvidia-ml-py already provides the
# module) and pytorch-memlab for torch, which must never be touched; their small pure-Python
# needs are listed instead, with torch and numpy held at the installed versions.
BENCH_PEERS := ipyexperiments pytorch-memlab gpustat
BENCH_PEER_DEPS := calmsize pandas blessed wcwidth

$(VENV)/.bench: $(VENV)/.installed
	$(PY) -m pip freeze | grep -iE '^(torch|numpy)==' > $(VENV)/bench-constraints.txt
	$(PY) -m pip install -q --no-deps $(BENCH_PEERS)
	$(PY) -m pip install -q -c $(VENV)/bench-constraints.txt $(BENCH_PEER_DEPS)
	touch $@

bench: $(VENV)/.bench
	$(PY) -m bench

bench-quick: $(VENV)/.bench
	$(PY) -m bench --quick

browser:
	bash .ci/browser.sh
