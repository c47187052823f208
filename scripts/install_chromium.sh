#!/usr/bin/env bash
# Debian's chromium for the browser tests (tests/browser), installed with apt-get when missing.
# Idempotent and instant once installed. Never fails the set-up: without root or sudo it prints
# what to run, and the browser tests skip saying so.
set -uo pipefail

if [ -x /usr/bin/chromium ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup: no /usr/bin/chromium and no apt-get: the browser tests will be skipped" \
       "(install Chromium and point OPENREG_CHROMIUM at it)" >&2
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  SUDO=(sudo -n)
else
  echo "setup: /usr/bin/chromium is missing and installing it needs root:" \
       "run 'sudo apt-get install -y chromium'; until then the browser tests are skipped" >&2
  exit 0
fi

echo "setup: installing Debian's chromium for the browser tests (apt-get, once)"
start=$(date +%s)
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
if ! { "${SUDO[@]}" apt-get install -y -qq --no-install-recommends chromium >"$log" 2>&1 ||
       { "${SUDO[@]}" apt-get update -qq >>"$log" 2>&1 &&
         "${SUDO[@]}" apt-get install -y -qq --no-install-recommends chromium >>"$log" 2>&1; }; }; then
  tail -n 20 "$log" >&2
  echo "setup: apt-get could not install chromium (log above): the browser tests will be skipped" >&2
  rm -f "$log"
  exit 0
fi
rm -f "$log"
echo "setup: chromium installed in $(( $(date +%s) - start )) s: $(/usr/bin/chromium --version 2>/dev/null)"
