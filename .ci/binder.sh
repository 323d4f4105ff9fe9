#!/usr/bin/env bash
# Check binder/requirements.txt the way repo2docker uses it: `pip install -r` from the
# repository root into a fresh virtualenv, then run the quickstart in a kernel there.
# Offline here, PyTorch's CPU index cannot be reached, so its --extra-index-url line is
# dropped and torch==2.13.0 resolves to the CPU wheel available locally.
set -euo pipefail
# bytecode cached once, not compiled in every process (.ci/run); written at first import, not
# for every installed file (--no-compile, as the Makefile)
unset PYTHONDONTWRITEBYTECODE
cd "$(dirname "$0")/.."
venv=.venvs/binder
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
grep -v -- '--extra-index-url' binder/requirements.txt > "$venv/requirements.offline.txt"
"$venv/bin/python" -m pip install -q --no-compile -r "$venv/requirements.offline.txt"
# Binder's base image brings the Jupyter server and kernel; bring the pieces the demo needs.
"$venv/bin/python" -m pip install -q --no-compile ipykernel nbclient nbformat
"$venv/bin/python" - <<'PY'
import torch, colab_gpu_guard
assert torch.version.cuda is None, f"Binder must get the CPU build, got CUDA {torch.version.cuda}"
print("binder env: torch", torch.__version__, "colab_gpu_guard", colab_gpu_guard.__version__)
PY
PATH="$PWD/$venv/bin:$PATH" bash binder/postBuild
"$venv/bin/python" tools/demo.py --output "$venv/quickstart.html"
