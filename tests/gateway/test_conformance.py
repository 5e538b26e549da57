"""Issue 11: what a client following WS-BaseNotification 1.3, the official bw-2.wsdl and
WS-Topics 1.3 to the letter gets from a real gateway over HTTP. Expected actions come from
the WSDL (tests/wsdl_actions.py), element names and validity from the official schemas."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest
from gwtest import (
    CONCRETE,
    FULL,
    RL,
    RP,
    SIMPLE,
    SOAP11,
    SOAP12,
    WSA,
    WSNT,
    WSTOP,
    XPATH,
    Reply,
    call,
    epr_address,
    notify_body,
    reading,
    register,
    sub_address,
    subscribe_body,
    topic_filter,
    validate,
)
from lxml import etree

from tests.wsdl_actions import action as wsdl_action

# ---------------------------------------------------------------- 1. Pause/Resume actions
OLD_SM = "http://docs.oasis-open.org/wsn/bw-2/SubscriptionManager/"


@pytest.mark.parametrize("op", ["PauseSubscription", "ResumeSubscription"])
async def test_pause_resume_answer_with_the_pausable_port_type_action(
    gw, consumer, op: str
) -> None:
    """bw-2.wsdl has PauseSubscription/ResumeSubscription only in
    PausableSubscriptionManager: the response action is that portType's; the request
    action of the WSDL, the normative text's (.../SubscriptionManager/..., WS-BaseNotification
    1.3 §6.2.1) and none at all are all accepted, and a request in the text's form is
    answered in that form (issue 25 defect 4, test_conformance_audit)."""
    r = await call(gw.url, subscribe_body(consumer.url, topic_filter("tns:t")))
    addr = sub_address(r)
    for act in (wsdl_action("PausableSubscriptionManager", op), f"{OLD_SM}{op}Request", None):
        r = await call(addr, f"<wsnt:{op}/>", action=act)
        assert r.status == 200, r.text
        validate(r.body)
        want = (
            f"{OLD_SM}{op}Response"
            if act == f"{OLD_SM}{op}Request"
            else wsdl_action("PausableSubscriptionManager", op, "output")
        )
        assert r.header("Action") == want


@pytest.mark.parametrize("port_type", ["SubscriptionManager", "PausableSubscriptionManager"])
@pytest.mark.parametrize("op", ["Renew", "Unsubscribe"])
async def test_renew_unsubscribe_answer_in_the_port_type_of_the_request(
    gw, consumer, port_type: str, op: str
) -> None:
    """Renew and Unsubscribe are in both portTypes of bw-2.wsdl: the answer's action is the
    output of the portType whose input action the request used."""
    r = await call(gw.url, subscribe_body(consumer.url, topic_filter("tns:t")))
    addr = sub_address(r)
    body = "<wsnt:Renew><wsnt:TerminationTime>PT5M</wsnt:TerminationTime></wsnt:Renew>"
    r = await call(
        addr, body if op == "Renew" else "<wsnt:Unsubscribe/>", action=wsdl_action(port_type, op)
    )
    assert r.status == 200, r.text
    validate(r.body)
    assert r.header("Action") == wsdl_action(port_type, op, "output")


# ---------------------------------------------------------------- 3. Destroy, ActionNotSupported
DESTROY = '<wsrf-rl:Destroy xmlns:wsrf-rl="http://docs.oasis-open.org/wsrf/rl-2"/>'


@pytest.mark.parametrize("kind", ["subscription", "registration"])
async def test_destroy_terminates_the_resource(gw, consumer, kind: str) -> None:
    """WS-ResourceLifetime Destroy (WS-BaseNotification 1.3 §6.4, WS-BrokeredNotification:
    a subscription or registration exposed as a WS-Resource MUST support it)."""
    if kind == "subscription":
        r = await call(gw.url, subscribe_body(consumer.url, topic_filter("tns:t")))
        addr = sub_address(r)
    else:
        addr = await register(gw.url, publisher="http://127.0.0.1:9/p", device_id=None, topics=())
    r = await call(addr, DESTROY, action=wsdl_action("ImmediateResourceTermination", "Destroy"))
    assert r.status == 200, r.text
    assert etree.QName(r.body).localname == "DestroyResponse", r.text
    assert etree.QName(r.body).namespace == RL
    assert r.header("Action") == wsdl_action("ImmediateResourceTermination", "Destroy", "output")
    assert (gw.state.subscriptions if kind == "subscription" else gw.state.registrations) == {}
    # and now it is gone: the same request is about an unknown resource
    r = await call(addr, DESTROY)
    assert r.fault_name == "ResourceUnknownFault", r.text


def _problem_action(r: Reply, version: int) -> etree._Element:
    """The wsa:ProblemAction of an ActionNotSupported fault: SOAP 1.2 Subcode + Detail,
    SOAP 1.1 faultcode + wsa:FaultDetail header (WS-Addressing 1.0 SOAP Binding §6)."""
    assert r.is_fault, r.text
    assert r.header("Action") == "http://www.w3.org/2005/08/addressing/fault"
    f = r.body
    if version == 12:
        sub = f.findtext(f"{{{SOAP12}}}Code/{{{SOAP12}}}Subcode/{{{SOAP12}}}Value")
        assert sub is not None and sub.endswith(":ActionNotSupported"), r.text
        prefix = sub.split(":")[0]
        assert (
            f.find(f"{{{SOAP12}}}Code/{{{SOAP12}}}Subcode/{{{SOAP12}}}Value").nsmap[prefix] == WSA
        )
        return r.fault
    assert f.findtext("faultcode") == "wsa:ActionNotSupported", r.text
    assert r.root is not None
    pa = r.root.find(f"{{{SOAP11}}}Header/{{{WSA}}}FaultDetail/{{{WSA}}}ProblemAction")
    assert pa is not None, r.text
    return pa


@pytest.mark.parametrize("version", [11, 12])
@pytest.mark.parametrize(
    ("kind", "body", "port_type", "op"),
    [
        ("subscription", "<wsnt:GetMessages/>", "PullPoint", "GetMessages"),
        (
            "subscription",
            "<br:DestroyRegistration/>",
            "PublisherRegistrationManager",
            "DestroyRegistration",
        ),
        (
            "registration",
            "<wsnt:PauseSubscription/>",
            "PausableSubscriptionManager",
            "PauseSubscription",
        ),
        ("pullpoint", "<wsnt:Renew/>", "SubscriptionManager", "Renew"),
    ],
)
async def test_unsupported_operation_on_an_existing_resource_is_action_not_supported(
    gw, consumer, version: int, kind: str, body: str, port_type: str, op: str
) -> None:
    if kind == "subscription":
        addr = sub_address(await call(gw.url, subscribe_body(consumer.url)))
    elif kind == "registration":
        addr = await register(gw.url, publisher="http://127.0.0.1:9/p", device_id=None, topics=())
    else:
        r = await call(gw.url, "<wsnt:CreatePullPoint/>")
        addr = epr_address(r, "wsnt:PullPoint/wsa:Address")
    act = wsdl_action(port_type, op)
    r = await call(addr, body, version=version, action=act)
    assert r.status in (400, 500), r.text
    pa = _problem_action(r, version)
    assert pa.findtext(f"{{{WSA}}}Action") == act
    validate(pa)
    # the resource is intact
    r = await call(addr, GET_RP_TERMINATION if kind != "pullpoint" else "<wsnt:GetMessages/>")
    assert r.status == 200, r.text


GET_RP_TERMINATION = (
    '<wsrf-rp:GetResourceProperty xmlns:wsrf-rp="http://docs.oasis-open.org/wsrf/rp-2" '
    'xmlns:wsrf-rl="http://docs.oasis-open.org/wsrf/rl-2">wsrf-rl:CurrentTime'
    "</wsrf-rp:GetResourceProperty>"
)


# ---------------------------------------------------------------- 2. delivered topic dialect
async def _topic_set(gw) -> etree._Element:  # type: ignore[no-untyped-def]
    r = await call(gw.url, "<rp:GetResourceProperty>wstop:TopicSet</rp:GetResourceProperty>")
    assert r.status == 200, r.text
    ts = r.body.find(f"{{{WSTOP}}}TopicSet")
    assert ts is not None, r.text
    return ts


@pytest.mark.parametrize(
    ("dialect", "expr", "notified"),
    [
        (SIMPLE, "tns:t1", "tns:t1"),
        (CONCRETE, "tns:t1", "tns:t1"),
        (FULL, "tns:t1//.", "tns:t1"),
        (FULL, "tns:t1//.", "tns:t1/t2"),
        (XPATH, "//tns:t1", "tns:t1"),
        (XPATH, "tns:t1/descendant-or-self::*", "tns:t1/t2"),
    ],
)
async def test_delivered_topic_is_in_the_subscribers_dialect(
    gw, consumer, dialect: str, expr: str, notified: str
) -> None:
    """WS-BaseNotification 1.3 §3.1: wsnt:Topic/@Dialect MUST be the subscriber's dialect;
    the text is valid in it and resolves with the namespace declarations in scope."""
    r = await call(gw.url, subscribe_body(consumer.url, topic_filter(expr, dialect)))
    assert r.status == 200, r.text
    r = await call(gw.url, notify_body((notified, reading(1))))
    assert r.status == 202, r.text
    await consumer.wait_for(1)
    [nm] = consumer.messages()
    validate(consumer.bodies()[0])
    topic = nm.find(f"{{{WSNT}}}Topic")
    assert topic is not None
    assert topic.get("Dialect") == dialect
    text = (topic.text or "").strip()
    # the expected topic as (namespace, local) steps, resolved independently
    want = [("urn:test", notified.split("/")[0].split(":")[1])] + [
        (None, s) for s in notified.split("/")[1:]
    ]
    if dialect == XPATH:
        # evaluated with lxml against the broker's own TopicSet document (WS-Topics 1.3
        # §8.4: the TopicSet element is the context node), prefixes from the wsnt:Topic
        ts = await _topic_set(gw)
        nsmap = {k: v for k, v in topic.nsmap.items() if k}
        got = ts.xpath(text, namespaces=nsmap)
        assert isinstance(got, list) and len(got) == 1, (text, got)
        el = got[0]
        path = []
        while el is not ts:
            path.append(el)
            el = el.getparent()
        assert [etree.QName(e).localname for e in reversed(path)] == [w[1] for w in want]
        assert etree.QName(path[-1]).namespace == "urn:test"
    else:
        steps = text.split("/")
        prefix, local = steps[0].split(":")
        assert topic.nsmap[prefix] == "urn:test", etree.tostring(topic)
        assert [local, *steps[1:]] == [w[1] for w in want]


# ---------------------------------------------------------------- 4. GetCurrentMessage, one topic
def _gcm(expr: str, dialect: str) -> str:
    return (
        f'<wsnt:GetCurrentMessage><wsnt:Topic Dialect="{dialect}" xmlns:tns="urn:test">'
        f"{expr}</wsnt:Topic></wsnt:GetCurrentMessage>"
    )


async def test_get_current_message_is_judged_by_the_topics_it_selects(gw) -> None:
    """WS-BaseNotification 1.3 §4.3: MultipleTopicsSpecifiedFault only when the expression
    references more than one topic; evaluated against the topic set, not judged by syntax."""
    for path, v in (("tns:g1/a", 1), ("tns:g1/b", 2)):
        assert (await call(gw.url, notify_body((path, reading(v))))).status == 202
    one = [
        (XPATH, "/wstop:TopicSet/tns:g1/a"),
        (XPATH, "//tns:g1/a"),
        (FULL, "tns:*/a"),
        (FULL, "tns:g1//a"),
    ]
    for dialect, expr in one:
        r = await call(
            gw.url,
            _gcm(expr, dialect),
            action=wsdl_action("NotificationProducer", "GetCurrentMessage"),
        )
        assert r.status == 200, (expr, r.text)
        assert r.body.findtext(".//{urn:wsn-edge:reading}value") == "1", (expr, r.text)
        assert r.header("Action") == wsdl_action(
            "NotificationProducer", "GetCurrentMessage", "output"
        )
    for dialect, expr in ((XPATH, "/wstop:TopicSet/tns:g1/*"), (FULL, "tns:g1/*")):
        r = await call(gw.url, _gcm(expr, dialect))
        assert r.fault_name == "MultipleTopicsSpecifiedFault", (expr, r.text)
        assert "2 topics" in r.text
        validate(r.fault)


# ---------------------------------------------------------------- 5. messageTypes, MessagePattern
TYPED_NS = f"""<wstop:TopicNamespace xmlns:wstop="{WSTOP}" name="Typed"
  targetNamespace="urn:test" xmlns:tns="urn:test" xmlns:m="urn:m">
  <wstop:Topic name="B" messageTypes="m:Good"/>
  <wstop:Topic name="P">
    <wstop:MessagePattern Dialect="{XPATH}">/m:Good[m:v &gt; 0]</wstop:MessagePattern>
  </wstop:Topic>
</wstop:TopicNamespace>""".encode()


async def test_a_message_its_topic_does_not_admit_is_dropped_counted_and_logged_once(
    make_gateway, make_consumer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """WS-Topics 1.3 §6: @messageTypes and MessagePattern constrain the Notifications of a
    topic. An inadmissible one is not delivered, not landed and not current; the admitted
    ones of the same Notify are (the choice for a one-way Notify: docs/gateway.md)."""
    f = tmp_path / "typed.xml"
    f.write_bytes(TYPED_NS)
    data = tmp_path / "d"
    gw = await make_gateway(topic_namespace_files=[f], data_dir=data, landing_max_age=0.1)
    consumer = await make_consumer()
    for t in ("tns:B", "tns:P"):
        r = await call(gw.url, subscribe_body(consumer.url, topic_filter(t)))
        assert r.status == 200, r.text
    good = '<m:Good xmlns:m="urn:m"><m:v>{}</m:v></m:Good>'
    bad = '<m:Bad xmlns:m="urn:m"><m:v>5</m:v></m:Bad>'
    with caplog.at_level(logging.WARNING, logger="gateway.notify"):
        for _ in range(2):
            r = await call(
                gw.url,
                notify_body(
                    ("tns:B", bad),  # not among messageTypes
                    ("tns:P", good.format(-1)),  # MessagePattern false
                    ("tns:B", good.format(1)),  # admitted
                    ("tns:P", good.format(2)),  # admitted
                ),
            )
            assert r.status == 202, r.text
    await consumer.wait_for(4)
    await asyncio.sleep(0.3)
    got = [
        (
            m.findtext(f"{{{WSNT}}}Topic"),
            etree.QName(m.find(f"{{{WSNT}}}Message")[0]).localname,
            m.findtext(".//{urn:m}v"),
        )
        for m in consumer.messages()
    ]
    assert got == [("tns:B", "Good", "1"), ("tns:P", "Good", "2")] * 2, got
    assert gw.ctx.counts.inadmissible == {"{urn:test}B": 2, "{urn:test}P": 2}
    drops = [r for r in caplog.records if "dropped a notification" in r.getMessage()]
    assert len(drops) == 2, [r.getMessage() for r in drops]  # once per topic
    assert any("messageTypes" in r.getMessage() and "{urn:m}Bad" in r.getMessage() for r in drops)
    assert any("MessagePattern" in r.getMessage() for r in drops)
    # not landed either
    for _ in range(50):
        lines = [
            json.loads(x)
            for p in (data / "landing").glob("landing-*.jsonl")
            for x in p.read_text().splitlines()
        ]
        if len(lines) >= 4:
            break
        await asyncio.sleep(0.1)
    assert len(lines) == 4, lines
    assert all("Bad" not in json.dumps(x) and ">-1<" not in json.dumps(x) for x in lines)
    # and the current message of B is the admitted one
    r = await call(gw.url, _gcm("tns:B", CONCRETE))
    assert r.body.findtext(".//{urn:m}v") == "1", r.text


# ---------------------------------------------------------------- 6. absent optional properties
def _get_rp(qname: str) -> str:
    return f"<rp:GetResourceProperty>{qname}</rp:GetResourceProperty>"


async def test_an_absent_optional_resource_property_is_an_empty_response(gw, consumer) -> None:
    """A property the RP document declares with minOccurs=0 exists (b-2.xsd
    SubscriptionManagerRP Filter/SubscriptionPolicy, NotificationProducerRP TopicExpression):
    asked for while absent, it is an empty GetResourcePropertyResponse, not
    InvalidResourcePropertyQNameFault; an undeclared QName still is that fault."""
    addr = sub_address(await call(gw.url, subscribe_body(consumer.url)))  # no Filter/Policy
    # no br:Topic
    reg = await register(gw.url, publisher="http://127.0.0.1:9/p", device_id=None, topics=())
    cases = [
        (addr, "wsnt:Filter"),
        (addr, "wsnt:SubscriptionPolicy"),
        (gw.url, "wsnt:TopicExpression"),  # empty topic set
        (reg, "br:Topic"),
    ]
    for url, qn in cases:
        r = await call(
            url, _get_rp(qn), action=wsdl_action("GetResourceProperty", "GetResourceProperty")
        )
        assert r.status == 200, (url, qn, r.text)
        assert r.body.tag == f"{{{RP}}}GetResourcePropertyResponse", r.text
        assert len(r.body) == 0, r.text
        assert r.header("Action") == wsdl_action(
            "GetResourceProperty", "GetResourceProperty", "output"
        )
    r = await call(addr, _get_rp("wsnt:NoSuchProperty"))
    assert r.fault_name == "InvalidResourcePropertyQNameFault", r.text


# ---------------------------------------------------------- 7. br:Topic @dialect, 8. br:Demand
async def test_br_topic_takes_the_2004_lowercase_dialect_like_topic_expression(gw) -> None:
    """The 2004 drafts' lowercase @dialect is accepted on wsnt:TopicExpression; br:Topic
    (the same TopicExpressionType) accepts it too, with the same meaning."""
    r = await call(
        gw.url,
        "<br:RegisterPublisher><br:PublisherReference><wsa:Address>http://127.0.0.1:9/p"
        f'</wsa:Address></br:PublisherReference><br:Topic dialect="{CONCRETE}" '
        'xmlns:tns="urn:test">tns:a/b</br:Topic></br:RegisterPublisher>',
    )
    assert r.status == 200, r.text
    reg = epr_address(r, "br:PublisherRegistrationReference/wsa:Address")
    r = await call(reg, notify_body(("tns:a/b", reading(1))))
    assert r.status == 202, r.text
    r = await call(reg, notify_body(("tns:other", reading(1))))
    assert r.fault_name == "TopicNotSupportedFault", r.text  # the registered topic counts
    r = await call(reg, _get_rp("br:Topic"))
    [t] = r.body
    assert t.get("Dialect") == CONCRETE and t.text == "tns:a/b", r.text


def _register_with_demand(value: str) -> str:
    """A RegisterPublisher whose br:Demand has the literal text `value`."""
    return (
        "<br:RegisterPublisher><br:PublisherReference><wsa:Address>http://127.0.0.1:9/p"
        f"</wsa:Address></br:PublisherReference><br:Demand>{value}</br:Demand>"
        "</br:RegisterPublisher>"
    )


@pytest.mark.parametrize("value", ["yes", "TRUE", "", "2"])
async def test_br_demand_that_is_not_an_xsd_boolean_is_refused(gw, value: str) -> None:
    r = await call(gw.url, _register_with_demand(value))
    assert r.fault_name == "PublisherRegistrationRejectedFault", r.text
    assert "xsd:boolean" in r.text
    assert gw.state.registrations == {}  # nothing registered


@pytest.mark.parametrize(("value", "demand"), [(" true ", True), ("1", True), ("0", False)])
async def test_br_demand_lexical_forms(gw, value: str, demand: bool) -> None:
    r = await call(gw.url, _register_with_demand(value))
    assert r.status == 200, r.text
    [reg] = gw.state.registrations.values()
    assert reg.demand is demand
