"""A pytest plugin for measuring the Spark tests (not a test module; not loaded unless asked):
the wall and CPU seconds of every test phase, CPU being user + system time of the pytest
process and every process under it (the session JVM, `wsn-ingest` subprocesses, cluster
daemons), read from /proc. On a shared machine a test's wall time says how loaded it was;
its CPU time says what it costs.

    PYTHONPATH=tests/spark_ingest python -m pytest --part spark -p cpu_per_test [-q]

prints the 60 costliest phases and the session's totals; CPU_PER_TEST_JSON=FILE also
writes every phase as [nodeid, phase, wall_s, cpu_s] rows. Linux only.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Generator
from typing import Any

import pytest

_TICK = os.sysconf("SC_CLK_TCK")
_rows: list[tuple[str, str, float, float]] = []
_start: list[float] = []


def tree_cpu(root: int | None = None) -> float:
    """CPU seconds of `root` (default: this process) and its descendants, the reaped ones
    included (cutime, cstime)."""
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
        cpu[int(name)] = sum(int(x) for x in fields[11:15]) / _TICK
    total, todo, seen = 0.0, [root or os.getpid()], set()
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            total += cpu.get(pid, 0.0)
            todo += children.get(pid, [])
    return total


def _measured(phase: str) -> Callable[[pytest.Item], Generator[None, Any, None]]:
    @pytest.hookimpl(hookwrapper=True)
    def hook(item: pytest.Item) -> Generator[None, Any, None]:
        wall, cpu = time.monotonic(), tree_cpu()
        yield
        _rows.append((item.nodeid, phase, time.monotonic() - wall, tree_cpu() - cpu))

    return hook


pytest_runtest_setup = _measured("setup")
pytest_runtest_call = _measured("call")
pytest_runtest_teardown = _measured("teardown")


def pytest_sessionstart(session: pytest.Session) -> None:
    _start[:] = [time.monotonic(), tree_cpu()]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    w = terminalreporter
    w.section("wall and CPU seconds per test phase (cpu_per_test)")
    w.write_line(f"{'wall':>8} {'cpu':>8} phase    test")
    for nodeid, phase, wall, cpu in sorted(_rows, key=lambda r: -r[3])[:60]:
        w.write_line(f"{wall:8.1f} {cpu:8.1f} {phase:8s} {nodeid}")
    if _start:
        w.write_line(
            f"session: wall {time.monotonic() - _start[0]:.1f} s, "
            f"CPU {tree_cpu() - _start[1]:.1f} s"
        )
    out = os.environ.get("CPU_PER_TEST_JSON")
    if out:
        with open(out, "w") as fh:
            json.dump(_rows, fh)
