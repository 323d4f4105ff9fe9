#!/usr/bin/env bash
# Browser tests of the %gpu_panel widget in two real front ends, each in its own virtualenv
# under .venvs/ (gitignored), driven by Playwright in Debian's headless Chromium:
#   browser-lab  JupyterLab 4 + ipywidgets 8
#   browser-nb6  classic Notebook 6.5 + ipywidgets 7.7.1 + widgetsnbextension 3.6 and
#                IPython 7.34 (closest to Colab's front end); the panel's unit tests run
#                on that floor in the Colab suite (.ci/compat.sh colab)
# Installs what it needs itself (chromium from Debian; never `playwright install`), exits
# non-zero on any failure. Screenshots: $CGG_BROWSER_OUTPUT (default test-output/browser).
# An environment whose pins did not change since the last run is reused.
#
# Usage: .ci/browser.sh [setup|tests]: Chromium and the environments only, or the tests
# only (the environments made before); both when not told (.ci/run makes them once the
# README's suite ends, beside the Colab suite, and runs the tests after).
set -euo pipefail
mode=${1:-all}
case "$mode" in
  all|setup|tests) ;;
  *) echo "usage: .ci/browser.sh [setup|tests]" >&2; exit 2 ;;
esac
unset PYTHONDONTWRITEBYTECODE  # bytecode cached once, not compiled in every process (.ci/run)
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1 DEBIAN_FRONTEND=noninteractive
started=$SECONDS
export CGG_BROWSER_OUTPUT=${CGG_BROWSER_OUTPUT:-$PWD/test-output/browser}
mkdir -p "$CGG_BROWSER_OUTPUT" .venvs
rm -f "$CGG_BROWSER_OUTPUT"/*.png  # screenshots of this run only

TORCH=torch==2.13.0  # resolves to the local CPU wheel on these machines
COMMON=("$TORCH" "numpy" "playwright==1.55.0" "pytest==8.4.2")
LAB_PINS=("jupyterlab==4.4.10" "ipywidgets==8.1.7" "jupyterlab_widgets==3.0.17")
NB6_PINS=("notebook==6.5.7" "ipywidgets==7.7.1" "widgetsnbextension==3.6.10"
          "ipython==7.34.0" "ipykernel==6.29.5" "jupyter_client==7.4.9" "traitlets==5.16.1"
          "pyzmq==27.3.0" "tornado==6.6.1")

make_env() {  # make_env NAME PIN...: a virtualenv with torch, this package and the pins
  local name=$1 venv=.venvs/$1
  shift
  local want="$*"
  if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.cgg-pins" 2>/dev/null)" = "$want" ]; then
    echo "$name: reusing $venv"
    return
  fi
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --no-compile "$TORCH"
  "$venv/bin/python" -m pip install -q --no-compile -e . "$@"
  echo "$want" >"$venv/.cgg-pins"
}

setup() {  # Chromium, and both environments side by side
  echo "== chromium (Debian's package)"
  apt-get update -qq
  apt-get install -y -qq chromium >/dev/null
  /usr/bin/chromium --version
  echo "== front-end environments (in parallel)"
  make_env browser-lab "${COMMON[@]}" "${LAB_PINS[@]}" >"$CGG_BROWSER_OUTPUT/env-lab.log" 2>&1 &
  local lab_job=$! nb6_job status=0
  make_env browser-nb6 "${COMMON[@]}" "${NB6_PINS[@]}" >"$CGG_BROWSER_OUTPUT/env-nb6.log" 2>&1 &
  nb6_job=$!
  wait $lab_job || { echo "browser-lab: install failed"; tail -n 40 "$CGG_BROWSER_OUTPUT/env-lab.log"; status=1; }
  wait $nb6_job || { echo "browser-nb6: install failed"; tail -n 40 "$CGG_BROWSER_OUTPUT/env-nb6.log"; status=1; }
  [ $status -eq 0 ] || exit 1
  grep -v "^WARNING: Location" "$CGG_BROWSER_OUTPUT/env-lab.log" "$CGG_BROWSER_OUTPUT/env-nb6.log" || true
  echo "environments ready after $((SECONDS - started)) s"
}

[ "$mode" = tests ] || setup
[ "$mode" != setup ] || exit 0

# The two front ends are tested at the same time, each in two halves (the layout tests
# alone took as long as the rest), each half its own server on a free port, its own
# browser and kernel: most of their time is spent waiting on a page or a kernel.
LAYOUT=tests/browser/test_panel_layout.py
echo "== JupyterLab 4 + ipywidgets 8 and Notebook 6.5 + ipywidgets 7.7.1, side by side"
declare -A names=([lab]="JupyterLab 4 + ipywidgets 8" [nb6]="Notebook 6.5 + ipywidgets 7.7.1")
declare -A frontend=([lab]=lab [nb6]=notebook6)
declare -A quiet=([lab]="" [nb6]="-W ignore::DeprecationWarning")  # Notebook 6.5's own
declare -A jobs_of=()
for env in lab nb6; do
  for half in layout other; do
    if [ $half = layout ]; then chosen=("$LAYOUT"); else chosen=(tests/browser --ignore="$LAYOUT"); fi
    # shellcheck disable=SC2086  # quiet: no option, or one option and its value
    CGG_BROWSER_FRONTEND=${frontend[$env]} ".venvs/browser-$env/bin/python" -m pytest -q \
      -p no:cacheprovider ${quiet[$env]} "${chosen[@]}" \
      >"$CGG_BROWSER_OUTPUT/tests-$env-$half.log" 2>&1 &
    jobs_of[$env-$half]=$!
  done
done
status=0
for env in lab nb6; do
  for half in layout other; do
    wait "${jobs_of[$env-$half]}" || status=1
    echo "== ${names[$env]}: the $half tests"
    cat "$CGG_BROWSER_OUTPUT/tests-$env-$half.log"
  done
done

echo "screenshots: $(ls "$CGG_BROWSER_OUTPUT"/*.png 2>/dev/null | tr '\n' ' ')"
echo "browser tests done in $((SECONDS - started)) s"
exit $status
