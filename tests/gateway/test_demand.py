"""Demand-based publishing (gateway.demand) against a TEST NotificationProducer: a small
aiohttp app in this module with its own subscription table, standing in for a device.

Checked: the Subscribe that arrives (wrapped, the registration as consumer, a Simple filter
in the publisher's namespace, a lifetime), Pause without demand, Resume when a broker
subscriber appears, renewal, re-Subscribe after the producer "reboots" (ResourceUnknownFault)
or registers again, Unsubscribe on DestroyRegistration, backoff on an unreachable producer
without holding up another one, the remote subscriptions surviving a broker restart, and a
Notify from the producer reaching a broker subscriber under dev:<id>/<topic>."""

from __future__ import annotations

import asyncio
import itertools
import socket
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp import web
from gwtest import BR, FULL, SIMPLE, WSA, WSNT, call, reading, sub_address, subscribe_body
from lxml import etree

from gateway import app
from gateway.demand import DemandManager
from tests import polling

S12 = "http://www.w3.org/2003/05/soap-envelope"
S11 = "http://schemas.xmlsoap.org/soap/envelope/"
WSRF_R = "http://docs.oasis-open.org/wsrf/r-2"
BF = "http://docs.oasis-open.org/wsrf/bf-2"
EDGE = "urn:wsn-edge"
DT_NS = "urn:wsn-edge:device-topics"
DEV_NS = "urn:wsn-edge:devices"
DT = f'xmlns:dt="{DT_NS}"'
DEV = f'xmlns:dev="{DEV_NS}"'
A_REG = "http://docs.oasis-open.org/wsn/brw-2/RegisterPublisher/RegisterPublisherRequest"
A_NOTIFY = "http://docs.oasis-open.org/wsn/bw-2/NotificationConsumer/Notify"


# --------------------------------------------------------------------------- test producer
@dataclass
class RemoteSub:
    id: str
    consumer: str
    consumer_headers: list[str]  # reference parameters, echoed as headers
    topic: tuple[str | None, str]  # (namespace, local name) of the Simple filter
    dialect: str
    raw: bool
    itt: str | None
    expires: float | None
    paused: bool = False


@dataclass
class TestProducer:
    """A NotificationProducer + SubscriptionManager over HTTP with its own table."""

    subs: dict[str, RemoteSub] = field(default_factory=dict)
    log: list[tuple[str, str]] = field(default_factory=list)  # (operation, subscription id)
    fail_subscribe: int = 0  # answer the next N Subscribe with SubscribeCreationFailedFault
    soap11_only: bool = False  # answer SOAP 1.2 with a SOAP 1.1 VersionMismatch fault
    versions: list[str] = field(default_factory=list)  # envelope namespace of each request
    url: str = ""
    port: int = 0
    _runner: web.AppRunner | None = None
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    __test__ = False  # not a pytest class

    @staticmethod
    def _env(body: str, action: str, ver: str) -> str:
        return (
            f'<s:Envelope xmlns:s="{ver}" xmlns:wsa="{WSA}" xmlns:wsnt="{WSNT}" '
            f'xmlns:edge="{EDGE}"><s:Header><wsa:Action>{action}</wsa:Action></s:Header>'
            f"<s:Body>{body}</s:Body></s:Envelope>"
        )

    def _fault(self, name: str, fns: str, reason: str, ver: str) -> web.Response:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        detail = (
            f'<f:{name} xmlns:f="{fns}" xmlns:bf="{BF}"><bf:Timestamp>{now}</bf:Timestamp>'
            f"</f:{name}>"
        )
        if ver == S11:
            body = (
                f"<s:Fault><faultcode>s:Client</faultcode><faultstring>{reason}</faultstring>"
                f"<detail>{detail}</detail></s:Fault>"
            )
        else:
            body = (
                f"<s:Fault><s:Code><s:Value>s:Sender</s:Value></s:Code><s:Reason>"
                f'<s:Text xml:lang="en">{reason}</s:Text></s:Reason><s:Detail>{detail}'
                "</s:Detail></s:Fault>"
            )
        return web.Response(
            status=400 if ver == S12 else 500,
            body=self._env(body, "http://docs.oasis-open.org/wsn/fault", ver).encode(),
            content_type="application/soap+xml" if ver == S12 else "text/xml",
        )

    def _ok(self, body: str, action: str, ver: str) -> web.Response:
        return web.Response(
            body=self._env(body, action, ver).encode(),
            content_type="application/soap+xml" if ver == S12 else "text/xml",
        )

    def _parse(self, request: web.Request, data: bytes) -> tuple[etree._Element, str]:
        env = etree.fromstring(data)
        ver = etree.QName(env).namespace or ""
        self.versions.append(ver)
        if ver == S11:  # SOAP 1.1 HTTP binding: text/xml and a SOAPAction header
            assert request.content_type == "text/xml", request.content_type
            assert request.headers.get("SOAPAction", "").startswith('"http'), request.headers
        return env, ver

    @staticmethod
    def _version_mismatch() -> web.Response:
        body = (
            f'<s:Envelope xmlns:s="{S11}"><s:Body><s:Fault><faultcode>s:VersionMismatch'
            "</faultcode><faultstring>SOAP 1.1 only</faultstring></s:Fault></s:Body></s:Envelope>"
        )
        return web.Response(status=500, body=body.encode(), content_type="text/xml")

    async def _producer(self, request: web.Request) -> web.Response:
        env, ver = self._parse(request, await request.read())
        if self.soap11_only and ver == S12:
            return self._version_mismatch()
        sub = env.find(f"{{{ver}}}Body/{{{WSNT}}}Subscribe")
        assert sub is not None, etree.tostring(env)
        if self.fail_subscribe > 0:
            self.fail_subscribe -= 1
            self.log.append(("Subscribe-refused", ""))
            return self._fault("SubscribeCreationFailedFault", WSNT, "table full (test)", ver)
        cr = sub.find(f"{{{WSNT}}}ConsumerReference")
        assert cr is not None
        rps = cr.find(f"{{{WSA}}}ReferenceParameters")
        te = sub.find(f"{{{WSNT}}}Filter/{{{WSNT}}}TopicExpression")
        assert te is not None and te.text
        prefix, _, local = te.text.strip().rpartition(":")
        itt_el = sub.find(f"{{{WSNT}}}InitialTerminationTime")
        expires = None
        if itt_el is not None and itt_el.text:
            assert itt_el.text.startswith("PT") and itt_el.text.endswith("S"), itt_el.text
            expires = time.time() + float(itt_el.text[2:-1])
        sid = f"s{next(self._ids)}"
        self.subs[sid] = RemoteSub(
            id=sid,
            consumer=cr.findtext(f"{{{WSA}}}Address") or "",
            consumer_headers=[etree.tostring(c).decode() for c in rps] if rps is not None else [],
            topic=(te.nsmap.get(prefix or None), local),
            dialect=te.get("Dialect") or "",
            raw=sub.find(f"{{{WSNT}}}SubscriptionPolicy/{{{WSNT}}}UseRaw") is not None,
            itt=itt_el.text if itt_el is not None else None,
            expires=expires,
        )
        self.log.append(("Subscribe", sid))
        return self._ok(
            "<wsnt:SubscribeResponse><wsnt:SubscriptionReference>"
            f"<wsa:Address>{self.url}/subs/{sid}</wsa:Address><wsa:ReferenceParameters>"
            f"<edge:ResourceId>{sid}</edge:ResourceId></wsa:ReferenceParameters>"
            f"</wsnt:SubscriptionReference>{self._times(expires)}</wsnt:SubscribeResponse>",
            "http://docs.oasis-open.org/wsn/bw-2/NotificationProducer/SubscribeResponse",
            ver,
        )

    @staticmethod
    def _times(expires: float | None) -> str:
        # a skewed producer clock (one day ahead): the broker must read TerminationTime
        # relative to CurrentTime
        skew = 86400

        def fmt(t: float) -> str:
            return datetime.fromtimestamp(t + skew, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

        out = f"<wsnt:CurrentTime>{fmt(time.time())}</wsnt:CurrentTime>"
        if expires is not None:
            out += f"<wsnt:TerminationTime>{fmt(expires)}</wsnt:TerminationTime>"
        return out

    async def _manager(self, request: web.Request) -> web.Response:
        sid = request.match_info["sid"]
        env, ver = self._parse(request, await request.read())
        if self.soap11_only and ver == S12:
            return self._version_mismatch()
        body = env.find(f"{{{ver}}}Body")
        assert body is not None
        op = etree.QName(body[0]).localname
        # the reference parameter comes back as a header (WS-Addressing SOAP binding §2.3)
        rid = env.findtext(f"{{{ver}}}Header/{{{EDGE}}}ResourceId")
        assert rid == sid, etree.tostring(env)
        s = self.subs.get(sid)
        if s is not None and s.expires is not None and s.expires <= time.time():
            del self.subs[sid]
            s = None
        if s is None:
            self.log.append((op + "-unknown", sid))
            return self._fault("ResourceUnknownFault", WSRF_R, f"no subscription {sid}", ver)
        self.log.append((op, sid))
        a = "http://docs.oasis-open.org/wsn/bw-2/SubscriptionManager/"
        if op == "PauseSubscription":
            s.paused = True
            return self._ok(
                "<wsnt:PauseSubscriptionResponse/>", a + "PauseSubscriptionResponse", ver
            )
        if op == "ResumeSubscription":
            s.paused = False
            return self._ok(
                "<wsnt:ResumeSubscriptionResponse/>", a + "ResumeSubscriptionResponse", ver
            )
        if op == "Unsubscribe":
            del self.subs[sid]
            return self._ok("<wsnt:UnsubscribeResponse/>", a + "UnsubscribeResponse", ver)
        if op == "Renew":
            tt = body[0].findtext(f"{{{WSNT}}}TerminationTime") or ""
            assert tt.startswith("PT"), tt
            s.expires = time.time() + float(tt[2:-1])
            return self._ok(
                f"<wsnt:RenewResponse>{self._times(s.expires)}</wsnt:RenewResponse>",
                a + "RenewResponse",
                ver,
            )
        raise AssertionError(op)

    async def start(self, port: int = 0) -> TestProducer:
        app = web.Application()
        app.router.add_post("/producer", self._producer)
        app.router.add_post("/subs/{sid}", self._manager)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{self.port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def address(self) -> str:
        return self.url + "/producer"

    def reboot(self) -> None:
        """Forget every subscription (as a rebooted device does)."""
        self.subs.clear()

    def by_topic(self, local: str) -> list[RemoteSub]:
        return [s for s in self.subs.values() if s.topic[1] == local]

    def ops(self, sid: str) -> list[str]:
        return [op for op, i in self.log if i == sid]

    async def notify(self, local: str, payload: str) -> int:
        """Push one wrapped Notify per active subscription on `local`; -> how many."""
        import aiohttp

        n = 0
        async with aiohttp.ClientSession() as session:
            for s in list(self.subs.values()):
                if s.paused or s.topic[1] != local:
                    continue
                hdrs = "".join(
                    h.replace(
                        "<edge:ResourceId", '<edge:ResourceId wsa:IsReferenceParameter="true"'
                    )
                    for h in s.consumer_headers
                )
                env = (
                    f'<s:Envelope xmlns:s="{S12}" xmlns:wsa="{WSA}" xmlns:wsnt="{WSNT}" '
                    f'xmlns:edge="{EDGE}" xmlns:dt="{DT_NS}"><s:Header>'
                    f"<wsa:Action>{A_NOTIFY}</wsa:Action><wsa:To>{s.consumer}</wsa:To>{hdrs}"
                    "</s:Header><s:Body><wsnt:Notify><wsnt:NotificationMessage>"
                    f"<wsnt:SubscriptionReference><wsa:Address>{self.url}/subs/{s.id}"
                    "</wsa:Address></wsnt:SubscriptionReference>"
                    f'<wsnt:Topic Dialect="{SIMPLE}">dt:{local}</wsnt:Topic>'
                    f"<wsnt:ProducerReference><wsa:Address>{self.address}</wsa:Address>"
                    f"</wsnt:ProducerReference><wsnt:Message>{payload}</wsnt:Message>"
                    "</wsnt:NotificationMessage></wsnt:Notify></s:Body></s:Envelope>"
                )
                async with session.post(
                    s.consumer,
                    data=env.encode(),
                    headers={"Content-Type": "application/soap+xml; charset=utf-8"},
                ) as r:
                    assert r.status == 202, await r.text()
                n += 1
        return n


# --------------------------------------------------------------------------- helpers
@pytest.fixture
async def make_producer() -> AsyncIterator[Callable[..., Awaitable[TestProducer]]]:
    made: list[TestProducer] = []

    async def factory(port: int = 0) -> TestProducer:
        p = await TestProducer().start(port)
        made.append(p)
        return p

    yield factory
    for p in made:
        await p.stop()


@pytest.fixture
async def producer(make_producer: Callable[..., Awaitable[TestProducer]]) -> TestProducer:
    return await make_producer()


async def until(pred: Callable[[], Any], timeout: float = 5.0, what: str = "") -> None:
    """tests/polling.py's until at this file's pace: in-process state, polled every 20 ms."""
    await polling.until(pred, what or repr(pred), timeout, every=0.02)


def register_body(
    address: str, device_id: str = "esp-t1", names: tuple[str, ...] = ("temperature", "humidity")
) -> str:
    t = "".join(f'<br:Topic Dialect="{SIMPLE}" {DT}>dt:{n}</br:Topic>' for n in names)
    return (
        f"<br:RegisterPublisher><br:PublisherReference><wsa:Address>{address}</wsa:Address>"
        f"<wsa:Metadata><edge:DeviceId>{device_id}</edge:DeviceId></wsa:Metadata>"
        f"</br:PublisherReference>{t}<br:Demand>true</br:Demand></br:RegisterPublisher>"
    )


async def register(gw: app.Running, address: str, **kw: Any) -> str:
    r = await call(gw.url, register_body(address, **kw), action=A_REG)
    assert r.status == 200, r.text
    reg = r.body.findtext(f"{{{BR}}}ConsumerReference/{{{WSA}}}Address")
    assert reg
    return reg


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
    assert producer.versions[0] == S12 and set(producer.versions[1:]) == {S11}
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
    assert set(producer.versions[1:]) == {S11}


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
