"""The Notify request to a consumer (gateway/delivery_http.py): the consumer's answer body is
read under --max-consumer-answer-bytes and within --delivery-timeout, discarded, and past
either the connection is closed; a 2xx answer counts as delivered whatever its body does.

The consumers here are raw asyncio servers (a fake of what is outside the product), so the
test controls every byte of the answer and sees what the gateway does with the connection.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from gwtest import (
    publish,
    read_request,
    readings,
    subscribe,
)

from gateway.app import Running
from tests.polling import until

MakeGateway = Callable[..., Awaitable[Running]]
#: what a flooding consumer sends at most; the code before the cap read all of it
FLOOD = 64 * 1024 * 1024
CHUNK = 64 * 1024
#: what the gateway may have let the consumer write before it closed: the cap, aiohttp's
#: stream buffer and both sockets' kernel buffers (loopback autotuning: a few MiB)
SENT_BOUND = 16 * 1024 * 1024
OK_BODY = b"<ok/>" * 200  # 1,000 bytes: under the cap, the connection is kept


@dataclass
class Conn:
    """One connection to the test consumer, as the consumer saw it."""

    requests: list[bytes] = field(default_factory=list)  # the request bodies
    answer_sent: int = 0  # bytes of the hostile answer's body written
    ended: str = ""  # "closed by the gateway", "flood written", "trickle stopped"


class HostileConsumer:
    """Answers its first request `status` (200) with a hostile body (`mode`: "flood", a
    chunked body of FLOOD bytes as fast as the socket takes them; "trickle", a
    Content-Length of 1 MB sent one byte per 100 ms), and every later request 200 with a
    1,000-byte body."""

    def __init__(self, mode: str, status: bytes = b"200 OK") -> None:
        self.mode = mode
        self.status = status  # of the hostile answer
        self.conns: list[Conn] = []
        self.server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/consumer"

    def bodies(self) -> list[bytes]:
        return [b for c in self.conns for b in c.requests]

    async def start(self) -> HostileConsumer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        conn = Conn()
        self.conns.append(conn)
        try:
            while True:
                conn.requests.append(await read_request(r))
                if len(self.bodies()) > 1:
                    w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + OK_BODY)
                    await w.drain()
                elif self.mode == "flood":
                    await self._flood(conn, w)
                else:
                    await self._trickle(conn, w)
        except (asyncio.IncompleteReadError, ConnectionError):
            conn.ended = conn.ended or "closed by the gateway"
        finally:
            w.close()

    async def _flood(self, conn: Conn, w: asyncio.StreamWriter) -> None:
        w.write(b"HTTP/1.1 %s\r\nTransfer-Encoding: chunked\r\n\r\n" % self.status)
        chunk = b"%x\r\n" % CHUNK + b"x" * CHUNK + b"\r\n"
        while conn.answer_sent < FLOOD:
            w.write(chunk)
            await w.drain()  # raises once the gateway has closed (reset)
            conn.answer_sent += CHUNK
        w.write(b"0\r\n\r\n")  # the whole flood was read: end it properly
        await w.drain()
        conn.ended = "flood written"

    async def _trickle(self, conn: Conn, w: asyncio.StreamWriter) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
        await w.drain()
        for _ in range(300):  # 30 s, far beyond the tests' 2 s --delivery-timeout
            await asyncio.sleep(0.1)
            w.write(b"x")
            await w.drain()
            conn.answer_sent += 1
        conn.ended = "trickle stopped"
        raise ConnectionError  # not a usable answer any more: give up the connection

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()


def _deliveries(gw: Running, outcome: str) -> float:
    got = gw.ctx.metrics.registry.get_sample_value("wsn_deliveries_total", {"outcome": outcome})
    return got or 0.0


def _got(c: HostileConsumer, n: int) -> bool:
    return len(c.bodies()) >= n


async def _one_each(gw: Running, c: HostileConsumer, sid: str) -> None:
    """Readings 0, 1, 2 published one after the other: each reached the consumer exactly
    once, in order, and the gateway counts three delivered and none retried or failed."""
    for v in range(3):
        await publish(gw.url, *readings(v))
        await until(functools.partial(_got, c, v + 1), f"reading {v} there", timeout=10)
    await until(lambda: gw.ctx.delivery.backlog(sid) == 0, "an empty backlog", timeout=5)
    await asyncio.sleep(0.3)  # a resend (the old code's) would arrive within the backoff
    values = re.findall(rb"<rd:value>([^<]*)</rd:value>", b"".join(c.bodies()))
    assert values == [b"0", b"1", b"2"]  # once each: the 2xx was the outcome
    state = gw.ctx.delivery.state(sid)
    assert state["delivered"] == 3 and state["failures"] == 0, state
    assert _deliveries(gw, "ok") == 3
    assert _deliveries(gw, "retried") == 0 and _deliveries(gw, "failed") == 0


async def test_a_200_with_a_flood_of_a_body_is_cut_at_the_cap_and_counts_as_delivered(
    make_gateway: MakeGateway,
) -> None:
    """A consumer answers 200 and streams 64 MiB of body: the gateway reads about the cap,
    closes that connection (the consumer's writes fail far short of the flood), counts the
    message delivered, and the next deliveries arrive on a new connection that is kept."""
    gw = await make_gateway()
    c = await HostileConsumer("flood").start()
    try:
        sid = (await subscribe(gw.url, c.url)).id
        await _one_each(gw, c, sid)
        first = c.conns[0]
        await until(lambda: first.ended, "the end of the flooded connection", timeout=10)
        assert first.ended == "closed by the gateway", first
        assert first.answer_sent < SENT_BOUND, first.answer_sent  # bounded, not the flood
        # readings 1 and 2 on one new connection: a body under the cap keeps it alive
        assert [len(k.requests) for k in c.conns] == [1, 2]
    finally:
        await c.stop()


async def test_a_200_with_an_endless_slow_body_frees_the_worker_within_the_timeout(
    make_gateway: MakeGateway,
) -> None:
    """A consumer answers 200 and then sends its body one byte at a time, never ending: the
    gateway stops reading at --delivery-timeout, closes the connection, counts the message
    delivered (not retried: that would send it again), and delivers the next ones."""
    gw = await make_gateway()  # --delivery-timeout 2 s (gwtest.make_config)
    c = await HostileConsumer("trickle").start()
    try:
        sid = (await subscribe(gw.url, c.url)).id
        await _one_each(gw, c, sid)
        first = c.conns[0]
        await until(lambda: first.ended, "the end of the trickling connection", timeout=10)
        assert first.ended == "closed by the gateway", first
        assert first.answer_sent < 60, first.answer_sent  # ~20 bytes in 2 s, not 30 s
        assert [len(k.requests) for k in c.conns] == [1, 2]
    finally:
        await c.stop()


async def test_the_cap_is_the_option_and_an_ordinary_body_over_it_only_costs_the_connection(
    make_gateway: MakeGateway,
) -> None:
    """With --max-consumer-answer-bytes 500, the consumer's ordinary 1,000-byte answers are
    over the cap: each delivery is counted once as delivered and its connection closed, so
    every request comes on a connection of its own (with the default, test 1 kept one)."""
    gw = await make_gateway(max_consumer_answer_bytes=500)
    c = await HostileConsumer("flood").start()
    try:
        sid = (await subscribe(gw.url, c.url)).id
        await _one_each(gw, c, sid)
        assert [len(k.requests) for k in c.conns] == [1, 1, 1]
        assert c.conns[0].answer_sent < SENT_BOUND, c.conns[0].answer_sent
    finally:
        await c.stop()


async def test_a_failure_answer_with_a_flood_of_a_body_is_cut_and_retried_once(
    make_gateway: MakeGateway,
) -> None:
    """A 500 with 64 MiB of body: cut at the cap like any answer, the connection closed, and
    the message not delivered, so it is sent again (once: the retry is answered 200) and
    then counted delivered; the next message goes on the retry's kept connection."""
    gw = await make_gateway()
    c = await HostileConsumer("flood", b"500 Internal Server Error").start()
    try:
        sid = (await subscribe(gw.url, c.url)).id
        await publish(gw.url, *readings(0))
        await until(functools.partial(_got, c, 2), "the retry", timeout=10)
        await publish(gw.url, *readings(1))
        await until(functools.partial(_got, c, 3), "reading 1 there", timeout=10)
        await until(lambda: gw.ctx.delivery.backlog(sid) == 0, "an empty backlog", timeout=5)
        await asyncio.sleep(0.3)
        values = re.findall(rb"<rd:value>([^<]*)</rd:value>", b"".join(c.bodies()))
        assert values == [b"0", b"0", b"1"]
        state = gw.ctx.delivery.state(sid)
        assert state["delivered"] == 2 and state["failures"] == 1, state
        assert _deliveries(gw, "ok") == 2 and _deliveries(gw, "retried") == 1
        first = c.conns[0]
        await until(lambda: first.ended, "the end of the flooded connection", timeout=10)
        assert first.ended == "closed by the gateway", first
        assert first.answer_sent < SENT_BOUND, first.answer_sent
        assert [len(k.requests) for k in c.conns] == [1, 2]
    finally:
        await c.stop()
