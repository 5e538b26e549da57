"""Issue 15 in the job: groups per device (device_id, else the producer), the producer and
gateway kept as columns, old lines without the identity keys, `--time event|received`,
clock skew per device, and many landing locations (globs, URIs, files that match nothing,
--require-input)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from ingest_data import T0, new_database

from spark_ingest import cli
from spark_ingest.batch import run_batch
from spark_ingest.schema import AGGREGATE_COLUMNS, TABLES
from spark_ingest.synth import Message, landing_name, write_lines, write_parquet_messages

pytestmark = pytest.mark.spark

A1 = "http://127.0.0.1:9101/wsn/producer"  # sim-01's address before its DHCP lease changed
A2 = "http://127.0.0.1:9102/wsn/producer"  # ... and after
LEGACY = "http://127.0.0.1:9200/legacy"


def _m(
    n: int,
    sec: float,
    producer: str | None,
    device: str | None,
    topic: str | None,
    value: str,
    *,
    gw: str | None = "gw-a",
    clock_s: float = 0.0,
    identity: bool = True,
) -> Message:
    at = T0 + timedelta(seconds=sec)
    ev = at + timedelta(seconds=clock_s)
    return Message(
        id=f"id{n:04d}", received_at=at, producer=producer, topic_path=topic,
        fields={"value": value, "time": ev.strftime("%Y-%m-%dT%H:%M:%SZ")},
        topic_namespace="urn:wsn-edge:devices" if (topic or "").startswith("sim-") else "urn:lab",
        device_id=device if identity else None, gateway_id=gw if identity else None,
        event_time=ev.replace(microsecond=0) if identity else None, identity=identity,
    )  # fmt: skip


def _zone() -> list[Message]:
    """sim-01 every 10 s for 5 minutes, moving from A1 to A2 (and from gateway gw-a to gw-b)
    at 150 s; sim-02's clock 120 s ahead; a legacy producer with no device; an old line
    (no identity keys) of sim-02, whose device id comes from its dev: topic."""
    out: list[Message] = []
    n = 0
    for k in range(30):
        sec = 10.0 * k
        moved = sec >= 150
        out.append(
            _m(
                n,
                sec,
                A2 if moved else A1,
                "sim-01",
                "sim-01/temperature",
                str(k),
                gw="gw-b" if moved else "gw-a",
            )
        )
        n += 1
        out.append(
            _m(
                n,
                sec + 1,
                "http://127.0.0.1:9103/wsn/producer",
                "sim-02",
                "sim-02/temperature",
                str(100 + k),
                clock_s=120,
            )
        )
        n += 1
    out.append(
        _m(
            n,
            301,
            "http://127.0.0.1:9103/wsn/producer",
            None,
            "sim-02/temperature",
            "999",
            identity=False,
        )
    )
    n += 1
    for k in range(3):
        out.append(_m(n, 20.0 * k, LEGACY, None, "bench/pressure", str(1000 + k), gw=None))
        n += 1
    return out


@pytest.fixture(scope="module")
def zone(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("identity")
    msgs = _zone()
    half = len(msgs) // 2
    # two landing zones (two gateways' folders), one in each format, and a wrong file
    write_lines(root / "site-a", landing_name(T0, 1), [m.to_json() for m in msgs[:half]])
    write_parquet_messages(root / "site-b", landing_name(T0, 1, ".parquet"), msgs[half:])
    (root / "site-b" / "readings.json").write_text("{}\n")
    (root / "site-b" / "landing-old.jsonl.gz").write_bytes(b"\x1f\x8b")
    return {"root": root, "msgs": msgs}


def _rows(spark: Any, db: str, table: str) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in spark.table(f"{db}.{table}").collect()]


def test_one_device_across_addresses_and_gateways(spark: Any, zone: dict[str, Any]) -> None:
    root = zone["root"]
    db = new_database()
    # a glob and a file:// URI, passed through to Hadoop as given
    s = run_batch(
        spark,
        [str(root / "site-a"), f"file://{root}/site-[b]"],
        str(root / "out"),
        window="1 minute",
        database=db,
    )
    assert (s.files, s.messages, s.quarantined_total) == (2, len(zone["msgs"]), 0)
    # the files that are not landing files are counted and named
    assert s.unmatched == 2 and s.unmatched_examples == ["landing-old.jsonl.gz", "readings.json"]
    assert "not landing files 2" in s.render() and "readings.json" in s.render()

    devs = {r["device_id"] or r["producer"]: r for r in _rows(spark, db, "devices")}
    assert set(devs) == {"sim-01", "sim-02", LEGACY}
    assert list(_rows(spark, db, "devices")[0]) == TABLES["devices"].columns
    one = devs["sim-01"]
    # one device: one history, both addresses, the last one and the last gateway
    assert one["messages"] == 30 and one["producers"] == [A1, A2]
    assert (one["producer"], one["gateway_id"]) == (A2, "gw-b")
    # no false gap: it never stopped publishing every 10 s
    assert one["gap_count"] == 0 and one["period_s"] == 10.0
    # the old line without identity keys joined sim-02 through its dev: topic
    assert devs["sim-02"]["messages"] == 31
    assert devs[LEGACY]["device_id"] is None and devs[LEGACY]["messages"] == 3
    # clock skew: event_time - received_at (the latest window's mean, and the bounds)
    assert devs["sim-02"]["clock_skew_s"] == pytest.approx(120, abs=1)
    assert one["clock_skew_min_s"] <= 0 <= one["clock_skew_max_s"] < 1
    assert devs[LEGACY]["clock_skew_s"] is not None  # its lines have event_time too

    aggs = _rows(spark, db, "aggregates")
    assert list(aggs[0]) == list(AGGREGATE_COLUMNS)
    sim1 = sorted(
        (r for r in aggs if r["device_id"] == "sim-01" and r["field"] == "value"),
        key=lambda r: r["window_start"],
    )
    # one series per window (not one per address), its producer the last in the window
    assert [r["count"] for r in sim1] == [6, 6, 6, 6, 6]
    assert [(r["producer"], r["gateway_id"]) for r in sim1] == [
        (A1, "gw-a"),
        (A1, "gw-a"),
        (A2, "gw-b"),
        (A2, "gw-b"),
        (A2, "gw-b"),
    ]
    legacy = [r for r in aggs if r["producer"] == LEGACY and r["field"] == "value"]
    assert legacy and all(r["device_id"] is None for r in legacy)


def test_time_event_windows_by_the_devices_clock(spark: Any, zone: dict[str, Any]) -> None:
    root = zone["root"]
    landings = [str(root / "site-a"), str(root / "site-b")]
    db = new_database()
    s = run_batch(spark, landings, str(root / "ev"), window="1 minute", time="event", database=db)
    assert s.time == "event" and "time event" in s.render()
    aggs = _rows(spark, db, "aggregates")
    firsts = {
        r["device_id"]: min(r["window_start"] for r in aggs if r["device_id"] == d)
        for d in ("sim-01", "sim-02")
        for r in aggs
        if r["device_id"] == d
    }
    naive0 = T0.replace(tzinfo=None)
    assert firsts["sim-01"] == naive0
    # sim-02's clock is 2 minutes ahead: by event time its first window is 2 minutes later
    assert firsts["sim-02"] == naive0 + timedelta(minutes=2)
    devs = {r["device_id"]: r for r in _rows(spark, db, "devices")}
    assert devs["sim-02"]["first_seen"].replace(tzinfo=UTC) == T0 + timedelta(seconds=121)
    # the skew does not depend on which time windows use
    assert devs["sim-02"]["clock_skew_s"] == pytest.approx(120, abs=1)


def test_require_input_and_a_plain_message_when_nothing_was_read(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    (wrong / "export-1.jsonl").write_text(json.dumps({"id": "x"}) + "\n")
    db = new_database()
    args = ["batch", "--landing", str(wrong), "--out", str(tmp_path / "o"), "--database", db]
    assert cli.main(args) == 0  # by default: said plainly, empty tables, exit 0
    cap = capsys.readouterr()
    assert "nothing new" in cap.out and "export-1.jsonl" in cap.out
    assert "no landing file was read" in cap.err
    assert cli.main([*args, "--require-input"]) == 1
    assert "no landing file was read" in capsys.readouterr().err
    # a --landing that names nothing is reported; with another one that has files, it runs
    good = tmp_path / "good"
    write_lines(good, landing_name(T0, 1), [_m(1, 0, A1, "sim-01", "sim-01/t", "1").to_json()])
    s = run_batch(
        spark, [str(good), str(tmp_path / "nope*")], str(tmp_path / "o2"), database=new_database()
    )
    assert s.files == 1 and s.missing == [str(tmp_path / "nope*")]
    assert "matched nothing" in s.render()


def test_received_is_the_default_time() -> None:
    args = cli.build_parser().parse_args(["batch", "--landing", "x", "--out", "y"])
    assert args.time == "received" and args.landing == ["x"] and args.database == "wsn"
    args = cli.build_parser().parse_args(
        [
            "stream",
            "--landing",
            "a",
            "--landing",
            "b/*",
            "--out",
            "y",
            "--time",
            "event",
        ]
    )
    assert args.time == "event" and args.landing == ["a", "b/*"]
    assert datetime(2026, 1, 1, tzinfo=UTC) < T0 + timedelta(days=400)
