"""Issue 11 acceptance: for every operation the gateway answers, a request with the input
action the official WSDL gives gets a response whose wsa:Action is the WSDL's output action,
and every message the gateway sends (responses, faults, the Notify it pushes to consumers,
the requests it sends a demand-based publisher) validates against the official schemas
(b-2.xsd, bf-2.xsd, r-2.xsd, t-1.xsd, ws-addr.xsd), headers included.

The operations are the WSDL's (tests/wsdl_actions.py: bw-2.wsdl's portTypes plus the
WSRF/brw-2 names documented there); OPERATION_CASES must cover every one of them, so an
operation added to the table without a case here fails `test_every_wsdl_operation_has_a_case`.
The gateway is a real aiohttp server on 127.0.0.1 with a real SQLite file (conftest `gw`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from gwproducer import TestProducer
from gwtest import (
    BF,
    CONCRETE,
    SOAP11,
    SOAP12,
    WSA,
    WSNT,
    WSTOP,
    Consumer,
    call,
    epr_address,
    notify_body,
    reading,
    sub_address,
    subscribe_body,
    topic_filter,
    validate,
    validate_epr,
)
from lxml import etree

from tests.wsdl_actions import official_actions

WSN_FAULT = "http://docs.oasis-open.org/wsn/fault"
WSRF_FAULT = "http://docs.oasis-open.org/wsrf/fault"
WSA_FAULT = "http://www.w3.org/2005/08/addressing/fault"
WSA_HEADERS = ("Action", "MessageID", "RelatesTo", "To", "FaultDetail")


SCHEMA_NAMESPACES = (WSNT, WSA, WSTOP, BF, "http://docs.oasis-open.org/wsrf/r-2")


def validate_element(el: etree._Element) -> None:
    """Validate `el` with the official schemas. An element of a namespace with no schema in
    the package (br-2, rp-2, rl-2) is not checked itself; if it is an EPR (has wsa:Address:
    br:PublisherRegistrationReference, br:ConsumerReference) it is validated as a
    wsa:EndpointReference, otherwise its children are checked."""
    qn = etree.QName(el)
    if qn == etree.QName(WSA, "FaultDetail"):
        # WS-Addressing 1.0 SOAP Binding §6 (SOAP 1.1 fault detail header): ws-addr.xsd
        # declares no FaultDetail element, only what goes in it (wsa:ProblemAction, ...)
        for c in el:
            validate_element(c)
    elif qn.namespace in SCHEMA_NAMESPACES:
        validate(el)
    elif el.find(f"{{{WSA}}}Address") is not None:
        validate_epr(el)
    elif el.find(f"{{{BF}}}Timestamp") is not None:
        # a br-2/rp-2/rl-2 fault: each is declared as an extension of wsrf-bf:BaseFaultType
        # adding nothing, so it must be valid as a wsrf-bf:BaseFault
        copy = etree.fromstring(etree.tostring(el))
        copy.tag = f"{{{BF}}}BaseFault"
        validate(copy)
    else:
        for c in el:
            if isinstance(c.tag, str):
                validate_element(c)


def validate_message(root: etree._Element) -> None:
    """Every header the gateway wrote in the wsa namespace and the Body child (or, for a
    fault, its detail) validate against the official schemas."""
    env = etree.QName(root).namespace
    assert env in (SOAP11, SOAP12)
    header = root.find(f"{{{env}}}Header")
    if header is not None:
        for h in header:
            qn = etree.QName(h)
            if qn.namespace == WSA:
                assert qn.localname in WSA_HEADERS, qn
                validate_element(h)
    body = root.find(f"{{{env}}}Body")
    assert body is not None and len(body) == 1
    el = body[0]
    if etree.QName(el).localname == "Fault":
        detail = el.find(f"{{{SOAP12}}}Detail") if env == SOAP12 else el.find("detail")
        if detail is not None:
            for d in detail:
                validate_element(d)
    else:
        validate_element(el)


# ---------------------------------------------------------------- the resources a case needs
@dataclass
class World:
    gw: Any
    consumer: Consumer
    subscription: str = ""
    pullpoint: str = ""
    registration: str = ""

    async def subscribe(self) -> str:
        r = await call(self.gw.url, subscribe_body(self.consumer.url, topic_filter("tns:t")))
        assert r.status == 200, r.text
        return sub_address(r)

    async def create_pullpoint(self) -> str:
        r = await call(self.gw.url, "<wsnt:CreatePullPoint/>")
        assert r.status == 200, r.text
        return epr_address(r, "wsnt:PullPoint/wsa:Address")

    async def register(self) -> str:
        r = await call(
            self.gw.url,
            "<br:RegisterPublisher><br:PublisherReference><wsa:Address>"
            "http://127.0.0.1:9/p</wsa:Address></br:PublisherReference>"
            f'<br:Topic Dialect="{CONCRETE}" xmlns:tns="urn:test">tns:t</br:Topic>'
            "</br:RegisterPublisher>",
        )
        assert r.status == 200, r.text
        return epr_address(r, "br:PublisherRegistrationReference/wsa:Address")


Target = Callable[[World], Awaitable[str]]


async def _broker(w: World) -> str:
    return str(w.gw.url)


async def _subscription(w: World) -> str:
    return await w.subscribe()


async def _pullpoint(w: World) -> str:
    return await w.create_pullpoint()


async def _registration(w: World) -> str:
    return await w.register()


async def _broker_with_current(w: World) -> str:
    r = await call(w.gw.url, notify_body(("tns:t", reading(1))))
    assert r.status == 202, r.text
    return str(w.gw.url)


RENEW = "<wsnt:Renew><wsnt:TerminationTime>PT5M</wsnt:TerminationTime></wsnt:Renew>"
SET_TT = (
    "<rl:SetTerminationTime><rl:RequestedLifetimeDuration>PT5M"
    "</rl:RequestedLifetimeDuration></rl:SetTerminationTime>"
)
GET_RP = "<rp:GetResourceProperty>wsrf-rl:CurrentTime</rp:GetResourceProperty>"
GET_RP_NS = 'xmlns:wsrf-rl="http://docs.oasis-open.org/wsrf/rl-2"'

# (portType, operation) -> [(case id, where to send it, request body)]
OPERATION_CASES: dict[tuple[str, str], list[tuple[str, Target, str]]] = {
    ("NotificationProducer", "Subscribe"): [
        ("broker", _broker, subscribe_body("http://127.0.0.1:9/c", topic_filter("tns:t")))
    ],
    ("NotificationProducer", "GetCurrentMessage"): [
        (
            "broker",
            _broker_with_current,
            f'<wsnt:GetCurrentMessage><wsnt:Topic Dialect="{CONCRETE}" xmlns:tns="urn:test">'
            "tns:t</wsnt:Topic></wsnt:GetCurrentMessage>",
        )
    ],
    ("NotificationConsumer", "Notify"): [
        ("broker", _broker, notify_body(("tns:t", reading(1)))),
        ("registration", _registration, notify_body(("tns:t", reading(1)))),
    ],
    ("CreatePullPoint", "CreatePullPoint"): [("broker", _broker, "<wsnt:CreatePullPoint/>")],
    ("PullPoint", "GetMessages"): [("pullpoint", _pullpoint, "<wsnt:GetMessages/>")],
    ("PullPoint", "DestroyPullPoint"): [("pullpoint", _pullpoint, "<wsnt:DestroyPullPoint/>")],
    ("PullPoint", "Notify"): [("pullpoint", _pullpoint, notify_body(("tns:t", reading(1))))],
    ("SubscriptionManager", "Renew"): [("subscription", _subscription, RENEW)],
    ("SubscriptionManager", "Unsubscribe"): [
        ("subscription", _subscription, "<wsnt:Unsubscribe/>")
    ],
    ("PausableSubscriptionManager", "Renew"): [("subscription", _subscription, RENEW)],
    ("PausableSubscriptionManager", "Unsubscribe"): [
        ("subscription", _subscription, "<wsnt:Unsubscribe/>")
    ],
    ("PausableSubscriptionManager", "PauseSubscription"): [
        ("subscription", _subscription, "<wsnt:PauseSubscription/>")
    ],
    ("PausableSubscriptionManager", "ResumeSubscription"): [
        ("subscription", _subscription, "<wsnt:ResumeSubscription/>")
    ],
    ("GetResourceProperty", "GetResourceProperty"): [
        (
            "broker",
            _broker,
            "<rp:GetResourceProperty>wsnt:FixedTopicSet</rp:GetResourceProperty>",
        ),
        ("subscription", _subscription, GET_RP),
        ("registration", _registration, GET_RP),
    ],
    ("ImmediateResourceTermination", "Destroy"): [
        ("subscription", _subscription, "<rl:Destroy/>"),
        ("registration", _registration, "<rl:Destroy/>"),
    ],
    ("ScheduledResourceTermination", "SetTerminationTime"): [
        ("subscription", _subscription, SET_TT),
        ("registration", _registration, SET_TT),
    ],
    ("RegisterPublisher", "RegisterPublisher"): [
        (
            "broker",
            _broker,
            "<br:RegisterPublisher><br:PublisherReference><wsa:Address>http://127.0.0.1:9/p"
            "</wsa:Address></br:PublisherReference></br:RegisterPublisher>",
        )
    ],
    ("PublisherRegistrationManager", "DestroyRegistration"): [
        ("registration", _registration, "<br:DestroyRegistration/>")
    ],
}
# wsrf-rl:CurrentTime needs its prefix in scope of the GetResourceProperty element
for _k, _cases in OPERATION_CASES.items():
    OPERATION_CASES[_k] = [
        (i, t, b.replace("<rp:GetResourceProperty>", f"<rp:GetResourceProperty {GET_RP_NS}>"))
        for i, t, b in _cases
    ]

CASES = [
    pytest.param(pt, op, target, body, id=f"{pt}.{op}@{where}")
    for (pt, op), cases in sorted(OPERATION_CASES.items())
    for where, target, body in cases
]


def test_every_wsdl_operation_has_a_case() -> None:
    assert set(OPERATION_CASES) == set(official_actions())


@pytest.mark.parametrize("version", [12, 11])
@pytest.mark.parametrize(("port_type", "operation", "target", "body"), CASES)
async def test_response_action_is_the_wsdl_output_and_every_message_validates(
    gw, consumer, version: int, port_type: str, operation: str, target: Target, body: str
) -> None:
    actions = official_actions()[(port_type, operation)]
    w = World(gw, consumer)
    url = await target(w)
    mid = "urn:uuid:11111111-2222-3333-4444-555555555555"
    r = await call(url, body, version=version, action=actions.input, message_id=mid)
    if actions.output is None:  # one-way: accepted, nothing sent back
        assert r.status == 202 and r.text == "", r.text
        return
    assert r.status == 200, r.text
    assert r.root is not None
    assert not r.is_fault, r.text
    assert r.header("Action") == actions.output, (r.header("Action"), actions.output)
    assert r.header("RelatesTo") == mid
    validate_message(r.root)


# ---------------------------------------------------------------- faults
FAULT_CASES = [
    # (id, target, body, expected fault action)
    ("ResourceUnknown", _broker, "<wsnt:Unsubscribe/>", WSRF_FAULT),
    (
        "InvalidTopicExpression",
        _broker,
        subscribe_body("http://127.0.0.1:9/c", topic_filter("tns:*", CONCRETE)),
        WSN_FAULT,
    ),
    (
        "InvalidResourcePropertyQName",
        _subscription,
        "<rp:GetResourceProperty>wsnt:Nope</rp:GetResourceProperty>",
        WSRF_FAULT,
    ),
    ("ActionNotSupported", _subscription, "<wsnt:GetMessages/>", WSA_FAULT),
    (
        "PublisherRegistrationRejected",
        _broker,
        "<br:RegisterPublisher><br:Demand>yes</br:Demand></br:RegisterPublisher>",
        WSN_FAULT,
    ),
]


@pytest.mark.parametrize("version", [12, 11])
@pytest.mark.parametrize(
    ("target", "body", "action"), [pytest.param(t, b, a, id=i) for i, t, b, a in FAULT_CASES]
)
async def test_faults_validate_and_carry_the_fault_action(
    gw, consumer, version: int, target: Target, body: str, action: str
) -> None:
    url = await target(World(gw, consumer))
    r = await call(url, body, version=version, action="urn:some-action")
    assert r.is_fault, r.text
    assert r.header("Action") == action
    validate_message(r.root)  # type: ignore[arg-type]


# ---------------------------------------------------------------- what the gateway sends
@pytest.mark.parametrize("raw", [False, True])
async def test_the_notify_pushed_to_a_consumer_has_the_wsdl_action_and_validates(
    gw, consumer, raw: bool
) -> None:
    notify = official_actions()[("NotificationConsumer", "Notify")].input
    extra = "<wsnt:SubscriptionPolicy><wsnt:UseRaw/></wsnt:SubscriptionPolicy>" if raw else ""
    r = await call(gw.url, subscribe_body(consumer.url, topic_filter("tns:t"), extra))
    assert r.status == 200, r.text
    assert (await call(gw.url, notify_body(("tns:t", reading(1))))).status == 202
    await consumer.wait_for(1, wrapped=not raw)
    env = consumer.received[0]
    assert env.findtext(f".//{{{WSA}}}Action") == notify
    if raw:
        body = env.find(f"{{{etree.QName(env).namespace}}}Body")
        assert body is not None and etree.QName(body[0]).localname == "Reading"
        for h in env.find(f"{{{etree.QName(env).namespace}}}Header"):  # type: ignore[union-attr]
            if etree.QName(h).namespace == WSA:
                validate(h)
    else:
        validate_message(env)
        assert etree.QName(consumer.bodies()[0]) == etree.QName(WSNT, "Notify")


async def test_requests_to_a_demand_based_publisher_have_wsdl_actions_and_validate(
    gw, consumer, producer
) -> None:
    """WS-BrokeredNotification demand-based publishing: the broker subscribes to the
    publisher and pauses/resumes/unsubscribes as demand comes and goes. Each request it sends
    carries the input action of the operation in bw-2.wsdl and validates."""
    r = await call(
        gw.url,
        f"<br:RegisterPublisher><br:PublisherReference><wsa:Address>{producer.address}"
        "</wsa:Address></br:PublisherReference>"
        f'<br:Topic Dialect="{CONCRETE}" xmlns:tns="urn:test">tns:d</br:Topic>'
        "<br:Demand>true</br:Demand></br:RegisterPublisher>",
    )
    assert r.status == 200, r.text
    reg = epr_address(r, "br:PublisherRegistrationReference/wsa:Address")
    await _wait_for_op(producer, "Subscribe")  # paused at once: nobody wants tns:d yet
    sub = sub_address(await call(gw.url, subscribe_body(consumer.url, topic_filter("tns:d"))))
    await _wait_for_op(producer, "ResumeSubscription")
    await call(sub, "<wsnt:Unsubscribe/>")
    await _wait_for_op(producer, "PauseSubscription", after="ResumeSubscription")
    await call(reg, "<br:DestroyRegistration/>")
    await _wait_for_op(producer, "Unsubscribe")
    assert {"Subscribe", "PauseSubscription", "ResumeSubscription", "Unsubscribe"} <= set(
        _ops(producer)
    ), _ops(producer)
    # the input action of the operation in a bw-2.wsdl portType that has it (Renew and
    # Unsubscribe are in both SubscriptionManager and PausableSubscriptionManager)
    manager_types = ("NotificationProducer", "SubscriptionManager", "PausableSubscriptionManager")
    for env, op in zip(producer.received, _ops(producer), strict=True):
        validate_message(env)
        allowed = {
            a.input for (pt, o), a in official_actions().items() if o == op and pt in manager_types
        }
        assert env.findtext(f".//{{{WSA}}}Action") in allowed, (op, allowed)


def _ops(pub: TestProducer) -> list[str]:
    out = []
    for e in pub.received:
        body = e.find(f"{{{etree.QName(e).namespace}}}Body")
        assert body is not None
        out.append(etree.QName(body[0]).localname)
    return out


async def _wait_for_op(pub: TestProducer, op: str, after: str | None = None) -> None:
    for _ in range(200):
        ops = _ops(pub)
        if op in (ops[ops.index(after) + 1 :] if after in ops else [] if after else ops):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the publisher got {_ops(pub)}, waiting for {op}")
