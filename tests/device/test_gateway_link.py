"""The device's link to the gateway (design.md "Device <-> gateway"): RegisterPublisher at
boot, renewal with SetTerminationTime, re-registration after a ResourceUnknownFault (a gateway
that forgot us), pushes to the registration address buffered while the gateway is down and
delivered in order when it returns, overflow dropped and counted. A stand-in gateway
(devtest.FakeGateway) plays the broker's side; the real broker is tested end to end elsewhere."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta

import aiohttp
import pytest
from devtest import (
    BR,
    DT,
    EDGE,
    RD,
    SIMPLE,
    WSA,
    WSNT,
    Client,
    DeviceProcess,
    FakeGateway,
)

from tests.polling import until

LINK = {
    "registration_ttl_s": 6,
    "renew_period_s": 1,
    "gateway_retry_s": 0.3,
    "gateway_retry_max_s": 0.6,
}


@pytest.fixture
async def gateway() -> AsyncIterator[FakeGateway]:
    gw = await FakeGateway().start()
    yield gw
    await gw.stop()


async def test_register_and_renew(
    start_device: Callable[..., DeviceProcess], gateway: FakeGateway
) -> None:
    # the device's clock reads between these two (second resolution: started is truncated)
    started = datetime.now(UTC).replace(microsecond=0)
    dev = start_device(gateway=gateway.url, **LINK)
    await until(lambda: gateway.register_requests, "a RegisterPublisher", 10, every=0.05)
    seen = datetime.now(UTC)
    rp = gateway.register_requests[0]
    pub = rp.find(f"{{{BR}}}PublisherReference")
    assert pub is not None
    assert pub.findtext(f"{{{WSA}}}Address") == dev.producer
    assert pub.findtext(f"{{{WSA}}}Metadata/{{{EDGE}}}DeviceId") == "dev-test"
    topics = rp.findall(f"{{{BR}}}Topic")
    assert [t.get("Dialect") for t in topics] == [SIMPLE] * 3
    names = []
    for t in topics:
        p, _, local = (t.text or "").partition(":")
        assert t.nsmap[p] == DT
        names.append(local)
    assert names == ["temperature", "humidity", "heartbeat"]
    assert rp.findtext(f"{{{BR}}}Demand") == "true"

    def when(text: str) -> datetime:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)

    # registration_ttl_s 6 from when it registered: no race of a load-delayed test against it
    ttl = timedelta(seconds=6)
    itt = when(rp.findtext(f"{{{BR}}}InitialTerminationTime") or "")
    assert started + ttl <= itt <= seen + ttl, (started, itt, seen)
    # renewals every renew_period_s (1 s), each asking ttl from when it was sent, the first
    # before the registration lapsed: checked on the times the device wrote, so a machine
    # under load can make them late (the wait is generous) but not wrong
    await until(lambda: len(gateway.renewals) >= 2, "two renewals", 30, every=0.05)
    assert [r[0] for r in gateway.renewals[:2]] == ["r1", "r1"]
    rtt1, rtt2 = (when(r[1]) for r in gateway.renewals[:2])
    assert itt < rtt1 < rtt2 and rtt1 - ttl < itt, (itt, rtt1, rtt2)
    await dev.await_line(r"^status \[gateway registered\]", 5)
    async with aiohttp.ClientSession() as s:
        st = await Client(dev, s).status()
    assert st["gateway"]["state"] == "registered"
    assert st["gateway"]["registration"] == gateway.reg_url("r1")


async def test_reregisters_when_the_gateway_forgets(
    start_device: Callable[..., DeviceProcess], gateway: FakeGateway
) -> None:
    dev = start_device(gateway=gateway.url, **LINK)
    await until(lambda: gateway.register_requests, "a RegisterPublisher", 10, every=0.05)
    async with aiohttp.ClientSession() as s:
        cl = Client(dev, s)
        # the gateway's subscription for its registration (wrapped, to the registration address)
        old_sub = await cl.subscribe(gateway.reg_url("r1"), topic="dt:heartbeat")
        gateway.forget()  # a restart without state: renewals now get ResourceUnknownFault
        await until(
            lambda: len(gateway.register_requests) >= 2, "a second RegisterPublisher", 8, every=0.05
        )
        await dev.await_line(r"registering again", 5)
        await until(lambda: "r2" in gateway.registrations, "registration r2", 10, every=0.05)
        for _ in range(100):
            st = await cl.status()
            if st["gateway"]["registration"] == gateway.reg_url("r2"):
                break
            await asyncio.sleep(0.05)
        assert st["gateway"]["registration"] == gateway.reg_url("r2")
        assert st["gateway"]["registrations"] == 2
        # the subscription made for the lost registration is an orphan: removed
        assert old_sub not in [x["id"] for x in st["subscription_list"]]
        assert st["subscriptions"] == 0


async def _values(gateway: FakeGateway, n: int) -> tuple[list[str | None], int]:
    """The reading values of the next n NotificationMessages the gateway gets (a Notify may
    carry several: batching) and how many Notify requests carried them."""
    values: list[str | None] = []
    notifies = 0
    while len(values) < n:
        _, notify = await asyncio.wait_for(gateway.notifications.get(), 15)
        notifies += 1
        for nm in notify.iter(f"{{{WSNT}}}NotificationMessage"):
            values.append(nm.findtext(f".//{{{RD}}}value"))
    return values, notifies


async def test_pushes_wait_for_the_gateway_in_order(
    start_device: Callable[..., DeviceProcess], gateway: FakeGateway
) -> None:
    dev = start_device(gateway=gateway.url, gateway_buffer=10, **LINK)
    await until(lambda: gateway.register_requests, "a RegisterPublisher", 10, every=0.05)
    async with aiohttp.ClientSession() as s:
        cl = Client(dev, s)
        await cl.subscribe(gateway.reg_url("r1"), topic="dt:heartbeat")
        await cl.sample("heartbeat")
        rid, notify = await asyncio.wait_for(gateway.notifications.get(), 10)
        assert rid == "r1" and notify.tag == f"{{{WSNT}}}Notify"
        nm = notify.find(f"{{{WSNT}}}NotificationMessage")
        assert nm is not None
        topic = nm.find(f"{{{WSNT}}}Topic")
        assert topic is not None and topic.text == "dt:heartbeat" and topic.nsmap["dt"] == DT
        assert nm.findtext(f"{{{WSNT}}}ProducerReference/{{{WSA}}}Address") == dev.producer
        await gateway.stop()  # outage
        for _ in range(5):
            await cl.sample("heartbeat")
        await until(
            lambda: "gateway down" in dev.output(), "'gateway down' in the output", 10, every=0.05
        )
        st = await cl.status()
        assert st["gateway"]["buffered"] == 5 and st["gateway"]["dropped"] == 0
        await gateway.start()  # back, same port, same state
        values, notifies = await _values(gateway, 5)
        assert values == ["2", "3", "4", "5", "6"]  # nothing lost, in order
        # issue 16: the buffered readings go batched, not one Notify each. The readings of the
        # first attempt in the outage (whose answer the device cannot know) go again as they
        # went, with the same wsa:MessageID, so the gateway publishes them once; the rest follow
        # in one Notify: two requests, or one if the first attempt came after all five samples
        assert notifies <= 2, notifies
        st = await cl.status()
        assert st["gateway"]["buffered"] == 0 and st["gatewayDropped"] == 0


async def test_buffer_overflow_is_counted_and_reported(
    start_device: Callable[..., DeviceProcess], gateway: FakeGateway
) -> None:
    dev = start_device(gateway=gateway.url, gateway_buffer=3, **LINK)
    await until(lambda: gateway.register_requests, "a RegisterPublisher", 10, every=0.05)
    async with aiohttp.ClientSession() as s:
        cl = Client(dev, s)
        await cl.subscribe(gateway.reg_url("r1"), topic="dt:heartbeat")
        await gateway.stop()
        for _ in range(5):
            await cl.sample("heartbeat")
        st = await cl.status()
        assert st["gateway"]["buffered"] == 3 and st["gateway"]["dropped"] == 2
        assert st["gatewayDropped"] == 2
        await dev.await_line(r"^status \[drops\] gateway=\w+ buffered=3 dropped=2 ", 15)
        await gateway.start()
        values, _ = await _values(gateway, 3)
        assert values == ["3", "4", "5"]  # the oldest two were dropped


async def test_batch_wait_gathers_readings_into_one_notify_by_choice(
    start_device: Callable[..., DeviceProcess], gateway: FakeGateway
) -> None:
    # issue 16.2 "buffered ... by choice": batch_wait_s holds the first reading that long
    dev = start_device(gateway=gateway.url, batch_wait_s=1.5, **LINK)
    await until(lambda: gateway.register_requests, "a RegisterPublisher", 10, every=0.05)
    async with aiohttp.ClientSession() as s:
        cl = Client(dev, s)
        await cl.subscribe(gateway.reg_url("r1"), topic="dt:heartbeat")
        for _ in range(5):
            await cl.sample("heartbeat")
        values, notifies = await _values(gateway, 5)
        assert values == ["1", "2", "3", "4", "5"] and notifies == 1
        st = await cl.status()
        assert st["gateway"]["batches"] == 1 and st["gateway"]["delivered"] == 5
