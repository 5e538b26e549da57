#!/usr/bin/env bash
# The one test command (README Quick start; .ci/run calls exactly this).
# Installs what the tests need, idempotently, then runs lint, types and every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --micropython --browser
export PATH="$PWD/.venv/bin:$PATH"
export SPARK_LOCAL_IP=127.0.0.1
echo "== ruff"
ruff check gateway spark_ingest wsncli tests scripts tools
ruff format --check gateway spark_ingest wsncli tests scripts tools
echo "== mypy"
mypy
echo "== pytest"
# WSN_TEST_WORKERS=2 runs the tests on two pytest-xdist workers, one module per worker at a
# time (module fixtures start once; each worker has its own SparkSession). Not the default
# yet: its one full run here (docs/performance.md, "The test command") took 29 min at a
# load of 8-13 and lost one worker's SparkSession to a 300 s timeout.
workers=${WSN_TEST_WORKERS:-0}
if [ "$workers" != 0 ]; then
  set -- -n "$workers" --dist loadscope "$@"
fi
exec python -m pytest "$@"
