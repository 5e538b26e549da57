"""A redelivered message carries the identity of its first delivery (issue 22): per message
and subscription, the same wsa:MessageID (one message per request) and the same entry in
edge:MessageIDs (a wrapped Notify), on a retry and after kill -9 and a restart; on a1410b0
every attempt had a new wsa:MessageID, so a consumer could not drop the at-least-once
resend."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from aiohttp import web
from gwtest import (
    EDGE,
    WSA,
    WSNT,
    call,
    envelope,
    notify_body,
    post,
    reading,
    start_gateway,
    stop_gateway,
    subscribe_body,
    topic_filter,
)
from lxml import etree

from tests.wsdl_actions import action

A_NOTIFY = action("NotificationConsumer", "Notify")
A_SUBSCRIBE = action("NotificationProducer", "Subscribe")
UUID = re.compile(r"urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


class Recorder:
    """A consumer that answers `status` and records (wsa:MessageID, [edge ids], values)."""

    def __init__(self) -> None:
        self.status = 500
        self.seen: list[tuple[str, list[str], list[str]]] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        env = etree.fromstring(await request.read())
        mid = env.findtext(f".//{{{WSA}}}MessageID") or ""
        ids = (env.findtext(f".//{{{WSNT}}}Notify/{{{EDGE}}}MessageIDs") or "").split()
        vals = [v.text or "" for v in env.iter("{urn:wsn-edge:reading}value")]
        self.seen.append((mid, ids, vals))
        return web.Response(status=self.status)

    async def start(self, port: int = 0) -> Recorder:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", port)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{bound}/c"
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def wait(self, n: int, timeout: float = 10.0) -> None:
        async def _w() -> None:
            while len(self.seen) < n:
                await asyncio.sleep(0.02)

        await asyncio.wait_for(_w(), timeout)


async def test_a_retry_carries_the_same_ids(make_gateway) -> None:  # type: ignore[no-untyped-def]
    gw = await make_gateway()
    c = await Recorder().start()
    try:
        r = await call(gw.url, subscribe_body(c.url, topic_filter("tns:t")), action=A_SUBSCRIBE)
        assert r.status == 200
        body = notify_body(("tns:t", reading(1)), ("tns:t", reading(2)))
        assert (await post(gw.url, envelope(body, action=A_NOTIFY))).status == 202
        await c.wait(2)  # refused once, sent again
        c.status = 200
        await c.wait(3)
        first, again = c.seen[0], c.seen[-1]
        assert first[2] == again[2] == ["1", "2"]
        assert first[0] == again[0] and UUID.fullmatch(first[0]), c.seen
        assert first[1] == again[1] and len(set(first[1])) == 2
        assert all(UUID.fullmatch(i) for i in first[1])
        # one message per request (here: raw): its wsa:MessageID is the message's id
        raw = await Recorder().start()
        c.status = raw.status = 200
        sub = subscribe_body(
            raw.url,
            topic_filter("tns:r"),
            "<wsnt:SubscriptionPolicy><wsnt:UseRaw/></wsnt:SubscriptionPolicy>",
        )
        r = await call(gw.url, sub, action=A_SUBSCRIBE)
        assert r.status == 200
        assert (
            await post(gw.url, envelope(notify_body(("tns:r", reading(3))), action=A_NOTIFY))
        ).status == 202
        await raw.wait(1)
        mid, ids, vals = raw.seen[0]
        assert vals == ["3"] and ids == [] and UUID.fullmatch(mid)
        await raw.stop()
    finally:
        await c.stop()


async def test_after_kill_9_a_message_keeps_its_id(tmp_path: Path) -> None:
    c = await Recorder().start()
    gw = start_gateway(tmp_path / "data")
    try:
        r = await call(gw.url, subscribe_body(c.url, topic_filter("tns:t")), action=A_SUBSCRIBE)
        assert r.status == 200
        for v in (1, 2, 3):  # one Notify each: three requests, or fewer batches
            body = notify_body(("tns:t", reading(v)))
            assert (await post(gw.url, envelope(body, action=A_NOTIFY))).status == 202
        await c.wait(1)  # refused: they stay in the outbox
        gw.proc.kill()
        gw.proc.wait()
        before = {v: i for mid, ids, vals in c.seen for v, i in zip(vals, ids, strict=True)}
        c.status = 200
        gw = start_gateway(tmp_path / "data")
        await asyncio.sleep(0.5)
        got = {}
        for _ in range(100):
            got = {v: i for mid, ids, vals in c.seen[-3:] for v, i in zip(vals, ids, strict=True)}
            if set(got) >= {"1", "2", "3"}:
                break
            await asyncio.sleep(0.1)
        assert before and all(got[v] == before[v] for v in before), (before, got)
    finally:
        stop_gateway(gw)
        await c.stop()
