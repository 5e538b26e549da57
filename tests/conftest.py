"""The two parts of the suite (`--part`), and the terminal summaries of board runs under
pytest-xdist.

`--part spark` keeps the tests that need a SparkSession or start a Spark JVM (a `spark` or
`spark_test_conf` fixture, or the `spark` mark), with every other test of their modules, so
a module fixture is set up in one part only; `--part rest` keeps every other test.
scripts/test.sh runs the rest on several xdist workers (those tests mostly wait on
subprocesses and timeouts) and the Spark part in one process of its own, side by side.

tests/qemu and tests/flash collect each board run's summary line in a module list
(mpboard.summaries, flash_report.flash_summaries) and print it from their conftest's
pytest_terminal_summary. Under xdist those lists fill in the worker processes, whose
terminal output nobody sees: each worker hands its lines to the controller in
`workeroutput`, and the controller prints them under the same section titles.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

# (module, list attribute, section title): the titles the sub-directory conftests print
SUMMARY_LISTS = (
    ("mpboard", "summaries", "MicroPython board test summaries (QEMU / 32-bit unix)"),
    ("flash_report", "flash_summaries", "flash.sh qemu: device self-test summaries"),
)
_KEY = "wsn_board_summaries"
SPARK_FIXTURES = frozenset({"spark", "spark_test_conf"})
PARTS = ("spark", "spark1", "spark2", "rest")
# The Spark modules of `--part spark2`; every other Spark module (a new one too) is in
# `--part spark1`. scripts/test.sh runs the two side by side, each in a process with its own
# SparkSession, metastore and tmp dirs: chosen so both take about as long (wall and CPU
# seconds per module, with every test's process tree: docs/performance.md, "The test
# command"). test_cluster (about 2 min) went to spark1 when spark2 was the longer by 3,
# then test_gap_context (about 50 s) to spark2 when spark1 was the longer by 2 min in CI.
SPARK2_MODULES = frozenset(
    {
        "tests/spark_ingest/test_gap_context.py",
        "tests/spark_ingest/test_small_run.py",
        "tests/spark_ingest/test_stream.py",
        "tests/spark_ingest/test_stream_history.py",
    }
)
#: run after the other Spark modules of their part: a standalone master, a worker and a
#: spark-submit JVM beside the busiest minutes of the rest part took over the 900 s timeout
LAST_MODULES = ("tests/spark_ingest/test_cluster.py",)
_collected: dict[str, list[str]] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--part",
        choices=PARTS,
        default=None,
        help="only the Spark tests (one SparkSession: never under xdist), one of their two "
        "halves (spark1, spark2), or only the rest",
    )


def _needs_spark(item: pytest.Item) -> bool:
    names = getattr(item, "fixturenames", ())
    return item.get_closest_marker("spark") is not None or bool(SPARK_FIXTURES & set(names))


# pytest's timeout (pyproject.toml) for a Spark test: its SIGALRM can land inside a py4j call,
# after which the session answers other calls wrongly and every later Spark test fails; a
# loaded machine (load 13 here) took one run_batch past 300 s
SPARK_TIMEOUT = 900


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        mark = item.get_closest_marker("timeout")
        limit = None if mark is None else (mark.args or [mark.kwargs.get("timeout")])[0]
        if _needs_spark(item) and (limit is None or float(limit) < SPARK_TIMEOUT):
            item.add_marker(pytest.mark.timeout(SPARK_TIMEOUT))
    part = config.getoption("--part")
    if part is None:
        return
    spark_modules = {item.nodeid.split("::", 1)[0] for item in items if _needs_spark(item)}
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        if part == "rest":
            wanted = module not in spark_modules
        elif part == "spark":
            wanted = module in spark_modules
        else:
            wanted = module in spark_modules and (module in SPARK2_MODULES) == (part == "spark2")
        (keep if wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    # a stable sort: the order within each group stays pytest's
    items[:] = sorted(keep, key=lambda it: it.nodeid.split("::", 1)[0] in LAST_MODULES)


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not _is_worker(session.config):
        return
    out: dict[str, list[str]] = {}
    for module, attr, title in SUMMARY_LISTS:
        mod = sys.modules.get(module)
        lines = list(getattr(mod, attr, []) or []) if mod is not None else []
        if lines:
            out[title] = lines
    session.config.workeroutput[_KEY] = out  # type: ignore[attr-defined]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist (controller): a worker finished; keep its board summaries."""
    for title, lines in getattr(node, "workeroutput", {}).get(_KEY, {}).items():
        _collected.setdefault(title, []).extend(lines)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    # without xdist the sub-directory conftests print their own lists; this prints only
    # what workers sent
    for _module, _attr, title in SUMMARY_LISTS:
        if _collected.get(title):
            terminalreporter.section(title)
            for entry in _collected[title]:
                terminalreporter.write_line(entry)
