"""flash.sh tests: the board summaries of `flash.sh qemu` go into pytest's terminal summary."""

from __future__ import annotations

import pytest
from flash_report import flash_summaries


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if flash_summaries:
        terminalreporter.section("flash.sh qemu: device self-test summaries")
        for entry in flash_summaries:
            terminalreporter.write_line(entry)
