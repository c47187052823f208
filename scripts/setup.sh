#!/usr/bin/env bash
# Idempotent set-up used by `make demo` and `make test`: a .venv with the pinned torch and our
# dependencies, an editable install with its entry points, and an incremental build of the C++
# extension.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check -q)

if [ ! -x "$PY" ]; then
  python3 -m venv "$VENV"
fi

# torch first and pinned: an unpinned or ranged torch would pull several GB of CUDA wheels.
if ! "$PY" -c 'import torch, sys; sys.exit(torch.__version__.split("+")[0] != "2.13.0")' 2>/dev/null; then
  "${PIP[@]}" install "torch==2.13.0"
fi

# Build tools (and numpy, which torch imports) first: the build below needs only them and torch.
# The dependencies pyproject.toml declares (runtime, test and lab extras) and Debian's chromium
# install in the background while the extension compiles (the build is CPU-bound, they are mostly
# download and unpacking); the set-up waits for both before it ends. torch==2.13.0 is already
# satisfied, so pip adds nothing CUDA.
if ! "$PY" -c 'import setuptools, wheel, ninja, numpy' 2>/dev/null; then
  "${PIP[@]}" install setuptools wheel ninja numpy
fi
stamp="$VENV/.deps-$(sha1sum pyproject.toml | cut -c1-12)"
deps_log="$VENV/deps.log"
deps_pid=""
if [ ! -f "$stamp" ]; then
  "$PY" - >"$VENV/requirements.txt" <<'PYEOF'
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project["optional-dependencies"]
print("\n".join(project["dependencies"] + extras["test"] + extras["lab"]))
PYEOF
  "${PIP[@]}" install -r "$VENV/requirements.txt" >"$deps_log" 2>&1 &
  deps_pid=$!
fi
chromium_log="$VENV/chromium.log"
bash scripts/install_chromium.sh >"$chromium_log" 2>&1 &
chromium_pid=$!

# Development install: the venv imports openreg_lab from this source tree, where the extension is
# built in place below (one incremental build, no second copy), and knows openreg-lab as installed,
# with its entry points: torch's autoload of the openreg device on `import torch`, and Dynamo's
# backend "openreg". Rewritten on each run (idempotent, no build): see scripts/dev_install.py.
"$PY" scripts/dev_install.py

# Incremental (ninja) build of openreg_lab._C against the installed torch.
log="$VENV/build.log"
start=$(date +%s)
if ! "$PY" setup.py -q build_ext --inplace >"$log" 2>&1; then
  cat "$log" >&2
  echo "setup: building the C++ extension failed (log above, also in $log)" >&2
  exit 1
fi
echo "setup: openreg_lab._C is up to date (build step took $(( $(date +%s) - start )) s)"

if [ -n "$deps_pid" ]; then
  if ! wait "$deps_pid"; then
    cat "$deps_log" >&2
    echo "setup: installing the dependencies of pyproject.toml failed (log above, also in $deps_log)" >&2
    exit 1
  fi
  touch "$stamp"
fi
"$PY" -c "import openreg_lab" || { echo "setup: openreg_lab does not import after the build" >&2; exit 1; }

# Debian's chromium for the browser tests (never fails the set-up: it says what is missing).
wait "$chromium_pid" || true
cat "$chromium_log"
