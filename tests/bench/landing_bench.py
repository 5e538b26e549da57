"""Micro-benchmark of the landing line (gateway/landing_record.py): microseconds per line
and bytes per line for a device's reading in the device's own SOAP envelope, and the cost
of a hostile payload element with many attributes (issue 13), each next to the record as
it was built before (kept below as `record_before`, for the A/B in one run).

    python tests/bench/landing_bench.py [--n 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lxml import etree

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gateway import landing  # noqa: E402
from gateway.landing_record import Item, _line, format_received_at  # noqa: E402

# what the device writes (device/wsn/core/soap.py envelope(), ns.DECLS, reading.py); a
# copy, since the device's modules import `micropython`
DEVICE_ENVELOPE = (
    '<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope"'
    ' xmlns:wsa="http://www.w3.org/2005/08/addressing"'
    ' xmlns:wsnt="http://docs.oasis-open.org/wsn/b-2"'
    ' xmlns:wstop="http://docs.oasis-open.org/wsn/t-1"'
    ' xmlns:br="http://docs.oasis-open.org/wsn/br-2"'
    ' xmlns:wsrf-bf="http://docs.oasis-open.org/wsrf/bf-2"'
    ' xmlns:wsrf-r="http://docs.oasis-open.org/wsrf/r-2"'
    ' xmlns:wsrf-rp="http://docs.oasis-open.org/wsrf/rp-2"'
    ' xmlns:wsrf-rl="http://docs.oasis-open.org/wsrf/rl-2"'
    ' xmlns:edge="urn:wsn-edge"'
    ' xmlns:dt="urn:wsn-edge:device-topics">'
    "<s:Header><wsa:Action>http://docs.oasis-open.org/wsn/bw-2/NotificationConsumer/Notify"
    "</wsa:Action></s:Header><s:Body>{body}</s:Body></s:Envelope>"
)
SIMPLE = "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Simple"
READING = (
    '<rd:Reading xmlns:rd="urn:wsn-edge:reading" device="sim-01"><rd:value>21.5</rd:value>'
    "<rd:unit>Cel</rd:unit><rd:time>2026-11-24T05:00:00Z</rd:time></rd:Reading>"
)


def record_before(
    msg_id: str,
    received_at: datetime,
    producer: str | None,
    topic_ns: str | None,
    topic_path: str | None,
    payload: Any,
) -> str:
    """The landing record as built before issues 13/15 (for the A/B only)."""
    qn = etree.QName(payload)
    fields: dict[str, str] = {}
    for el in payload.iter():
        if not isinstance(el.tag, str):
            continue
        for k, v in el.attrib.items():
            fields.setdefault(etree.QName(k).localname, str(v))
        if len(el) == 0 and el is not payload:
            fields.setdefault(etree.QName(el).localname, (el.text or "").strip())
    if len(payload) == 0 and (payload.text or "").strip():
        fields.setdefault(qn.localname, (payload.text or "").strip())
    obj = {
        "id": msg_id,
        "received_at": received_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "producer": producer,
        "topic_namespace": topic_ns,
        "topic_path": topic_path,
        "message_type": f"{{{qn.namespace}}}{qn.localname}" if qn.namespace else qn.localname,
        "fields": fields,
        "payload": etree.tostring(payload, encoding="unicode", with_tail=False),
    }
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def device_payload() -> Any:
    """The reading payload as parsed out of a device's wrapped Notify."""
    body = (
        "<wsnt:Notify><wsnt:NotificationMessage><wsnt:Topic "
        f'Dialect="{SIMPLE}">dt:temperature</wsnt:Topic><wsnt:Message>'
        + READING
        + "</wsnt:Message></wsnt:NotificationMessage></wsnt:Notify>"
    )
    doc = etree.fromstring(DEVICE_ENVELOPE.format(body=body).encode())
    return doc.find(".//{http://docs.oasis-open.org/wsn/b-2}Message")[0]


def hostile_payload(n: int) -> Any:
    attrs = " ".join(f'a{i}="{i}"' for i in range(n))
    env = DEVICE_ENVELOPE.format(body=f'<x:P xmlns:x="urn:x" {attrs}/>')
    parser = etree.XMLParser(huge_tree=True, resolve_entities=False)
    return etree.fromstring(env.encode(), parser)[1][0]


def per_call(fn: Any, reps: int) -> float:
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t) / reps)
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000, help="reps for the reading line")
    a = ap.parse_args()
    now = datetime.now(UTC)
    pl = device_payload()
    producer = "http://127.0.0.1:32905/wsn/producer"
    args = ("0" * 32, now, producer, "urn:wsn-edge:devices", "sim-01/temperature", pl)
    before = record_before(*args)
    after = landing.record(*args, device_id="sim-01", gateway_id="gw-bench")
    item = Item("0" * 32, producer, "urn:wsn-edge:devices", "sim-01/temperature", pl, "sim-01")
    when = format_received_at(now)
    us_before = per_call(lambda: record_before(*args), a.n)
    us_after = per_call(lambda: _line(item, when, "gw-bench", True), a.n)
    # what gateway.notify hands over: the payload already serialized (for storage and
    # delivery), so the line neither serializes it again nor walks it the long way
    xml = etree.tostring(pl, encoding="unicode", with_tail=False)
    item_xml = item._replace(payload_xml=xml)
    assert _line(item_xml, when, "gw-bench", True) == _line(item, when, "gw-bench", True)
    us_broker = per_call(lambda: _line(item_xml, when, "gw-bench", True), a.n)
    builder = landing.RecordBuilder("gw-bench")

    async def via_builder() -> float:
        t = time.perf_counter()
        for _ in range(a.n):
            await builder.lines(now, [item])
        return (time.perf_counter() - t) / a.n * 1e6

    us_builder = asyncio.run(via_builder())
    print("landing line for a device reading (device envelope, wrapped Notify):")
    print(f"  before: {us_before:7.2f} us/line  {len(before.encode()):5d} bytes/line")
    print(
        f"  after:  {us_after:7.2f} us/line  {len(after.encode()):5d} bytes/line "
        f"(RecordBuilder.lines on the loop: {us_builder:.2f} us; the line now also carries "
        "device_id, gateway_id, event_time)"
    )
    print(f"  speed-up {us_before / us_after:.2f}x; bytes {len(after) / len(before):.2f}x")
    print(f"  the broker's path (payload serialized once by gateway.notify): {us_broker:.2f} "
          "us/line, not counting that serialization")  # fmt: skip
    print("hostile payload element with N attributes (one record, seconds):")
    for n in (5_000, 20_000, 100_000):
        hp = hostile_payload(n)
        hi = Item("0" * 32, None, None, None, hp, None)
        t = time.perf_counter()
        line = _line(hi, when, "gw-bench", False)
        t_after = time.perf_counter() - t
        if n <= 20_000:
            t = time.perf_counter()
            record_before("0" * 32, now, None, None, None, hp)
            t_before = f"{time.perf_counter() - t:7.3f}"
        else:
            t_before = "  (not run: minutes)"
        rec = json.loads(line)
        print(
            f"  N={n:6d}: before {t_before}  after {t_after:7.3f}  "
            f"fields kept {len(rec['fields'])}, truncated={rec.get('fields_truncated', False)}, "
            f"payload_omitted={rec.get('payload_omitted', 0)}"
        )


if __name__ == "__main__":
    main()
