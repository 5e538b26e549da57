"""Demand-based publishing (gateway.demand) against a NotificationProducer double
(gwproducer.TestProducer, with its own subscription table), standing in for a device.

Checked: the Subscribe that arrives (wrapped, the registration as consumer, a Simple filter
in the publisher's namespace, a lifetime), Pause without demand, Resume when a broker
subscriber appears, renewal, re-Subscribe after the producer "reboots" (ResourceUnknownFault)
or registers again, Unsubscribe on DestroyRegistration, backoff on an unreachable producer
without holding up another one, the remote subscriptions surviving a broker restart, and a
Notify from the producer reaching a broker subscriber under dev:<id>/<topic>."""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import gwtest
from gwtest import (
    DEV,
    DEV_NS,
    DT_NS,
    FULL,
    SIMPLE,
    SOAP11,
    SOAP12,
    WSA,
    WSNT,
    call,
    reading,
    sub_address,
    subscribe_body,
)

from gateway import app
from gateway.demand import DemandManager
from tests import polling


# --------------------------------------------------------------------------- helpers
async def until(pred: Callable[[], Any], timeout: float = 5.0, what: str = "") -> None:
    """tests/polling.py's until at this file's pace: in-process state, polled every 20 ms."""
    await polling.until(pred, what or repr(pred), timeout, every=0.02)


def register(
    gw: app.Running,
    address: str,
    device_id: str = "esp-t1",
    names: tuple[str, ...] = ("temperature", "humidity"),
) -> Awaitable[str]:
    """A Demand=true registration of the device at `address` publishing dt:<names>."""
    return gwtest.register(
        gw.url, publisher=address, device_id=device_id, topics=tuple(f"dt:{n}" for n in names),
        demand=True,
    )  # fmt: skip


def demand(gw: app.Running) -> DemandManager:
    assert gw.demand is not None
    return gw.demand


async def subscribe_full(gw: app.Running, consumer_url: str, expr: str) -> str:
    r = await call(
        gw.url,
        subscribe_body(
            consumer_url,
            f'<wsnt:TopicExpression Dialect="{FULL}" {DEV}>{expr}</wsnt:TopicExpression>',
        ),
    )
    assert r.status == 200, r.text
    return sub_address(r)


async def unsubscribe(addr: str) -> None:
    r = await call(addr, "<wsnt:Unsubscribe/>")
    assert r.status == 200, r.text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- tests
async def test_subscribes_wrapped_per_topic_and_pauses_without_demand(gw, producer):
    reg = await register(gw, producer.address)
    await until(
        lambda: len(producer.subs) == 2 and all(s.paused for s in producer.subs.values()),
        what="two paused subscriptions",
    )
    reg_id = reg.rsplit("/", 1)[1]
    for name in ("temperature", "humidity"):
        (s,) = producer.by_topic(name)
        assert s.consumer == reg  # the registration address is the ConsumerReference
        assert any(reg_id in h and "ResourceId" in h for h in s.consumer_headers)
        assert s.topic == (DT_NS, name)  # the device's own topic, not dev:<id>/<topic>
        assert s.dialect == SIMPLE
        assert s.raw is False  # wrapped: the Notify carries wsnt:Topic
        assert s.itt == "PT3600S"
        assert producer.ops(s.id) == ["Subscribe", "PauseSubscription"]
    st = demand(gw).status()
    assert {e["topic"] for e in st} == {
        f"{{{DEV_NS}}}esp-t1/temperature",
        f"{{{DEV_NS}}}esp-t1/humidity",
    }
    assert all(e["paused"] is True and e["failures"] == 0 for e in st)


async def test_resumes_for_a_subscriber_and_its_notify_arrives_as_dev_topic(gw, producer, consumer):
    await register(gw, producer.address)
    await until(lambda: len(producer.subs) == 2 and all(s.paused for s in producer.subs.values()))
    sub = await subscribe_full(gw, consumer.url, "dev:*/temperature")
    (t,) = producer.by_topic("temperature")
    (h,) = producer.by_topic("humidity")
    await until(lambda: not t.paused, what="temperature resumed")
    assert producer.ops(t.id) == ["Subscribe", "PauseSubscription", "ResumeSubscription"]
    assert h.paused and producer.ops(h.id) == ["Subscribe", "PauseSubscription"]

    assert await producer.notify("temperature", reading(21.5, "esp-t1")) == 1
    assert await producer.notify("humidity", reading(50, "esp-t1")) == 0  # paused there
    await consumer.wait_for(1)
    (nm,) = consumer.messages()
    topic = nm.find(f"{{{WSNT}}}Topic")
    assert topic is not None and topic.text
    prefix, _, path = topic.text.partition(":")
    assert topic.nsmap[prefix] == DEV_NS and path == "esp-t1/temperature"
    assert nm.findtext(f".//{{{WSNT}}}Message/*/{{urn:wsn-edge:reading}}value") == "21.5"
    # the producer is named as the producer
    assert nm.findtext(f"{{{WSNT}}}ProducerReference/{{{WSA}}}Address") == producer.address

    # the subscriber pauses: no demand left -> Pause; it resumes -> Resume; it goes -> Pause
    r = await call(sub, "<wsnt:PauseSubscription/>")
    assert r.status == 200, r.text
    await until(lambda: t.paused, what="paused after the subscriber paused")
    r = await call(sub, "<wsnt:ResumeSubscription/>")
    assert r.status == 200, r.text
    await until(lambda: not t.paused, what="resumed after the subscriber resumed")
    await unsubscribe(sub)
    await until(lambda: t.paused, what="paused after Unsubscribe")
    assert producer.ops(t.id)[-3:] == [
        "PauseSubscription",
        "ResumeSubscription",
        "PauseSubscription",
    ]
    assert len(producer.subs) == 2  # never subscribed twice


async def test_resubscribes_when_the_producer_rebooted(gw, producer, consumer):
    await register(gw, producer.address)
    await until(lambda: len(producer.subs) == 2 and all(s.paused for s in producer.subs.values()))
    old = {s.id for s in producer.subs.values()}
    producer.reboot()
    # a demand change makes the broker Resume; the producer answers ResourceUnknownFault
    await subscribe_full(gw, consumer.url, "dev:esp-t1//.")
    await until(lambda: len(producer.subs) == 2, what="subscribed again")
    assert not old & set(producer.subs)
    assert all(not s.paused for s in producer.subs.values())
    assert [op for op, _ in producer.log].count("ResumeSubscription-unknown") >= 1
    assert demand(gw).counters["resubscribe"] >= 1
    for s in producer.subs.values():
        assert producer.ops(s.id) == ["Subscribe"]  # wanted active: no Pause
    assert await producer.notify("humidity", reading(49, "esp-t1")) == 1
    await consumer.wait_for(1)


async def test_renews_before_expiry_and_resubscribes_when_renew_finds_nothing(gw, producer):
    dm = demand(gw)
    dm.lifetime = timedelta(seconds=2)
    await register(gw, producer.address, names=("temperature",))
    await until(lambda: len(producer.subs) == 1)
    (s,) = producer.subs.values()
    # renewed at 2/3 of the granted lifetime, again and again: it never expires
    await until(lambda: producer.ops(s.id).count("Renew") >= 2, timeout=6, what="two renewals")
    assert s.id in producer.subs and s.expires is not None and s.expires > time.time()
    producer.reboot()
    await until(
        lambda: len(producer.subs) == 1 and all(x.paused for x in producer.subs.values()),
        timeout=5,
        what="re-Subscribe after Renew (and Pause: still no demand)",
    )
    (s2,) = producer.subs.values()
    assert s2.id != s.id
    assert ("Renew-unknown", s.id) in producer.log


async def test_fresh_registration_of_the_same_publisher_replaces_the_old(gw, producer):
    reg1 = await register(gw, producer.address)
    await until(lambda: len(producer.subs) == 2 and all(s.paused for s in producer.subs.values()))
    old = set(producer.subs)
    reg2 = await register(gw, producer.address)  # e.g. the device rebooted and registered
    assert reg2 != reg1
    await until(
        lambda: len(producer.subs) == 2 and {s.consumer for s in producer.subs.values()} == {reg2},
        what="moved to the new registration",
    )
    for sid in old:  # the old ones were unsubscribed (best effort)
        assert "Unsubscribe" in producer.ops(sid)
    st = demand(gw).status()
    assert {e["registration"] for e in st} == {reg2.rsplit("/", 1)[1]}
    # and the earlier registration is still a resource (WS-BrokeredNotification 1.0 §5.4:
    # a new one is created regardless), only no longer subscribed for: no push twice
    assert reg1.rsplit("/", 1)[1] in gw.state.registrations


async def test_same_device_id_at_a_new_address_replaces_the_old(gw, make_producer):
    # a device that rebooted with another (DHCP) address registers with the same DeviceId
    before, after = await make_producer(), await make_producer()
    await register(gw, before.address, device_id="esp-moved")
    await until(lambda: len(before.subs) == 2 and all(s.paused for s in before.subs.values()))
    reg2 = await register(gw, after.address, device_id="esp-moved")
    await until(lambda: len(after.subs) == 2 and not before.subs, what="moved to the new one")
    assert {s.consumer for s in after.subs.values()} == {reg2}
    assert [e["publisher"] for e in demand(gw).status()] == [after.address] * 2


async def test_destroy_registration_unsubscribes_and_forgets(gw, producer):
    reg = await register(gw, producer.address)
    await until(lambda: len(producer.subs) == 2)
    r = await call(reg, "<br:DestroyRegistration/>")
    assert r.status == 200, r.text
    await until(lambda: not producer.subs, what="unsubscribed")
    await until(lambda: not demand(gw).status())
    assert await gw.ctx.storage.demand_load() == []


async def test_unreachable_publisher_backs_off_without_blocking_another(
    gw, make_producer, producer
):
    port = free_port()
    await register(gw, f"http://127.0.0.1:{port}/producer", device_id="esp-late")
    producer.fail_subscribe = 2  # and this one refuses twice, then accepts
    await register(gw, producer.address, device_id="esp-now")
    await until(lambda: len(producer.subs) == 2, what="the reachable one subscribed")
    assert [op for op, _ in producer.log].count("Subscribe-refused") == 2
    late = [e for e in demand(gw).status() if "esp-late" in e["topic"]]
    assert late and all(e["failures"] >= 1 and e["subscription"] is None for e in late)
    assert "ClientConnectorError" in late[0]["last_error"] or "Connect" in late[0]["last_error"]
    # the publisher comes up: subscribed within the (test) backoff cap of 0.2 s
    p2 = await make_producer(port)
    await until(lambda: len(p2.subs) == 2, timeout=5, what="subscribed after backoff")
    await until(
        lambda: all(e["failures"] == 0 and e["paused"] for e in demand(gw).status()),
        what="both publishers settled (paused: no demand)",
    )


async def test_remote_subscriptions_survive_a_broker_restart(
    make_gateway, producer, consumer, tmp_path
):
    data = tmp_path / "state"
    gw = await make_gateway(data_dir=data)
    port = gw.port
    await register(gw, producer.address)
    sub = await subscribe_full(gw, consumer.url, "dev:*/temperature")
    await until(lambda: len(producer.subs) == 2)
    (t,) = producer.by_topic("temperature")
    await until(lambda: not t.paused)
    subscribes = [op for op, _ in producer.log].count("Subscribe")
    await gw.stop()
    assert len(producer.subs) == 2  # stopping the broker does not unsubscribe

    gw2 = await make_gateway(data_dir=data, port=port)
    assert gw2.url == gw.url
    await until(lambda: len(demand(gw2).status()) == 2)
    st = {e["topic"]: e for e in demand(gw2).status()}
    assert st[f"{{{DEV_NS}}}esp-t1/temperature"]["subscription"] == f"{producer.url}/subs/{t.id}"
    await asyncio.sleep(0.3)
    assert [op for op, _ in producer.log].count("Subscribe") == subscribes  # no re-Subscribe
    # the same remote subscription keeps being managed and keeps delivering
    assert await producer.notify("temperature", reading(22, "esp-t1")) == 1
    await consumer.wait_for(1)
    await unsubscribe(sub)
    await until(lambda: t.paused, what="Pause on the remembered subscription")
    assert len(producer.subs) == 2


async def test_rows_of_vanished_registrations_are_dropped_at_start(
    make_gateway, producer, tmp_path
):
    data = tmp_path / "state"
    gw = await make_gateway(data_dir=data)
    await register(gw, producer.address)
    await until(lambda: len(producer.subs) == 2 and all(s.paused for s in producer.subs.values()))
    await gw.stop()
    # the registration vanished without the DemandManager hearing of it (a crash between the
    # broker's delete and ours)
    c = sqlite3.connect(data / "broker.sqlite3")
    with c:
        c.execute("DELETE FROM registrations")
    c.close()
    gw2 = await make_gateway(data_dir=data, port=gw.port)
    await until(lambda: not producer.subs, what="best-effort Unsubscribe of the orphans")
    assert demand(gw2).status() == []
    await until(lambda: demand(gw2).counters["unsubscribe"] == 2)
    assert await gw2.ctx.storage.demand_load() == []


async def test_hostile_answers_are_failures_not_crashes(gw, producer):
    """An answer that is not SOAP, or too large, counts as a failure (backoff); nothing
    else is disturbed."""
    from aiohttp import web as _web

    hits = {"n": 0}

    async def huge(request: _web.Request) -> _web.StreamResponse:
        hits["n"] += 1
        if hits["n"] % 2:
            return _web.Response(body=b"<x>" + b"a" * (1 << 20) + b"</x>")
        return _web.Response(text="OK, not SOAP")

    app = _web.Application()
    app.router.add_post("/p", huge)
    runner = _web.AppRunner(app, access_log=None)
    await runner.setup()
    site = _web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        await register(gw, f"http://127.0.0.1:{port}/p", device_id="esp-bad")
        await register(gw, producer.address)
        await until(lambda: len(producer.subs) == 2, what="the good producer served")
        await until(lambda: hits["n"] >= 3, what="retries")
        bad = [e for e in demand(gw).status() if "esp-bad" in e["topic"]]
        assert bad[0]["subscription"] is None and bad[0]["failures"] >= 2
        assert (
            "exceeds" in bad[0]["last_error"] or "without a SOAP envelope" in (bad[0]["last_error"])
        )
    finally:
        await runner.cleanup()


async def test_a_soap11_only_publisher_is_spoken_to_in_soap11(gw, producer, consumer):
    producer.soap11_only = True
    await register(gw, producer.address, names=("temperature",))
    await until(lambda: len(producer.subs) == 1 and all(s.paused for s in producer.subs.values()))
    sub = await subscribe_full(gw, consumer.url, "dev:*/temperature")
    await until(lambda: not next(iter(producer.subs.values())).paused, what="resumed")
    # one SOAP 1.2 attempt (VersionMismatch), then SOAP 1.1 for every request
    assert producer.versions[0] == SOAP12 and set(producer.versions[1:]) == {SOAP11}
    assert [op for op, _ in producer.log] == [
        "Subscribe",
        "PauseSubscription",
        "ResumeSubscription",
    ]
    # a SOAP 1.1 ResourceUnknownFault (in <detail>) is understood as well
    producer.reboot()
    await unsubscribe(sub)
    await until(lambda: len(producer.subs) == 1, what="subscribed again after the SOAP 1.1 fault")
    assert ("PauseSubscription-unknown", "s1") in producer.log
    assert set(producer.versions[1:]) == {SOAP11}


async def test_an_internal_error_is_retried_not_fatal(gw, producer, monkeypatch):
    dm = demand(gw)
    dm.backoff_max = 0.1
    real = dm._subscribe
    calls = {"n": 0}

    async def flaky(pub, t):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a bug")
        return await real(pub, t)

    monkeypatch.setattr(dm, "_subscribe", flaky)
    await register(gw, producer.address)
    await until(lambda: len(producer.subs) == 2 and all(s.paused for s in producer.subs.values()))
    assert calls["n"] == 3
    await until(lambda: all(e["failures"] == 0 for e in dm.status()), what="recovered")
