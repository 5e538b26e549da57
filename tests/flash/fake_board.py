"""A stand-in for a USB-serial MicroPython board: a pty that speaks MicroPython's raw REPL.

No ESP32 or Pico W is attached to CI, so the board is the one thing outside the product that
the deploy test fakes. Everything mpremote sends is really executed by a MicroPython unix port
(one persistent process per soft reset) whose working directory is the board's "flash"
(``root``). The protocol follows shared/runtime/pyexec.c: Ctrl-A enters raw mode and prints
the banner, Ctrl-D runs the collected code (``OK``, output, ``\\x04``, error, ``\\x04``, ``>``)
or, on an empty line, soft-reboots; raw-paste (Ctrl-E A Ctrl-A) is declined with ``R\\x00``,
so mpremote falls back to plain raw REPL. ``machine.reset()`` is recorded in ``resets``.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import threading
import tty
from pathlib import Path

BANNER = b"raw REPL; CTRL-B to exit\r\n>"

# Runs inside MicroPython: exec length-prefixed code blocks in one namespace (mpremote's file
# transfers span several blocks), frame each result like the raw REPL does.
AGENT = r"""
import sys, io
class _Machine:
    def reset(self):
        open(".fake-board-resets", "a").write("reset\n")
sys.modules["machine"] = _Machine()
g = {"__name__": "__main__"}
while True:
    n = sys.stdin.buffer.readline()
    if not n:
        break
    code = sys.stdin.buffer.read(int(n))
    err = ""
    try:
        exec(code, g)
    except BaseException as e:
        buf = io.StringIO()
        sys.print_exception(e, buf)
        err = buf.getvalue()
    sys.stdout.write("\x04" + err + "\x04")
"""


class FakeBoard:
    def __init__(self, root: Path, micropython: Path) -> None:
        self.root = root
        self.micropython = micropython
        self.master, self.slave = pty.openpty()
        tty.setraw(self.slave)  # a serial line: no echo, no newline translation
        self.port = os.ttyname(self.slave)
        self.agent: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def resets(self) -> int:
        f = self.root / ".fake-board-resets"
        return len(f.read_text().splitlines()) if f.exists() else 0

    def __enter__(self) -> FakeBoard:
        self.root.mkdir(parents=True, exist_ok=True)
        self._soft_reboot()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._kill_agent()
        os.close(self.master)
        os.close(self.slave)

    # -- the MicroPython process ------------------------------------------------------------
    def _kill_agent(self) -> None:
        if self.agent is not None:
            self.agent.kill()
            self.agent.wait()
            for f in (self.agent.stdin, self.agent.stdout):
                if f is not None:
                    f.close()
            self.agent = None

    def _soft_reboot(self) -> None:
        self._kill_agent()
        self.agent = subprocess.Popen(
            [str(self.micropython), "-c", AGENT],
            cwd=self.root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, MICROPYPATH=f".frozen:{self.root}"),
        )

    def _run(self, code: bytes) -> None:
        assert self.agent is not None and self.agent.stdin and self.agent.stdout
        self.agent.stdin.write(b"%d\n" % len(code) + code)
        self.agent.stdin.flush()
        eofs = 0
        while eofs < 2:  # forward output, then the error text, as they come
            chunk = os.read(self.agent.stdout.fileno(), 4096)
            if not chunk:
                self._write(b"\x04\x04")
                break
            eofs += chunk.count(b"\x04")
            self._write(chunk)
        self._write(b">")

    # -- the serial line ----------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        os.write(self.master, data)

    def _serve(self) -> None:
        raw = False
        line = bytearray()
        pending = bytearray()
        while not self._stop.is_set():
            r, _, _ = select.select([self.master], [], [], 0.1)
            if not r:
                continue
            try:
                pending += os.read(self.master, 4096)
            except OSError:
                return
            while pending:
                c = pending[0]
                if c == 0x05 and raw and len(pending) < 3:
                    break  # wait for the rest of Ctrl-E A Ctrl-A
                del pending[0]
                if not raw:
                    if c == 0x01:
                        raw = True
                        line.clear()
                        self._write(b"\r\n" + BANNER)
                    elif c == 0x03:
                        self._write(b"\r\n>>> ")
                    elif c == 0x04:
                        self._soft_reboot()
                        self._write(b"\r\nMPY: soft reboot\r\n>>> ")
                    continue
                if c == 0x01:
                    line.clear()
                    self._write(b"\r\n" + BANNER)
                elif c == 0x02:
                    raw = False
                    self._write(b"\r\n>>> ")
                elif c == 0x03:
                    line.clear()
                elif c == 0x05:
                    del pending[:2]  # 'A' Ctrl-A: raw-paste request, declined
                    self._write(b"R\x00")
                elif c == 0x04:
                    self._write(b"OK")
                    if not line:
                        self._soft_reboot()
                        self._write(b"\r\nMPY: soft reboot\r\n" + BANNER)
                    else:
                        code = bytes(line)
                        line.clear()
                        self._run(code)
                else:
                    line.append(c)
