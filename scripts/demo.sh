#!/usr/bin/env bash
# The main job (README Quick start): sets up, then runs the gateway with
# simulated devices on the MicroPython unix port and the Spark aggregation.
# Options are passed to scripts/demo.py (--devices N, --seconds S, --work DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}
exec .venv/bin/python scripts/demo.py "$@"
