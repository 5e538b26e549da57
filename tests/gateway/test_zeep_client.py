"""Interoperability (issue 3): a zeep client generated from the official OASIS bw-2.wsdl
(shipped with b-2.xsd in the PyPI package onvif-zeep-async, under onvif/wsdl/) drives a real
`python -m gateway` process on 127.0.0.1, unmodified.

bw-2.wsdl has portTypes only. Like any client of it, we add what it leaves to the
implementer: a small WSDL (written to a temp dir) that imports bw-2.wsdl by its file URI,
unchanged, and declares document/literal SOAP 1.1 and SOAP 1.2 bindings for the
NotificationConsumer, NotificationProducer, CreatePullPoint, PullPoint and
PausableSubscriptionManager portTypes. soapAction is the WS-Addressing default action of
each input, derived from bw-2.wsdl's portTypes (tests/wsdl_actions.py);
zeep.wsa.WsAddressingPlugin sends it as wsa:Action with a wsa:MessageID and wsa:To, as
real clients do.

Checked on every exchange: zeep parses the response with the schemas (structure and types),
the raw response body (or fault detail) validates with lxml against b-2.xsd/bf-2.xsd
(gwtest.validate), wsa:Action is the output action bw-2.wsdl gives and wsa:RelatesTo is the
request's MessageID. Notifications the gateway pushes to a consumer validate too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import zeep
from gwtest import (
    CONCRETE,
    SOAP11,
    SOAP12,
    WSA,
    WSDL_DIR,
    WSNT,
    Consumer,
    GatewayProcess,
    start_gateway,
    stop_gateway,
    validate,
)
from lxml import etree
from zeep.exceptions import Fault
from zeep.plugins import Plugin
from zeep.wsa import WsAddressingPlugin

from tests.wsdl_actions import action as wsdl_action

BW = "http://docs.oasis-open.org/wsn/bw-2"
BINDINGS_NS = "urn:wsn-edge:interop"
TNS = "urn:wsn-edge:interop-topics"
RD = "urn:wsn-edge:reading"

# portType -> (operation, request-response?): the operations the gateway answers. Their
# actions (soapAction, and the response action checked on every exchange) are derived from
# bw-2.wsdl itself by tests/wsdl_actions.py, never taken from our constants.
OPERATIONS: dict[str, list[tuple[str, bool]]] = {
    "NotificationConsumer": [("Notify", False)],
    "NotificationProducer": [("Subscribe", True), ("GetCurrentMessage", True)],
    "CreatePullPoint": [("CreatePullPoint", True)],
    "PullPoint": [("GetMessages", True), ("DestroyPullPoint", True), ("Notify", False)],
    "PausableSubscriptionManager": [
        ("Renew", True),
        ("Unsubscribe", True),
        ("PauseSubscription", True),
        ("ResumeSubscription", True),
    ],
}
SOAP_WSDL_NS = {
    "soap11": "http://schemas.xmlsoap.org/wsdl/soap/",
    "soap12": "http://schemas.xmlsoap.org/wsdl/soap12/",
}


def binding_wsdl() -> str:
    """The implementer's WSDL: imports the official bw-2.wsdl unmodified, adds bindings."""
    out = [
        '<?xml version="1.0" encoding="utf-8"?>',
        f'<wsdl:definitions targetNamespace="{BINDINGS_NS}" '
        'xmlns:wsdl="http://schemas.xmlsoap.org/wsdl/" '
        f'xmlns:wsntw="{BW}" xmlns:soap11="{SOAP_WSDL_NS["soap11"]}" '
        f'xmlns:soap12="{SOAP_WSDL_NS["soap12"]}">',
        f'<wsdl:import namespace="{BW}" location="{(WSDL_DIR / "bw-2.wsdl").as_uri()}"/>',
    ]
    for v in ("soap11", "soap12"):
        for port_type, ops in OPERATIONS.items():
            out.append(
                f'<wsdl:binding name="{port_type}_{v}" type="wsntw:{port_type}">'
                f'<{v}:binding style="document" transport="http://schemas.xmlsoap.org/soap/http"/>'
            )
            for name, request_response in ops:
                action = wsdl_action(port_type, name, "input")
                out.append(
                    f'<wsdl:operation name="{name}"><{v}:operation soapAction="{action}"/>'
                    f'<wsdl:input><{v}:body use="literal"/></wsdl:input>'
                )
                if request_response:
                    out.append(f'<wsdl:output><{v}:body use="literal"/></wsdl:output>')
                out.append("</wsdl:operation>")
            out.append("</wsdl:binding>")
    out.append("</wsdl:definitions>")
    return "\n".join(out)


@dataclass
class Recorder(Plugin):  # type: ignore[misc]
    """Keeps every envelope zeep sends and receives, as bytes (the raw wire form)."""

    sent: list[tuple[str, bytes]] = field(default_factory=list)
    received: list[tuple[str, bytes]] = field(default_factory=list)

    def egress(self, envelope: Any, http_headers: Any, operation: Any, binding_options: Any):  # type: ignore[no-untyped-def]
        self.sent.append((operation.name, etree.tostring(envelope)))
        return envelope, http_headers

    def ingress(self, envelope: Any, http_headers: Any, operation: Any):  # type: ignore[no-untyped-def]
        self.received.append((operation.name, etree.tostring(envelope)))
        return envelope, http_headers


# ---------------------------------------------------------------- the gateway process
@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    gw = start_gateway(tmp_path_factory.mktemp("zeep") / "gw")
    try:
        yield gw
    finally:
        rc = stop_gateway(gw)
    assert rc == 0, gw.stderr.read_text()
    # nothing went wrong inside the gateway while zeep was talking to it
    assert "Traceback" not in gw.stderr.read_text(), gw.stderr.read_text()


@pytest.fixture(scope="module")
def wsdl_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("wsdl") / "wsn-edge-bindings.wsdl"
    p.write_text(binding_wsdl())
    return p


# ---------------------------------------------------------------- the client
class Client:
    """A zeep client of the official WSDL plus the checks every exchange must pass."""

    def __init__(self, wsdl: Path, version: str) -> None:
        self.rec = Recorder()
        self.zeep = zeep.Client(str(wsdl), plugins=[WsAddressingPlugin(), self.rec])
        # prefix for topic QNames in TopicExpression text (declared on the Envelope)
        self.zeep.set_ns_prefix("tns", TNS)
        self.version = version
        self.envns = SOAP12 if version == "soap12" else SOAP11

    def service(self, port_type: str, address: str) -> Any:
        return self.zeep.create_service(f"{{{BINDINGS_NS}}}{port_type}_{self.version}", address)

    def topic(self, text: str, dialect: str = CONCRETE) -> Any:
        te = self.zeep.get_element(f"{{{WSNT}}}TopicExpression")
        return te(text, Dialect=dialect)

    def topic_filter(self, text: str, dialect: str = CONCRETE) -> dict[str, Any]:
        te = self.zeep.get_element(f"{{{WSNT}}}TopicExpression")
        return {"_value_1": [zeep.xsd.AnyObject(te, self.topic(text, dialect))]}

    def last_exchange(self, op: str) -> etree._Element:
        """Check the last response to `op` (raw bytes) and return its Body child."""
        name, sent = self.rec.sent[-1]
        rname, got = self.rec.received[-1]
        assert name == rname == op, (name, rname, op)
        req = etree.fromstring(sent)
        resp = etree.fromstring(got)
        assert resp.tag == f"{{{self.envns}}}Envelope", got
        mid = req.findtext(f"{{{self.envns}}}Header/{{{WSA}}}MessageID")
        hdr = resp.find(f"{{{self.envns}}}Header")
        assert hdr is not None, got
        assert hdr.findtext(f"{{{WSA}}}RelatesTo") == mid, got
        body = resp.find(f"{{{self.envns}}}Body")
        assert body is not None and len(body) == 1, got
        el = body[0]
        if etree.QName(el).localname == "Fault":
            detail = el.find(f"{{{SOAP12}}}Detail") if self.envns == SOAP12 else el.find("detail")
            assert detail is not None and len(detail) == 1, got
            validate(detail[0])
            # WS-BaseNotification 1.3 §1.4 faults: .../wsn/fault; WSRF faults
            # (ResourceUnknownFault, r-2): .../wsrf/fault
            family = "wsrf" if "/wsrf/" in (etree.QName(detail[0]).namespace or "") else "wsn"
            assert hdr.findtext(f"{{{WSA}}}Action") == f"http://docs.oasis-open.org/{family}/fault"
            return el
        # the operation's output action in the portType its binding uses (bw-2.wsdl)
        port_type = next(pt for pt, ops in OPERATIONS.items() if (op, True) in ops)
        assert hdr.findtext(f"{{{WSA}}}Action") == wsdl_action(port_type, op, "output"), got
        validate(el)
        return el

    def fault_detail(self, f: Fault) -> etree._Element:
        assert f.detail is not None, f.message
        kids = [c for c in f.detail if isinstance(c.tag, str)]
        assert len(kids) == 1
        return kids[0]


def reading_element(value: float, device: str = "esp32-01") -> etree._Element:
    el = etree.Element(f"{{{RD}}}Reading", nsmap={"rd": RD}, device=device)
    etree.SubElement(el, f"{{{RD}}}value").text = str(value)
    etree.SubElement(el, f"{{{RD}}}unit").text = "Cel"
    etree.SubElement(el, f"{{{RD}}}time").text = "2026-11-21T05:00:00Z"
    return el


def notify(client: Client, address: str, topic: str, *values: float) -> None:
    """wsnt:Notify through the NotificationConsumer (or PullPoint) binding: one-way."""
    port_type = "PullPoint" if "/wsn/pullpoints/" in address else "NotificationConsumer"
    msgs = [
        {
            "Topic": client.topic(topic),
            "Message": {"_value_1": reading_element(v)},
        }
        for v in values
    ]
    assert client.service(port_type, address).Notify(NotificationMessage=msgs) is None
    assert client.rec.sent[-1][0] == "Notify"


def values(messages: list[etree._Element]) -> list[str]:
    return [m.findtext(f".//{{{RD}}}value") or "" for m in messages]


def _close(a: datetime, b: datetime, slack: timedelta = timedelta(seconds=30)) -> bool:
    return abs(a - b) < slack


# ---------------------------------------------------------------- tests
@pytest.mark.parametrize("version", ["soap11", "soap12"])
async def test_subscribe_renew_pause_resume_unsubscribe(
    gateway: GatewayProcess, wsdl_path: Path, version: str
) -> None:
    c = Client(wsdl_path, version)
    consumer = await Consumer().start()
    topic = f"tns:{version}/temperature"
    try:
        producer = c.service("NotificationProducer", gateway.url)
        itt = "PT10M"
        r = await asyncio.to_thread(
            producer.Subscribe,
            ConsumerReference={"Address": consumer.url},
            Filter=c.topic_filter(topic),
            InitialTerminationTime=itt,
        )
        c.last_exchange("Subscribe")
        sub_addr = r.SubscriptionReference.Address._value_1
        assert sub_addr.startswith(gateway.url.rsplit("/wsn/", 1)[0] + "/wsn/subscriptions/")
        rid = r.SubscriptionReference.ReferenceParameters._value_1[0]
        assert etree.QName(rid).localname == "ResourceId" and sub_addr.endswith("/" + rid.text)
        assert _close(r.TerminationTime - r.CurrentTime, timedelta(minutes=10), timedelta(1))
        assert _close(r.CurrentTime, datetime.now(UTC))

        # a Notify on the subscribed topic reaches the consumer, schema-valid
        await asyncio.to_thread(notify, c, gateway.url, topic, 1.5)
        await asyncio.to_thread(notify, c, gateway.url, "tns:other", 99)  # filtered out
        await consumer.wait_for(1)
        for b in consumer.bodies():
            validate(b)
        assert values(consumer.messages()) == ["1.5"]
        nm = consumer.messages()[0]
        assert nm.findtext(f"{{{WSNT}}}SubscriptionReference/{{{WSA}}}Address") == sub_addr
        t = nm.find(f"{{{WSNT}}}Topic")
        assert t is not None and t.get("Dialect") == CONCRETE
        assert t.text is not None and t.nsmap[t.text.split(":")[0]] == TNS

        # GetCurrentMessage returns the last message on the topic
        r = await asyncio.to_thread(producer.GetCurrentMessage, Topic=c.topic(topic))
        c.last_exchange("GetCurrentMessage")
        cur = r if isinstance(r, list) else r._value_1
        assert values(list(cur)) == ["1.5"]

        manager = c.service("PausableSubscriptionManager", sub_addr)
        # Renew with an xsd:duration, then with an xsd:dateTime
        r = await asyncio.to_thread(manager.Renew, TerminationTime="PT2H")
        c.last_exchange("Renew")
        assert _close(r.TerminationTime, datetime.now(UTC) + timedelta(hours=2))
        target = (datetime.now(UTC) + timedelta(hours=3)).replace(microsecond=0)
        r = await asyncio.to_thread(manager.Renew, TerminationTime=target)
        c.last_exchange("Renew")
        assert r.TerminationTime == target
        assert _close(r.CurrentTime, datetime.now(UTC))

        # paused: nothing delivered; resumed: delivery goes on
        await asyncio.to_thread(manager.PauseSubscription)
        c.last_exchange("PauseSubscription")
        await asyncio.to_thread(notify, c, gateway.url, topic, 2.5)
        await asyncio.sleep(0.5)
        assert values(consumer.messages()) == ["1.5"]
        await asyncio.to_thread(manager.ResumeSubscription)
        c.last_exchange("ResumeSubscription")
        await asyncio.to_thread(notify, c, gateway.url, topic, 3.5)
        await consumer.wait_for(2)
        assert values(consumer.messages()) == ["1.5", "3.5"]

        await asyncio.to_thread(manager.Unsubscribe)
        c.last_exchange("Unsubscribe")
        # the subscription is gone: zeep raises the fault, its detail is schema-valid
        with pytest.raises(Fault) as e:
            await asyncio.to_thread(manager.Renew, TerminationTime="PT1H")
        c.last_exchange("Renew")
        assert etree.QName(c.fault_detail(e.value)).localname == "ResourceUnknownFault"
        await asyncio.to_thread(notify, c, gateway.url, topic, 4.5)
        await asyncio.sleep(0.3)
        assert values(consumer.messages()) == ["1.5", "3.5"]
    finally:
        await consumer.stop()


@pytest.mark.parametrize("version", ["soap11", "soap12"])
async def test_pullpoint_create_get_messages_destroy(
    gateway: GatewayProcess, wsdl_path: Path, version: str
) -> None:
    c = Client(wsdl_path, version)
    topic = f"tns:{version}/humidity"
    factory = c.service("CreatePullPoint", gateway.url)
    r = await asyncio.to_thread(factory.CreatePullPoint)
    c.last_exchange("CreatePullPoint")
    pp_addr = r.PullPoint.Address._value_1
    assert "/wsn/pullpoints/" in pp_addr

    # the pull point is the consumer of a subscription on the broker
    producer = c.service("NotificationProducer", gateway.url)
    r = await asyncio.to_thread(
        producer.Subscribe,
        ConsumerReference={"Address": pp_addr},
        Filter=c.topic_filter(topic),
        InitialTerminationTime=datetime.now(UTC) + timedelta(minutes=5),
    )
    c.last_exchange("Subscribe")
    await asyncio.to_thread(notify, c, gateway.url, topic, 40, 41, 42)

    pp = c.service("PullPoint", pp_addr)
    r = await asyncio.to_thread(pp.GetMessages, MaximumNumber=2)
    body = c.last_exchange("GetMessages")
    assert values(body.findall(f"{{{WSNT}}}NotificationMessage")) == ["40", "41"]
    # zeep's own parse of the response
    assert [m.Message._value_1.findtext(f"{{{RD}}}value") for m in r.NotificationMessage] == [
        "40",
        "41",
    ]
    assert r.NotificationMessage[0].Topic._value_1 == topic
    # a Notify posted to the pull point itself (PullPoint portType) is accumulated too
    await asyncio.to_thread(notify, c, pp_addr, topic, 43)
    r = await asyncio.to_thread(pp.GetMessages)
    body = c.last_exchange("GetMessages")
    assert values(body.findall(f"{{{WSNT}}}NotificationMessage")) == ["42", "43"]
    r = await asyncio.to_thread(pp.GetMessages, MaximumNumber=5)
    c.last_exchange("GetMessages")
    assert not r.NotificationMessage

    await asyncio.to_thread(pp.DestroyPullPoint)
    c.last_exchange("DestroyPullPoint")
    with pytest.raises(Fault) as e:
        await asyncio.to_thread(pp.GetMessages)
    c.last_exchange("GetMessages")
    assert etree.QName(c.fault_detail(e.value)).localname == "ResourceUnknownFault"


@pytest.mark.parametrize("version", ["soap11", "soap12"])
async def test_faults_reach_zeep_as_schema_valid_wsn_faults(
    gateway: GatewayProcess, wsdl_path: Path, version: str
) -> None:
    c = Client(wsdl_path, version)
    producer = c.service("NotificationProducer", gateway.url)
    cases = [
        ({"Filter": c.topic_filter("tns:a", "urn:no-such-dialect")},
         "TopicExpressionDialectUnknownFault"),
        ({"Filter": c.topic_filter("undeclared:a")}, "InvalidTopicExpressionFault"),
        ({"InitialTerminationTime": "2001-01-01T00:00:00Z"},
         "UnacceptableInitialTerminationTimeFault"),
    ]  # fmt: skip
    for kw, name in cases:
        with pytest.raises(Fault) as e:
            await asyncio.to_thread(
                producer.Subscribe, ConsumerReference={"Address": "http://127.0.0.1:9/c"}, **kw
            )
        c.last_exchange("Subscribe")
        assert etree.QName(c.fault_detail(e.value)).localname == name, e.value.message
        if version == "soap12":
            assert e.value.subcodes and e.value.subcodes[0].localname == name
    with pytest.raises(Fault) as e:
        await asyncio.to_thread(producer.GetCurrentMessage, Topic=c.topic("tns:never/published"))
    c.last_exchange("GetCurrentMessage")
    assert etree.QName(c.fault_detail(e.value)).localname == "NoCurrentMessageOnTopicFault"


def test_the_official_wsdl_is_used_unmodified(wsdl_path: Path) -> None:
    """The client's WSDL imports bw-2.wsdl from the installed package by its file URI (no
    copy, no edit) and zeep reads every portType operation from it."""
    doc = etree.parse(str(wsdl_path))
    imports = doc.getroot().findall("{http://schemas.xmlsoap.org/wsdl/}import")
    assert [i.get("location") for i in imports] == [(WSDL_DIR / "bw-2.wsdl").as_uri()]
    client = zeep.Client(str(wsdl_path))
    for v in ("soap11", "soap12"):
        for port_type, ops in OPERATIONS.items():
            b = client.wsdl.bindings[f"{{{BINDINGS_NS}}}{port_type}_{v}"]
            assert sorted(b._operations) == sorted(o for o, _ in ops)


async def test_reference_parameters_echoed_as_headers_address_the_subscription(
    gateway: GatewayProcess, wsdl_path: Path
) -> None:
    """A WS-Addressing client that sends the EPR's reference parameters as SOAP headers
    (WS-Addressing 1.0 SOAP binding §2.3) reaches the subscription even when it posts to
    the broker's address (design.md: edge:ResourceId)."""
    c = Client(wsdl_path, "soap12")
    producer = c.service("NotificationProducer", gateway.url)
    r = await asyncio.to_thread(
        producer.Subscribe, ConsumerReference={"Address": "http://127.0.0.1:9/c"}
    )
    c.last_exchange("Subscribe")
    rid = r.SubscriptionReference.ReferenceParameters._value_1[0]
    header = etree.fromstring(etree.tostring(rid))
    header.set(f"{{{WSA}}}IsReferenceParameter", "true")
    manager = c.service("PausableSubscriptionManager", gateway.url)
    r = await asyncio.to_thread(manager.Renew, TerminationTime="PT5M", _soapheaders=[header])
    c.last_exchange("Renew")
    sent = etree.fromstring(c.rec.sent[-1][1])
    assert sent.find(f".//{{{SOAP12}}}Header/{header.tag}") is not None
    assert _close(r.TerminationTime, datetime.now(UTC) + timedelta(minutes=5))
    await asyncio.to_thread(manager.Unsubscribe, _soapheaders=[header])
    c.last_exchange("Unsubscribe")
    with pytest.raises(Fault) as e:
        await asyncio.to_thread(manager.Unsubscribe, _soapheaders=[header])
    c.last_exchange("Unsubscribe")
    assert etree.QName(c.fault_detail(e.value)).localname == "ResourceUnknownFault"
