"""The landing line (gateway/landing_record.py, docs/design.md "Landing zone"): identity
(device_id of a registered device, gateway_id, event_time), a payload with only the
namespace declarations it uses, and the documented caps, each said in the line."""

from __future__ import annotations

import asyncio
import json
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gwtest import (
    A_REG,
    DT,
    WSNT,
    call,
    envelope,
    notify_body,
    reading,
    register_body,
)
from lxml import etree

from gateway import landing
from gateway.cli import build_parser, config_from_args
from gateway.config import Config
from gateway.landing_record import (
    MAX_FIELD_CHARS,
    MAX_FIELDS,
    MAX_PAYLOAD_CHARS,
    minimal_namespaces,
)

NOW = datetime(2026, 11, 24, 5, 0, 0, 123456, tzinfo=UTC)


def _payload(body_xml: str) -> Any:
    """The first wsnt:Message child of a Notify carried in the tests' SOAP envelope (which
    declares s12, wsa, wsnt, br, edge, rp, rl, wstop, xsi)."""
    env = envelope(notify_body(("tns:t", body_xml)))
    doc = etree.fromstring(env, etree.XMLParser(huge_tree=True))
    return doc.find(f".//{{{WSNT}}}Message")[0]


def _rec(payload: Any, **kw: Any) -> dict[str, Any]:
    return json.loads(landing.record("id1", NOW, None, None, None, payload, **kw))  # type: ignore[no-any-return]


def _lines(d: Path) -> list[dict[str, Any]]:
    out = []
    for p in sorted(d.glob("landing-*.jsonl")):
        out.extend(json.loads(x) for x in p.read_text().splitlines())
    return out


def test_payload_keeps_only_the_declarations_it_uses() -> None:
    pl = _payload(reading(21.5, "sim-01"))
    assert len(pl.nsmap) > 5  # the envelope declares many prefixes ...
    rec = _rec(pl)
    # ... and the payload keeps only its own: byte for byte what the device sent
    assert rec["payload"] == reading(21.5, "sim-01")
    # a QName in text (here a topic expression naming wstop: and wsnt:) keeps its
    # declarations, and an attribute in a namespace keeps its prefix's
    qn = '<x:Sub xmlns:x="urn:x" xsi:nil="false"><x:t>wstop:a/wsnt:b</x:t></x:Sub>'
    out = _rec(_payload(qn))["payload"]
    root = etree.fromstring(out.encode())
    assert set(root.nsmap) == {"x", "xsi", "wstop", "wsnt"}, out
    assert root.nsmap["wsnt"] == WSNT
    # the meaning is unchanged: same names, same text, same attributes
    orig = _payload(qn)
    assert [(e.tag, e.text, dict(e.attrib)) for e in root.iter()] == [
        (e.tag, e.text, dict(e.attrib)) for e in orig.iter()
    ]


def test_default_namespace_kept_only_when_an_element_uses_it() -> None:
    assert minimal_namespaces('<a xmlns="urn:d" xmlns:p="urn:p"><b/></a>') == (
        '<a xmlns="urn:d"><b/></a>'
    )
    assert minimal_namespaces('<p:a xmlns="urn:d" xmlns:p="urn:p"><p:b/></p:a>') == (
        '<p:a xmlns:p="urn:p"><p:b/></p:a>'
    )
    # a value that looks like a declaration is a value, not a declaration
    tricky = '<p:a xmlns:p="urn:p" v=" xmlns:q=&quot;urn:q&quot;"/>'
    assert minimal_namespaces(tricky) == tricky


def test_event_time_is_the_payloads_time_in_utc() -> None:
    def ev(t: str) -> str | None:
        return _rec(_payload(f'<r:R xmlns:r="urn:r"><r:time>{t}</r:time></r:R>'))["event_time"]  # type: ignore[no-any-return]

    assert ev("2026-11-21T05:00:00Z") == "2026-11-21T05:00:00.000000Z"
    assert ev("2026-11-21T05:00:00.25Z") == "2026-11-21T05:00:00.250000Z"
    assert ev("2026-11-21T07:00:00+02:00") == "2026-11-21T05:00:00.000000Z"
    assert ev("2026-11-21T05:00:00") == "2026-11-21T05:00:00.000000Z"  # no offset: UTC
    assert ev("2026-13-21T05:00:00Z") is None  # not a date: null, the field stays as sent
    assert ev("yesterday") is None
    assert _rec(_payload("<plain>7</plain>"))["event_time"] is None


def test_caps_are_said_in_the_line() -> None:
    many = " ".join(f'a{i}="{i}"' for i in range(MAX_FIELDS + 500))
    rec = _rec(_payload(f'<x:P xmlns:x="urn:x" {many}/>'))
    assert len(rec["fields"]) == MAX_FIELDS and rec["fields_truncated"] is True
    # the first ones are kept, exactly
    assert rec["fields"]["a0"] == "0" and rec["fields"][f"a{MAX_FIELDS - 1}"] == str(MAX_FIELDS - 1)
    big = "v" * (MAX_FIELD_CHARS + 10)
    rec = _rec(_payload(f'<x:P xmlns:x="urn:x"><x:small>1</x:small><x:big>{big}</x:big></x:P>'))
    assert rec["fields"] == {"small": "1"} and rec["fields_truncated"] is True
    huge = "w" * (MAX_PAYLOAD_CHARS + 1)
    rec = _rec(_payload(f'<x:P xmlns:x="urn:x">{huge}</x:P>'))
    assert rec["payload"] is None and rec["payload_omitted"] > MAX_PAYLOAD_CHARS
    # within the caps, neither key appears
    rec = _rec(_payload(reading(1)))
    assert "fields_truncated" not in rec and "payload_omitted" not in rec


async def test_big_records_are_built_off_the_event_loop_and_equal_inline_ones() -> None:
    builder = landing.RecordBuilder("gw")
    many = " ".join(f'a{i}="{i}"' for i in range(2000))
    pl = _payload(f'<x:P xmlns:x="urn:x" {many}/>')
    small = _payload(reading(3))
    items = [landing.Item("i1", None, None, None, pl), landing.Item("i2", None, None, None, small)]
    got = await builder.lines(NOW, items)
    assert builder.offloaded == 1  # the big one only
    assert [i for i, _ in got] == ["i1", "i2"]
    assert got[0][1] == landing.record("i1", NOW, None, None, None, pl, gateway_id="gw")
    assert got[1][1] == landing.record("i2", NOW, None, None, None, small, gateway_id="gw")
    builder.close()


def test_gateway_id_defaults_to_the_host_name() -> None:
    assert Config().gateway_id == socket.gethostname()
    assert config_from_args(build_parser().parse_args([])).gateway_id == socket.gethostname()
    cfg = config_from_args(build_parser().parse_args(["--gateway-id", "site-7"]))
    assert cfg.gateway_id == "site-7"


async def test_device_id_is_the_registered_devices_across_addresses(make_gateway, tmp_path):
    gw = await make_gateway(data_dir=tmp_path / "d", landing_max_age=30)
    # a device registers, its address changes (DHCP), it registers again from there
    regs = []
    for port in (9001, 9002):
        body = register_body(publisher=f"http://127.0.0.1:{port}/wsn/producer", device_id="sim-01")
        r = await call(gw.url, body, action=A_REG)
        assert r.status == 200, r.text
        regs.append(r.body.findtext(".//{http://www.w3.org/2005/08/addressing}Address"))
    for reg in regs:
        r = await call(reg, notify_body(("dt:temperature", reading(1, "sim-01")), nsdecl=DT))
        assert r.status == 202, r.text
    # to the broker itself, naming the registered address as its producer
    r = await call(
        gw.url,
        notify_body(("tns:t", reading(2, "sim-01")), producer="http://127.0.0.1:9002/wsn/producer"),
    )
    assert r.status == 202, r.text
    # an unregistered producer has no device id, whatever its payload says
    r = await call(
        gw.url, notify_body(("tns:t", reading(3, "sim-01")), producer="http://127.0.0.1:1/p")
    )
    assert r.status == 202, r.text
    await gw.stop()
    recs = _lines(tmp_path / "d" / "landing")
    assert [(r["producer"], r["device_id"]) for r in recs] == [
        ("http://127.0.0.1:9001/wsn/producer", "sim-01"),
        ("http://127.0.0.1:9002/wsn/producer", "sim-01"),
        ("http://127.0.0.1:9002/wsn/producer", "sim-01"),
        ("http://127.0.0.1:1/p", None),
    ]
    assert recs[0]["topic_path"] == "sim-01/temperature"
    assert {r["gateway_id"] for r in recs} == {socket.gethostname()}
    await asyncio.sleep(0)
