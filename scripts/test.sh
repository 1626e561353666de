#!/usr/bin/env bash
# The whole test suite, from a fresh machine: install, then pytest. Tests start the
# services they need (mooncake_master on loopback) themselves and stop them.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TRITON_INTERPRET=1
python3 -m pytest -p no:cacheprovider "$@"
