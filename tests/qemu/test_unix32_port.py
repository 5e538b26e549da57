"""The 32-bit single-precision unix port (.cache/micropython/bin/micropython32).

It has the small-int and float widths of an ESP32 / RP2040, so the device core's unit tests run
here too; the device's HTTP integration tests use it through tests/device/conftest.py. (The
64 KiB-heap run is on the QEMU board, where the code is frozen as on a product build; a unix
port compiling every test module from source into a 64 KiB heap measures the compiler instead.)
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from mpboard import (
    ROOT,
    count_core_tests,
    record_summary,
    require_core_tests,
)


def mp(exe: Path, *args: str, path: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, MICROPYPATH=path)
    return subprocess.run(
        [str(exe), *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT
    )


def test_is_32_bit_single_precision(micropython32: Path) -> None:
    with open(micropython32, "rb") as f:
        assert f.read(5) == b"\x7fELF\x01", "not a 32-bit ELF"  # EI_CLASS 1 = ELFCLASS32
    r = mp(
        micropython32,
        "-c",
        "import sys, time\n"
        "print(sys.maxsize, 1.0 + 2.0**-30 == 1.0, type(time.time()).__name__)\n"
        "print(sys.implementation.version[:3])",
        path=".frozen",
    )
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0].split()
    assert first == ["2147483647", "True", "int"], r.stdout


def test_frozen_asyncio(micropython32: Path) -> None:
    r = mp(micropython32, "-c", "import asyncio, json, re, socket; print('ok')", path=".frozen")
    assert (r.returncode, r.stdout.strip()) == (0, "ok"), r.stderr


def test_board_self_checks(micropython32: Path) -> None:
    r = mp(
        micropython32,
        "-c",
        "import board_checks, sys; sys.exit(board_checks.run())",
        path="tests/qemu/mp",
    )
    line = record_summary("micropython32: board self-checks", r.stdout)
    assert r.returncode == 0 and line == "4 passed, 0 failed", f"{line}\n{r.stdout}{r.stderr}"


def _core_tests(micropython32: Path, *opts: str) -> tuple[str, subprocess.CompletedProcess[str]]:
    modules = require_core_tests()
    r = mp(
        micropython32,
        *opts,
        "-c",
        f"import sys, mp_runner\nsys.exit(1 if mp_runner.run({modules!r}) else 0)",
        path=".frozen:device:tests/device/core:tests/device",
        timeout=300,
    )
    return f"{len(modules)} core test modules", r


def test_core_unit_tests_on_micropython32(micropython32: Path) -> None:
    what, r = _core_tests(micropython32)
    line = record_summary(f"micropython32 ({what})", r.stdout)
    out = r.stdout[-4000:] + r.stderr[-2000:]
    assert r.returncode == 0 and line.endswith(" 0 failed"), f"micropython32: {line}\n{out}"
    assert line == f"{count_core_tests()} passed, 0 failed", f"{line}\n{out}"
