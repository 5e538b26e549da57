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
exec python -m pytest "$@"
