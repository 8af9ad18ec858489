# Sourced by scripts/demo and scripts/test: makes the Python environment
# (.venv with numpy, ml_dtypes, pytest) and builds the library into build/.
# Idempotent: a second run only rebuilds what changed.
#
# The build prints one line per finished target (and, on a terminal, one
# self-updating progress line); the compiler's full output goes to
# build/build.log (configure: build/configure.log). A failed configure or
# build prints the compiler's errors (the tail of the log) and exits 1: no
# caller ever goes on with a stale library. FLASHC_CUDA=OFF|ON|AUTO (default
# AUTO: the CUDA module when nvcc is found) is passed to CMake.
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

# The errors of a failed build: compiler diagnostics with a little context,
# else the last lines of the log. $1: log file.
fc_build_errors() {
    local errs
    errs=$(grep -E -A4 '(^|[^A-Za-z_])(error|fatal error|Error [0-9]+)([: ]|$)|undefined reference' "$1" |
           grep -Ev '^\[ *[0-9]+%\]|^make(\[[0-9]+\])?: \*\*\* Waiting' | head -n 40 || true)
    if [ -n "$errs" ]; then echo "$errs"; else tail -n 30 "$1"; fi
}

# fc_build DIR LABEL [cmake -D options...]: configure and build DIR, quietly.
# Progress: a line per finished target with the percentage and the elapsed
# time; on a terminal also one line, rewritten in place, naming the file
# being compiled. Exits 1 (the caller's whole script) on failure.
fc_build() {
    local dir=$1 label=$2
    shift 2
    local t0=$SECONDS tty=0 line pct="" last_pct=-10 last_t=$SECONDS worked=0 cfg="$dir/configure.log" log="$dir/build.log"
    [ -t 1 ] && tty=1
    mkdir -p "$dir"
    if ! cmake -S . -B "$dir" "$@" >"$cfg" 2>&1; then
        echo "== $label: configure FAILED (full log: $cfg)"
        tail -n 30 "$cfg"
        exit 1
    fi
    # A module left by an earlier CUDA build would be loaded beside the new
    # library: remove it when this configuration builds none.
    if [ -f "$dir/lib/libflashc_cuda.so" ] && { grep -q '^FLASHC_CUDA:[A-Z]*=OFF' "$dir/CMakeCache.txt" ||
       ! grep -q '^CMAKE_CUDA_COMPILER:[A-Z]*=.*nvcc' "$dir/CMakeCache.txt"; }; then
        echo "== $label: removing $dir/lib/libflashc_cuda.so (left by an earlier build; this one builds no CUDA module)"
        rm -f "$dir/lib/libflashc_cuda.so"
    fi
    if grep -q '^CMAKE_CUDA_COMPILER:[A-Z]*=.*nvcc' "$dir/CMakeCache.txt" 2>/dev/null &&
       ! grep -q '^FLASHC_CUDA:[A-Z]*=OFF' "$dir/CMakeCache.txt" && [ ! -f "$dir/lib/libflashc_cuda.so" ]; then
        echo "== $label: building into $dir/ with the CUDA module (first build: several minutes on 2 cores;" \
             "FLASHC_CUDA=OFF skips it). Log: $log"
    else
        echo "== $label: building into $dir/ (log: $log)"
    fi
    # Make prints "[ 45%] Building C object …", Ninja "[12/80] Building …".
    local step_re='(Building|Compiling|Linking) [A-Za-z+ ]* (.*)$'
    set +o pipefail
    : >"$log" # exists before tail opens it
    cmake --build "$dir" -j"$JOBS" >>"$log" 2>&1 &
    local pid=$!
    # Follow the log while the build runs. The build is in no pipe: its exit
    # status (wait, below) is its own, and a display that dies hides nothing.
    tail -n +1 --pid="$pid" -f "$log" 2>/dev/null | while IFS= read -r line; do
        if [[ $line =~ ^\[\ *([0-9]+)%\] ]]; then
            pct=${BASH_REMATCH[1]}
        elif [[ $line =~ ^\[([0-9]+)/([0-9]+)\] ]]; then
            pct=$((100 * BASH_REMATCH[1] / BASH_REMATCH[2]))
        else
            continue
        fi
        if [[ $line == *"Built target "* ]]; then
            # None at all when the build had nothing to do.
            [ $worked = 1 ] || continue
            [ $tty = 1 ] && printf '\r\033[K'
            printf '   [%3s%%] built %-22s %4d s\n' "$pct" "${line##*Built target }" $((SECONDS - t0))
            last_t=$SECONDS
        elif [[ $line =~ $step_re ]]; then
            worked=1
            local verb=${BASH_REMATCH[1]} what=${BASH_REMATCH[2]}
            what=${what#*CMakeFiles/*.dir/}
            if [ $tty = 1 ]; then
                printf '\r\033[K   [%3s%%] %s %s' "$pct" "${verb,,}" "${what:0:64}"
            elif [ "$pct" -ge $((last_pct + 25)) ] || [ $((SECONDS - last_t)) -ge 60 ]; then
                # A plain log gets a line every quarter or every minute, not one per file.
                last_pct=$pct last_t=$SECONDS
                printf '   [%3s%%] %s %s\n' "$pct" "${verb,,}" "${what:0:64}"
            fi
        fi
    done || true # the display only: the build's own status is taken by wait below
    set -o pipefail
    local rc=0
    wait "$pid" || rc=$?
    [ $tty = 1 ] && printf '\r\033[K'
    if [ $rc -ne 0 ]; then
        echo "== $label: build FAILED (exit $rc) after $((SECONDS - t0)) s; the compiler said:"
        fc_build_errors "$log" | sed 's/^/   /'
        echo "== full log: $log"
        exit 1
    fi
    if ! grep -qE '^\[ *[0-9]+%\] (Building|Linking)|^\[[0-9]+/[0-9]+\]' "$log"; then
        echo "   up to date"
    else
        echo "   done in $((SECONDS - t0)) s (ptxas/compiler warnings, if any: $log)"
    fi
}

fc_build build "flashc" -DCMAKE_BUILD_TYPE=Release -DFLASHC_CUDA="${FLASHC_CUDA:-AUTO}"
test -f build/lib/libflashc.so || { echo "== build/lib/libflashc.so missing after the build (log: build/build.log)"; exit 1; }
export PYTHONPATH="$FLASHC_ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
