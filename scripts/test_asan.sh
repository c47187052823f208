#!/usr/bin/env bash
# Build openreg_lab._C with AddressSanitizer + UndefinedBehaviorSanitizer into build/asan (the
# normal in-place build is left alone) and run the test suite against it.
#   bash scripts/test_asan.sh [pytest args...]      (also: make test-asan)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

stage=build/asan
log="$stage/build.log"
mkdir -p "$stage"
if ! OPENREG_SANITIZE=1 .venv/bin/python setup.py -q build_ext --build-temp "$stage/temp" \
    --build-lib "$stage/lib" >"$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi
# The sanitized extension beside a copy of the Python sources: PYTHONPATH puts it first.
cp openreg_lab/*.py openreg_lab/*.yaml "$stage/lib/openreg_lab/"

# Python itself is not instrumented, so the runtimes are preloaded; CPython's own allocations
# at exit are not our leaks.
export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:detect_odr_violation=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export PYTHONPATH="$PWD/$stage/lib"
exec .venv/bin/python -m pytest -p no:cacheprovider -q "$@"
