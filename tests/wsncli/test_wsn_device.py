"""`wsn sub` against the device on the MicroPython unix port (issue 14): a producer is a
broker's peer here, so the same command that subscribes at the gateway subscribes at the
device (Simple dialect, the device's own pull point), prints its readings and cleans up
there (no subscription, no pull point left on the device)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
from devtest import Client, DeviceProcess, launch, resolve_interpreter
from wsntest import Wsn

from tests.polling import until

pytestmark = pytest.mark.timeout(120)
DT = "urn:wsn-edge:device-topics"
RD = "urn:wsn-edge:reading"


@pytest.fixture
def device(tmp_path: Path) -> Iterator[DeviceProcess]:
    started: list[DeviceProcess] = []
    dev = launch(resolve_interpreter("unix"), tmp_path, started)
    yield dev
    for d in started:
        d.stop()


@pytest.fixture
async def client(device: DeviceProcess) -> AsyncIterator[Client]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as s:
        yield Client(device, s)


async def test_wsn_sub_at_the_device_simple_dialect(device: DeviceProcess, client: Client) -> None:
    sub = await Wsn.start(
        "sub", device.producer, "dt:temperature", "--dialect", "simple", "--ns", f"dt={DT}",
        "--json", "--count", "2", "--interval", "0.2",
    )  # fmt: skip
    st = await until(lambda: _one_sub(client), "wsn's subscription at the device", timeout=20)
    (s,) = st["subscription_list"]
    assert "temperature" in str(s["topics"]) and len(st["pullpoint_list"]) == 1
    assert await client.sample("humidity") == 1  # not selected by dt:temperature
    assert await client.sample("temperature", count=3) == 3
    res = await sub.finish(timeout=30)
    assert res.rc == 0 and res.err == "", res
    rows = [json.loads(line) for line in res.out.splitlines()]
    assert len(rows) == 2
    for r in rows:
        assert r["topic"].endswith(":temperature") and r["topic_namespace"] == DT
        assert r["message"].startswith("<rd:Reading") and f'xmlns:rd="{RD}"' in r["message"]
        assert 'device="dev-test"' in r["message"]
    after = await client.status()
    assert after["subscription_list"] == [] and after["pullpoint_list"] == []


async def _one_sub(client: Client) -> dict[str, object] | None:
    st = await client.status()
    return st if len(st["subscription_list"]) == 1 else None
