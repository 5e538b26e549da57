"""The per-device last-seen of /metrics (issue 22 point 4) follows every message the gateway
attributes to a device, as the landing zone's `device_id` does (its registered publisher
address, or its `dev:<id>/...` topics), and every request of its registered publisher
(RegisterPublisher, a renewal), so a silent sensor is what alerts, not a device that
publishes through the broker's own address. One series per device of a current
registration. On ca8bf7e only a Notify posted to the registration's own address counted:
every step here but the first Notify fails there."""

from __future__ import annotations

import contextlib
import logging
import re
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from gwtest import call, notify_body, reading, register

from gateway.storage import StorageError
from gateway.storage_schema import SCHEMA_VERSION
from tests.polling import until

PRODUCER = "http://127.0.0.1:9/wsn/producer"  # never called: Demand=false
DEVICES = 'xmlns:dev="urn:wsn-edge:devices"'
A_SET_TT = (
    "http://docs.oasis-open.org/wsrf/rlw-2/ScheduledResourceTermination/SetTerminationTimeRequest"
)


async def _last_seen(gw) -> dict[str, float]:  # type: ignore[no-untyped-def]
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{gw.port}/metrics") as r:
        text = await r.text()
    return {
        m.group(1): float(m.group(2))
        for m in re.finditer(
            r'^wsn_device_last_seen_timestamp_seconds\{device="([^"]+)"\} (\S+)$', text, re.M
        )
    }


async def test_last_seen_follows_what_is_attributed_to_the_device(make_gateway) -> None:  # type: ignore[no-untyped-def]
    t0 = datetime.now(UTC).replace(microsecond=0)
    clock = [t0]
    gw = await make_gateway(clock=lambda: clock[0])

    def at(seconds: int) -> float:
        clock[0] = t0 + timedelta(seconds=seconds)
        return clock[0].timestamp()

    # RegisterPublisher is the device's own request: seen
    reg = await register(gw.url, publisher=PRODUCER, device_id="s1")
    assert await _last_seen(gw) == {"s1": t0.timestamp()}
    # a Notify to the broker's own address naming the device's producer address
    t = at(10)
    msg = notify_body(("tns:t", reading(1)), producer=PRODUCER)
    assert (await call(gw.url, msg)).status == 202
    assert await _last_seen(gw) == {"s1": t}
    # a Notify with no producer, on the device's dev:<id>/... topics
    t = at(20)
    msg = notify_body(("dev:s1/temperature", reading(2)), nsdecl=DEVICES)
    assert (await call(gw.url, msg)).status == 202
    assert await _last_seen(gw) == {"s1": t}
    # what is not the device's leaves it alone: another producer, another device's topic
    at(30)
    other = notify_body(("tns:t", reading(3)), producer="http://127.0.0.1:9/other")
    assert (await call(gw.url, other)).status == 202
    msg = notify_body(("dev:s2/temperature", reading(2)), nsdecl=DEVICES)
    assert (await call(gw.url, msg)).status == 202
    assert await _last_seen(gw) == {"s1": t}
    # a renewal of its registration
    t = at(40)
    later = (t0 + timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = (
        f"<rl:SetTerminationTime><rl:RequestedTerminationTime>{later}"
        "</rl:RequestedTerminationTime></rl:SetTerminationTime>"
    )
    assert (await call(reg, body, action=A_SET_TT)).status == 200
    assert await _last_seen(gw) == {"s1": t}
    # a Notify to its registration (as before), then registering again
    t = at(50)
    msg = notify_body(
        ("dt:temperature", reading(4)), nsdecl='xmlns:dt="urn:wsn-edge:device-topics"'
    )
    assert (await call(reg, msg)).status == 202
    assert await _last_seen(gw) == {"s1": t}
    t = at(60)
    again = await register(gw.url, publisher=PRODUCER, device_id="s1")
    assert await _last_seen(gw) == {"s1": t}
    # bounded: one series per device of a current registration, gone with the last
    assert len(gw.state.registrations) == 2
    assert (await call(reg, "<br:DestroyRegistration/>")).status == 200
    assert await _last_seen(gw) == {"s1": t}
    assert (await call(again, "<br:DestroyRegistration/>")).status == 200
    assert await _last_seen(gw) == {}


def _stored(data_dir: Path) -> list[tuple[str | None, float | None]]:
    with contextlib.closing(sqlite3.connect(data_dir / "broker.sqlite3")) as c:
        return list(c.execute("SELECT device_id, last_seen FROM registrations"))


async def test_last_seen_survives_a_restart(make_gateway, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Stored with the registration by the sweeps (a crash loses at most one interval) and
    at shutdown: the restarted gateway shows the time from before, not none. On 9656bd0
    the device had no series after a restart until it was heard from again."""
    t0 = datetime.now(UTC).replace(microsecond=0)
    clock = [t0]
    data = tmp_path / "gw"
    gw = await make_gateway(data_dir=data, clock=lambda: clock[0], sweep_interval=0.05)
    await register(gw.url, publisher=PRODUCER, device_id="s1")
    clock[0] = t0 + timedelta(seconds=10)
    msg = notify_body(("tns:t", reading(1)), producer=PRODUCER)
    assert (await call(gw.url, msg)).status == 202
    seen = clock[0].timestamp()
    # a sweep stores it, with the gateway running (what a kill -9 would keep)
    await until(lambda: _stored(data) == [("s1", seen)], "last_seen stored by a sweep", 5, 0.02)
    clock[0] = t0 + timedelta(seconds=20)
    assert (await call(gw.url, msg)).status == 202
    seen = clock[0].timestamp()
    clock[0] = t0 + timedelta(seconds=21)
    await gw.stop()  # and the shutdown stores the newest, whatever the sweeps did
    assert _stored(data) == [("s1", seen)]
    clock[0] = t0 + timedelta(minutes=5)
    again = await make_gateway(data_dir=data, clock=lambda: clock[0])
    assert await _last_seen(again) == {"s1": seen}


async def test_a_schema_2_file_gains_last_seen(make_gateway, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A database written by the previous schema (2: no registrations.last_seen) is
    upgraded in place; its registrations are kept, seen again from their next message."""
    data = tmp_path / "gw"
    gw = await make_gateway(data_dir=data)
    await register(gw.url, publisher=PRODUCER, device_id="s1")
    await gw.stop()
    with contextlib.closing(sqlite3.connect(data / "broker.sqlite3")) as c:
        c.execute("ALTER TABLE registrations DROP COLUMN last_seen")
        c.execute("PRAGMA user_version=2")
        c.commit()
    gw = await make_gateway(data_dir=data)
    assert len(gw.state.registrations) == 1
    msg = notify_body(("tns:t", reading(1)), producer=PRODUCER)
    assert (await call(gw.url, msg)).status == 202
    assert list(await _last_seen(gw)) == ["s1"]
    await gw.stop()
    with contextlib.closing(sqlite3.connect(data / "broker.sqlite3")) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
        (stored,) = c.execute("SELECT last_seen FROM registrations").fetchone()
    assert stored is not None


async def test_a_full_disk_at_a_sweep_is_one_line_and_stored_later(
    make_gateway, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    """A sweep that cannot store the last-seen times (the disk is full) says so in one
    WARNING line, with no traceback, and stores them at a later sweep. On 6ce495d each
    such sweep logged an ERROR with a traceback (the short soak, which fills the disk,
    counted four)."""
    t0 = datetime.now(UTC).replace(microsecond=0)
    clock = [t0]
    gw = await make_gateway(clock=lambda: clock[0], sweep_interval=0.05)
    await register(gw.url, publisher=PRODUCER, device_id="s1")
    storage = gw.ctx.storage
    real = storage.set_last_seen
    failed: list[int] = []

    async def full(rows: Any) -> None:
        failed.append(len(rows))
        raise StorageError("storage failure: database or disk is full")

    storage.set_last_seen = full
    with caplog.at_level(logging.INFO, logger="gateway.upkeep"):
        clock[0] = t0 + timedelta(seconds=10)
        msg = notify_body(("tns:t", reading(1)), producer=PRODUCER)
        assert (await call(gw.url, msg)).status == 202
        await until(lambda: len(failed) >= 2, "two sweeps on a full disk", 10, 0.02)
        storage.set_last_seen = real
        sweeps = gw.ctx.counts.sweeps
        await until(lambda: gw.ctx.counts.sweeps >= sweeps + 2, "two more sweeps", 10, 0.02)
    records = [r for r in caplog.records if r.name == "gateway.upkeep"]
    assert records and all(r.exc_info is None for r in records), [
        (r.levelname, r.getMessage()) for r in records
    ]
    assert all(r.levelname == "WARNING" and "disk is full" in r.getMessage() for r in records)
    stored = [(r.device_id, r.last_seen) for r in storage.load().registrations]
    assert stored == [("s1", clock[0].timestamp())], stored
