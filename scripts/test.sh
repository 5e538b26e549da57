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
# Two workers (the machine's two cores), one test module per worker at a time: module
# fixtures (a batch run, a QEMU board, a Spark cluster) start once; each worker has its own
# SparkSession. WSN_TEST_WORKERS=0 runs in one process; "$@" comes last, so `-n 0` works too.
exec python -m pytest -n "${WSN_TEST_WORKERS:-2}" --dist loadscope "$@"
