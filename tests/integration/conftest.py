"""Fixtures for the device <-> gateway end-to-end tests: a real `python -m gateway` process
and a real device on the MicroPython unix port, all on 127.0.0.1.

The device side reuses tests/device/devtest.py (launch, Client, resolve_interpreter) and the
gateway side tests/gateway/gwtest.py (Consumer, call, SOAP helpers): imported, not copied.

- ``gateway_process(data_dir=None, port=None)``: starts the gateway (``--port`` fixed so that
  a restart on the same port keeps every EPR valid) and waits for its ``listening`` line;
  ``GatewayProcess.stop(sig)`` ends it (SIGTERM: orderly; SIGKILL: crash) and
  ``restart()`` starts it again on the same port and data dir. Every process is ended at
  teardown.
- ``start_device(**config)``: the device (unix port) via devtest.launch.
- ``make_consumer()``: a NotificationConsumer over HTTP (gwtest.Consumer).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
for _d in (HERE.parent / "device", HERE.parent / "gateway"):
    if str(_d) not in sys.path:
        sys.path.insert(0, str(_d))

from devtest import ROOT, DeviceProcess, free_port, launch, resolve_interpreter  # noqa: E402
from gwtest import Consumer  # noqa: E402


class GatewayProcess(DeviceProcess):
    """`python -m gateway` as a child process (stdout line reader of DeviceProcess)."""

    def __init__(self, data_dir: Path, port: int, extra: list[str]) -> None:
        self.data_dir = data_dir
        self.extra = extra
        self.url = f"http://127.0.0.1:{port}/wsn/broker"
        self.starts = 0
        super().__init__(self._spawn(port), port, {})

    def _spawn(self, port: int) -> subprocess.Popen[str]:
        cmd = [
            sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", str(port),
            "--data-dir", str(self.data_dir), "--log-level", "INFO", *self.extra,
        ]  # fmt: skip
        self.starts += 1
        return subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=str(ROOT),
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def wait_ready(self, timeout: float = 20.0) -> None:
        self.wait_line(r"wsn-gateway listening on http://", timeout, start=self._mark)

    def start_reading(self) -> None:
        import threading

        with self._cond:
            self._mark = len(self.lines)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    _mark = 0

    def stop(self, sig: int = signal.SIGTERM) -> None:  # type: ignore[override]
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(5)

    def restart(self) -> None:
        """Start again with the same port and data dir."""
        assert self.proc.poll() is not None, "stop it first"
        self.proc = self._spawn(self.port)
        self.start_reading()
        self.wait_ready()


@pytest.fixture
def interpreter() -> Path:
    return resolve_interpreter("unix")


@pytest.fixture
def gateway_process(tmp_path: Path) -> Iterator[Callable[..., GatewayProcess]]:
    started: list[GatewayProcess] = []

    def start(*extra: str, data_dir: Path | None = None) -> GatewayProcess:
        last = ""
        for _attempt in range(3):  # a free port can be taken between probe and bind
            gp = GatewayProcess(data_dir or tmp_path / "gateway", free_port(), list(extra))
            started.append(gp)
            try:
                gp.wait_ready()
                return gp
            except AssertionError as e:
                last = str(e)
                gp.stop(signal.SIGKILL)
                if "Address already in use" not in gp.output():
                    break
        raise AssertionError(f"gateway did not start: {last}")

    yield start
    for gp in started:
        gp.stop(signal.SIGKILL)


@pytest.fixture
def start_device(interpreter: Path, tmp_path: Path) -> Iterator[Callable[..., DeviceProcess]]:
    started: list[DeviceProcess] = []

    def start(**overrides: Any) -> DeviceProcess:
        return launch(interpreter, tmp_path, started, None, "source", **overrides)

    yield start
    for dev in started:
        dev.stop()


@pytest.fixture
async def make_consumer() -> AsyncIterator[Callable[..., Awaitable[Consumer]]]:
    made: list[Consumer] = []

    async def factory(port: int = 0) -> Consumer:
        c = await Consumer().start_on(port)
        made.append(c)
        return c

    yield factory
    for c in made:
        await c.stop()
