"""Helpers for the QEMU board and 32-bit unix port tests (built by scripts/build_micropython.sh).

A missing (or stale: built from other frozen files than the tree's) artifact fails the test
under CI=true and skips it otherwise, with the build command in the reason. Every board run's
``N passed, N failed`` line is collected and printed in pytest's terminal summary, so it is in
the normal test output (no -s needed), and it is also in each assertion message.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".cache" / "micropython" / "bin"
BUILD_CMD = "bash scripts/build_micropython.sh"
CORE_TEST_DIR = ROOT / "tests" / "device" / "core"
MP_RUNNER = ROOT / "tests" / "device" / "mp_runner.py"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

FIRMWARES = {"default": "qemu-mps2-an385.elf", "64k": "qemu-mps2-an385-64k.elf"}
KEY_NAMES = {"default": "qemu", "64k": "qemu-64k"}

summaries: list[str] = []


def _load_qemu_run() -> ModuleType:
    path = ROOT / "tools" / "micropython" / "qemu_run.py"
    spec = importlib.util.spec_from_file_location("wsn_qemu_run", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["wsn_qemu_run"] = mod
    spec.loader.exec_module(mod)
    return mod


qemu_run = _load_qemu_run()


def unavailable(reason: str) -> None:
    """Fail under CI, skip elsewhere (tests/ convention for missing built artifacts)."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: this must not be skipped)", pytrace=False)
    pytest.skip(reason)


def record_summary(title: str, output: str) -> str:
    """Remember a board run's summary line for the terminal summary; returns the line."""
    found = qemu_run.summary(output)
    line = f"{found[0]} passed, {found[1]} failed" if found else "NO SUMMARY LINE"
    entry = f"{title}: {line}"
    summaries.append(entry)
    # Also straight to the real stdout, so it shows while the run is in progress.
    print(f"\n[board] {entry}", file=sys.__stdout__, flush=True)
    return line


def core_test_modules() -> list[str]:
    mods: list[str] = qemu_run.core_test_modules(CORE_TEST_DIR)
    return mods


def count_core_tests() -> int:
    """How many test_* functions the core test modules define (what the board must report)."""
    pattern = re.compile(r"^def (test_\w+)\(", re.MULTILINE)
    return sum(
        len(pattern.findall((CORE_TEST_DIR / f"{m}.py").read_text())) for m in core_test_modules()
    )


def require_core_tests() -> list[str]:
    mods = core_test_modules()
    if not mods or not MP_RUNNER.is_file():
        unavailable(
            f"the device core's tests ({CORE_TEST_DIR.relative_to(ROOT)}/test_*.py) or "
            f"{MP_RUNNER.relative_to(ROOT)} do not exist yet"
        )
    return mods


def current_key(variant: str) -> str:
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build_micropython.sh"), "--print-key", KEY_NAMES[variant]],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout.strip()


def firmware_path(variant: str) -> Path:
    """The built firmware, rebuilt first if the tree's frozen files changed since its build.

    The rebuild is incremental (a few seconds): the Debian source and the object files are
    cached; a missing firmware is not built here (fail under CI, skip elsewhere).
    """
    fw = BIN / FIRMWARES[variant]
    if not fw.is_file():
        unavailable(f"{fw.relative_to(ROOT)} is missing: run {BUILD_CMD}")
    key_file = fw.with_name(fw.name + ".key")
    built = key_file.read_text().strip() if key_file.is_file() else "none"
    want = current_key(variant)
    if built != want:
        proc = subprocess.run(
            ["bash", str(ROOT / "scripts" / "build_micropython.sh"), "--only", "qemu"],
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert proc.returncode == 0, (
            f"{fw.relative_to(ROOT)} was stale (key {built}, tree {want}) and rebuilding failed:\n"
            f"{proc.stdout}{proc.stderr}"
        )
        print(f"\n[board] rebuilt stale firmware:\n{proc.stdout}", file=sys.__stdout__, flush=True)
    return fw
