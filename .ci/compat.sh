#!/usr/bin/env bash
# Run the test suite in one of the compatibility environments, each its own virtualenv
# under .venvs/:
#   colab    Colab's pins (IPython 7.34, ipywidgets 7.7.1, ipykernel 6.17.1, ...) + torch
#   minimal  no torch and no NumPy: the non-torch parts must work and say what is missing
# The "latest" environment is the main .venv that `make test` builds.
set -euo pipefail
# bytecode cached once, not compiled in every process (.ci/run); written at first import, not
# for every installed file (--no-compile, as the Makefile)
unset PYTHONDONTWRITEBYTECODE
cd "$(dirname "$0")/.."
env_name=${1:?usage: .ci/compat.sh colab|minimal}
venv=.venvs/$env_name
py=$venv/bin/python

case "$env_name" in
  colab)
    pins=(torch==2.13.0 "ipython==7.34.0" "ipywidgets==7.7.1" "ipykernel==6.17.1"
          "traitlets==5.7.1" "jupyter_client==7.4.9" "nvidia-ml-py==13.610.43"
          "psutil==5.9.5" "numpy==2.0.*" "pandas==2.2.*") ;;
  minimal)
    pins=() ;;
  *) echo "unknown environment: $env_name" >&2; exit 2 ;;
esac

if [ ! -x "$py" ]; then
  python3 -m venv "$venv"
fi
"$py" -m pip install -q --upgrade pip
if [ ${#pins[@]} -gt 0 ]; then
  "$py" -m pip install -q --no-compile "${pins[@]}"
fi
# the pins stay: only what the pins leave open is resolved here
"$py" -m pip install -q --no-compile -e ".[dev]" "${pins[@]}"
if [ "$env_name" = minimal ]; then
  "$py" -m pip uninstall -q -y torch numpy pandas pyarrow 2>/dev/null || true
  "$py" - <<'PY'
import importlib.util, sys
present = [m for m in ("torch", "numpy", "pandas", "pyarrow") if importlib.util.find_spec(m)]
sys.exit(f"minimal environment still has {present}" if present else 0)
PY
fi
"$py" -c "import IPython, ipywidgets; print('$env_name: IPython', IPython.__version__, 'ipywidgets', ipywidgets.__version__)"
"$py" -m pytest -q -p no:cacheprovider "${@:2}"
