#!/usr/bin/env bash
# Everything the GPU run checks, most important first, each step's log under $OUT (a step
# cut off by its timeout keeps what it wrote). Run from the project root on a machine with
# an NVIDIA GPU, after `../shared/tools/device-wheels.sh blessed` (and a gpustat wheel) put
# the missing pure-Python wheels in .whl/:  OUT=/some/dir bash tools/gpu_check.sh
# Only some steps: GPU_CHECK_ONLY='pytest snapshots' (names: versions snapshots pytest
# status captures notebooks bench-status bench-tracker bench); GPU_CHECK_PYTEST='-k trace' narrows the tests; GPU_CHECK_RECORD='--only oom'
# records only some scenarios.
# Step budgets (seconds) can be scaled with GPU_CHECK_SCALE (default 1).
set -u
export PYTHONUNBUFFERED=1
# The logs are written in a scratch folder and packed into $OUT/gpu-check.tgz at every
# step (one file comes back whatever the step count; a cut-off run keeps the last pack).
RESULT=${OUT:?set OUT to the folder for the results}
OUT=$(mktemp -d /tmp/gpu-check.XXXX)
SCALE=${GPU_CHECK_SCALE:-1}
t() { echo $(($1 * SCALE)); }
pack() { tar czf "$RESULT/gpu-check.tgz" -C "$OUT" .; }
step() { pack; echo "== $(date -u +%T) $*" | tee -a "$OUT/steps.log"; }
ONLY=${GPU_CHECK_ONLY:-versions snapshots pytest status captures notebooks bench-status bench-tracker bench}
want() { case " $ONLY " in *" $1 "*) return 0 ;; esac; return 1; }

step install
[ -d /tmp/site/IPython ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
  > "$OUT/pip.log" 2>&1 || echo "pip install failed (rc $?)" | tee -a "$OUT/steps.log"
export PYTHONPATH=/tmp/site:$PWD
python3 -m ipykernel install --prefix /tmp/site-kernel --name python3 > /dev/null 2>&1
export JUPYTER_PATH=/tmp/site-kernel/share/jupyter

if want versions; then
step versions
{
  nvidia-smi
  nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,memory.used,driver_version,compute_cap,compute_mode,mig.mode.current,ecc.mode.current,power.limit --format=csv
  nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv
  python3 -c "import sys, torch, IPython, numpy; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version()); print('IPython', IPython.__version__, 'numpy', numpy.__version__)"
  python3 -c "import cupy; print('cupy', cupy.__version__)" 2>&1 | tail -1
  python3 -c "import jax; print('jax', jax.__version__, jax.devices())" 2>&1 | tail -1
} > "$OUT/versions.txt" 2>&1
nvidia-smi -q > "$OUT/nvidia-smi-q.txt" 2>&1
fi

if want snapshots; then
step "cuda snapshots (tools/record_cuda_snapshots.py)"
timeout "$(t 110)" python3 tools/record_cuda_snapshots.py "$OUT/cuda_snapshots" ${GPU_CHECK_RECORD:-} > "$OUT/snapshots.log" 2>&1
echo "rc $?" >> "$OUT/snapshots.log"
fi

if want pytest; then
step "pytest -m gpu"
timeout "$(t 240)" python3 -m pytest -m gpu -v -p no:cacheprovider -rs --junitxml="$OUT/gpu-tests.xml" \
  --ignore=tests/browser ${GPU_CHECK_PYTEST:-} > "$OUT/gpu-tests.log" 2>&1
echo "rc $?" >> "$OUT/gpu-tests.log"
fi

if want status; then
step "status --json, panel static HTML"
python3 -m colab_gpu_guard status --json > "$OUT/status.json" 2> "$OUT/status.err"
python3 -m colab_gpu_guard status --processes > "$OUT/status.txt" 2>&1
python3 - > "$OUT/panel.log" 2>&1 <<EOF
import torch
x = torch.ones(2**26, device="cuda")  # 256 MiB held, so the panel has something to show
from colab_gpu_guard.status import gpu_status
from colab_gpu_guard.status.panel_static import render_static_panel
snap = gpu_status(namespace={"x": x})
open("$OUT/panel_static.html", "w").write("<!doctype html><meta charset=utf-8>" + render_static_panel(snap, cell=1))
open("$OUT/status_html.html", "w").write("<!doctype html><meta charset=utf-8>" + snap._repr_html_())
print(snap)
EOF
fi

if want captures; then
step "the README's examples on the GPU (tools/readme_outputs.py --gpu): docs/gpu-outputs.md"
timeout "$(t 120)" python3 tools/readme_outputs.py --gpu "$OUT/gpu-outputs.md" > "$OUT/captures.log" 2>&1
echo "rc $?" >> "$OUT/captures.log"
fi

if want notebooks; then
step notebooks
for nb in ${GPU_CHECK_NOTEBOOKS:-notebooks/*.ipynb}; do
  name=$(basename "$nb" .ipynb)
  timeout "$(t 60)" python3 tools/demo.py --notebook "$nb" --output "$OUT/$name.html" > "$OUT/notebook-$name.log" 2>&1
  echo "rc $?" >> "$OUT/notebook-$name.log"
done
fi

if want bench || want bench-status; then
step "bench: status (nvidia-smi -q, gpustat), tracker with CUDA initialised, trace"
want bench-status && timeout "$(t 45)" python3 bench/bench_status.py --quick --json "$OUT/bench-status.json" \
  > "$OUT/bench-status.log" 2>&1
want bench-tracker && timeout "$(t 60)" python3 bench/bench_tracker.py --quick --cuda --json "$OUT/bench-tracker-cuda.json" \
  > "$OUT/bench-tracker-cuda.log" 2>&1
want bench && timeout "$(t 30)" python3 - > "$OUT/hook-parts-cuda.log" 2>&1 <<EOF
# what one per-cell hook's CUDA reads cost, piece by piece (us per call, median of 5 x 2000)
import statistics, time, torch
torch.ones(1, device="cuda")
from colab_gpu_guard import cuda_health
from colab_gpu_guard.cells import tracker
from colab_gpu_guard.frameworks import torch as ts
def us(f, n=2000):
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        runs.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(runs)
parts = {
    "torch._C._cuda_memoryStats(0)": lambda: torch._C._cuda_memoryStats(0),
    "cuda_initialized": lambda: ts.cuda_initialized(torch),
    "cuda_device_count": lambda: ts.cuda_device_count(torch),
    "cuda_health.broken_reason": cuda_health.broken_reason,
    "allocator_stats(count=1)": lambda: ts.allocator_stats(torch, 1),
    "tracker._cuda_stats()": tracker._cuda_stats,
    "torch.cuda.memory_allocated()": torch.cuda.memory_allocated,
    "torch.cuda.device_count()": torch.cuda.device_count,
    "torch.cuda.is_initialized()": torch.cuda.is_initialized,
}
for name, f in parts.items():
    print(f"{us(f):9.2f} us  {name}")
EOF
for bench in bench/bench_trace.py; do
  want bench && [ -f "$bench" ] || continue
  timeout "$(t 60)" python3 "$bench" --quick --json "$OUT/$(basename "$bench" .py).json" > "$OUT/$(basename "$bench" .py).log" 2>&1
done
fi
step done
pack
