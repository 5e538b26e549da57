"""End to end (issue 5): gateway -> landing zone -> `wsn-ingest batch`.

A real `python -m gateway` process with a data dir on 127.0.0.1 accepts a known set of reading
notifications (design.md payload): two devices that register (br:RegisterPublisher, then
Notify on their registration address, so the producer is set and `dt:<topic>` becomes
`dev:<device>/<topic>`), a legacy producer that posts to /wsn/broker with a
wsnt:ProducerReference, and an anonymous one. The gateway is stopped with SIGTERM, which
must publish its landing file (no `.tmp` left behind, every line there once). The batch job
(spark_ingest.batch.run_batch, on the shared local SparkSession) then has to give exactly
the count/min/max/mean/last the test computes from what it published.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import socket
import sys
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
# helpers of the gateway tests (SOAP envelopes, the gateway process), imported, not copied
sys.path.insert(0, str(ROOT / "tests" / "gateway"))

from gwtest import (  # noqa: E402
    BR,
    CONCRETE,
    SIMPLE,
    WSA,
    call,
    notify_body,
    start_gateway,
    stop_gateway,
)


def _load_spark_conftest() -> Any:
    """The session SparkSession fixture of tests/spark_ingest/conftest.py, re-exported here
    so pytest finds it when only tests/integration is collected (getOrCreate: one JVM)."""
    spec = importlib.util.spec_from_file_location(
        "spark_ingest_tests_conftest", ROOT / "tests" / "spark_ingest" / "conftest.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


spark = _load_spark_conftest().spark

DT = "urn:wsn-edge:device-topics"
LAB = "urn:wsn-edge:lab"
A_REG = "http://docs.oasis-open.org/wsn/brw-2/RegisterPublisher/RegisterPublisherRequest"
A_NOTIFY = "http://docs.oasis-open.org/wsn/bw-2/NotificationConsumer/Notify"
LEGACY = "http://127.0.0.1:7/legacy-sensor"
WINDOW_S = 60


def reading_xml(device: str, value: str, unit: str) -> str:
    return (
        f'<rd:Reading xmlns:rd="urn:wsn-edge:reading" device="{device}"><rd:value>{value}'
        f"</rd:value><rd:unit>{unit}</rd:unit><rd:time>2026-11-21T05:00:00Z</rd:time></rd:Reading>"
    )


def register_body(publisher: str, device: str, topics: list[str]) -> str:
    out = (
        f"<br:RegisterPublisher><br:PublisherReference><wsa:Address>{publisher}</wsa:Address>"
        f"<wsa:Metadata><edge:DeviceId>{device}</edge:DeviceId></wsa:Metadata>"
        "</br:PublisherReference>"
    )
    for t in topics:
        out += f'<br:Topic Dialect="{SIMPLE}" xmlns:dt="{DT}">dt:{t}</br:Topic>'
    return out + "<br:Demand>false</br:Demand></br:RegisterPublisher>"


@dataclass
class Published:
    """One accepted notification, as the landing zone must show it."""

    order: int
    producer: str | None
    topic_path: str | None
    value: str
    unit: str
    batch: int  # Notify it travelled in (several messages share received_at)


# (device, topic, unit, values) for the registered devices; sent one Notify per reading
DEVICE_SERIES = [
    ("esp32-01", "temperature", "Cel", ["20.5", "21.25", "19.75", "22.0", "21.5"]),
    ("esp32-01", "humidity", "%RH", ["55", "57.5", "n/a", "56"]),  # n/a: counted, not numeric
    ("pico-03", "temperature", "Cel", ["-3.5", "-4.0", "-2.25"]),
]
LEGACY_VALUES = ["1013.25", "1012.5", "1014.0"]  # one Notify with three messages
ANON_VALUES = ["7", "8.5"]  # no producer, no topic: aggregated under null keys


async def _publish(url: str) -> tuple[list[Published], dict[str, str]]:
    broker_root = url.rsplit("/wsn/", 1)[0]
    published: list[Published] = []
    producers: dict[str, str] = {}
    batch = 0
    reg_addr: dict[str, str] = {}
    for device in sorted({d for d, _, _, _ in DEVICE_SERIES}):
        producers[device] = f"http://127.0.0.1:9/{device}/wsn/producer"
        topics = [t for d, t, _, _ in DEVICE_SERIES if d == device]
        r = await call(url, register_body(producers[device], device, topics), action=A_REG)
        assert r.status == 200, r.text
        addr = r.body.findtext(f"{{{BR}}}ConsumerReference/{{{WSA}}}Address")
        assert addr and addr.startswith(broker_root + "/wsn/registrations/"), r.text
        reg_addr[device] = addr
    # interleave the series so files and windows hold a mix
    longest = max(len(v) for *_, v in DEVICE_SERIES)
    for i in range(longest):
        for device, topic, unit, vals in DEVICE_SERIES:
            if i >= len(vals):
                continue
            batch += 1
            body = notify_body(
                (f"dt:{topic}", reading_xml(device, vals[i], unit)),
                nsdecl=f'xmlns:dt="{DT}"',
                dialect=SIMPLE,
            )
            r = await call(reg_addr[device], body, action=A_NOTIFY)
            assert r.status == 202, r.text
            published.append(
                Published(len(published), producers[device], f"{device}/{topic}", vals[i],
                          unit, batch)
            )  # fmt: skip
    batch += 1
    body = notify_body(
        *[("lab:bench/pressure", reading_xml("legacy", v, "hPa")) for v in LEGACY_VALUES],
        nsdecl=f'xmlns:lab="{LAB}"',
        dialect=CONCRETE,
        producer=LEGACY,
    )
    r = await call(url, body, action=A_NOTIFY)
    assert r.status == 202, r.text
    for v in LEGACY_VALUES:
        published.append(Published(len(published), LEGACY, "bench/pressure", v, "hPa", batch))
    for v in ANON_VALUES:
        batch += 1
        r = await call(url, notify_body((None, reading_xml("anon", v, "1"))), action=A_NOTIFY)
        assert r.status == 202, r.text
        published.append(Published(len(published), None, None, v, "1", batch))
    return published, producers


@pytest.fixture(scope="module")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("e2e")
    data = root / "gw"
    t0 = datetime.now(UTC)
    # default rotation (64 MiB / 60 s): the file is published by the graceful stop
    gw = start_gateway(data)
    try:
        published, producers = asyncio.run(_publish(gw.url))
        # SIGTERM right away: a graceful stop writes everything accepted exactly once
    finally:
        rc = stop_gateway(gw)
    t1 = datetime.now(UTC)
    assert rc == 0, gw.stderr.read_text()
    assert "Traceback" not in gw.stderr.read_text(), gw.stderr.read_text()
    return {"root": root, "landing": data / "landing", "published": published,
            "producers": producers, "t0": t0, "t1": t1}  # fmt: skip


def _landing_lines(landing: Path) -> list[dict[str, Any]]:
    lines = []
    for f in sorted(landing.glob("landing-*.jsonl")):
        lines.extend(json.loads(x) for x in f.read_text().splitlines())
    return lines


def _received(s: str) -> datetime:
    assert s.endswith("Z") and len(s) == len("2026-11-21T05:00:00.123456Z"), s
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def test_graceful_stop_publishes_every_line_once(e2e: dict[str, Any]) -> None:
    landing: Path = e2e["landing"]
    names = sorted(p.name for p in landing.iterdir())
    assert names, "no landing file after SIGTERM"
    assert not [n for n in names if n.endswith(".tmp")], names  # nothing left in progress
    assert all(n.startswith("landing-") and n.endswith(".jsonl") for n in names), names
    lines = _landing_lines(landing)
    published: list[Published] = e2e["published"]
    assert len(lines) == len(published)
    assert len({x["id"] for x in lines}) == len(lines)
    # the contract of design.md, line by line, in publish order
    for x, p in zip(lines, published, strict=True):
        assert set(x) == {"id", "received_at", "producer", "topic_namespace", "topic_path",
                          "message_type", "fields", "payload", "device_id", "gateway_id",
                          "event_time"}  # fmt: skip
        assert e2e["t0"] <= _received(x["received_at"]) <= e2e["t1"]
        assert (x["producer"], x["topic_path"]) == (p.producer, p.topic_path)
        want_ns = {LEGACY: LAB, None: None}.get(p.producer, "urn:wsn-edge:devices")
        assert x["topic_namespace"] == want_ns
        assert x["message_type"] == "{urn:wsn-edge:reading}Reading"
        assert x["fields"]["value"] == p.value and x["fields"]["unit"] == p.unit
        # only the payload's own namespace declaration, none of the envelope's (issue 15)
        device = p.topic_path.split("/")[0] if want_ns == "urn:wsn-edge:devices" else None
        assert x["payload"] == reading_xml(
            device or {LEGACY: "legacy", None: "anon"}[p.producer], p.value, p.unit
        )
        # identity (issue 15): the registered device, this gateway, the device's clock
        assert x["device_id"] == device
        assert x["gateway_id"] == socket.gethostname()
        assert x["event_time"] == "2026-11-21T05:00:00.000000Z"


def _num(v: str) -> float | None:
    try:
        return float(v)
    except ValueError:
        return None


def _expected(published: list[Published], lines: list[dict[str, Any]]) -> dict[tuple, dict]:  # type: ignore[type-arg]
    """count/numeric_count/min/max/mean/last per (window, producer, topic_path) of field
    `value`, from what was published; the window of each message is taken from its
    received_at (the gateway's clock decides, design.md)."""
    groups: dict[tuple, list[tuple[datetime, str, str]]] = defaultdict(list)  # type: ignore[type-arg]
    for p, x in zip(published, lines, strict=True):
        at = _received(x["received_at"])
        epoch = int(at.timestamp()) // WINDOW_S * WINDOW_S
        w = datetime.fromtimestamp(epoch, UTC).replace(tzinfo=None)
        groups[(w, p.producer, p.topic_path)].append((at, x["id"], p.value))
    out = {}
    for key, items in groups.items():
        nums = [n for _, _, v in items if (n := _num(v)) is not None]
        last = max(items)[2]  # the job's rule: greatest (received_at, id)
        last_num = _num(last)
        out[key] = {
            "count": len(items),
            "numeric_count": len(nums),
            "min": min(nums) if nums else None,
            "max": max(nums) if nums else None,
            "mean": sum(nums) / len(nums) if nums else None,
            "last": last_num,
            "last_str": last,
        }
    return out


@pytest.mark.spark
def test_batch_job_aggregates_what_was_published(spark: Any, e2e: dict[str, Any]) -> None:
    from spark_ingest.batch import run_batch

    out = e2e["root"] / "out"
    db = "e2e_published"
    summary = run_batch(
        spark, str(e2e["landing"]), str(out), window=f"{WINDOW_S} seconds", database=db
    )
    published: list[Published] = e2e["published"]
    assert summary.messages == len(published) and summary.quarantined_total == 0
    assert summary.lines == len(published)

    lines = _landing_lines(e2e["landing"])
    want = _expected(published, lines)
    rows = spark.table(f"{db}.aggregates").where("field = 'value'").collect()
    got = {
        (r["window_start"], r["producer"], r["topic_path"]): {
            k: r[k] for k in ("count", "numeric_count", "min", "max", "mean", "last", "last_str")
        }
        for r in rows
    }
    assert got == want

    # the same, said in words for the series whose numbers are easy to check by hand
    # (summed over windows, in case the run straddled a minute boundary)
    def series(producer: str | None, topic: str | None) -> dict[str, Any]:
        mine = [v for k, v in sorted(got.items(), key=lambda kv: kv[0][0])
                if k[1:] == (producer, topic)]  # fmt: skip
        return {
            "count": sum(m["count"] for m in mine),
            "min": min(m["min"] for m in mine if m["min"] is not None),
            "max": max(m["max"] for m in mine if m["max"] is not None),
            "sum": sum(m["mean"] * m["numeric_count"] for m in mine if m["numeric_count"]),
            "last_str": mine[-1]["last_str"],
        }

    p = e2e["producers"]
    t = series(p["esp32-01"], "esp32-01/temperature")
    assert t == {"count": 5, "min": 19.75, "max": 22.0, "sum": 105.0, "last_str": "21.5"}
    h = series(p["esp32-01"], "esp32-01/humidity")
    assert h == {"count": 4, "min": 55.0, "max": 57.5, "sum": 168.5, "last_str": "56"}
    c = series(p["pico-03"], "pico-03/temperature")
    assert c == {"count": 3, "min": -4.0, "max": -2.25, "sum": -9.75, "last_str": "-2.25"}
    legacy = series(LEGACY, "bench/pressure")
    assert {k: legacy[k] for k in ("count", "min", "max", "sum")} == {
        "count": 3, "min": 1012.5, "max": 1014.0, "sum": 3039.75}  # fmt: skip
    # one Notify, one received_at: `last` is the tie-break by message id
    assert legacy["last_str"] in LEGACY_VALUES
    anon = series(None, None)
    assert {k: anon[k] for k in ("count", "min", "max", "sum")} == {
        "count": 2, "min": 7.0, "max": 8.5, "sum": 15.5}  # fmt: skip

    # a reading's unit is the unit of its value, not a text measurement of its own
    aggs = spark.table(f"{db}.aggregates")
    assert aggs.where("field = 'unit'").count() == 0
    units = aggs.where("topic_path = 'esp32-01/temperature'").select("field", "unit").collect()
    assert {(r["field"], r["unit"]) for r in units} == {("value", "Cel")}

    # devices: one row per producer, messages counted
    devices = spark.table(f"{db}.devices").collect()
    devs = {r["producer"]: r["messages"] for r in devices}
    assert devs == {p["esp32-01"]: 9, p["pico-03"]: 3, LEGACY: 3, None: 2}


MOVE_EVERY_S = 0.3


async def _device_moves(url: str, addresses: list[str], per_address: int) -> list[str]:
    """Device sim-01 registers from each address in turn (its DHCP lease changed: it
    registers again from the new one, as after a reboot) and publishes a temperature every
    MOVE_EVERY_S seconds, with no pause longer than that one registration."""
    ids: list[str] = []
    for addr in addresses:
        r = await call(url, register_body(addr, "sim-01", ["temperature"]), action=A_REG)
        assert r.status == 200, r.text
        reg = r.body.findtext(f"{{{BR}}}ConsumerReference/{{{WSA}}}Address")
        assert reg
        for k in range(per_address):
            body = notify_body(
                ("dt:temperature", reading_xml("sim-01", str(20 + k), "Cel")),
                nsdecl=f'xmlns:dt="{DT}"', dialect=SIMPLE,
            )  # fmt: skip
            r = await call(reg, body, action=A_NOTIFY)
            assert r.status == 202, r.text
            ids.append(addr)
            await asyncio.sleep(MOVE_EVERY_S)
    return ids


@pytest.mark.spark
def test_a_device_that_changes_address_is_one_device_with_no_false_gap(
    spark: Any, tmp_path: Path
) -> None:
    from spark_ingest.batch import run_batch

    a1 = "http://127.0.0.1:9/sim-01-lease-1/wsn/producer"
    a2 = "http://127.0.0.1:9/sim-01-lease-2/wsn/producer"
    gw = start_gateway(tmp_path / "gw", "--gateway-id", "site-15")
    try:
        sent = asyncio.run(_device_moves(gw.url, [a1, a2], 8))
    finally:
        assert stop_gateway(gw) == 0
    lines = _landing_lines(tmp_path / "gw" / "landing")
    assert [x["producer"] for x in lines] == sent
    assert {x["device_id"] for x in lines} == {"sim-01"}
    from spark_ingest.options import Options

    db = "e2e_moves"
    # a reading every 0.3 s: steps of at least 0.1 s count as intervals here (the default
    # 1 s would call them a burst and judge no gap at all). The times are the gateway's
    # clock at receipt, and this test runs niced beside the other tests: a gap is a step
    # over 10 periods (~3 s), so a busy machine's stall of a second or two is none (at the
    # default 3, one of ~1 s was); the move adds one Register between two Notifys
    opts = Options(database=db, window="10 seconds", burst="100 milliseconds", gap_factor=10.0)
    s = run_batch(spark, str(tmp_path / "gw" / "landing"), str(tmp_path / "out"), opts=opts)
    assert s.messages == 16
    devices = [r.asDict() for r in spark.table(f"{db}.devices").collect()]
    # one device, not a dead one plus a new one; both addresses and this gateway on it
    assert len(devices) == 1, devices
    d = devices[0]
    assert (d["device_id"], d["messages"], d["producers"]) == ("sim-01", 16, [a1, a2])
    assert (d["producer"], d["gateway_id"]) == (a2, "site-15")
    # no false gap: the move took no longer than a usual interval or two
    assert d["gap_count"] == 0 and d["period_s"] is not None, d
    aggs = spark.table(f"{db}.aggregates").where("field = 'value'")
    assert {r["device_id"] for r in aggs.collect()} == {"sim-01"}
    assert sum(r["count"] for r in aggs.collect()) == 16
