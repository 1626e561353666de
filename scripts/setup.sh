#!/usr/bin/env bash
# Install hicache and everything its tests need on a fresh machine (idempotent).
# System packages: Mooncake Store's runtime libraries, Chromium (the explain page tests).
# Python: the package in editable mode with its test, Triton (CPU interpreter) and Mooncake extras.
set -euo pipefail
cd "$(dirname "$0")/.."
need_apt=()
for pkg in libibverbs1 libnuma1 librdmacm1 chromium; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ] && command -v apt-get >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}") >/dev/null \
    || echo "setup: could not install ${need_apt[*]}; Mooncake/Chromium tests will be skipped" >&2
fi
python3 -m pip install -q --disable-pip-version-check -e '.[test]'
# Optional extras: a failure here leaves those tests skipped with a reason, never red.
python3 -m pip install -q --disable-pip-version-check -e '.[triton]' \
  || echo "setup: triton unavailable; Triton interpreter tests will be skipped" >&2
python3 -m pip install -q --disable-pip-version-check -e '.[mooncake]' \
  || echo "setup: mooncake unavailable; Mooncake tests will be skipped" >&2
python3 -m pip install -q --disable-pip-version-check -e '.[metrics,plot]' \
  || echo "setup: prometheus_client/matplotlib unavailable; export and plot tests will be skipped" >&2
# Say why Mooncake cannot run (client import, e.g. a missing libibverbs, or no master binary).
python3 -c 'from hicache.storage.mooncake_server import unavailable_reason as r; m = r(); m and print("setup:", m, "- Mooncake tests will be skipped")' >&2 || true
