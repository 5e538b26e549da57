"""The producer's operations and every fault over real HTTP, both SOAP versions; hostile
input (malformed, truncated, oversized, slow) gets a fault or an HTTP 4xx, never a crash or a
hang; the management secret."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable

import aiohttp
import pytest
from devtest import (
    BF,
    DT,
    FAULT_ACTION,
    S11,
    S12,
    SIMPLE,
    WSNT,
    Client,
    Consumer,
    DeviceProcess,
    body_child,
    envelope,
    fault_name,
    header_action,
    parse,
    subscribe_body,
)

Consumers = Callable[..., Awaitable[Consumer]]
C = "http://127.0.0.1:9/c"
XPATH = "http://www.w3.org/TR/1999/REC-xpath-19991116"
GRP = (
    '<wsrf-rp:GetResourceProperty xmlns:wsrf-rp="http://docs.oasis-open.org/wsrf/rp-2" '
    'xmlns:wstop="http://docs.oasis-open.org/wsn/t-1" xmlns:edge="urn:wsn-edge">{}'
    "</wsrf-rp:GetResourceProperty>"
)

MC = f'<wsnt:MessageContent Dialect="{XPATH}">1</wsnt:MessageContent>'
PP = '<wsnt:ProducerProperties Dialect="x">1</wsnt:ProducerProperties>'
SUBSCRIBE_FAULTS = [
    (subscribe_body(C, extra_filter=MC), "InvalidFilterFault"),
    (subscribe_body(C, extra_filter=PP), "InvalidFilterFault"),
    (subscribe_body(C, extra_filter='<o:Geo xmlns:o="urn:o"/>'), "InvalidFilterFault"),
    (
        subscribe_body(C, topic=None).replace(
            "</wsnt:ConsumerReference>",
            '</wsnt:ConsumerReference><wsnt:Filter><wsnt:TopicExpression Dialect="http://docs.oasis-'
            'open.org/wsn/t-1/TopicExpression/Full">dt:*</wsnt:TopicExpression></wsnt:Filter>',
        ),
        "TopicExpressionDialectUnknownFault",
    ),
    (subscribe_body(C, topic="dt:pressure_of_mars"), "TopicNotSupportedFault"),
    (
        subscribe_body(C, topic="o:temperature").replace(
            "<wsnt:TopicExpression ", '<wsnt:TopicExpression xmlns:o="urn:other" '
        ),
        "TopicNotSupportedFault",
    ),
    (subscribe_body(C, topic="undeclared:temperature"), "InvalidTopicExpressionFault"),
    (subscribe_body(C, topic="dt:temperature/child"), "InvalidTopicExpressionFault"),
    (
        subscribe_body(C, policy='<o:MaxRate xmlns:o="urn:o">3</o:MaxRate>'),
        "UnrecognizedPolicyRequestFault",
    ),
    (subscribe_body(C, itt="2001-01-01T00:00:00Z"), "UnacceptableInitialTerminationTimeFault"),
    (subscribe_body(C, itt="-PT5M"), "UnacceptableInitialTerminationTimeFault"),
    (subscribe_body(C, itt="P1000D"), "UnacceptableInitialTerminationTimeFault"),
    (subscribe_body(C, itt="next tuesday"), "UnacceptableInitialTerminationTimeFault"),
    (subscribe_body("ftp://x/"), "SubscribeCreationFailedFault"),
]


@pytest.mark.parametrize("version", [11, 12])
@pytest.mark.parametrize(("body", "fault"), SUBSCRIBE_FAULTS)
async def test_subscribe_faults(client: Client, body: str, fault: str, version: int) -> None:
    st, data = await client.soap(body, version=version)
    assert st == (400 if version == 12 else 500), data
    assert fault_name(data) == fault, data
    assert header_action(data) == FAULT_ACTION
    root = parse(data)
    assert root.tag == f"{{{S12 if version == 12 else S11}}}Envelope"
    assert root.find(f".//{{{BF}}}Timestamp") is not None
    assert (await client.status())["subscriptions"] == 0


async def test_invalid_filter_fault_names_the_filters(client: Client) -> None:
    _, data = await client.soap(subscribe_body(C, extra_filter=MC + PP))
    detail = parse(data).find(f".//{{{WSNT}}}InvalidFilterFault")
    assert detail is not None
    names = []
    for uf in detail.findall(f"{{{WSNT}}}UnknownFilter"):
        p, _, local = (uf.text or "").partition(":")
        names.append((uf.nsmap[p], local))
    assert names == [(WSNT, "MessageContent"), (WSNT, "ProducerProperties")]


async def test_get_current_message_and_faults(client: Client) -> None:
    gcm = (
        '<wsnt:GetCurrentMessage><wsnt:Topic Dialect="{}">{}</wsnt:Topic></wsnt:GetCurrentMessage>'
    )
    st, data = await client.soap(gcm.format(SIMPLE, "dt:temperature"))
    assert fault_name(data) == "NoCurrentMessageOnTopicFault"
    await client.sample("temperature")
    st, data = await client.soap(gcm.format(SIMPLE, "dt:temperature"), version=11)
    assert st == 200
    r = body_child(parse(data))
    assert r.tag == f"{{{WSNT}}}GetCurrentMessageResponse"
    assert r[0].tag == "{urn:wsn-edge:reading}Reading"
    assert (await client.soap(gcm.format("urn:x", "dt:temperature")))[1].find(
        b"TopicExpressionDialectUnknownFault"
    ) > 0
    assert (
        fault_name((await client.soap(gcm.format(SIMPLE, "dt:nope")))[1])
        == "TopicNotSupportedFault"
    )
    assert (
        fault_name((await client.soap(gcm.format(SIMPLE, "zz:temperature")))[1])
        == "InvalidTopicExpressionFault"
    )
    two = gcm.format(SIMPLE, "dt:temperature").replace(
        "</wsnt:GetCurrentMessage>",
        f'<wsnt:Topic Dialect="{SIMPLE}">dt:humidity</wsnt:Topic></wsnt:GetCurrentMessage>',
    )
    assert fault_name((await client.soap(two))[1]) == "MultipleTopicsSpecifiedFault"


async def test_get_resource_property(client: Client) -> None:
    st, data = await client.soap(GRP.format("wsnt:TopicExpression"))
    assert st == 200
    tes = body_child(parse(data)).findall(f"{{{WSNT}}}TopicExpression")
    names = []
    for te in tes:
        assert te.get("Dialect") == SIMPLE
        p, _, local = (te.text or "").partition(":")
        assert te.nsmap[p] == DT
        names.append(local)
    assert names == ["temperature", "humidity", "light", "pressure", "voltage", "heartbeat"]
    st, data = await client.soap(GRP.format("wsnt:TopicExpressionDialect"), version=11)
    assert body_child(parse(data))[0].text == SIMPLE
    st, data = await client.soap(GRP.format("wsnt:FixedTopicSet"))
    assert body_child(parse(data))[0].text == "true"
    st, data = await client.soap(GRP.format("wstop:TopicSet"))
    assert body_child(parse(data))[0].find(f"{{{DT}}}heartbeat") is not None
    st, data = await client.soap(GRP.format("edge:Status"))
    assert body_child(parse(data))[0].findtext("{urn:wsn-edge}gatewayDropped") == "0"
    st, data = await client.soap(GRP.format("wsnt:Bogus"))
    assert fault_name(data) == "InvalidResourcePropertyQNameFault"


async def test_create_pullpoint_limit(start_device) -> None:  # type: ignore[no-untyped-def]
    dev = start_device(limits={"max_pullpoints": 1})
    async with aiohttp.ClientSession() as s:
        cl = Client(dev, s)
        assert (await cl.soap("<wsnt:CreatePullPoint/>"))[0] == 200
        st, data = await cl.soap("<wsnt:CreatePullPoint/>")
        assert st == 500 and fault_name(data) == "UnableToCreatePullPointFault"


async def test_unknown_operation_and_endpoint(client: Client) -> None:
    st, data = await client.soap("<wsnt:Renew/>")
    assert st == 400 and fault_name(data) == "ActionNotSupported"
    st, data = await client.soap("<wsnt:Renew/>", "/wsn/subscriptions/nope")
    assert fault_name(data) == "ResourceUnknownFault"
    st, data = await client.soap("<wsnt:GetMessages/>", "/wsn/pullpoints/nope")
    assert fault_name(data) == "ResourceUnknownFault"
    st, _ = await client.soap("<x/>", "/elsewhere")
    assert st == 404
    async with client.s.get(client.dev.producer) as r:
        assert r.status == 405


BAD_BODIES = [
    (b"<s:Envelope", 400, b"malformed XML"),
    (b'<?xml version="1.0"?><!DOCTYPE e [<!ENTITY x "y">]><e>&x;</e>', 400, b"DOCTYPE"),
    (b"<e>&lol;</e>", 400, b"undeclared entity"),
    (b"<a>" * 40 + b"</a>" * 40, 400, b"deeper"),
    (b"<r>" + b"<e/>" * 400 + b"</r>", 400, b"elements"),
    (b"\xff\xfe<\x00r\x00/\x00>\x00", 400, b"malformed"),
    (b"<html><body>hi</body></html>", 400, b"not a SOAP Envelope"),
    (b"", 400, b"no root"),
    (b'<e:Envelope xmlns:e="urn:soap-99"><e:Body/></e:Envelope>', 500, b"VersionMismatch"),
]


@pytest.mark.parametrize(("data", "status", "word"), BAD_BODIES)
async def test_bad_bodies(client: Client, data: bytes, status: int, word: bytes) -> None:
    st, out = await client.soap(data)
    assert st == status and word in out, out
    st, _ = await client.soap(GRP.format("wsnt:FixedTopicSet"))
    assert st == 200  # still serving


async def test_must_understand_header(client: Client) -> None:
    st, data = await client.soap(
        "<wsnt:CreatePullPoint/>", headers='<x:Sec xmlns:x="urn:x" s:mustUnderstand="true"/>'
    )
    assert st == 500 and fault_name(data) == "MustUnderstand"


async def _raw(
    dev: DeviceProcess, payload: bytes, close_write: bool = False, timeout: float = 10
) -> bytes:
    r, w = await asyncio.open_connection("127.0.0.1", dev.port)
    w.write(payload)
    await w.drain()
    if close_write:
        w.write_eof()
    data = await asyncio.wait_for(r.read(), timeout)
    w.close()
    return data


async def test_oversized_truncated_slow_and_garbage(client: Client) -> None:
    dev = client.dev
    big = envelope("<wsnt:CreatePullPoint/>" + "<!-- pad -->" * 1000)
    st, data = await client.soap(big)
    assert st == 413 and b"limit" in data
    huge = b"POST /wsn/producer HTTP/1.1\r\nContent-Length: 100000000\r\n\r\n" + b"x" * 1000
    assert (await _raw(dev, huge)).startswith(b"HTTP/1.1 413")
    # truncated body: the client stops sending and closes its side
    trunc = b"POST /wsn/producer HTTP/1.1\r\nContent-Length: 500\r\n\r\n<s:Envelope"
    out = await _raw(dev, trunc, close_write=True)
    assert out.startswith(b"HTTP/1.1 400") and b"truncated" in out
    # slow client: half a request and silence -> 408 after the read timeout (2 s in tests)
    t0 = asyncio.get_running_loop().time()
    out = await _raw(dev, b"POST /wsn/producer HTTP/1.1\r\nContent-Le")
    assert out.startswith(b"HTTP/1.1 408")
    assert asyncio.get_running_loop().time() - t0 < 8
    assert (await _raw(dev, b"HELLO\r\n\r\n")).startswith(b"HTTP/1.1 400")
    assert (await _raw(dev, b"GET / HTTP/1.1\r\n" + b"X: " + b"a" * 5000 + b"\r\n\r\n")).startswith(
        b"HTTP/1.1 431"
    )
    # issue 13: two conflicting Content-Length headers -> 400 at once, not 408 after the timeout
    # (the answer tells them apart, not the clock: reading the 50 would end in the 408 above,
    # reading the 5 in an answer about "hello", not about Content-Length)
    two = b"POST /wsn/producer HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 50\r\n\r\nhello"
    out = await _raw(dev, two)
    assert out.startswith(b"HTTP/1.1 400") and b"Content-Length" in out, out
    chunked = b"POST /wsn/producer HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    assert (await _raw(dev, chunked)).startswith(b"HTTP/1.1 411")
    # several slow clients at once do not stop the others
    slow = [asyncio.ensure_future(_raw(dev, b"POST /wsn/producer HTTP/1.1\r\n")) for _ in range(3)]
    await asyncio.sleep(0.2)
    st, _ = await client.soap(GRP.format("wsnt:FixedTopicSet"))
    assert st == 200
    for f in slow:
        assert (await f).startswith(b"HTTP/1.1 408")


async def test_management_secret(start_device, consumers: Consumers) -> None:  # type: ignore[no-untyped-def]
    dev = start_device(secret="s3cret")
    c = await consumers()
    async with aiohttp.ClientSession() as s:
        cl = Client(dev, s)
        async with s.get(dev.base + "/status") as r:
            assert r.status == 401
        async with s.post(dev.base + "/admin/sample") as r:
            assert r.status == 401
        async with s.get(dev.base + "/status", headers={"Authorization": "Bearer wrong"}) as r:
            assert r.status == 401
        st = await cl.status("Bearer s3cret")
        assert st["device_id"] == "dev-test"
        basic = "Basic " + base64.b64encode(b"admin:s3cret").decode()
        assert (await cl.status(basic))["subscriptions"] == 0
        # Subscribe stays open; the subscription's id is its capability
        sub = await cl.subscribe(c.url, raw=True)
        assert await cl.sample("temperature", auth=basic) == 1
        await c.next()
        st_, _ = await cl.soap("<wsnt:PauseSubscription/>", sub)
        assert st_ == 200


async def test_expect_100_continue(client: Client) -> None:
    body = envelope("<wsnt:CreatePullPoint/>")
    r, w = await asyncio.open_connection("127.0.0.1", client.dev.port)
    w.write(
        b"POST /wsn/producer HTTP/1.1\r\nContent-Type: application/soap+xml\r\n"
        b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    await w.drain()
    interim = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 5)
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    w.write(body)
    await w.drain()
    final = await asyncio.wait_for(r.read(), 5)
    w.close()
    assert final.startswith(b"HTTP/1.1 200 ") and b"CreatePullPointResponse" in final
