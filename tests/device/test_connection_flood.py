"""A device left alone on a network (issue 26): a flood of connections that each send half a
request and hold on. The device serves at most limits.max_connections at once (the others wait
in the listen backlog), never runs out of heap for them, and once the attacker's sockets are
closed it answers again, without a reboot: on the unix ports at a 140 KiB heap, and on the 64 KiB
heap of the device frozen into the 32-bit firmware. (At a1410b0 the 64-bit port took every
connection, and after 60 of them a MemoryError had ended its accept task: it never answered
again.)"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import aiohttp
import pytest
from devtest import DeviceProcess

# generous: the module's fixture builds a firmware variant (make), minutes on a loaded machine
pytestmark = pytest.mark.timeout(600)

HALF = b"POST /wsn/producer HTTP/1.1\r\nHost: x\r\nContent-Le"


async def _flood_then_recover(dev: DeviceProcess, n: int = 60) -> None:
    async def attacker() -> asyncio.StreamWriter | None:
        try:
            _, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", dev.port), 0.3)
        except (OSError, TimeoutError):
            return None  # the listen backlog is full: the kernel holds back the handshake
        w.write(HALF)
        return w

    writers: list[asyncio.StreamWriter] = []
    for _ in range(n // 5):  # in waves, so the device may take each as it comes
        writers += [w for w in await asyncio.gather(*[attacker() for _ in range(5)]) if w]
        await asyncio.sleep(0.1)
    # the device holds at most max_connections (4); the kernel's accept queue (listen(8))
    # holds 9 more; everything beyond waits for the handshake
    assert 8 <= len(writers) <= 4 + 9, len(writers)
    await asyncio.sleep(1.5)
    assert dev.proc.poll() is None, dev.output()
    for w in writers:
        w.close()
        with contextlib.suppress(Exception):
            await w.wait_closed()
    # served again once the attack stops: well within the read timeout of the held slots
    deadline = time.monotonic() + 15
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as s:
        while True:
            try:
                async with s.get(dev.base + "/") as r:
                    assert r.status == 200
                    break
            except (aiohttp.ClientError, TimeoutError):
                assert time.monotonic() < deadline, "no answer after the flood:\n" + dev.output()
                await asyncio.sleep(0.2)
    out = dev.output()
    assert "MemoryError" not in out and "Traceback" not in out, out


async def test_a_flood_of_half_requests_on_a_small_heap(
    start_device: Callable[..., DeviceProcess],
) -> None:
    dev = start_device("140K", limits={"read_timeout_s": 10}, sensors=[{"topic": "heartbeat"}])
    await _flood_then_recover(dev)


async def test_a_flood_of_half_requests_in_64k_frozen(
    start_frozen_device: Callable[..., DeviceProcess],
) -> None:
    dev = start_frozen_device("64K", limits={"read_timeout_s": 10})
    await _flood_then_recover(dev)
