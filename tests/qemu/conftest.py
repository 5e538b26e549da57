"""Fixtures for the QEMU board and the 32-bit unix port (see mpboard.py for the conventions).

Every board run's ``N passed, N failed`` line is printed in pytest's terminal summary.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mpboard import BIN, BUILD_CMD, FIRMWARES, ROOT, firmware_path, qemu_run, summaries, unavailable


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if summaries:
        terminalreporter.section("MicroPython board test summaries (QEMU / 32-bit unix)")
        for entry in summaries:
            terminalreporter.write_line(entry)


# module scope, not session: an idle QEMU board spins a host core, and a session-scoped
# board stayed up through every later test (the Spark suite ran on one core)
@pytest.fixture(scope="module", params=sorted(FIRMWARES))
def board(request: pytest.FixtureRequest) -> Iterator[tuple[str, Any]]:
    """A booted QEMU board per firmware variant (default heap, 64 KiB heap), killed when
    the module's tests are done."""
    variant: str = request.param
    fw = firmware_path(variant)
    with qemu_run.QemuBoard(fw, boot_timeout=30) as b:
        yield variant, b


@pytest.fixture(scope="session")
def micropython32() -> Path:
    exe = BIN / "micropython32"
    if not exe.is_file():
        unavailable(f"{exe.relative_to(ROOT)} is missing: run {BUILD_CMD}")
    return exe
