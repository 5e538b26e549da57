"""Boot MicroPython's QEMU board (MPS2-AN385) and run scripts on it over its serial pty.

Used by ``flash.sh qemu`` and by the tests in tests/qemu/. The firmware is built by
scripts/build_micropython.sh with the device core, its unit tests and their runner frozen in
(the board has no filesystem), so a test run is one small script sent through mpremote.

What a caller may rely on:
- ``QemuBoard`` is a context manager; leaving it always ends QEMU (SIGTERM, then SIGKILL, on
  its own process group), also on a timeout or an exception; and QEMU gets SIGKILL from the
  kernel if the Python process that started it dies (PR_SET_PDEATHSIG), so none is orphaned.
- ``start()`` waits at most ``boot_timeout`` seconds for QEMU's ``char device redirected to
  /dev/pts/N`` line; if it never comes (or QEMU exits), QEMU is killed and ``QemuError`` says
  why, with QEMU's own output.
- ``run()`` runs a script through ``mpremote connect <pty> run`` with a timeout and returns
  its exit status and output; a hung board gives ``QemuError``, never a hang.
- ``summary()`` finds the runner's final ``N passed, N failed`` line.

Command line (flash.sh qemu calls this)::

    python tools/micropython/qemu_run.py --firmware F.elf [--tests core|board|all] [--timeout S]

prints the board's output and exits 0 only if every test passed.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

ROOT = Path(__file__).resolve().parents[2]
PTY_RE = re.compile(rb"char device redirected to (/dev/pts/\d+)")
SUMMARY_RE = re.compile(r"^(\d+) passed, (\d+) failed\s*$", re.MULTILINE)
CORE_TEST_DIR = ROOT / "tests" / "device" / "core"


def _own_session_and_die_with_parent() -> None:
    """preexec_fn: own process group (so close() can end all of it), and SIGKILL when the
    process that started it dies, even by SIGKILL (Linux PR_SET_PDEATHSIG): no orphan QEMU."""
    os.setsid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


class QemuError(RuntimeError):
    """QEMU did not boot, or the board did not answer in time."""


def qemu_command(firmware: str | os.PathLike[str], qemu: str = "qemu-system-arm") -> list[str]:
    """The QEMU command line for the MPS2-AN385 board with its UART on a fresh pty."""
    return [
        qemu,
        "-machine",
        "mps2-an385",
        "-nographic",
        "-monitor",
        "null",
        "-semihosting",
        "-serial",
        "pty",
        "-kernel",
        str(firmware),
    ]


def find_tool(name: str, env_var: str) -> str:
    """A tool from $env_var, else PATH, else the project's .venv/bin."""
    explicit = os.environ.get(env_var)
    if explicit:
        return explicit
    found = shutil.which(name) or shutil.which(name, path=str(ROOT / ".venv" / "bin"))
    if not found:
        raise QemuError(f"{name} not found on PATH (set {env_var}=/path/to/{name})")
    return found


class QemuBoard:
    def __init__(
        self,
        firmware: str | os.PathLike[str],
        *,
        qemu: str | None = None,
        mpremote: str | None = None,
        boot_timeout: float = 20.0,
    ) -> None:
        self.firmware = Path(firmware)
        self.qemu = qemu or os.environ.get("QEMU") or "qemu-system-arm"
        self.mpremote = mpremote
        self.boot_timeout = boot_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.pty: str | None = None
        self._out = bytearray()
        self._lock = threading.Lock()
        self._reader: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> QemuBoard:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def output(self) -> str:
        with self._lock:
            return self._out.decode(errors="replace")

    def _drain(self, stream: BinaryIO) -> None:
        # Keep reading QEMU's stdout for its whole life so a full pipe never blocks it.
        while chunk := stream.read1(4096):  # type: ignore[attr-defined]
            with self._lock:
                self._out += chunk

    def start(self) -> str:
        if not self.firmware.is_file():
            raise QemuError(
                f"firmware {self.firmware} not found: run bash scripts/build_micropython.sh"
            )
        if shutil.which(self.qemu) is None:
            raise QemuError(
                f"{self.qemu} not found: install the Debian package qemu-system-arm "
                "(bash scripts/setup.sh --micropython)"
            )
        self.proc = subprocess.Popen(
            qemu_command(self.firmware, self.qemu),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=_own_session_and_die_with_parent,
        )
        assert self.proc.stdout is not None
        self._reader = threading.Thread(target=self._drain, args=(self.proc.stdout,), daemon=True)
        self._reader.start()
        deadline = time.monotonic() + self.boot_timeout
        try:
            while True:
                with self._lock:
                    m = PTY_RE.search(self._out)
                if m:
                    self.pty = m.group(1).decode()
                    return self.pty
                if self.proc.poll() is not None:
                    if self._reader is not None:
                        self._reader.join(timeout=5)  # the rest of its output, up to EOF
                    raise QemuError(
                        f"QEMU exited with status {self.proc.returncode} before opening its "
                        f"serial pty; its output:\n{self.output()}"
                    )
                if time.monotonic() > deadline:
                    raise QemuError(
                        f"QEMU printed no 'char device redirected to /dev/pts/N' line within "
                        f"{self.boot_timeout:g} s; its output:\n{self.output()}"
                    )
                time.sleep(0.02)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)  # EOF follows the exit of QEMU
        if proc.stdout is not None:
            proc.stdout.close()

    # -- running code -----------------------------------------------------------------------
    def run(self, script: str, timeout: float = 120.0) -> tuple[int, str]:
        """Run MicroPython source on the board; returns (mpremote exit status, output)."""
        if self.pty is None:
            raise QemuError("board not started")
        mpremote = self.mpremote or find_tool("mpremote", "MPREMOTE")
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write(script)
            path = f.name
        try:
            cmd = [mpremote, "connect", self.pty, "run", path]
            proc = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                preexec_fn=_own_session_and_die_with_parent,
            )
            try:
                out, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
                raise QemuError(
                    f"board did not finish within {timeout:g} s; output so far:\n"
                    f"{out.decode(errors='replace')}"
                ) from None
            return proc.returncode, out.decode(errors="replace")
        finally:
            os.unlink(path)


def summary(output: str) -> tuple[int, int] | None:
    """(passed, failed) from the last ``N passed, N failed`` line, or None."""
    found = SUMMARY_RE.findall(output)
    if not found:
        return None
    passed, failed = found[-1]
    return int(passed), int(failed)


def core_test_modules(test_dir: Path = CORE_TEST_DIR) -> list[str]:
    """Names of the device core's test modules (frozen as top-level modules)."""
    return sorted(p.stem for p in test_dir.glob("test_*.py"))


def core_tests_script(modules: Sequence[str]) -> str:
    return f"import sys\nimport mp_runner\nn = mp_runner.run({list(modules)!r})\n"


BOARD_CHECKS_SCRIPT = "import board_checks\nn = board_checks.run()\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--firmware", required=True, help="firmware .elf to boot")
    ap.add_argument(
        "--tests",
        choices=["core", "board", "all"],
        default="all",
        help="core: the device core's unit tests; board: the board self-checks",
    )
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per script")
    ap.add_argument("--boot-timeout", type=float, default=20.0)
    args = ap.parse_args(argv)

    scripts: list[tuple[str, str]] = []
    if args.tests in ("board", "all"):
        scripts.append(("board self-checks", BOARD_CHECKS_SCRIPT))
    if args.tests in ("core", "all"):
        modules = core_test_modules()
        if modules:
            scripts.append(
                (f"device core unit tests ({len(modules)} modules)", core_tests_script(modules))
            )
        elif args.tests == "core":
            print(f"no core tests found in {CORE_TEST_DIR}", file=sys.stderr)
            return 1
    failed_total = 0
    try:
        with QemuBoard(args.firmware, boot_timeout=args.boot_timeout) as board:
            print(f"qemu: {args.firmware} booted, serial on {board.pty}", flush=True)
            for title, script in scripts:
                print(f"== {title}", flush=True)
                rc, out = board.run(script, timeout=args.timeout)
                print(out, end="" if out.endswith("\n") else "\n", flush=True)
                result = summary(out)
                if rc != 0 or result is None:
                    print(f"qemu: {title}: no summary line (mpremote exit {rc})", file=sys.stderr)
                    failed_total += 1
                else:
                    failed_total += result[1]
    except QemuError as e:
        print(f"qemu: {e}", file=sys.stderr)
        return 1
    return 0 if failed_total == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
