"""Issue 11 on the device: every message it sends validates against the official OASIS schemas
(b-2, t-1, bf-2, r-2, ws-addr shipped in onvif-zeep-async) and carries the wsa:Action that the
WS-Addressing default-action pattern gives for its operation in the official WSDL
(tests/wsdl_actions.py derives them; nothing here is taken from the device's constants).

Covered: every operation the device answers (its response and, for the faults it answers
with, the fault action rule shared with the gateway), the pushes it sends to consumers, and the
RegisterPublisher / SetTerminationTime requests and the Notify it sends to its gateway."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable

import aiohttp
from devtest import (
    BF,
    RD,
    WSA,
    WSNT,
    Client,
    Consumer,
    DeviceProcess,
    FakeGateway,
    body_child,
    envelope,
    fault_name,
    header_action,
    parse,
)
from lxml import etree

from tests.wsdl_actions import WSDL_DIR, action

Consumers = Callable[..., Awaitable[Consumer]]
WSTOP = "http://docs.oasis-open.org/wsn/t-1"
WSRF_R = "http://docs.oasis-open.org/wsrf/r-2"
RP = "http://docs.oasis-open.org/wsrf/rp-2"
RL = "http://docs.oasis-open.org/wsrf/rl-2"
SIMPLE = "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Simple"
# gateway/wire/faults.py: faults of the WSRF specifications get the WSRF fault action
WSRF_FAULT_ACTION = "http://docs.oasis-open.org/wsrf/fault"


@functools.cache
def _schema() -> etree.XMLSchema:
    doc = f"""<xsd:schema xmlns:xsd="http://www.w3.org/2001/XMLSchema"
      targetNamespace="urn:wsn-edge:test-device-schemas">
      <xsd:import namespace="{WSNT}" schemaLocation="{(WSDL_DIR / "b-2.xsd").as_uri()}"/>
      <xsd:import namespace="{WSRF_R}" schemaLocation="{(WSDL_DIR / "r-2.xsd").as_uri()}"/>
    </xsd:schema>"""
    return etree.XMLSchema(etree.fromstring(doc.encode(), base_url=str(WSDL_DIR) + "/"))


def validate(el: etree._Element) -> int:
    """Validate `el` against the official schemas; for an element of a namespace without a
    shipped schema (rp-2, rl-2, br-2, our own), validate its children. -> elements checked."""
    ns = etree.QName(el).namespace
    if ns in (WSNT, BF, WSRF_R, WSTOP, WSA):
        copy = etree.fromstring(etree.tostring(el))
        s = _schema()
        assert s.validate(copy), f"{s.error_log}\n{etree.tostring(el).decode()}"
        return 1
    if el.find(f"{{{WSA}}}Address") is not None:
        # an EndpointReferenceType element of a schema we lack (br:PublisherReference):
        # checked as the wsa:EndpointReference it is
        copy = etree.fromstring(etree.tostring(el))
        copy.tag = f"{{{WSA}}}EndpointReference"
        return validate(copy)
    return sum(validate(c) for c in el if isinstance(c.tag, str))


def check_message(data: bytes, expected_action: str) -> etree._Element:
    """The envelope's wsa headers and Body content are schema-valid, its action the WSDL's."""
    root = parse(data)
    assert header_action(data) == expected_action, (header_action(data), expected_action)
    header = root[0]
    for h in header:
        if etree.QName(h).namespace == WSA:
            validate(h)
    b = body_child(root)
    if etree.QName(b).localname == "Fault":
        detail = b.find("{*}Detail")
        if detail is None:
            detail = b.find("detail")
        assert detail is not None and len(detail)
        assert validate(detail[0]) == 1  # the BaseFault detail itself is checked
    elif etree.QName(b).namespace in (WSNT, WSRF_R):
        assert validate(b) == 1
    else:
        validate(b)
    return b


def out(port_type: str, op: str) -> str:
    return action(port_type, op, "output")


async def test_every_answer_is_schema_valid_with_the_wsdl_action(
    client: Client, consumers: Consumers
) -> None:
    c = await consumers()
    for version in (12, 11):
        st, data = await client.soap(
            f"<wsnt:Subscribe><wsnt:ConsumerReference><wsa:Address>{c.url}</wsa:Address>"
            f'</wsnt:ConsumerReference><wsnt:Filter><wsnt:TopicExpression Dialect="{SIMPLE}">'
            "dt:temperature</wsnt:TopicExpression></wsnt:Filter><wsnt:InitialTerminationTime>"
            "PT1H</wsnt:InitialTerminationTime></wsnt:Subscribe>",
            version=version,
        )
        assert st == 200
        b = check_message(data, out("NotificationProducer", "Subscribe"))
        sub = b.findtext(f"{{{WSNT}}}SubscriptionReference/{{{WSA}}}Address") or ""

        calls: list[tuple[str, str, str]] = [
            (
                sub,
                "<wsnt:Renew><wsnt:TerminationTime>PT2H</wsnt:TerminationTime></wsnt:Renew>",
                out("SubscriptionManager", "Renew"),
            ),
            (
                sub,
                "<wsnt:PauseSubscription/>",
                out("PausableSubscriptionManager", "PauseSubscription"),
            ),
            (
                sub,
                "<wsnt:ResumeSubscription/>",
                out("PausableSubscriptionManager", "ResumeSubscription"),
            ),
        ]
        for prop in (
            "wsnt:ConsumerReference",
            "wsnt:Filter",
            "wsnt:CreationTime",
            "wsnt:SubscriptionPolicy",
            "wsrf-rl:TerminationTime",
            "wsrf-rl:CurrentTime",
        ):
            calls.append(
                (
                    sub,
                    f'<wsrf-rp:GetResourceProperty xmlns:wsrf-rp="{RP}" '
                    f'xmlns:wsrf-rl="{RL}">{prop}</wsrf-rp:GetResourceProperty>',
                    out("GetResourceProperty", "GetResourceProperty"),
                )
            )
        for prop in (
            "wsnt:TopicExpression",
            "wsnt:TopicExpressionDialect",
            "wsnt:FixedTopicSet",
            "wstop:TopicSet",
        ):
            calls.append(
                (
                    "/wsn/producer",
                    f'<wsrf-rp:GetResourceProperty xmlns:wsrf-rp="{RP}" '
                    f'xmlns:wstop="{WSTOP}">{prop}</wsrf-rp:GetResourceProperty>',
                    out("GetResourceProperty", "GetResourceProperty"),
                )
            )
        for path, body, want in calls:
            st, data = await client.soap(body, path, version=version)
            assert st == 200, data
            check_message(data, want)

        await client.sample("temperature")
        gcm = (
            f'<wsnt:GetCurrentMessage><wsnt:Topic Dialect="{SIMPLE}">dt:temperature'
            "</wsnt:Topic></wsnt:GetCurrentMessage>"
        )
        st, data = await client.soap(gcm, version=version)
        assert st == 200
        check_message(data, out("NotificationProducer", "GetCurrentMessage"))

        st, data = await client.soap("<wsnt:CreatePullPoint/>", version=version)
        assert st == 200
        pp = (
            check_message(data, out("CreatePullPoint", "CreatePullPoint")).findtext(
                f"{{{WSNT}}}PullPoint/{{{WSA}}}Address"
            )
            or ""
        )
        await client.subscribe(pp, version=version, topic="dt:humidity")
        await client.sample("humidity")
        st, data = await client.soap("<wsnt:GetMessages/>", pp, version=version)
        assert st == 200
        msgs = check_message(data, out("PullPoint", "GetMessages"))
        assert len(msgs.findall(f"{{{WSNT}}}NotificationMessage")) == 1
        st, data = await client.soap("<wsnt:DestroyPullPoint/>", pp, version=version)
        assert st == 200
        check_message(data, out("PullPoint", "DestroyPullPoint"))

        st, data = await client.soap("<wsnt:Unsubscribe/>", sub, version=version)
        assert st == 200
        check_message(data, out("SubscriptionManager", "Unsubscribe"))

        # a fault of WS-Resource (r-2) has the WSRF fault action, as at the gateway
        st, data = await client.soap("<wsnt:Unsubscribe/>", sub, version=version)
        assert fault_name(data) == "ResourceUnknownFault"
        check_message(data, WSRF_FAULT_ACTION)
        # a WS-BaseNotification fault keeps the WS-N fault action
        st, data = await client.soap(gcm.replace("dt:temperature", "dt:nothing"), version=version)
        assert fault_name(data) == "TopicNotSupportedFault"
        check_message(data, "http://docs.oasis-open.org/wsn/fault")


async def test_pause_resume_accept_the_old_and_the_wsdl_request_actions(
    client: Client, consumers: Consumers
) -> None:
    # issue 11 point 1: old clients send .../SubscriptionManager/PauseSubscriptionRequest
    c = await consumers()
    sub = await client.subscribe(c.url, raw=True)
    old = "http://docs.oasis-open.org/wsn/bw-2/SubscriptionManager/"
    for op in ("PauseSubscription", "ResumeSubscription"):
        for req_action in (
            old + op + "Request",
            action("PausableSubscriptionManager", op, "input"),
        ):
            data = envelope(f"<wsnt:{op}/>", 12, req_action)
            st, resp = await client.soap(data, sub)
            assert st == 200, resp
            check_message(resp, out("PausableSubscriptionManager", op))


async def test_destroy_terminates_a_subscription_at_once(
    client: Client, consumers: Consumers
) -> None:
    # issue 11 point 3: WS-BaseNotification 1.3 §6.4 / WS-ResourceLifetime 1.2 §4.1
    c = await consumers()
    sub = await client.subscribe(c.url, raw=True)
    destroy = f'<wsrf-rl:Destroy xmlns:wsrf-rl="{RL}"/>'
    data = envelope(destroy, 12, action("ImmediateResourceTermination", "Destroy", "input"))
    st, resp = await client.soap(data, sub)
    assert st == 200, resp
    b = check_message(resp, out("ImmediateResourceTermination", "Destroy"))
    assert b.tag == f"{{{RL}}}DestroyResponse"
    assert (await client.status())["subscriptions"] == 0
    await client.sample("temperature")
    assert await c.nothing()
    st, resp = await client.soap(destroy, sub)
    assert st == 400 and fault_name(resp) == "ResourceUnknownFault"
    check_message(resp, WSRF_FAULT_ACTION)


async def test_unprefixed_simple_topic_is_in_no_namespace(client: Client) -> None:
    # issue 11 point 9: WS-Topics 1.3 §10, an unqualified name is in the ad-hoc namespace
    st, data = await client.soap(
        "<wsnt:Subscribe><wsnt:ConsumerReference><wsa:Address>http://127.0.0.1:9/c"
        f"</wsa:Address></wsnt:ConsumerReference><wsnt:Filter><wsnt:TopicExpression "
        f'Dialect="{SIMPLE}">temperature</wsnt:TopicExpression></wsnt:Filter></wsnt:Subscribe>'
    )
    assert st == 400 and fault_name(data) == "TopicNotSupportedFault", data
    check_message(data, "http://docs.oasis-open.org/wsn/fault")
    assert (await client.status())["subscriptions"] == 0


async def test_pushes_are_schema_valid_notify(client: Client, consumers: Consumers) -> None:
    c = await consumers()
    await client.subscribe(c.url, topic="dt:temperature")
    await client.subscribe(c.url, raw=True, topic="dt:temperature", version=11)
    await client.sample("temperature")
    got = [await c.next(), await c.next()]
    for _, data in got:
        b = check_message(data, action("NotificationConsumer", "Notify"))
        if b.tag == f"{{{WSNT}}}Notify":
            nm = b.find(f"{{{WSNT}}}NotificationMessage")
            assert nm is not None and nm.find(f"{{{WSNT}}}Topic") is not None
        else:
            assert b.tag == f"{{{RD}}}Reading"


class RecordingGateway(FakeGateway):
    """The stand-in gateway of the link tests, also keeping every raw request it gets."""

    def __init__(self) -> None:
        super().__init__()
        self.raw: list[bytes] = []

    async def _broker(self, request):  # type: ignore[no-untyped-def]
        self.raw.append(await request.read())
        return await super()._broker(request)

    async def _registration(self, request):  # type: ignore[no-untyped-def]
        self.raw.append(await request.read())
        return await super()._registration(request)


async def test_requests_to_the_gateway_are_schema_valid_with_the_wsdl_action(
    start_device: Callable[..., DeviceProcess],
) -> None:
    gw = RecordingGateway()
    await gw.start()
    try:
        dev = start_device(
            gateway=gw.url, registration_ttl_s=6, renew_period_s=1, gateway_retry_s=0.3
        )
        for _ in range(100):
            if gw.renewals:
                break
            await asyncio.sleep(0.1)
        async with aiohttp.ClientSession() as s:
            cl = Client(dev, s)
            await cl.subscribe(gw.reg_url("r1"), topic="dt:temperature")
            await cl.sample("temperature")
            await asyncio.wait_for(gw.notifications.get(), 10)
        want = {
            f"{{{'http://docs.oasis-open.org/wsn/br-2'}}}RegisterPublisher": action(
                "RegisterPublisher", "RegisterPublisher", "input"
            ),
            f"{{{RL}}}SetTerminationTime": action(
                "ScheduledResourceTermination", "SetTerminationTime", "input"
            ),
            f"{{{WSNT}}}Notify": action("NotificationConsumer", "Notify"),
        }
        seen = set()
        for data in gw.raw:
            tag = body_child(parse(data)).tag
            check_message(data, want[tag])
            seen.add(tag)
        assert seen == set(want)
    finally:
        await gw.stop()
