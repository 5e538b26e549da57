"""The device core on MicroPython's QEMU board (MPS2-AN385, Cortex-M3), built from Debian's source.

Each firmware (default 140 KiB heap and 64 KiB heap) has the core, its unit tests and
mp_runner frozen in; the tests talk to the board through mpremote over QEMU's serial pty.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mpboard import (
    ROOT,
    count_core_tests,
    firmware_path,
    qemu_run,
    record_summary,
    require_core_tests,
)

pytestmark = pytest.mark.qemu


def tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def test_board_self_checks(board: tuple[str, Any]) -> None:
    variant, b = board
    rc, out = b.run(qemu_run.BOARD_CHECKS_SCRIPT, timeout=60)
    line = record_summary(f"QEMU {variant}: board self-checks", out)
    assert rc == 0 and qemu_run.summary(out) == (4, 0), f"board self-checks: {line}\n{tail(out)}"


def test_heap_size_is_what_the_build_asked_for(board: tuple[str, Any]) -> None:
    variant, b = board
    rc, out = b.run("import gc\ngc.collect()\nprint('HEAP', gc.mem_free() + gc.mem_alloc())\n")
    assert rc == 0, out
    heap = int(out.split("HEAP")[1].split()[0])
    if variant == "64k":
        assert 60_000 <= heap <= 65_536, out
    else:
        assert 130_000 <= heap <= 143_360, out


def test_every_core_module_imports_without_io(board: tuple[str, Any]) -> None:
    """The frozen core imports on a board that has no time, socket, select or asyncio."""
    _, b = board
    core = ROOT / "device" / "wsn" / "core"
    names = sorted(
        ".".join(p.relative_to(ROOT / "device").with_suffix("").parts).removesuffix(".__init__")
        for p in core.rglob("*.py")
    )
    assert names, "device/wsn/core has no modules"
    script = (
        "for m in ['time', 'socket', 'select', 'asyncio']:\n"
        "    try:\n"
        "        __import__(m)\n"
        "        print('HAS', m)\n"
        "    except ImportError:\n"
        "        pass\n"
        f"for m in {names!r}:\n"
        "    try:\n"
        "        __import__(m)\n"
        "        print('OK', m)\n"
        "    except Exception as e:\n"
        "        print('FAIL', m, type(e).__name__, e)\n"
    )
    rc, out = b.run(script)
    assert rc == 0, out
    assert "HAS" not in out, f"the QEMU board gained I/O modules, so it proves less:\n{out}"
    failed = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert not failed, "core modules that do not import on the board:\n" + "\n".join(failed)
    assert sorted(line.split()[1] for line in out.splitlines() if line.startswith("OK")) == names


def test_core_unit_tests_on_qemu(board: tuple[str, Any]) -> None:
    """tests/device/core/test_*.py via mp_runner on the board (64k: with the capacity test)."""
    variant, b = board
    modules = require_core_tests()
    expected = count_core_tests()
    rc, out = b.run(qemu_run.core_tests_script(modules), timeout=240)  # < pytest timeout
    line = record_summary(f"QEMU {variant} ({len(modules)} core test modules)", out)
    found = qemu_run.summary(out)
    assert found is not None, f"no 'N passed, N failed' line (mpremote exit {rc}):\n{tail(out)}"
    passed, failed = found
    assert failed == 0 and rc == 0, f"device core tests on QEMU {variant}: {line}\n{tail(out, 80)}"
    assert passed == expected, (
        f"QEMU {variant}: {line}, but the modules define {expected} tests\n{tail(out)}"
    )


# --- robustness of the harness: QEMU never outlives a test, nothing hangs ---------------------


def _fake_qemu(tmp_path: Path, body: str) -> str:
    exe = tmp_path / "fake-qemu"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too; close() reaps, so this only sees a live process.
    return True


def test_no_pty_line_is_a_timeout_not_a_hang(tmp_path: Path) -> None:
    fw = tmp_path / "fw.elf"
    fw.write_bytes(b"\x7fELF")
    b = qemu_run.QemuBoard(
        fw, qemu=_fake_qemu(tmp_path, "echo booting; exec sleep 600"), boot_timeout=1.5
    )
    t0 = time.monotonic()
    with pytest.raises(qemu_run.QemuError, match=r"(?s)no 'char device redirected.*booting"):
        b.start()
    assert time.monotonic() - t0 < 10
    assert b.proc is None  # closed: killed and reaped


def test_qemu_exiting_early_is_reported(tmp_path: Path) -> None:
    fw = tmp_path / "fw.elf"
    fw.write_bytes(b"\x7fELF")
    b = qemu_run.QemuBoard(fw, qemu=_fake_qemu(tmp_path, "echo 'no such machine' >&2; exit 3"))
    with pytest.raises(qemu_run.QemuError, match=r"(?s)status 3.*no such machine"):
        b.start()


def test_missing_firmware_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(qemu_run.QemuError, match=r"build_micropython\.sh"):
        qemu_run.QemuBoard(tmp_path / "none.elf").start()


def test_hung_script_times_out_and_qemu_is_killed() -> None:
    fw = firmware_path("default")
    with qemu_run.QemuBoard(fw) as b:
        assert b.proc is not None
        pid = b.proc.pid
        t0 = time.monotonic()
        with pytest.raises(qemu_run.QemuError, match="did not finish within 3 s"):
            b.run("while True:\n    pass\n", timeout=3)
        assert time.monotonic() - t0 < 15
    assert not _alive(pid)


def test_qemu_dies_with_a_killed_parent() -> None:
    """Even a SIGKILLed test process (no finally runs) leaves no QEMU behind."""
    fw = firmware_path("default")
    code = (
        "import sys, time\n"
        f"sys.path.insert(0, {str(ROOT / 'tools' / 'micropython')!r})\n"
        "import qemu_run\n"
        f"b = qemu_run.QemuBoard({str(fw)!r})\n"
        "b.start()\n"
        "print(b.proc.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        qemu_pid = int(parent.stdout.readline())
        assert _alive(qemu_pid)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 10
    while _alive(qemu_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(qemu_pid), f"QEMU {qemu_pid} outlived its killed parent"
