"""SIGTERM answers open long polls at once and the gateway exits within a few seconds
(issue 22 point 5). On a1410b0 a `wsn sub` long-polling made the stop wait out its
edge:Wait (20.8 s with the CLI's 20 s wait), silently."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
from gwtest import WSA, WSNT, call, start_gateway, stop_gateway

from tests.polling import until

A_CREATE_PP = "http://docs.oasis-open.org/wsn/bw-2/CreatePullPoint/CreatePullPointRequest"


async def test_sigterm_answers_long_polls_at_once(tmp_path: Path) -> None:
    gw = start_gateway(tmp_path / "data")
    try:
        pps = []
        for _ in range(3):
            r = await call(gw.url, "<wsnt:CreatePullPoint/>", action=A_CREATE_PP)
            pps.append(r.body.findtext(f"{{{WSNT}}}PullPoint/{{{WSA}}}Address"))
        # the longest wait the gateway grants (--max-wait 60 s): a stop that waited for the
        # polls would take that long; one that answers them at once takes what a stop takes
        # (a few seconds on a loaded machine), far below
        wait = "<wsnt:GetMessages><edge:Wait>PT60S</edge:Wait></wsnt:GetMessages>"
        polls = [asyncio.create_task(call(pp, wait)) for pp in pps]
        status = gw.url.rsplit("/wsn/", 1)[0] + "/status.json"

        async def waiting() -> bool:  # the gateway holds all three (not a guess of when)
            async with aiohttp.ClientSession() as s, s.get(status) as r:
                snap = await r.json()
            return sum(p["waiting_clients"] for p in snap["pullpoints"]) == 3

        await until(waiting, "the three long polls waiting", 30)
        assert not any(p.done() for p in polls)
        t0 = time.monotonic()
        code = await asyncio.to_thread(stop_gateway, gw)
        took = time.monotonic() - t0
        answers = await asyncio.gather(*polls, return_exceptions=True)
    finally:
        if gw.proc.poll() is None:
            gw.proc.kill()
    assert code == 0, gw.stderr.read_text()
    assert took < 30.0, f"the stop took {took:.1f} s"
    # each long poll got its (empty) answer, not a dropped connection
    for a in answers:
        assert not isinstance(a, BaseException), a
        assert a.status == 200, a.text
        assert a.body.find(f"{{{WSNT}}}NotificationMessage") is None
    assert "Traceback" not in gw.stderr.read_text()
