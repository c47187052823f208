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
# Reports go to files: pytest captures the tests' stderr, and an aborting process loses it.
reports="$PWD/$stage/reports"
rm -rf "$reports"
mkdir -p "$reports"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:detect_odr_violation=0:log_path=$reports/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$reports/ubsan"
# The sanitized package first, then this directory for `tests.*`. PYTHONSAFEPATH stops `python -m`
# and `python -c` (also in the tests' subprocesses) from putting the working directory first on
# sys.path: it holds openreg_lab with the normal, uninstrumented build, which would win.
export PYTHONPATH="$PWD/$stage/lib:$PWD"
export PYTHONSAFEPATH=1
where=$(.venv/bin/python -c 'import openreg_lab._C as c; print(c.__file__)')
case "$where" in
  "$PWD/$stage/lib/"*) ;;
  *)
    echo "test_asan: openreg_lab._C imports from $where, not the sanitized build in $stage" >&2
    exit 1
    ;;
esac
status=0
.venv/bin/python -m pytest -p no:cacheprovider -q "$@" || status=$?
if [ -n "$(ls -A "$reports")" ]; then
  cat "$reports"/* >&2
  echo "test_asan: sanitizer reports above (also in $reports)" >&2
  [ "$status" -ne 0 ] || status=1
fi
exit "$status"
