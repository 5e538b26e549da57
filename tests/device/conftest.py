"""Fixtures for the device tests: the real device on a real MicroPython, on 127.0.0.1.

- ``interpreter``: parametrized over "unix" (.venv/bin/micropython, 64-bit) and "unix32"
  (.cache/micropython/bin/micropython32, a 32-bit single-precision build made by
  ``bash scripts/build_micropython.sh``). A missing unix32 fails under CI=true and is skipped
  otherwise (design.md test conventions).
- ``start_device(**config)``: starts ``micropython device/main.py CONFIG.json`` on a free port
  with a temporary JSON config, waits for its ``producer http://...`` line and returns a
  :class:`DeviceProcess`; every device started is killed at teardown.
- ``soap``: helpers to build SOAP requests and read responses (lxml).

The MicroPython test modules under ``core/`` are run by ``mp_runner.py`` inside MicroPython
(test_core_in_micropython.py), never collected by pytest.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import fwbuild
import pytest
from devtest import (
    INTERPRETERS,
    Client,
    Consumer,
    DeviceProcess,
    launch,
    resolve_interpreter,
)

collect_ignore = ["core", "mp_runner.py"]


@pytest.fixture(params=sorted(INTERPRETERS))
def interpreter(request: pytest.FixtureRequest) -> Path:
    return resolve_interpreter(request.param)


@pytest.fixture
def device_install() -> str | Path:
    """What start_device runs by default: "source" (device/ as is); test_mip.py overrides it
    with the tree MicroPython's mip installed."""
    return "source"


@pytest.fixture
def start_device(
    interpreter: Path, tmp_path: Path, device_install: str | Path
) -> Iterator[Callable[..., DeviceProcess]]:
    """start(heapsize=None, install=device_install, **config) -> a running device (config
    keys as in device/config.example.json, e.g. mode="sleepy")."""
    started: list[DeviceProcess] = []

    def start(
        heapsize: str | None = None, install: str | Path | None = None, **overrides: Any
    ) -> DeviceProcess:
        return launch(
            interpreter, tmp_path, started, heapsize, install or device_install, **overrides
        )

    yield start
    for dev in started:
        dev.stop()


@pytest.fixture(scope="session")
def device_firmware() -> Path:
    """The 32-bit unix port with the device frozen in (tests/device/fwbuild.py)."""
    try:
        return fwbuild.device_firmware()
    except fwbuild.FirmwareUnavailable as e:
        if os.environ.get("CI") == "true":
            pytest.fail(str(e))
        pytest.skip(str(e))


@pytest.fixture
def start_frozen_device(
    device_firmware: Path, tmp_path: Path
) -> Iterator[Callable[..., DeviceProcess]]:
    """Like start_device, on the frozen-device firmware (the device code is not in the heap)."""
    started: list[DeviceProcess] = []

    def start(heapsize: str | None = "64K", **overrides: Any) -> DeviceProcess:
        return launch(device_firmware, tmp_path, started, heapsize, "frozen", **overrides)

    yield start
    for dev in started:
        dev.stop()


@pytest.fixture
def device(start_device: Callable[..., DeviceProcess]) -> DeviceProcess:
    return start_device()


@pytest.fixture
async def consumers() -> AsyncIterator[Callable[..., Awaitable[Consumer]]]:
    made: list[Consumer] = []

    async def make(fail_first: int = 0, status: int = 202, path: str = "/consumer") -> Consumer:
        c = await Consumer(fail_first, status).start(path)
        made.append(c)
        return c

    yield make
    for c in made:
        await c.stop()


@pytest.fixture
async def client(device: DeviceProcess) -> AsyncIterator[Client]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as s:
        yield Client(device, s)
