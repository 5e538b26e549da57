"""Parquet landing variant (--landing-format parquet|both; docs/spark_ingest.md "Parquet
landing"): the same records as the JSON lines, the column contract, hidden temporary names,
rotation, exactly once across a crash at every step of publishing a file."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from gwtest import ROOT, call, notify_body, reading

from gateway import landing_parquet
from gateway.storage import AcceptBatch, Storage

NAME = re.compile(r"^landing-\d{8}T\d{6}-\d+\.parquet$")
CONTRACT = pa.schema(
    [
        ("id", pa.string()),
        ("received_at", pa.timestamp("us", tz="UTC")),
        ("producer", pa.string()),
        ("topic_namespace", pa.string()),
        ("topic_path", pa.string()),
        ("message_type", pa.string()),
        ("fields", pa.map_(pa.string(), pa.string())),
        ("payload", pa.string()),
        ("event_time", pa.timestamp("us", tz="UTC")),
        ("device_id", pa.string()),
        ("gateway_id", pa.string()),
        ("fields_truncated", pa.bool_()),
        ("payload_omitted", pa.int64()),
    ]
)


def _rows(d: Path) -> list[dict]:  # type: ignore[type-arg]
    out = []
    for p in sorted(d.glob("landing-*.parquet")):
        assert NAME.match(p.name), p.name
        t = pq.read_table(p)
        assert t.schema.equals(CONTRACT), t.schema
        out.extend(t.to_pylist())
    return out


def _json_lines(d: Path) -> list[dict]:  # type: ignore[type-arg]
    out = []
    for p in sorted(d.glob("landing-*.jsonl")):
        out.extend(json.loads(x) for x in p.read_text().splitlines())
    return out


def test_the_column_contract_is_spark_ingests() -> None:
    from spark_ingest.schema import parquet_landing_arrow

    assert landing_parquet.arrow_schema(pa).equals(parquet_landing_arrow())
    assert CONTRACT.equals(parquet_landing_arrow())


async def test_both_formats_hold_the_same_records(make_gateway, tmp_path):
    gw = await make_gateway(
        data_dir=tmp_path / "d", landing_format="both", landing_max_age=30, gateway_id="site-7"
    )
    r = await call(
        gw.url,
        notify_body(
            ("tns:a/b", reading(21.5, "esp32-01")),
            (None, "<plain>7</plain>"),
            producer="http://127.0.0.1:1/p",
        ),
    )
    assert r.status == 202
    for v in range(3):
        assert (await call(gw.url, notify_body(("tns:t", reading(v))))).status == 202
    await gw.stop()  # publishes both open files
    d = tmp_path / "d" / "landing"
    rows, lines = _rows(d), _json_lines(d)
    assert len(rows) == 5
    assert [r["id"] for r in rows] == [x["id"] for x in lines]
    for row, line in zip(rows, lines, strict=True):
        assert row["received_at"].strftime("%Y-%m-%dT%H:%M:%S.%fZ") == line["received_at"]
        assert dict(row["fields"]) == line["fields"]
        for k in ("producer", "topic_namespace", "topic_path", "message_type", "payload"):
            assert row[k] == line[k], k
        for k in ("device_id", "gateway_id"):
            assert row[k] == line[k], k
        ev = row["event_time"]
        assert (ev.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if ev else None) == line["event_time"]
        assert row["fields_truncated"] is False and row["payload_omitted"] == 0
    assert rows[0]["event_time"] is not None and rows[1]["event_time"] is None
    assert {r["gateway_id"] for r in rows} == {"site-7"}
    assert rows[0]["producer"] == "http://127.0.0.1:1/p" and rows[0]["topic_path"] == "a/b"
    assert rows[1]["topic_path"] is None and dict(rows[1]["fields"]) == {"plain": "7"}
    assert not list(d.glob(".landing-*"))


async def test_parquet_only_rotates_by_age_and_size(make_gateway, tmp_path):
    gw = await make_gateway(data_dir=tmp_path / "d", landing_format="parquet", landing_max_age=0.3)
    assert (await call(gw.url, notify_body(("tns:t", reading(1))))).status == 202
    d = tmp_path / "d" / "landing"
    for _ in range(60):
        await asyncio.sleep(0.05)
        if list(d.glob("landing-*.parquet")):
            break
    assert [dict(r["fields"])["value"] for r in _rows(d)] == ["1"]
    assert not list(d.glob("*.jsonl")) and not list(d.glob(".landing-*"))
    # by size: one Notify's records exceed --landing-max-bytes -> a file right away
    gw2 = await make_gateway(
        data_dir=tmp_path / "e", landing_format="parquet", landing_max_bytes=500, landing_max_age=30
    )
    e = tmp_path / "e" / "landing"
    assert (await call(gw2.url, notify_body(*[("tns:t", reading(v)) for v in range(3)]))).status \
        == 202  # fmt: skip
    for _ in range(60):
        await asyncio.sleep(0.05)
        if list(e.glob("landing-*.parquet")):
            break
    assert [dict(r["fields"])["value"] for r in _rows(e)] == ["0", "1", "2"]


async def _writer_with_records(tmp_path: Path, n: int) -> tuple[Storage, Path]:
    st = Storage(tmp_path / "db.sqlite3")
    st.open()
    lines = [
        json.dumps(
            {
                "id": f"id{i}",
                "received_at": "2026-11-21T05:00:00.000000Z",
                "producer": None,
                "topic_namespace": None,
                "topic_path": None,
                "message_type": "x",
                "fields": {"x": str(i)},
                "payload": "<x/>",
            }
        )
        for i in range(n)
    ]
    await st.accept(AcceptBatch(landing_parquet=[(f"id{i}", ln) for i, ln in enumerate(lines)]))
    return st, tmp_path / "landing"


async def test_crash_at_each_step_of_publishing_loses_and_duplicates_nothing(tmp_path, monkeypatch):
    # 1. crash while the temporary file is written (nothing recorded): discarded, rewritten
    st, d = await _writer_with_records(tmp_path / "a", 3)
    try:
        d.mkdir()
        (d / ".landing-20260101T000000-000004.parquet.tmp").write_bytes(b"PAR1 torn")
        w = landing_parquet.ParquetLandingWriter(d, st)
        w.recover()
        assert not list(d.glob(".landing-*"))
        await w.publish()
        assert sorted(r["id"] for r in _rows(d)) == ["id0", "id1", "id2"]
        # a new file never reuses a name seen before (the torn one was seq 4)
        assert all(int(p.stem.rsplit("-", 1)[1]) > 4 for p in d.glob("landing-*"))
    finally:
        st.close()

    # 2. crash after the file was recorded complete, before the rename: published at start
    st, d = await _writer_with_records(tmp_path / "b", 2)
    try:
        w = landing_parquet.ParquetLandingWriter(d, st)
        w.recover()

        def crash(*a: object) -> None:
            raise OSError("simulated crash before rename")

        monkeypatch.setattr(landing_parquet.os, "replace", crash)
        with pytest.raises(OSError, match="simulated crash"):
            await w.publish()
        monkeypatch.undo()
        assert not list(d.glob("landing-*")) and len(list(d.glob(".landing-*.tmp"))) == 1
        assert (await st.parquet_outbox_stats())[0] == 0  # the file owns the records now
        w2 = landing_parquet.ParquetLandingWriter(d, st)
        w2.recover()
        assert sorted(r["id"] for r in _rows(d)) == ["id0", "id1"]
        assert not list(d.glob(".landing-*")) and st.parquet_files_sync() == []
        await w2.publish()  # nothing left to write
        assert len(_rows(d)) == 2
    finally:
        st.close()


def test_without_pyarrow_the_gateway_runs_and_the_option_says_what_is_missing(tmp_path):
    code = (
        "import sys; sys.modules['pyarrow'] = None\n"
        "import gateway.http, gateway.app\n"
        "from gateway.cli import main\n"
        f"sys.exit(main(['--port', '0', '--data-dir', {str(tmp_path)!r},"
        " '--landing-format', 'parquet']))\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "needs pyarrow" in p.stderr and "--landing-format jsonl" in p.stderr
