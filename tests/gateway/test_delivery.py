"""Push delivery (gateway.delivery): batching, retries with backoff, isolation of slow and
dead consumers, bounded backlog, SOAP version and reference parameters."""

from __future__ import annotations

import asyncio
import time

from gwtest import (
    SOAP11,
    SOAP12,
    WSA,
    call,
    notify_body,
    reading,
    topic_filter,
    validate,
)


async def _subscribe(gw, url: str, version: int = 12, epr_extra: str = "") -> str:  # type: ignore[no-untyped-def]
    body = (
        f"<wsnt:Subscribe><wsnt:ConsumerReference><wsa:Address>{url}</wsa:Address>{epr_extra}"
        f"</wsnt:ConsumerReference><wsnt:Filter>{topic_filter('tns:t')}</wsnt:Filter></wsnt:Subscribe>"
    )
    r = await call(gw.url, body, version)
    assert r.status == 200, r.text
    rid = r.body.findtext(".//{urn:wsn-edge}ResourceId")
    assert rid
    return rid


async def _publish(gw, *vals: float) -> None:  # type: ignore[no-untyped-def]
    r = await call(gw.url, notify_body(*[("tns:t", reading(v)) for v in vals]))
    assert r.status == 202, r.text


async def test_pending_messages_are_batched_into_one_notify(gw, make_consumer):
    c = await make_consumer(fail=1, delay=0.5)  # first attempt hangs then fails: messages pile up
    await _subscribe(gw, c.url)
    for v in range(5):
        await _publish(gw, v)
    await c.wait_for(5)
    assert len(c.received) == 1  # one Notify carrying all five
    vals = [m.findtext(".//{urn:wsn-edge:reading}value") for m in c.messages()]
    assert vals == ["0", "1", "2", "3", "4"]
    validate(c.bodies()[0])


async def test_retry_until_the_consumer_recovers(gw, make_consumer):
    c = await make_consumer(fail=3)
    sid = await _subscribe(gw, c.url)
    await _publish(gw, 42)
    await c.wait_for(1, timeout=5)
    assert c.requests == 4
    assert c.messages()[0].findtext(".//{urn:wsn-edge:reading}value") == "42"
    await asyncio.sleep(0.1)
    assert gw.broker.delivery.backlog(sid) == 0
    # delivered rows are gone from storage
    assert gw.broker.storage.load().deliveries == []


async def test_slow_or_dead_consumer_does_not_delay_others(make_gateway, make_consumer):
    gw = await make_gateway(delivery_timeout=5.0)
    slow = await make_consumer(delay=1.5)
    dead_url = "http://127.0.0.1:9/nothing-listens-here"
    fast = await make_consumer()
    await _subscribe(gw, slow.url)
    await _subscribe(gw, dead_url)
    await _subscribe(gw, fast.url)
    t0 = time.monotonic()
    await _publish(gw, 1)
    await fast.wait_for(1, timeout=2)
    assert time.monotonic() - t0 < 1.0  # the slow one answers after 1.5 s


async def test_backlog_overflow_drops_oldest(make_gateway):
    gw = await make_gateway(max_backlog=3)
    sid = await _subscribe(gw, "http://127.0.0.1:9/dead")
    for v in range(6):
        await _publish(gw, v)
    await asyncio.sleep(0.05)
    stats = gw.broker.delivery.stats(sid)
    assert stats["queued"] == 3 and stats["dropped"] == 3
    rows = [r for r in gw.broker.storage.load().deliveries if r[1] == sid]
    assert len(rows) == 3
    assert [x.split("<rd:value>")[1].split("<")[0] for _, _, x in rows] == ["3", "4", "5"]


async def test_dead_consumer_ends_its_subscription(make_gateway):
    gw = await make_gateway(consumer_dead_after=0.5)
    sid = await _subscribe(gw, "http://127.0.0.1:9/dead")
    await _publish(gw, 1)
    for _ in range(40):
        await asyncio.sleep(0.1)
        if sid not in gw.broker.subs:
            break
    assert sid not in gw.broker.subs
    assert sid not in {s.id for s in gw.broker.storage.load().subscriptions}


async def test_delivery_uses_the_subscribers_soap_version_and_reference_parameters(gw, consumer):
    rp = '<wsa:ReferenceParameters><x:Key xmlns:x="urn:k">abc</x:Key></wsa:ReferenceParameters>'
    await _subscribe(gw, consumer.url, 11, rp)
    await _publish(gw, 1)
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
    await _subscribe(gw, consumer.url)
    r = await call(gw.url, notify_body(("tns:t", reading(1)), ("tns:t", reading(2))), 11)
    assert r.status == 202
    await consumer.wait_for(2)
    assert consumer.received[0].tag == f"{{{SOAP12}}}Envelope"


async def test_one_notify_larger_than_the_backlog_keeps_only_the_newest(make_gateway):
    gw = await make_gateway(max_backlog=2)
    sid = await _subscribe(gw, "http://127.0.0.1:9/dead")
    await _publish(gw, *range(5))
    await asyncio.sleep(0.2)
    assert gw.broker.delivery.stats(sid)["queued"] == 2
    rows = [r for r in gw.broker.storage.load().deliveries if r[1] == sid]
    assert len(rows) == 2  # dropped rows are gone from storage too
