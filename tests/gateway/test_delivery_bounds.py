"""Outgoing deliveries are bounded and their failures visible (issue 22): at most
--max-delivery-connections connections in all and --max-consumer-connections to one consumer
(on a1410b0 there was no total bound: 1,200 consumers that never answer held 1,024 open
files), one WARNING line when a consumer starts failing, with the error, and one when it
recovers (on a1410b0: DEBUG free text only), and the last error and last success of each
subscription for the status page."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest
from gwtest import (
    Consumer,
    call,
    envelope,
    notify_body,
    post,
    reading,
    subscribe_body,
    topic_filter,
)

from tests.polling import until
from tests.wsdl_actions import action

A_NOTIFY = action("NotificationConsumer", "Notify")
A_SUBSCRIBE = action("NotificationProducer", "Subscribe")


class Silent:
    """A consumer host that accepts connections and never answers; counts them."""

    def __init__(self) -> None:
        self.open = 0
        self.peak = 0
        self.server: asyncio.Server | None = None
        self.port = 0

    async def _conn(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.open += 1
        self.peak = max(self.peak, self.open)
        try:
            while await r.read(65536):
                pass
        finally:
            self.open -= 1
            w.close()

    async def start(self) -> Silent:
        self.server = await asyncio.start_server(self._conn, "0.0.0.0", 0, backlog=1024)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()


async def _subscribe(url: str, consumer: str) -> None:
    r = await call(url, subscribe_body(consumer, topic_filter("tns:t")), action=A_SUBSCRIBE)
    assert r.status == 200, r.text


async def test_outgoing_connections_are_bounded_in_all_and_per_consumer(make_gateway) -> None:  # type: ignore[no-untyped-def]
    gw = await make_gateway(
        max_delivery_connections=12, max_consumer_connections=3, delivery_timeout=30.0
    )
    many, one = await Silent().start(), await Silent().start()
    try:
        for k in range(40):  # 40 consumer hosts (loopback addresses) that never answer
            await _subscribe(gw.url, f"http://127.0.1.{k + 1}:{many.port}/x")
        r = await post(gw.url, envelope(notify_body(("tns:t", reading(1))), action=A_NOTIFY))
        assert r.status == 202
        # the bound is reached (a loaded machine opens them slowly), then held: none of the
        # 28 waiting deliveries gets a 13th connection while the 12 hang
        await until(lambda: many.peak >= 12, "12 connections open", 30, 0.05)
        await asyncio.sleep(1.0)
        assert many.peak == 12 and many.open == 12, (many.peak, many.open)
        await gw.stop()
        gw = await make_gateway(
            max_delivery_connections=12, max_consumer_connections=3, delivery_timeout=30.0
        )
        for k in range(10):  # 10 endpoints of one consumer host
            await _subscribe(gw.url, f"http://127.0.0.1:{one.port}/c{k}")
        r = await post(gw.url, envelope(notify_body(("tns:t", reading(1))), action=A_NOTIFY))
        assert r.status == 202
        await until(lambda: one.peak >= 3, "3 connections to the one host", 30, 0.05)
        await asyncio.sleep(1.0)
        assert one.peak == 3 and one.open == 3, (one.peak, one.open)
    finally:
        await many.stop()
        await one.stop()


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


async def test_a_failing_consumer_is_one_line_and_its_recovery_another(
    make_gateway, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    gw = await make_gateway(backoff_initial=0.05, backoff_max=0.1)
    port = _free_port()
    url = f"http://127.0.0.1:{port}/consumer"
    await _subscribe(gw.url, url)
    sid = next(iter(gw.state.subscriptions))
    with caplog.at_level(logging.INFO, logger="gateway.events"):
        for v in range(3):
            body = notify_body(("tns:t", reading(v)))
            assert (await post(gw.url, envelope(body, action=A_NOTIFY))).status == 202
        # failing: more than one attempt refused (the recovery line reports them)
        state = gw.ctx.delivery.state
        await until(lambda: (state(sid)["failing"] or 0) >= 3, "3 refused attempts", 30, 0.05)
        err = gw.ctx.delivery.last_error(sid)
        assert err is not None and err[0] == "connection refused", err
        assert gw.ctx.delivery.state(sid)["last_delivery"] is None
        c = await Consumer().start_on(port)
        try:
            await c.wait_for(3)
            await asyncio.sleep(0.2)
        finally:
            await c.stop()
    lines = [r for r in caplog.records if r.name == "gateway.events"]
    failing = [r for r in lines if getattr(r, "wsn_event", "") == "consumer_failing"]
    recovered = [r for r in lines if getattr(r, "wsn_event", "") == "consumer_recovered"]
    assert len(failing) == 1 and len(recovered) == 1, [r.getMessage() for r in lines]
    assert failing[0].levelname == recovered[0].levelname == "WARNING"
    assert failing[0].wsn_fields["error"] == "connection refused"  # type: ignore[attr-defined]
    assert failing[0].wsn_fields["consumer"] == url  # type: ignore[attr-defined]
    assert recovered[0].wsn_fields["failed_attempts"] > 1  # type: ignore[attr-defined]
    assert gw.ctx.delivery.state(sid)["last_delivery"] is not None
