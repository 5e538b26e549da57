"""PullPoint (WS-BaseNotification 1.3 §5): CreatePullPoint, GetMessages, DestroyPullPoint,
Notify into a pull point, pull point as a subscription's consumer, edge:Wait long poll."""

from __future__ import annotations

import asyncio
import time

from gwtest import (
    EDGE,
    WSA,
    WSNT,
    call,
    notify_body,
    reading,
    subscribe_body,
    topic_filter,
    validate,
)


async def _create(gw) -> str:  # type: ignore[no-untyped-def]
    r = await call(
        gw.url,
        "<wsnt:CreatePullPoint/>",
        action="http://docs.oasis-open.org/wsn/bw-2/CreatePullPoint/CreatePullPointRequest",
    )
    assert r.status == 200, r.text
    validate(r.body)
    assert (
        r.header("Action")
        == "http://docs.oasis-open.org/wsn/bw-2/CreatePullPoint/CreatePullPointResponse"
    )
    addr = r.body.findtext(f"{{{WSNT}}}PullPoint/{{{WSA}}}Address")
    assert addr and "/wsn/pullpoints/" in addr
    assert r.body.findtext(f".//{{{EDGE}}}ResourceId") == addr.rsplit("/", 1)[1]
    return addr


def _vals(reply) -> list[str]:  # type: ignore[no-untyped-def]
    return [
        m.findtext(".//{urn:wsn-edge:reading}value") or ""
        for m in reply.body.findall(f"{{{WSNT}}}NotificationMessage")
    ]


async def test_pullpoint_as_consumer_in_process(gw):
    pp = await _create(gw)
    r = await call(gw.url, subscribe_body(pp, topic_filter("tns:t")))
    assert r.status == 200, r.text
    sid = r.body.findtext(f".//{{{EDGE}}}ResourceId")
    assert gw.state.subscriptions[sid].pullpoint == pp.rsplit("/", 1)[1]
    await call(gw.url, notify_body(*[("tns:t", reading(v)) for v in range(5)]))
    r = await call(
        pp,
        "<wsnt:GetMessages><wsnt:MaximumNumber>2</wsnt:MaximumNumber></wsnt:GetMessages>",
        action="http://docs.oasis-open.org/wsn/bw-2/PullPoint/GetMessagesRequest",
    )
    assert r.status == 200, r.text
    validate(r.body)
    assert r.header("Action") == "http://docs.oasis-open.org/wsn/bw-2/PullPoint/GetMessagesResponse"
    assert _vals(r) == ["0", "1"]
    m = r.body.find(f"{{{WSNT}}}NotificationMessage")
    assert m is not None and m.find(f"{{{WSNT}}}SubscriptionReference") is not None
    r = await call(pp, "<wsnt:GetMessages/>")  # no MaximumNumber: everything left
    assert _vals(r) == ["2", "3", "4"]
    r = await call(pp, "<wsnt:GetMessages/>")  # returned messages were removed
    assert _vals(r) == []
    validate(r.body)


async def test_notify_posted_to_the_pullpoint_address(gw):
    pp = await _create(gw)
    r = await call(pp, notify_body(("tns:x", reading(9))))
    assert r.status == 202
    r = await call(
        pp, "<wsnt:GetMessages><wsnt:MaximumNumber>0</wsnt:MaximumNumber></wsnt:GetMessages>"
    )
    assert _vals(r) == []  # MaximumNumber 0 returns nothing and keeps the message
    r = await call(pp, "<wsnt:GetMessages/>")
    assert _vals(r) == ["9"]
    topic = r.body.findtext(f".//{{{WSNT}}}Topic")
    assert topic == "tns:x"  # exactly as received


async def test_long_poll_wait(gw):
    pp = await _create(gw)
    t0 = time.monotonic()
    r = await call(pp, "<wsnt:GetMessages><edge:Wait>PT0.3S</edge:Wait></wsnt:GetMessages>")
    assert r.status == 200 and _vals(r) == []
    # it ends at its Wait, not at the 60 s --max-wait cap: 10 s leaves a busy machine room
    assert 0.25 < time.monotonic() - t0 < 10

    async def later() -> None:
        await asyncio.sleep(0.2)
        await call(pp, notify_body(("tns:x", reading(1))))

    task = asyncio.create_task(later())
    t0 = time.monotonic()
    r = await call(pp, "<wsnt:GetMessages><edge:Wait>PT30S</edge:Wait></wsnt:GetMessages>")
    await task
    assert _vals(r) == ["1"]
    assert time.monotonic() - t0 < 15  # answered when the Notify came, not after the Wait


async def test_destroy_pullpoint(gw):
    pp = await _create(gw)
    r = await call(gw.url, subscribe_body(pp))
    sid = r.body.findtext(f".//{{{EDGE}}}ResourceId")
    r = await call(
        pp,
        "<wsnt:DestroyPullPoint/>",
        action="http://docs.oasis-open.org/wsn/bw-2/PullPoint/DestroyPullPointRequest",
    )
    assert r.status == 200, r.text
    validate(r.body)
    assert (
        r.header("Action")
        == "http://docs.oasis-open.org/wsn/bw-2/PullPoint/DestroyPullPointResponse"
    )
    assert sid not in gw.state.subscriptions  # its feeding subscription went with it
    for body in ("<wsnt:GetMessages/>", "<wsnt:DestroyPullPoint/>"):
        r = await call(pp, body)
        assert r.fault_name == "ResourceUnknownFault"
        validate(r.fault)


async def test_pullpoint_faults(make_gateway):
    gw = await make_gateway(max_pullpoints=1)
    pp = await _create(gw)
    r = await call(gw.url, "<wsnt:CreatePullPoint/>")
    assert r.fault_name == "UnableToCreatePullPointFault"
    validate(r.fault)
    r = await call(
        pp, "<wsnt:GetMessages><wsnt:MaximumNumber>-1</wsnt:MaximumNumber></wsnt:GetMessages>"
    )
    assert r.fault_name == "UnableToGetMessagesFault"
    validate(r.fault)
    r = await call(pp, "<wsnt:GetMessages><edge:Wait>forever</edge:Wait></wsnt:GetMessages>")
    assert r.fault_name == "UnableToGetMessagesFault"
    # raw delivery into a pull point cannot be honoured
    raw = "<wsnt:SubscriptionPolicy><wsnt:UseRaw/></wsnt:SubscriptionPolicy>"
    r = await call(gw.url, subscribe_body(pp, extra=raw))
    assert r.fault_name == "UnsupportedPolicyRequestFault"


async def test_pullpoint_overflow_drops_oldest(make_gateway):
    gw = await make_gateway(pullpoint_max_messages=3)
    pp = await _create(gw)
    await call(gw.url, subscribe_body(pp))
    for v in range(5):
        await call(gw.url, notify_body(("tns:t", reading(v))))
    r = await call(pp, "<wsnt:GetMessages/>")
    assert _vals(r) == ["2", "3", "4"]
    assert gw.state.pullpoints[pp.rsplit("/", 1)[1]].dropped == 2


async def test_pullpoint_addressed_by_reference_parameter_on_the_broker_url(gw):
    pp = await _create(gw)
    rid = pp.rsplit("/", 1)[1]
    hdr = f'<edge:ResourceId wsa:IsReferenceParameter="true">{rid}</edge:ResourceId>'
    r = await call(gw.url, notify_body(("tns:x", reading(5))), headers=hdr)
    assert r.status == 202
    r = await call(gw.url, "<wsnt:GetMessages/>", headers=hdr)
    assert _vals(r) == ["5"]
    bogus = '<edge:ResourceId wsa:IsReferenceParameter="true">nope</edge:ResourceId>'
    r = await call(gw.url, "<wsnt:GetMessages/>", headers=bogus)
    assert r.fault_name == "ResourceUnknownFault"
    # a broker operation sent to a resource address is not that resource's operation: the
    # resource exists, the action is not supported (WS-Addressing 1.0 SOAP Binding §6.4.1)
    r = await call(pp, subscribe_body("http://127.0.0.1:1/x"))
    assert r.fault_name == "ProblemAction"
    validate(r.fault)
