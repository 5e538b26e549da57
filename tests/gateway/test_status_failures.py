"""Failures in plain sight (issue 22 point 4): /status and /status.json show per
subscription its last error and last success, a pull-point subscription's deliveries, the
recent WARNING lines, rates and free disk; /metrics has per-device last-seen, process_* and
build-info series and keeps long-poll waits out of the request latency. On a1410b0 none of
these were there (a pull-point subscription showed `delivered 0`; GetMessages with
edge:Wait PT1S was observed as a request of a second)."""

from __future__ import annotations

import asyncio
import json
import re
import socket

import aiohttp
from gwtest import (
    DT,
    WSA,
    WSNT,
    Consumer,
    call,
    notify_body,
    reading,
    register,
    subscribe_body,
    topic_filter,
)

A_CREATE_PP = "http://docs.oasis-open.org/wsn/bw-2/CreatePullPoint/CreatePullPointRequest"


async def _get(url: str) -> str:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        assert r.status == 200, await r.text()
        return await r.text()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_failing_consumer_and_a_pullpoint_on_the_status(gw) -> None:  # type: ignore[no-untyped-def]
    base = f"http://127.0.0.1:{gw.port}"
    port = _free_port()  # nobody listens there yet: connection refused
    url = f"http://127.0.0.1:{port}/consumer"
    r = await call(gw.url, subscribe_body(url, topic_filter("tns:t")))
    assert r.status == 200, r.text
    r = await call(gw.url, "<wsnt:CreatePullPoint/>", action=A_CREATE_PP)
    pp = r.body.findtext(f"{{{WSNT}}}PullPoint/{{{WSA}}}Address")
    assert (await call(gw.url, subscribe_body(pp, topic_filter("tns:t")))).status == 200
    for v in range(3):
        assert (await call(gw.url, notify_body(("tns:t", reading(v))))).status == 202

    async def snapshot() -> dict:  # type: ignore[type-arg]
        return json.loads(await _get(f"{base}/status.json"))  # type: ignore[no-any-return]

    for _ in range(50):
        snap = await snapshot()
        push = next(s for s in snap["subscriptions"] if s["pullpoint"] is None)
        if push["last_error"]:
            break
        await asyncio.sleep(0.1)
    assert "refused" in push["last_error"], push
    assert push["last_error_at"] and push["last_delivery"] is None
    pull = next(s for s in snap["subscriptions"] if s["pullpoint"])
    assert pull["delivered"] == 3 and pull["last_delivery"], pull
    assert any(e["event"] == "consumer_failing" for e in snap["recent_errors"]), snap
    g = snap["gateway"]
    assert g["free_disk_bytes"] > 0
    assert g["rates"]["accepted_per_s"] > 0 and "delivered_per_s" in g["rates"], g
    html = await _get(f"{base}/status")
    assert "Recent errors" in html and "free disk" in html and "refused" in html
    # the consumer comes: its last success shows
    c = await Consumer().start_on(port)
    try:
        await c.wait_for(3)
        for _ in range(50):
            push = next(s for s in (await snapshot())["subscriptions"] if s["pullpoint"] is None)
            if push["last_delivery"]:
                break
            await asyncio.sleep(0.1)
        assert push["last_delivery"] and push["delivered"] == 3, push
    finally:
        await c.stop()


async def test_metrics_process_build_devices_and_no_long_poll_in_latency(gw) -> None:  # type: ignore[no-untyped-def]
    base = f"http://127.0.0.1:{gw.port}"
    reg = await register(gw.url, device_id="sensor-7")
    assert (await call(reg, notify_body(("dt:temperature", reading(1)), nsdecl=DT))).status == 202
    r = await call(gw.url, "<wsnt:CreatePullPoint/>", action=A_CREATE_PP)
    pp = r.body.findtext(f"{{{WSNT}}}PullPoint/{{{WSA}}}Address")
    wait = "<wsnt:GetMessages><edge:Wait>PT1S</edge:Wait></wsnt:GetMessages>"
    r = await call(pp, wait)  # waits its second: nothing arrives
    assert r.status == 200
    text = await _get(f"{base}/metrics")
    for name in ("process_resident_memory_bytes", "process_open_fds", "wsn_data_dir_free_bytes"):
        assert re.search(rf"^{name} \S+$", text, re.M), name
    assert re.search(r'^wsn_build_info\{.*version="[^"]+".*\} 1\.0$', text, re.M)
    m = re.search(
        r'^wsn_device_last_seen_timestamp_seconds\{device="sensor-7"\} (\S+)$', text, re.M
    )
    assert m and float(m.group(1)) > 1e9, text
    # the GetMessages that waited 1 s is observed without its wait
    le = re.search(
        r'^wsn_request_duration_seconds_bucket\{le="0.5",operation="GetMessages"\} (\S+)$',
        text,
        re.M,
    )
    count = re.search(
        r'^wsn_request_duration_seconds_count\{operation="GetMessages"\} (\S+)$', text, re.M
    )
    assert le and count and float(count.group(1)) == 1.0, text
    assert float(le.group(1)) == 1.0
