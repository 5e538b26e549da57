"""The conformance audit of issue 25: one test per defect a spec-following client found, each
against a real gateway over HTTP (and, for demand-based publishing, real publishers: a small
aiohttp app in this module). Expected actions come from the WSDL (tests/wsdl_actions.py) or,
where the normative text and the WSDL differ, from the text, cited."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from gwtest import (
    BR,
    CONCRETE,
    FULL,
    SIMPLE,
    WSA,
    WSNT,
    XPATH,
    call,
    notify_body,
    reading,
    sub_address,
    subscribe_body,
    topic_filter,
    validate,
)
from lxml import etree

from tests.polling import until
from tests.wsdl_actions import action as wsdl_action

A_REG = wsdl_action("RegisterPublisher", "RegisterPublisher")
DT_NS = "urn:wsn-edge:device-topics"
DEV_NS = "urn:wsn-edge:devices"
S12 = "http://www.w3.org/2003/05/soap-envelope"
RL = "http://docs.oasis-open.org/wsrf/rl-2"


def register_body(
    publisher: str, topics: tuple[str, ...], demand: bool = False, device_id: str | None = None
) -> str:
    md = (
        f"<wsa:Metadata><edge:DeviceId>{device_id}</edge:DeviceId></wsa:Metadata>"
        if device_id
        else ""
    )
    t = "".join(f'<br:Topic Dialect="{SIMPLE}" xmlns:dt="{DT_NS}">{x}</br:Topic>' for x in topics)
    return (
        f"<br:RegisterPublisher><br:PublisherReference><wsa:Address>{publisher}</wsa:Address>"
        f"{md}</br:PublisherReference>{t}<br:Demand>{'true' if demand else 'false'}"
        "</br:Demand></br:RegisterPublisher>"
    )


async def register(url: str, publisher: str, *topics: str, **kw: object) -> str:
    r = await call(url, register_body(publisher, topics, **kw), action=A_REG)  # type: ignore[arg-type]
    assert r.status == 200, r.text
    addr = r.body.findtext(f"{{{BR}}}ConsumerReference/{{{WSA}}}Address")
    assert addr
    return addr


# ---------------------------------------------------------------- defect 1
async def test_registering_again_creates_a_resource_and_keeps_the_first(make_gateway):
    """WS-BrokeredNotification (002_, RegisterPublisher): "A new resource is created
    regardless of whether the same Publisher has previously registered." The first
    registration stays a resource: Notify to its ConsumerReference is accepted, and with
    RequiresRegistration its topics stay publishable."""
    gw = await make_gateway(requires_registration=True)
    pub = "http://127.0.0.1:9/wsn/producer"
    first = await register(gw.url, pub, "dt:temperature", device_id="twice")
    second = await register(gw.url, pub, "dt:humidity", device_id="twice")
    assert first != second
    dt = f'xmlns:dt="{DT_NS}"'
    r = await call(first, notify_body(("dt:temperature", reading(1)), nsdecl=dt, dialect=SIMPLE))
    assert r.status == 202, r.text
    r = await call(second, notify_body(("dt:humidity", reading(2)), nsdecl=dt, dialect=SIMPLE))
    assert r.status == 202, r.text
    # to the broker, naming the publisher: either registration's topic is allowed
    for t in ("dt:temperature", "dt:humidity"):
        r = await call(
            gw.url, notify_body((t, reading(3)), nsdecl=dt, dialect=SIMPLE, producer=pub)
        )
        assert r.status == 202, r.text


# ---------------------------------------------------------------- defect 2
@dataclass
class Publishers:
    """NotificationProducers at several paths of one host:port (as two producers behind one
    reverse proxy, or two apps on one device): each answers Subscribe with a subscription of
    its own and records every operation it receives, by path."""

    ops: list[tuple[str, str]] = field(default_factory=list)  # (producer path, operation)
    subs: dict[str, str] = field(default_factory=dict)  # subscription id -> producer path
    url: str = ""
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.Response:
        env = etree.fromstring(await request.read())
        body = env.find(f"{{{S12}}}Body")
        assert body is not None
        op = etree.QName(body[0]).localname
        path = request.path
        if path.startswith("/subs/"):
            path = self.subs.get(path.rsplit("/", 1)[1], "?")
        self.ops.append((path, op))
        if op == "Subscribe":
            sid = str(next(self._ids))
            self.subs[sid] = request.path
            out = (
                f'<wsnt:SubscribeResponse xmlns:wsnt="{WSNT}" xmlns:wsa="{WSA}">'
                f"<wsnt:SubscriptionReference><wsa:Address>{self.url}/subs/{sid}</wsa:Address>"
                "</wsnt:SubscriptionReference>"
                "<wsnt:CurrentTime>2026-01-01T00:00:00Z</wsnt:CurrentTime>"
                "<wsnt:TerminationTime>2026-01-01T01:00:00Z</wsnt:TerminationTime>"
                "</wsnt:SubscribeResponse>"
            )
        else:
            out = f'<wsnt:{op}Response xmlns:wsnt="{WSNT}"/>'
        return web.Response(
            body=f'<s:Envelope xmlns:s="{S12}"><s:Body>{out}</s:Body></s:Envelope>'.encode(),
            content_type="application/soap+xml",
        )

    def count(self, path: str, op: str) -> int:
        return sum(1 for p, o in self.ops if (p, o) == (path, op))


@pytest.fixture
async def publishers() -> AsyncIterator[Publishers]:
    p = Publishers()
    app = web.Application()
    app.router.add_post("/{tail:.*}", p._handle)
    p._runner = web.AppRunner(app, access_log=None)
    await p._runner.setup()
    site = web.TCPSite(p._runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    p.url = f"http://127.0.0.1:{port}"
    yield p
    await p._runner.cleanup()


async def test_two_publishers_on_one_host_port_keep_their_own_demand(gw, consumer, publishers):
    """Publishers at http://H:P/a and http://H:P/b, both Demand=true and without an
    edge:DeviceId, are two publishers: registering /b leaves /a subscribed, and a subscriber
    to /a's topic makes the broker resume /a's subscription."""
    a, b = publishers.url + "/a", publishers.url + "/b"
    await register(gw.url, a, "dt:temperature", demand=True)
    await until(lambda: publishers.count("/a", "PauseSubscription") == 1, "/a subscribed, paused")
    await register(gw.url, b, "dt:humidity", demand=True)
    await until(lambda: publishers.count("/b", "PauseSubscription") == 1, "/b subscribed, paused")
    assert publishers.count("/a", "Unsubscribe") == 0, publishers.ops
    r = await call(
        gw.url,
        subscribe_body(
            consumer.url, topic_filter("dev:*/temperature", FULL, f'xmlns:dev="{DEV_NS}"')
        ),
    )
    assert r.status == 200, r.text
    await until(lambda: publishers.count("/a", "ResumeSubscription") == 1, "/a resumed")
    assert publishers.count("/b", "ResumeSubscription") == 0, publishers.ops


# ---------------------------------------------------------------- defect 3
async def test_a_pull_point_is_destroyed_by_wsrf_destroy(gw):
    """A pull point's EPR presents it as a WS-Resource (WS-BaseNotification 1.3 §5.1), so
    WS-ResourceLifetime's immediate termination ends it like DestroyPullPoint does."""
    r = await call(gw.url, "<wsnt:CreatePullPoint/>")
    pp = r.body.findtext(f"{{{WSNT}}}PullPoint/{{{WSA}}}Address")
    assert pp
    r = await call(
        pp,
        f'<wsrf-rl:Destroy xmlns:wsrf-rl="{RL}"/>',
        action=wsdl_action("ImmediateResourceTermination", "Destroy"),
    )
    assert r.status == 200, r.text
    assert r.body.tag == f"{{{RL}}}DestroyResponse"
    assert r.header("Action") == wsdl_action("ImmediateResourceTermination", "Destroy", "output")
    r = await call(pp, "<wsnt:GetMessages/>")
    assert r.fault_name == "ResourceUnknownFault", r.text


# ---------------------------------------------------------------- defect 4
#: WS-BaseNotification 1.3 §6.2.1 and §6.2.2 (004_, lines ~2094-2262) give these actions;
#: bw-2.wsdl has the operations only in PausableSubscriptionManager; §1.2 says the
#: normative text takes precedence
SM = "http://docs.oasis-open.org/wsn/bw-2/SubscriptionManager/"


@pytest.mark.parametrize("op", ["PauseSubscription", "ResumeSubscription"])
async def test_pause_resume_answer_in_the_form_the_request_used(gw, consumer, op):
    r = await call(gw.url, subscribe_body(consumer.url, topic_filter("tns:t")))
    addr = sub_address(r)
    r = await call(addr, f"<wsnt:{op}/>", action=f"{SM}{op}Request")
    assert r.status == 200, r.text
    validate(r.body)
    assert r.header("Action") == f"{SM}{op}Response"
    # the WSDL's form keeps the WSDL's answer
    r = await call(addr, f"<wsnt:{op}/>", action=wsdl_action("PausableSubscriptionManager", op))
    assert r.header("Action") == wsdl_action("PausableSubscriptionManager", op, "output")


# ---------------------------------------------------------------- defect 6
IBM = "http://www.ibm.com/xmlns/stdwip/web-services/WS-Topics/TopicExpression/"
OASIS_2004 = "http://docs.oasis-open.org/wsn/2004/06/TopicExpression/"


@pytest.mark.parametrize(
    "dialect, expr, delivered",
    [
        (IBM + "simple", "tns:t", IBM + "simple"),
        (IBM + "concreteTopicPath", "tns:t", IBM + "concreteTopicPath"),
        (IBM + "FullTopicPath", "tns:*", IBM + "FullTopicPath"),
        (OASIS_2004 + "Concrete", "tns:t", OASIS_2004 + "Concrete"),
        (f" {CONCRETE} ", "tns:t", CONCRETE),  # xsd:anyURI white space collapses
        (XPATH, "//tns:t", XPATH),
    ],
)
async def test_topic_comes_back_in_the_dialect_uri_the_subscriber_used(
    gw, consumer, dialect, expr, delivered
):
    """WS-BaseNotification 1.3 §3.1: wsnt:Topic/@Dialect "MUST be the same dialect used by
    the Subscriber": a subscriber that wrote a 2004 URI gets that URI back, to a consumer
    and into a pull point."""
    r = await call(gw.url, "<wsnt:CreatePullPoint/>")
    pp = r.body.findtext(f"{{{WSNT}}}PullPoint/{{{WSA}}}Address")
    for target in (consumer.url, pp):
        r = await call(gw.url, subscribe_body(target, topic_filter(expr, dialect)))
        assert r.status == 200, r.text
    assert (await call(gw.url, notify_body(("tns:t", reading(1))))).status == 202
    await consumer.wait_for(1)
    r = await call(pp, "<wsnt:GetMessages/>")
    pulled = r.body.findall(f"{{{WSNT}}}NotificationMessage")
    for nm in (consumer.messages()[0], *pulled):
        t = nm.find(f"{{{WSNT}}}Topic")
        assert t is not None and t.get("Dialect") == delivered, etree.tostring(nm)
        assert t.text == "tns:t"


async def test_two_spellings_of_one_dialect_get_a_rendering_each(gw, consumer):
    """Renderings are shared per dialect *URI* (gateway.notify.plan), so a 2004 and a 1.3
    subscriber of one notification each get their own spelling."""
    for d in (IBM + "simple", SIMPLE):
        r = await call(gw.url, subscribe_body(consumer.url, topic_filter("tns:a", d)))
        assert r.status == 200
    assert (await call(gw.url, notify_body(("tns:a", reading(1))))).status == 202
    await consumer.wait_for(2)
    topics = [nm.find(f"{{{WSNT}}}Topic") for nm in consumer.messages()]
    assert sorted(t.get("Dialect") or "" for t in topics if t is not None) == sorted(
        [IBM + "simple", SIMPLE]
    )


# ---------------------------------------------------------------- topics keep their prefix
ONVIF = "http://www.onvif.org/ver10/topics"
MOTION = (
    '<tt:Message xmlns:tt="http://www.onvif.org/ver10/schema" UtcTime="2026-11-26T10:00:00Z"'
    ' PropertyOperation="Changed"><tt:Source><tt:SimpleItem Name="VideoSourceConfigurationToken"'
    ' Value="vsc"/></tt:Source><tt:Data><tt:SimpleItem Name="IsMotion" Value="true"/>'
    "</tt:Data></tt:Message>"
)


@pytest.mark.parametrize("dialect", [CONCRETE, FULL, XPATH, None])
async def test_a_delivered_topic_keeps_its_publishers_prefix(gw, consumer, dialect):
    """ONVIF clients look an event up by its literal topic text: the broker delivers and
    pulls `tns1:RuleEngine/CellMotionDetector/Motion` as the camera wrote it, whatever
    prefix the subscriber used (matching is prefix-independent)."""
    filt = "" if dialect is None else topic_filter("ev:RuleEngine//.", FULL, f'xmlns:ev="{ONVIF}"')
    if dialect in (CONCRETE, XPATH):
        text = "ev:RuleEngine/CellMotionDetector/Motion"
        filt = topic_filter(text, dialect, f'xmlns:ev="{ONVIF}"')
    r = await call(gw.url, subscribe_body(consumer.url, filt))
    assert r.status == 200, r.text
    r = await call(gw.url, "<wsnt:CreatePullPoint/>")
    pp = r.body.findtext(f"{{{WSNT}}}PullPoint/{{{WSA}}}Address")
    assert (await call(gw.url, subscribe_body(pp or "", filt))).status == 200
    body = notify_body(
        ("tns1:RuleEngine/CellMotionDetector/Motion", MOTION),
        nsdecl=f'xmlns:tns1="{ONVIF}"',
        producer="http://127.0.0.1:9/onvif/event_service",
    )
    assert (await call(gw.url, body)).status == 202
    await consumer.wait_for(1)
    r = await call(pp or "", "<wsnt:GetMessages/>")
    for nm in (consumer.messages()[0], *r.body.findall(f"{{{WSNT}}}NotificationMessage")):
        t = nm.find(f"{{{WSNT}}}Topic")
        assert t is not None and t.text == "tns1:RuleEngine/CellMotionDetector/Motion"
        assert t.nsmap["tns1"] == ONVIF


async def test_a_prefix_is_per_publisher_and_falls_back_to_the_convention(gw, consumer):
    """Two publishers writing one namespace with their own prefixes each get theirs back; a
    device topic mapped by the gateway (no publisher wrote `urn:wsn-edge:devices`) gets the
    conventional `dev`."""
    r = await call(gw.url, subscribe_body(consumer.url))
    assert r.status == 200
    for n, (prefix, producer) in enumerate((("a", "http://127.0.0.1:9/a"), ("b", None))):
        body = notify_body(
            (f"{prefix}:x/y", reading(n)), nsdecl=f'xmlns:{prefix}="urn:shared"', producer=producer
        )
        assert (await call(gw.url, body)).status == 202
    reg = await register(gw.url, "http://127.0.0.1:9/wsn/producer", "dt:t", device_id="d7")
    body = notify_body(("dt:t", reading(3)), nsdecl=f'xmlns:dt="{DT_NS}"', dialect=SIMPLE)
    assert (await call(reg, body)).status == 202
    await consumer.wait_for(3)
    texts = [nm.findtext(f"{{{WSNT}}}Topic") for nm in consumer.messages()]
    assert texts == ["a:x/y", "b:x/y", "dev:d7/t"], texts
    edge = consumer.messages()[2].find(f"{{{WSNT}}}Topic")
    assert edge is not None and edge.nsmap["dev"] == DEV_NS
