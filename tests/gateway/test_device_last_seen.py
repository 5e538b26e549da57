"""The per-device last-seen of /metrics (issue 22 point 4) follows every message the gateway
attributes to a device, as the landing zone's `device_id` does (its registered publisher
address, or its `dev:<id>/...` topics), and every request of its registered publisher
(RegisterPublisher, a renewal), so a silent sensor is what alerts, not a device that
publishes through the broker's own address. One series per device of a current
registration. On ca8bf7e only a Notify posted to the registration's own address counted:
every step here but the first Notify fails there."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import aiohttp
from gwtest import call, notify_body, reading, register

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
