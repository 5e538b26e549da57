#!/usr/bin/env bash
# The one test command (README Quick start; .ci/run calls exactly this).
# Installs what the tests need, idempotently, then runs lint, types and every test.
# Extra arguments go to pytest (`./scripts/test.sh tests/gateway/test_soap.py -k fault`).
set -euo pipefail
cd "$(dirname "$0")/.."
# the Debian packages and the venv first; the MicroPython build below (the Spark tests do
# not need it)
bash scripts/setup.sh --micropython --browser --no-build
export PATH="$PWD/.venv/bin:$PATH"
export SPARK_LOCAL_IP=127.0.0.1
# The tests start hundreds of Python processes (gateways, devices, the CLIs, XPath workers):
# with bytecode caches each imports the project's modules without compiling them again.
unset PYTHONDONTWRITEBYTECODE

# What must pass before the rest part: the MicroPython builds its tests use, lint, types.
# Run before pytest in one process, and beside the Spark parts otherwise (those are the
# longest part: they start first).
checks() {
  bash scripts/build_micropython.sh
  echo "== ruff"
  ruff check gateway spark_ingest wsncli tests scripts tools
  ruff format --check gateway spark_ingest wsncli tests scripts tools
  echo "== mypy"
  mypy
}
# Parts, side by side (tests/conftest.py, `--part`):
# - the Spark tests in two processes of their own (`--part spark1`, `--part spark2`: each
#   module in one of them, chosen so both take about as long), never under xdist (a
#   timeout inside a py4j call would leave a worker's session answering the wrong calls);
#   each has one SparkSession, its own metastore and tmp dirs. WSN_SPARK_PROCS=1 runs them
#   in one process (`--part spark`) instead;
# - the rest on WSN_TEST_WORKERS pytest-xdist workers (default 4; one module per worker at
#   a time, so module fixtures start once): those tests mostly wait on subprocesses,
#   sockets and timeouts, so four of them share the two cores well.
# WSN_TEST_WORKERS=0 runs everything in one process, as does any -n/--part of your own.
# The exit status is non-zero if any part fails (5, "no tests", only if none ran any).
workers=${WSN_TEST_WORKERS:-4}
for a in "$@"; do
  case "$a" in
    -n | -n* | --numprocesses* | --part*) workers=0 ;;
  esac
done
if [ "$workers" = 0 ]; then
  checks
  echo "== pytest"
  exec python -m pytest "$@"
fi
case "${WSN_SPARK_PROCS:-2}" in
  1) spark_parts=(spark) ;;
  *) spark_parts=(spark1 spark2) ;;
esac

logs=$(mktemp -d "${TMPDIR:-/tmp}/wsn-test.XXXXXX")
spark_pids=()
stop_spark() {
  for pid in "${spark_pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      kill -INT "$pid" 2>/dev/null || true
    fi
  done
  for pid in "${spark_pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  spark_pids=()
}
trap 'stop_spark; rm -rf "$logs"' EXIT
trap 'stop_spark; exit 130' INT TERM

# The Spark parts at a lower priority: the other part's tests wait on processes that must
# answer in time (issue 22's 1 s under attack), and the JVMs take the CPU they leave.
# Each part keeps its own cache (--lf, --ff) so none overwrites another's; `set -m`: a
# background job of a script would ignore SIGINT, so each gets its own process group
# instead, and stop_spark passes Ctrl-C on to them
set -m
for part in "${spark_parts[@]}"; do
  nice -n 5 python -m pytest --part "$part" -o cache_dir=".pytest_cache/$part" "$@" \
    >"$logs/$part.log" 2>&1 &
  spark_pids+=($!)
done
set +m
echo "(the Spark tests run from now on, in ${#spark_parts[@]} process(es); their output follows the others')"
# a failed check ends the script here (set -e): the EXIT trap stops the Spark parts
checks
echo "== pytest"

set +e
python -m pytest --part rest -o cache_dir=.pytest_cache/rest -n "$workers" --dist loadscope \
  "$@" 2>&1 | tee "$logs/rest.log"
rest_rc=${PIPESTATUS[0]}
spark_rcs=()
for pid in "${spark_pids[@]}"; do
  wait "$pid"
  spark_rcs+=($?)
done
spark_pids=()
set -e

summary() {
  grep -E '(passed|failed|errors?|skipped|deselected|no tests ran).* in [0-9.]+s' "$1" |
    tail -1 | tr -d '=' | sed 's/^ *//; s/ *$//' || true
}
for part in "${spark_parts[@]}"; do
  echo "== pytest: the Spark tests, --part $part (tests/spark_ingest, tests/integration/*spark*)"
  cat "$logs/$part.log"
done
echo "== pytest: every part"
echo "rest ($workers workers), exit $rest_rc: $(summary "$logs/rest.log")"
for i in "${!spark_parts[@]}"; do
  echo "${spark_parts[$i]} (one process), exit ${spark_rcs[$i]}: $(summary "$logs/${spark_parts[$i]}.log")"
done
rc=0
all5=1
for r in "$rest_rc" "${spark_rcs[@]}"; do
  if [ "$r" != 0 ] && [ "$r" != 5 ] && [ "$rc" = 0 ]; then rc=$r; fi
  if [ "$r" != 5 ]; then all5=0; fi
done
if [ "$all5" = 1 ]; then rc=5; fi
exit "$rc"
