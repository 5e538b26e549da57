"""Fixtures for the device <-> gateway end-to-end tests: a real `python -m gateway` process
and a real device on the MicroPython unix port, all on 127.0.0.1.

The device side reuses tests/device/devtest.py (launch, Client, resolve_interpreter), the
gateway process tests/device/gwproc.py (GatewayProcess, start_gateway_process) and the SOAP
side tests/gateway/gwtest.py (Consumer, call, SOAP helpers): imported, not copied.

- ``gateway_process(data_dir=None, port=None)``: starts the gateway (``--port`` fixed so that
  a restart on the same port keeps every EPR valid) and waits for its ``listening`` line;
  ``GatewayProcess.stop(sig)`` ends it (SIGTERM: orderly; SIGKILL: crash) and
  ``restart()`` starts it again on the same port and data dir. Every process is ended at
  teardown.
- ``start_device(**config)``: the device (unix port) via devtest.launch.
- ``make_consumer()``: a NotificationConsumer over HTTP (gwtest.Consumer).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
for _d in (HERE.parent / "device", HERE.parent / "gateway"):
    if str(_d) not in sys.path:
        sys.path.insert(0, str(_d))

from devtest import DeviceProcess, launch, resolve_interpreter  # noqa: E402
from gwproc import GatewayProcess, start_gateway_process  # noqa: E402
from gwtest import Consumer  # noqa: E402


@pytest.fixture
def interpreter() -> Path:
    return resolve_interpreter("unix")


@pytest.fixture
def gateway_process(tmp_path: Path) -> Iterator[Callable[..., GatewayProcess]]:
    started: list[GatewayProcess] = []

    def start(*extra: str, data_dir: Path | None = None) -> GatewayProcess:
        return start_gateway_process(data_dir or tmp_path / "gateway", extra, started=started)

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
