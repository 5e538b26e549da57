"""SOAP 1.1/1.2 binding, WS-Addressing, hostile and malformed input (gateway.wire.soap,
gateway.http)."""

from __future__ import annotations

import aiohttp
from gwtest import (
    NSDECL,
    SOAP11,
    SOAP12,
    WSA,
    call,
    envelope,
    post,
    subscribe_body,
    validate,
)

A_SUB = "http://docs.oasis-open.org/wsn/bw-2/NotificationProducer/SubscribeRequest"
A_SUB_RESP = "http://docs.oasis-open.org/wsn/bw-2/NotificationProducer/SubscribeResponse"


async def test_soap12_response_in_soap12_with_wsa_headers(gw, consumer):
    mid = "urn:uuid:11111111-2222-3333-4444-555555555555"
    r = await call(gw.url, subscribe_body(consumer.url), 12, action=A_SUB, message_id=mid)
    assert r.status == 200
    assert r.headers["Content-Type"].startswith("application/soap+xml")
    assert r.root is not None and r.root.tag == f"{{{SOAP12}}}Envelope"
    assert r.header("Action") == A_SUB_RESP
    assert r.header("RelatesTo") == mid
    assert (r.header("MessageID") or "").startswith("urn:uuid:")
    validate(r.body)


async def test_soap11_response_in_soap11(gw, consumer):
    r = await call(gw.url, subscribe_body(consumer.url), 11, action=A_SUB)
    assert r.status == 200
    assert r.headers["Content-Type"].startswith("text/xml")
    assert r.root is not None and r.root.tag == f"{{{SOAP11}}}Envelope"
    assert r.header("Action") == A_SUB_RESP
    validate(r.body)


async def test_missing_and_duplicated_headers_are_tolerated(gw, consumer):
    # no header at all: dispatch on the body
    data = (
        f'<s:Envelope xmlns:s="{SOAP11}" {NSDECL}><s:Body>{subscribe_body(consumer.url)}'
        "</s:Body></s:Envelope>"
    ).encode()
    r = await post(gw.url, data, 11)
    assert r.status == 200 and not r.is_fault
    # duplicated Action/MessageID (seen from real clients): first one wins
    hdr = (
        f"<wsa:Action>{A_SUB}</wsa:Action><wsa:Action>{A_SUB}</wsa:Action>"
        "<wsa:MessageID>urn:uuid:a</wsa:MessageID><wsa:MessageID>urn:uuid:b</wsa:MessageID>"
        f"<wsa:To>{gw.url}</wsa:To><wsa:To>{gw.url}</wsa:To>"
        f"<wsa:ReplyTo><wsa:Address>{WSA}/anonymous</wsa:Address></wsa:ReplyTo>"
    )
    r = await call(gw.url, subscribe_body(consumer.url), 12, headers=hdr)
    assert r.status == 200 and not r.is_fault
    assert r.header("RelatesTo") == "urn:uuid:a"


async def test_fault_codes_and_actions_both_versions(gw):
    body = "<wsnt:Subscribe/>"  # no ConsumerReference
    r12 = await call(gw.url, body, 12)
    assert r12.status == 400  # SOAP 1.2 HTTP binding: Sender -> 400
    code = r12.body.find(f"{{{SOAP12}}}Code/{{{SOAP12}}}Value")
    assert code is not None and code.text is not None and code.text.endswith(":Sender")
    sub = r12.body.find(f"{{{SOAP12}}}Code/{{{SOAP12}}}Subcode/{{{SOAP12}}}Value")
    assert (
        sub is not None
        and sub.text is not None
        and sub.text.endswith("SubscribeCreationFailedFault")
    )
    assert r12.header("Action") == "http://docs.oasis-open.org/wsn/fault"
    assert r12.fault_name == "SubscribeCreationFailedFault"
    validate(r12.fault)
    r11 = await call(gw.url, body, 11)
    assert r11.status == 500
    fc = r11.body.find("faultcode")
    assert fc is not None and fc.text is not None and fc.text.endswith(":Client")
    assert r11.body.findtext("faultstring")
    assert r11.fault_name == "SubscribeCreationFailedFault"
    validate(r11.fault)
    ts = r11.fault.find("{http://docs.oasis-open.org/wsrf/bf-2}Timestamp")
    assert ts is not None and ts.text


async def test_non_soap_garbage_is_http_400_with_text(gw):
    xml = {"Content-Type": "text/xml"}  # a SOAP media type; others get 415 (test_hostile)
    async with aiohttp.ClientSession() as s:
        async with s.post(gw.url, data=b"hello, broker", headers=xml) as r:
            assert r.status == 400
            assert "not XML" in await r.text()
        async with s.post(gw.url, data=b"<notAnEnvelope/>", headers=xml) as r:
            assert r.status == 400
            assert "not a SOAP envelope" in await r.text()
        async with s.post(gw.url, data=b"", headers=xml) as r:
            assert r.status == 400
        async with s.get(gw.url) as r:
            assert r.status == 405


async def test_unknown_envelope_namespace_is_version_mismatch(gw):
    r = await post(
        gw.url, b'<e:Envelope xmlns:e="urn:not-soap"><e:Body><x/></e:Body></e:Envelope>', 11
    )
    assert r.status == 500 and r.root is not None
    fc = r.body.find("faultcode")
    assert fc is not None and fc.text is not None and "VersionMismatch" in fc.text


async def test_empty_body_and_must_understand(gw):
    r = await post(gw.url, f'<s:Envelope xmlns:s="{SOAP12}"><s:Body/></s:Envelope>'.encode())
    assert r.status == 400 and r.is_fault
    data = envelope(
        "<wsnt:Subscribe/>", 12, headers='<x:Sec xmlns:x="urn:sec" s:mustUnderstand="true"/>'
    )
    r = await post(gw.url, data)
    assert r.is_fault
    code = r.body.find(f"{{{SOAP12}}}Code/{{{SOAP12}}}Value")
    assert code is not None and code.text is not None and code.text.endswith("MustUnderstand")


BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol9 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
]>
<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope"><s:Body>
<wsnt:Subscribe xmlns:wsnt="http://docs.oasis-open.org/wsn/b-2">&lol9;</wsnt:Subscribe>
</s:Body></s:Envelope>"""

XXE = b"""<?xml version="1.0"?>
<!DOCTYPE s:Envelope [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body>
<wsnt:Subscribe xmlns:wsnt="http://docs.oasis-open.org/wsn/b-2">&xxe;</wsnt:Subscribe>
</s:Body></s:Envelope>"""


async def test_billion_laughs_and_xxe_get_a_clear_fault(gw):
    r = await post(gw.url, BILLION_LAUGHS, 12)
    assert r.is_fault and r.status == 400
    reason = r.body.findtext(f"{{{SOAP12}}}Reason/{{{SOAP12}}}Text") or ""
    assert "DOCTYPE" in reason
    r = await post(gw.url, XXE, 11)
    assert r.is_fault and r.status == 500
    assert "DOCTYPE" in (r.body.findtext("faultstring") or "")
    assert "root:" not in r.text


async def test_request_size_limit_413(make_gateway, consumer):
    gw = await make_gateway(max_request_bytes=2000)
    big = subscribe_body(consumer.url, extra="<x:pad xmlns:x='urn:x'>" + "a" * 5000 + "</x:pad>")
    r = await call(gw.url, big)
    assert r.status == 413
    assert "limit" in r.text

    # chunked upload without Content-Length is cut off too
    async def gen():  # type: ignore[no-untyped-def]
        yield envelope(big)

    async with (
        aiohttp.ClientSession() as s,
        s.post(gw.url, data=gen(), headers={"Content-Type": "application/soap+xml"}) as resp,
    ):
        assert resp.status == 413
    # and the broker still works
    r = await call(gw.url, subscribe_body(consumer.url))
    assert r.status == 200


async def test_unknown_operation_and_misdirected_manager_op(gw):
    r = await call(gw.url, '<x:Frobnicate xmlns:x="urn:x"/>')
    # WS-Addressing 1.0 SOAP Binding §6.4.1: the endpoint exists, the operation does not
    assert r.is_fault and r.fault_name == "ProblemAction"
    r = await call(gw.url, "<wsnt:Unsubscribe/>")
    assert r.is_fault and r.fault_name == "ResourceUnknownFault"
    validate(r.fault)


async def test_wsa_2004_headers_with_must_understand_are_understood(gw, consumer):
    old = "http://schemas.xmlsoap.org/ws/2004/08/addressing"
    hdr = (
        f'<a:Action xmlns:a="{old}" s:mustUnderstand="1">{A_SUB}</a:Action>'
        f'<a:MessageID xmlns:a="{old}">urn:uuid:old-style</a:MessageID>'
    )
    r = await call(gw.url, subscribe_body(consumer.url), 12, headers=hdr)
    assert r.status == 200, r.text
    assert r.header("RelatesTo") == "urn:uuid:old-style"


async def test_empty_or_blank_http_body_is_400_not_soap(gw):
    # nothing, or only whitespace, is no envelope at all: 400 with a reason, not a fault
    for data in (b"", b" \r\n\t \x0b\x0c"):
        r = await post(gw.url, data)
        assert r.status == 400 and not r.is_fault, (data, r.status, r.text)
        assert "empty request body" in r.text
    # one non-blank byte is parsed (and refused as not XML)
    r = await post(gw.url, b" x ")
    assert r.status == 400 and "not XML" in r.text, r.text
