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

import json
import os
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from devtest import (
    DEVICE_DIR,
    INTERPRETERS,
    Client,
    Consumer,
    DeviceProcess,
    compile_mpy,
    free_port,
    make_config,
    resolve_interpreter,
)

collect_ignore = ["core", "mp_runner.py"]


@pytest.fixture(params=sorted(INTERPRETERS))
def interpreter(request: pytest.FixtureRequest) -> Path:
    return resolve_interpreter(request.param)


@pytest.fixture
def start_device(
    interpreter: Path, tmp_path: Path
) -> Iterator[Callable[..., DeviceProcess]]:
    started: list[DeviceProcess] = []

    def start(heapsize: str | None = None, mpy: bool = False, **overrides: Any) -> DeviceProcess:
        last_error = ""
        for _attempt in range(3):  # a free port can be taken between probe and bind
            port = free_port()
            conf = make_config(port, **overrides)
            cfg = tmp_path / f"config-{port}.json"
            cfg.write_text(json.dumps(conf))
            if mpy:
                app = compile_mpy(tmp_path / "mpy")
                main, path = app / "main.py", f".frozen:{app}"
            else:
                main, path = DEVICE_DIR / "main.py", f".frozen:{DEVICE_DIR}"
            cmd = [str(interpreter)]
            if heapsize:
                cmd += ["-X", f"heapsize={heapsize}"]
            cmd += [str(main), str(cfg)]
            env = {**os.environ, "MICROPYPATH": path}
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, env=env, cwd=str(tmp_path))
            dev = DeviceProcess(proc, port, conf)
            started.append(dev)
            try:
                dev.wait_line(r"^producer http://127\.0\.0\.1:\d+/wsn/producer$", 15)
                return dev
            except AssertionError as e:
                last_error = str(e)
                dev.stop()
                if "EADDRINUSE" not in dev.output() and "Errno 98" not in dev.output():
                    break
        raise AssertionError(f"device did not start: {last_error}")

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
