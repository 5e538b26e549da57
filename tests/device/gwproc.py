"""A real gateway (`python -m gateway`) for the device tests that need one (batching, sleepy
mode): started on 127.0.0.1 with its own data dir, stoppable and restartable on the same port
(so the registration address the device keeps stays valid), and its landing zone readable.

The device-side helpers are in devtest.py; this only adds the gateway process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from devtest import ROOT, DeviceProcess, free_port


class GatewayProcess(DeviceProcess):
    """`python -m gateway` as a child process (the stdout line reader of DeviceProcess)."""

    def __init__(self, data_dir: Path, extra: list[str] | None = None) -> None:
        self.data_dir = data_dir
        self.extra = extra or []
        port = free_port()
        self.url = f"http://127.0.0.1:{port}/wsn/broker"
        super().__init__(self._spawn(port), port, {})
        self.wait_line(r"wsn-gateway listening on http://", 30)

    def _spawn(self, port: int) -> subprocess.Popen[str]:
        cmd = [sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", str(port),
               "--data-dir", str(self.data_dir), "--log-level", "INFO", *self.extra]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, cwd=str(ROOT),
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(5)

    def restart(self) -> None:
        """Start again on the same port and data dir (after stop())."""
        assert self.proc.poll() is not None, "stop it first"
        mark = len(self.lines)
        self.proc = self._spawn(self.port)
        import threading

        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.wait_line(r"wsn-gateway listening on http://", 30, start=mark)

    def landing(self) -> list[dict[str, Any]]:
        """Every landing line written so far (complete files and the open .tmp file)."""
        out: list[dict[str, Any]] = []
        d = self.data_dir / "landing"
        files = sorted(d.glob("landing-*.jsonl")) + sorted(d.glob(".landing-*.jsonl.tmp"))
        for f in files:
            for line in f.read_text().splitlines():
                if line.strip():
                    out.append(json.loads(line))
        return out
