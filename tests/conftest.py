"""The terminal summaries of board runs under pytest-xdist (WSN_TEST_WORKERS=2 scripts/test.sh).

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
_collected: dict[str, list[str]] = {}


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
