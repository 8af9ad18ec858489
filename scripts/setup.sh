# Sourced by scripts/demo and scripts/test: makes the Python environment
# (.venv with numpy, ml_dtypes, pytest) and builds the library into build/.
# Idempotent: a second run only rebuilds what changed.
set -euo pipefail
FLASHC_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$FLASHC_ROOT"
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import numpy, ml_dtypes, pytest" 2>/dev/null; then
    echo "== setting up .venv (numpy, ml_dtypes, pytest)"
    python3 -m venv .venv
    .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
fi
PY="$FLASHC_ROOT/.venv/bin/python"
JOBS=$(nproc 2>/dev/null || echo 2)
echo "== building flashc into build/ (FLASHC_CUDA=${FLASHC_CUDA:-AUTO})"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DFLASHC_CUDA="${FLASHC_CUDA:-AUTO}" >build-configure.log 2>&1 ||
    { cat build-configure.log; exit 1; }
cmake --build build -j"$JOBS" 2>&1 | grep -Ev '^\[ *[0-9]+%\]' || true
test -f build/lib/libflashc.so || { echo "build failed"; exit 1; }
export PYTHONPATH="$FLASHC_ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
