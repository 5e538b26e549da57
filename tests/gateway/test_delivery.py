"""Push delivery (gateway.delivery): batching (per consumer endpoint, across subscriptions),
retries with backoff, isolation of slow and dead consumers, bounded backlog, SOAP version
and reference parameters."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from gwtest import (
    RD,
    SOAP11,
    SOAP12,
    WSA,
    call,
    notify_body,
    publish,
    read_request,
    reading,
    readings,
    subscribe,
    topic_filter,
    validate,
)

from tests.polling import until


async def test_pending_messages_are_batched_into_one_notify(gw, make_consumer):
    c = await make_consumer(fail=1, delay=0.5)  # first attempt hangs then fails: messages pile up
    await subscribe(gw.url, c.url)
    for v in range(5):
        await publish(gw.url, *readings(v))
    await c.wait_for(5)
    assert len(c.received) == 1  # one Notify carrying all five
    vals = [m.findtext(".//{urn:wsn-edge:reading}value") for m in c.messages()]
    assert vals == ["0", "1", "2", "3", "4"]
    validate(c.bodies()[0])


async def test_retry_until_the_consumer_recovers(gw, make_consumer):
    c = await make_consumer(fail=3)
    sid = (await subscribe(gw.url, c.url)).id
    await publish(gw.url, *readings(42))
    await c.wait_for(1, timeout=5)
    assert c.requests == 4
    assert c.messages()[0].findtext(".//{urn:wsn-edge:reading}value") == "42"
    # the gateway reads the 2xx after the consumer got the message, and deletes the row in
    # the background: awaited, not slept on (a fixed 0.1 s failed whenever that took longer)
    await until(lambda: gw.ctx.delivery.backlog(sid) == 0, "the message out of the backlog")
    # delivered rows are gone from storage
    await until(lambda: gw.ctx.storage.load().deliveries == [], "the delivered row deleted")


async def test_slow_or_dead_consumer_does_not_delay_others(make_gateway, make_consumer):
    gw = await make_gateway(delivery_timeout=30.0)
    # the slow consumer answers only once the fast one has its message: if the slow one
    # delayed the others, the fast one would wait for ever (no race of a 1.5 s answer
    # against a 1 s deadline that a loaded machine misses)
    release = asyncio.Event()
    slow = await make_consumer(hold=release)
    dead_url = "http://127.0.0.1:9/nothing-listens-here"
    fast = await make_consumer()
    await subscribe(gw.url, slow.url)
    await subscribe(gw.url, dead_url)
    await subscribe(gw.url, fast.url)
    try:
        await publish(gw.url, *readings(1))
        await fast.wait_for(1, timeout=20)
        assert slow.received == []  # still holding its answer
    finally:
        release.set()
    await slow.wait_for(1, timeout=20)


async def test_backlog_overflow_drops_oldest(make_gateway):
    gw = await make_gateway(max_backlog=3)
    sid = (await subscribe(gw.url, "http://127.0.0.1:9/dead")).id
    for v in range(6):
        await publish(gw.url, *readings(v))
    stats = gw.ctx.delivery.stats(sid)
    assert stats["queued"] == 3 and stats["dropped"] == 3
    # the dropped rows are deleted in the background (gateway.delivery_acks)

    def rows_left() -> list[Any]:
        return [r for r in gw.ctx.storage.load().deliveries if r[1] == sid]

    await until(lambda: len(rows_left()) <= 3, "the dropped rows deleted", 15, 0.02)
    rows = rows_left()
    assert len(rows) == 3
    assert [r.xml.split("<rd:value>")[1].split("<")[0] for r in rows] == ["3", "4", "5"]


async def test_backlog_full_is_logged_once_then_summarised(
    make_gateway, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
):
    """A dead consumer: one "backlog full" line when the subscription starts dropping, not
    one per incoming Notify; later lines at most once per interval, with the count."""
    from gateway import delivery

    gw = await make_gateway(max_backlog=1)
    sid = (await subscribe(gw.url, "http://127.0.0.1:9/dead")).id
    with caplog.at_level(logging.WARNING, logger="gateway.delivery"):
        for v in range(6):  # the first fits; each later one drops the oldest
            await publish(gw.url, *readings(v))

        def lines() -> list[str]:
            return [r.getMessage() for r in caplog.records if sid in r.getMessage()]

        assert len(lines()) == 1, lines()
        assert "backlog full" in lines()[0] and "dropped 1 oldest" in lines()[0]
        monkeypatch.setattr(delivery, "DROP_LOG_INTERVAL", 0.0)  # the interval has passed
        await publish(gw.url, *readings(6))
        assert len(lines()) == 2, lines()
        assert "dropped 5 oldest messages since the last line" in lines()[1]  # 4 unlogged + 1
        monkeypatch.setattr(delivery, "DROP_LOG_INTERVAL", 3600.0)
        await publish(gw.url, *readings(7))
        assert len(lines()) == 2, lines()
        r = await call(f"{gw.url.rsplit('/', 1)[0]}/subscriptions/{sid}", "<wsnt:Unsubscribe/>")
        assert r.status == 200, r.text
        assert len(lines()) == 3, lines()  # what the interval held back is not lost
        assert "dropped 1 more" in lines()[2] and "(7 in all)" in lines()[2]
    assert sid not in gw.state.subscriptions


async def test_dead_consumer_ends_its_subscription(make_gateway):
    gw = await make_gateway(consumer_dead_after=0.5)
    sid = (await subscribe(gw.url, "http://127.0.0.1:9/dead")).id
    await publish(gw.url, *readings(1))
    await until(lambda: sid not in gw.state.subscriptions, "the subscription ended", 30)
    assert sid not in {s.id for s in gw.ctx.storage.load().subscriptions}


async def test_delivery_uses_the_subscribers_soap_version_and_reference_parameters(gw, consumer):
    rp = '<wsa:ReferenceParameters><x:Key xmlns:x="urn:k">abc</x:Key></wsa:ReferenceParameters>'
    await subscribe(gw.url, consumer.url, version=11, epr_extra=rp)
    await publish(gw.url, *readings(1))
    await consumer.wait_for(1)
    env = consumer.received[0]
    assert env.tag == f"{{{SOAP11}}}Envelope"
    key = env.find(f"{{{SOAP11}}}Header/{{urn:k}}Key")
    assert key is not None and key.text == "abc"
    assert key.get(f"{{{WSA}}}IsReferenceParameter") == "true"
    assert env.findtext(f"{{{SOAP11}}}Header/{{{WSA}}}Action") == (
        "http://docs.oasis-open.org/wsn/bw-2/NotificationConsumer/Notify"
    )
    assert env.findtext(f"{{{SOAP11}}}Header/{{{WSA}}}To") == consumer.url


async def test_notify_accepts_many_messages_and_both_versions(gw, consumer):
    await subscribe(gw.url, consumer.url)
    r = await call(gw.url, notify_body(("tns:t", reading(1)), ("tns:t", reading(2))), 11)
    assert r.status == 202
    await consumer.wait_for(2)
    assert consumer.received[0].tag == f"{{{SOAP12}}}Envelope"


async def test_one_notify_larger_than_the_backlog_keeps_only_the_newest(make_gateway):
    gw = await make_gateway(max_backlog=2)
    sid = (await subscribe(gw.url, "http://127.0.0.1:9/dead")).id
    await publish(gw.url, *readings(*range(5)))
    assert gw.ctx.delivery.stats(sid)["queued"] == 2
    # dropped rows are gone from storage too (deleted in the background: awaited)
    await until(
        lambda: len([r for r in gw.ctx.storage.load().deliveries if r[1] == sid]) == 2,
        "the 3 dropped rows deleted",
    )


EDGE_RID = "{urn:wsn-edge}ResourceId"
SUBREF = "{http://docs.oasis-open.org/wsn/b-2}SubscriptionReference"


def _by_subscription(envelopes: list) -> list[dict[str, list[str]]]:  # type: ignore[type-arg]
    """Per received envelope: SubscriptionReference id -> values, in message order."""
    out = []
    for env in envelopes:
        seen: dict[str, list[str]] = {}
        for nm in env.iter("{http://docs.oasis-open.org/wsn/b-2}NotificationMessage"):
            rid = nm.find(SUBREF).findtext(".//" + EDGE_RID)
            seen.setdefault(rid, []).append(nm.findtext(f".//{RD}value"))
        out.append(seen)
    return out


async def test_subscriptions_of_one_consumer_share_one_notify(gw, make_consumer):
    """Per-consumer queue: messages of two subscriptions pending for one consumer go out
    together, each NotificationMessage naming its own SubscriptionReference."""
    c = await make_consumer(fail=1, delay=0.5)  # first request hangs, then fails
    sa = (await subscribe(gw.url, c.url, topic_filter("tns:a"))).id
    sb = (await subscribe(gw.url, c.url, topic_filter("tns:b"))).id
    n = 12
    for v in range(n):
        await publish(gw.url, *readings(v, topic="tns:a" if v % 2 == 0 else "tns:b"))
    await c.wait_for(n)
    await asyncio.sleep(0.2)  # nothing more arrives
    got = _by_subscription(c.received)
    assert len(c.received) < n  # fewer requests than messages
    assert any(len(env) == 2 for env in got)  # one Notify carried both subscriptions
    per_sub: dict[str, list[str]] = {sa: [], sb: []}
    for env in got:
        for rid, vals in env.items():
            per_sub[rid].extend(vals)
    # exactly once, to the right subscription, in publication order
    assert per_sub[sa] == [str(v) for v in range(0, n, 2)]
    assert per_sub[sb] == [str(v) for v in range(1, n, 2)]
    for body in c.bodies():
        validate(body)
    assert gw.ctx.delivery.stats(sa)["delivered"] == n // 2
    assert gw.ctx.storage.load().deliveries == []


async def test_batches_never_mix_reference_parameters_or_soap_versions(gw, make_consumer):
    """One Notify request has one set of SOAP headers: subscriptions whose consumer EPRs
    differ in reference parameters (or SOAP version) are separate endpoints."""
    c = await make_consumer(fail=1, delay=0.5)

    def key(k: str) -> str:
        return (
            f'<wsa:ReferenceParameters><x:Key xmlns:x="urn:k">{k}</x:Key></wsa:ReferenceParameters>'
        )

    s1 = (await subscribe(gw.url, c.url, epr_extra=key("one"))).id
    s2 = (await subscribe(gw.url, c.url, epr_extra=key("two"))).id
    s3 = (await subscribe(gw.url, c.url, version=11, epr_extra=key("one"))).id
    for v in range(3):
        await publish(gw.url, *readings(v))
    await c.wait_for(9)
    want = {s1: ("one", SOAP12), s2: ("two", SOAP12), s3: ("one", SOAP11)}
    for env, subs in zip(c.received, _by_subscription(c.received), strict=True):
        assert len(subs) == 1, subs
        (rid,) = subs
        k, version = want[rid]
        assert env.tag == f"{{{version}}}Envelope"
        assert env.findtext(f"{{{version}}}Header/{{urn:k}}Key") == k
    assert sorted(
        v for env in _by_subscription(c.received) for vs in env.values() for v in vs
    ) == sorted(["0", "1", "2"] * 3)


async def test_a_paused_subscription_does_not_hold_back_another_of_the_same_consumer(
    gw, make_consumer
):
    c = await make_consumer(fail=1, delay=0.5)
    sa = (await subscribe(gw.url, c.url, topic_filter("tns:a"))).id
    sb = (await subscribe(gw.url, c.url, topic_filter("tns:b"))).id
    await publish(
        gw.url, *readings(1, topic="tns:a")
    )  # in flight to a failing consumer: stays queued
    hdr = f'<edge:ResourceId wsa:IsReferenceParameter="true">{sa}</edge:ResourceId>'
    assert (await call(gw.url, "<wsnt:PauseSubscription/>", headers=hdr)).status == 200
    await publish(gw.url, *readings(2, topic="tns:b"))
    await c.wait_for(1)
    await asyncio.sleep(0.3)
    assert _by_subscription(c.received) == [{sb: ["2"]}]
    assert gw.ctx.delivery.backlog(sa) == 1  # held while paused
    assert (await call(gw.url, "<wsnt:ResumeSubscription/>", headers=hdr)).status == 200
    await c.wait_for(2)
    assert _by_subscription(c.received)[1] == {sa: ["1"]}


async def test_a_dead_consumer_ends_the_subscriptions_waiting_on_it(make_gateway):
    gw = await make_gateway(consumer_dead_after=0.5)
    dead = "http://127.0.0.1:9/dead"
    s1 = (await subscribe(gw.url, dead)).id
    s2 = (await subscribe(gw.url, dead, topic_filter("tns:u"))).id
    paused = (await subscribe(gw.url, dead)).id
    hdr = f'<edge:ResourceId wsa:IsReferenceParameter="true">{paused}</edge:ResourceId>'
    assert (await call(gw.url, "<wsnt:PauseSubscription/>", headers=hdr)).status == 200
    await publish(gw.url, *readings(1))
    await publish(gw.url, *readings(2, topic="tns:u"))

    def ended() -> bool:
        return s1 not in gw.state.subscriptions and s2 not in gw.state.subscriptions

    await until(ended, "both subscriptions ended", 30)
    # the paused one was not trying to deliver: it stays
    assert paused in gw.state.subscriptions
    assert {s.id for s in gw.ctx.storage.load().subscriptions} == {paused}


async def test_raw_subscriptions_get_one_message_per_request(gw, make_consumer):
    c = await make_consumer(fail=1, delay=0.3)
    body = (
        f"<wsnt:Subscribe><wsnt:ConsumerReference><wsa:Address>{c.url}</wsa:Address>"
        f"</wsnt:ConsumerReference><wsnt:Filter>{topic_filter('tns:t')}</wsnt:Filter>"
        "<wsnt:SubscriptionPolicy><wsnt:UseRaw/></wsnt:SubscriptionPolicy></wsnt:Subscribe>"
    )
    for _ in range(2):
        assert (await call(gw.url, body)).status == 200
    await publish(gw.url, *readings(1, 2))
    await c.wait_for(4, wrapped=False)
    await asyncio.sleep(0.2)
    assert len(c.received) == 4
    assert [b.tag for b in c.bodies()] == [f"{RD}Reading"] * 4


def test_endpoint_key_is_what_one_notify_request_can_address():
    from lxml import etree

    from gateway.delivery import Target
    from gateway.wire.addressing import Epr

    def rp(doc: str) -> etree._Element:
        return etree.fromstring(doc)[0]

    def key(sid: str, rps: list, raw: bool = False, version: str = SOAP12):  # type: ignore[no-untyped-def,type-arg]
        return Target(sid, Epr("http://127.0.0.1:1/c", rps), raw, version).endpoint_key()

    k1 = rp('<a xmlns:u="urn:unused"><x:K xmlns:x="urn:k">1</x:K></a>')
    k1b = rp('<b xmlns:v="urn:other"><x:K xmlns:x="urn:k">1</x:K></b>')
    k2 = rp('<a><x:K xmlns:x="urn:k">2</x:K></a>')
    assert key("s1", [k1]) == key("s2", [k1b])  # unused declarations do not matter
    assert key("s1", [k1]) != key("s2", [k2])
    assert key("s1", [k1]) != key("s2", [k1], version=SOAP11)
    assert key("s1", []) != key("s2", [], raw=True)
    assert key("s1", [], raw=True) != key("s2", [], raw=True)  # raw: one message per request


async def test_an_answer_that_is_not_http_is_retried_and_delivery_goes_on(gw):
    """A consumer whose first answer is not HTTP at all (the response parser's error, not a
    client error): the attempt fails like any other, the message is sent again, and the
    consumer's worker goes on delivering."""
    bodies: list[bytes] = []

    async def consumer(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while True:
                bodies.append(await read_request(r))
                if len(bodies) == 1:
                    w.write(b"NOT HTTP AT ALL\r\n\r\n")
                    await w.drain()
                    w.close()
                    return
                w.write(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
                await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            w.close()

    server = await asyncio.start_server(consumer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        sid = (await subscribe(gw.url, f"http://127.0.0.1:{port}/consumer")).id
        await publish(gw.url, *readings(1))
        await until(lambda: len(bodies) >= 2, "the retry after the non-HTTP answer", timeout=5)
        await publish(gw.url, *readings(2))
        await until(lambda: len(bodies) >= 3, "the next message on the same worker", timeout=5)
        assert [b"<rd:value>1</rd:value>" in b for b in bodies] == [True, True, False]
        assert b"<rd:value>2</rd:value>" in bodies[2]
        await until(lambda: gw.ctx.delivery.backlog(sid) == 0, "an empty backlog", timeout=5)
    finally:
        server.close()


async def test_a_clean_stop_lets_the_request_in_flight_have_its_answer(
    make_gateway, make_consumer, tmp_path
):
    """A stop while a consumer is answering: the answer is waited for (at most
    delivery.STOP_DRAIN_S) and the message acknowledged, so the restarted gateway does not
    send it again. On 9656bd0 the request was cancelled mid-flight, the row stayed, and the
    consumer that had taken the message got it a second time after the restart (what
    tests/device/test_gateway_batching.py's sleepy-mode test met under load)."""
    hold = asyncio.Event()
    c = await make_consumer(hold=hold)
    data = tmp_path / "gw"
    gw = await make_gateway(data_dir=data)
    await subscribe(gw.url, c.url)
    await publish(gw.url, *readings(1))
    await until(lambda: c.requests == 1, "the request at the consumer", 5, 0.02)
    stopping = asyncio.create_task(gw.stop())
    await asyncio.sleep(0.3)  # the stop is waiting for the answer, not done without it
    assert not stopping.done()
    hold.set()
    await asyncio.wait_for(stopping, 10)
    assert len(c.received) == 1
    again = await make_gateway(data_dir=data)
    await publish(again.url, *readings(2))
    await until(lambda: len(c.received) >= 2, "the next message", 5, 0.02)
    await asyncio.sleep(0.3)
    vals = [m.findtext(".//{urn:wsn-edge:reading}value") for m in c.messages()]
    assert vals == ["1", "2"]  # 1 once: not sent again after the restart
