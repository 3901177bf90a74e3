#!/usr/bin/env bash
# The whole test suite, as CI runs it: install tenfold with its test dependencies, then
#   1. pytest with the compiled kernels,
#   2. pytest again with TENFOLD_PUREPYTHON=1 (the reference kernels),
#   3. mypy.stubtest on every kernel stub,
#   4. the asv benchmarks in quick mode, so they cannot rot.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

# pip's output is shown only when it fails (this machine's pip config is chatty).
pip_install() {
    local log
    log=$(mktemp)
    if "$PY" -m pip install --disable-pip-version-check "$@" >"$log" 2>&1; then
        rm -f "$log"
    else
        cat "$log"
        rm -f "$log"
        return 1
    fi
}

echo "== install tenfold[test]"
pip_install ".[test]"

# PyTorch (CPU) for the DataLoader and torch.save tests, only where its wheel lies on this
# machine's disk: from the registry it would be a multi-GB CUDA build. Without it those tests
# skip with a reason.
if ls /opt/wheels/torch-2.13.0* >/dev/null 2>&1; then
    pip_install "torch==2.13.0" || echo "note: torch==2.13.0 did not install; torch tests will skip"
else
    echo "note: no local torch wheel; torch tests will skip"
fi

# Run from a neutral directory so `import tenfold` is the installed package, not the tree.
here=$(pwd)
export TENFOLD_SHARED=${TENFOLD_SHARED:-$(cd "$here/.." && pwd)/shared}

# pyfolds 1.0.2, the FOLD reference, for the peer tests. Its metadata asks for torch and
# torchvision (a CUDA build from the registry) but its code needs neither to write and read
# FOLD files: install it alone; its tests skip with a reason when it is absent.
pip_install --no-deps "pyfolds==1.0.2" || echo "note: pyfolds did not install; its peer tests will skip"

echo "== pytest (compiled kernels)"
"$PY" -m pytest "$here/tests" -p no:cacheprovider --rootdir "$here" -c "$here/pyproject.toml"

echo "== pytest (TENFOLD_PUREPYTHON=1)"
TENFOLD_PUREPYTHON=1 "$PY" -m pytest "$here/tests" -p no:cacheprovider --rootdir "$here" \
    -c "$here/pyproject.toml" -m "not slow" -q

echo "== stubtest"
mods=$("$PY" -c "import tenfold._kernels as k; print(' '.join('tenfold._kernels.' + f for f in k.FAMILIES))")
(cd /tmp && "$PY" -m mypy.stubtest $mods)

echo "== asv (quick)"
"$PY" scripts/asv_quick.py
