#!/usr/bin/env bash
# make test's run: the test suite, and beside it the template check (scripts/template_check.py) at
# the lowest CPU priority, so that the template's own build takes the CPU the suite leaves idle
# while its tests wait on processes, servers and browsers (a first check compiles the template once
# more: about 3 minutes of 2 cores on its own). The suite's output comes first, then the check's;
# the run fails if either does. Usage: scripts/run_tests.sh PYTHON [pytest arguments...]
set -u
PY="$1"
shift
mkdir -p build
log=build/template-check.log
nice -n 19 "$PY" scripts/template_check.py >"$log" 2>&1 &
check=$!
trap 'kill "$check" 2>/dev/null; wait "$check" 2>/dev/null; exit 130' INT TERM
"$PY" -m pytest -n "${TEST_WORKERS:-2}" "$@"
suite=$?
wait "$check"
template=$?
trap - INT TERM
echo "---- make template-check, run beside the suite (its whole output: $log)"
if [ "$template" -ne 0 ]; then
	cat "$log"
	echo "make template-check FAILED (exit $template)"
else
	tail -n 3 "$log"
fi
if [ "$suite" -ne 0 ]; then
	exit "$suite"
fi
exit "$template"
