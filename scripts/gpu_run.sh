#!/usr/bin/env bash
# What runs on a lent GPU machine (issue 28): install tenfold and the dependencies that machine
# lacks from the wheels carried in .whl/ (no network there), check the device load for
# correctness, then measure it: scripts/gpu_bench.py, its table on stdout and its JSON in $OUT;
# then the TARIDX build's scaling with cores (scripts/taridx_scaling.py) and the convert of
# 1.5 GiB of safetensors to every target on that many cores (scripts/convert_rss.py --sample).
#
#   bash scripts/gpu_run.sh                 # from the repository root, .whl/ carried
#   GB=1 REPEAT=3 bash scripts/gpu_run.sh   # smaller or shorter
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/tenfold-gpu-out}
mkdir -p "$OUT"
start=$(date +%s)
echo "== install ($(ls .whl/*.whl | wc -l) wheels)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
python3 - <<'PY'
import os, sys
import numpy, torch
import tenfold, tenfold._kernels as k
print("python", sys.version.split()[0], "torch", torch.__version__, "numpy", numpy.__version__,
      "tenfold", tenfold.__version__, "from", os.path.dirname(tenfold.__file__))
print("cuda", torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else "")
bad = []
for f in k.FAMILIES:  # a kernel that fails to load is reported, the run goes on (slower open)
    try:
        k.load(f, "compiled")
    except ImportError as e:
        bad.append(f"{f}: {e}")
print("compiled kernels:", "all" if not bad else "MISSING " + "; ".join(bad))
print("cpus", os.cpu_count(), "usable", len(os.sched_getaffinity(0)))
PY
nvidia-smi --query-gpu=name,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv || true
echo "== check ($(( $(date +%s) - start )) s)"
timeout 120 python3 scripts/gpu_bench.py --check 2>&1 | tee "$OUT/gpu_check.txt"
echo "== bench ($(( $(date +%s) - start )) s)"
timeout 360 python3 scripts/gpu_bench.py --gb "${GB:-3}" --repeat "${REPEAT:-5}" \
    --out "$OUT/gpu_bench.json" 2>&1 | tee "$OUT/gpu_bench.txt"
echo "== taridx scaling ($(( $(date +%s) - start )) s)"
timeout 150 python3 scripts/taridx_scaling.py --out "$OUT/taridx_scaling.json" 2>&1 \
    | tee "$OUT/taridx_scaling.txt" || true
echo "== convert to every target ($(( $(date +%s) - start )) s)"
timeout 150 python3 scripts/convert_rss.py --sample --sources safetensors --mib 128 --count 12 \
    --out /dev/shm --repeat 2 2>&1 | tee "$OUT/convert_targets.txt" || true
echo "== done in $(( $(date +%s) - start )) s"
