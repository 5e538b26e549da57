"""The device core's unit tests (tests/device/core/test_*.py) run inside MicroPython."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from devtest import DEVICE_DIR, ROOT


def test_core_unit_tests_pass_in_micropython(interpreter: Path) -> None:
    env = {**os.environ, "MICROPYPATH": f".frozen:{DEVICE_DIR}"}
    r = subprocess.run(
        [str(interpreter), str(ROOT / "tests/device/mp_runner.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=ROOT,
    )
    out = r.stdout + r.stderr
    print(out)
    m = re.search(r"^(\d+) passed, (\d+) failed$", r.stdout, re.M)
    assert m, out
    assert int(m.group(2)) == 0, out
    assert int(m.group(1)) >= 50, out  # every module was found and ran
    assert r.returncode == 0, out


def test_capacity_test_in_a_bounded_heap(interpreter: Path) -> None:
    # The capacity test (8 subscriptions, a 32-slot pull point) with the heap bounded. Here the
    # core's bytecode is compiled into the heap too (~60 KB on the 64-bit port), so the bound is
    # 192K; the 64 KiB runs, with the code frozen as on a board, are the QEMU firmware
    # (tests/qemu) and test_small_heap.py.
    env = {**os.environ, "MICROPYPATH": f".frozen:{DEVICE_DIR}"}
    r = subprocess.run(
        [
            str(interpreter),
            "-X",
            "heapsize=192K",
            str(ROOT / "tests/device/mp_runner.py"),
            "test_capacity",
            "test_support",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 0 and "2 passed, 0 failed" in r.stdout, r.stdout + r.stderr
