"""Batch job on a hand-made landing zone: every aggregate value, every quarantined line, the
devices, the CLI and the plot, the Parquet landing variant and a `both` zone."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from ingest_data import (
    P1,
    P2,
    P3,
    T0,
    Bad,
    assert_same_aggregates,
    batch_zone,
    expected_aggregates,
    new_database,
    spark_aggregates,
    write_zone,
)

from spark_ingest import cli
from spark_ingest.batch import run_batch
from spark_ingest.keep import KEEP_CONF, keep_mode, materialize, release
from spark_ingest.schema import AGGREGATE_COLUMNS, TABLES

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def batch_run(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("batch")
    files, msgs, bads = batch_zone()
    paths = write_zone(root / "landing", files)
    # what a reader must never pick up: the gateway's file in progress, other files
    (root / "landing" / ".landing-20261121T060000-000009.jsonl.tmp").write_text("{torn")
    (root / "landing" / "notes.txt").write_text("not landing data\n")
    db = new_database()
    summary = run_batch(spark, str(root / "landing"), str(root / "out"), database=db)
    return {"root": root, "msgs": msgs, "bads": bads, "paths": paths, "summary": summary, "db": db}


def _table(spark: Any, run: dict[str, Any], name: str) -> Any:
    return spark.table(f"{run['db']}.{name}")


def test_aggregates_value_by_value(spark: Any, batch_run: dict[str, Any]) -> None:
    df = _table(spark, batch_run, "aggregates")
    assert df.columns == list(AGGREGATE_COLUMNS)
    got = spark_aggregates(df.collect())
    want = expected_aggregates(batch_run["msgs"], 60)
    assert_same_aggregates(got, want)
    # spot checks that say in words what the oracle computes
    w0 = T0
    t = got[(w0, P1, "esp32-01/temperature", "value")]
    # 20.5, 21.0, 19.5 from file 1 and the late 30.0 from file 2
    assert (t["count"], t["min"], t["max"], t["last"], t["unit"]) == (4, 19.5, 30.0, 19.5, "Cel")
    assert t["mean"] == pytest.approx((20.5 + 21.0 + 19.5 + 30.0) / 4) and t["sum"] == 91.0
    h = got[(w0, P1, "esp32-01/humidity", "value")]
    assert (h["count"], h["numeric_count"], h["min"], h["last"], h["last_str"]) == (
        2,
        1,
        55.0,
        None,
        "n/a",
    )
    nan = got[(w0 + timedelta(minutes=1), P1, "esp32-01/humidity", "value")]
    assert (nan["count"], nan["numeric_count"], nan["mean"], nan["last_str"]) == (1, 0, None, "NaN")
    tie = got[(w0, P2, "esp32-02/temperature", "value")]
    assert (tie["last"], tie["count"]) == (19.0, 2)
    # a reading's device, unit and time describe it: no aggregate rows of their own
    assert not {k for k in got if k[3] in ("device", "unit", "time")}
    assert got[(w0, None, None, "value")]["last"] == 5.0
    nums = {k[3]: v["last"] for k, v in got.items() if k[2] == "esp32-02/numbers"}
    assert nums == {
        "sci": 1000.0,
        "plus": 5.0,
        "frac": 0.5,
        "pad": 7.0,
        "hex": None,
        "under": None,
        "huge": None,
        "inf": None,
        "word": None,
    }
    assert not any(k[1] == P3 and k[3] not in ("seq",) for k in got), "heartbeat {} -> no rows"


def test_partitioned_by_date_and_hour_in_version_directories(
    spark: Any, batch_run: dict[str, Any]
) -> None:
    out = batch_run["root"] / "out" / "aggregates"
    parts = sorted(str(p.relative_to(out)) for p in out.glob("date=*/hour=*/v*"))
    assert parts == ["date=2026-11-21/hour=5/v00000001"]
    rows = spark.sql(f"SHOW PARTITIONS {batch_run['db']}.aggregates").collect()
    assert [r[0] for r in rows] == ["date=2026-11-21/hour=5"]


def test_quarantine_keeps_every_bad_line(spark: Any, batch_run: dict[str, Any]) -> None:
    q = _table(spark, batch_run, "quarantine").collect()
    bads = batch_run["bads"]
    got = Counter((r["reason"], r["raw"], Path(r["source_file"]).name) for r in q)
    want = Counter((b.reason, b.raw, batch_run["paths"][0].name) for b in bads)
    assert got == want
    detail = {r["raw"]: r["detail"] for r in q if r["reason"] == "bad_received_at"}
    assert list(detail.values()) == [
        "received_at 'yesterday': not an RFC 3339 or ISO 8601 date-time"
    ]
    s = batch_run["summary"]
    assert s.quarantined == dict(Counter(b.reason for b in bads))
    # nothing silently dropped: every line is a message or quarantined
    assert s.lines == len(batch_run["msgs"]) + len(bads)
    assert s.messages == len(batch_run["msgs"]) and s.duplicates == 0
    assert s.files == 2


def test_devices(spark: Any, batch_run: dict[str, Any]) -> None:
    rows = _table(spark, batch_run, "devices").collect()
    devs = {r["producer"]: r for r in rows}
    msgs = batch_run["msgs"]
    assert set(devs) == {m.producer for m in msgs}
    for p, r in devs.items():
        mine = [m for m in msgs if m.producer == p]
        assert r["messages"] == len(mine)
        assert r["first_seen"].replace(tzinfo=UTC) == min(m.received_at for m in mine)
        assert r["last_seen"].replace(tzinfo=UTC) == max(m.received_at for m in mine)
    hb = devs[P3]
    # heartbeats at 0,10,20,30({}),40 then 190,200: period 10 s, one 150 s silence
    assert hb["period_s"] == 10.0 and hb["gap_count"] == 1 and hb["device_id"] == "pico-03"
    dq = {
        r["window_start"]: r
        for r in _table(spark, batch_run, "device_quality").collect()
        if r["device_id"] == "pico-03"
    }
    gap = dq[datetime(2026, 11, 21, 5, 3)]  # 05:03:10 ends the silence that began at 05:00:40
    assert (gap["gaps"], gap["longest_silence_s"], gap["missed"]) == (1, 150.0, 14)
    assert devs[None]["messages"] == 1 and devs[None]["gap_count"] == 0


def test_persisted_run_gives_the_same_tables(
    spark: Any, batch_run: dict[str, Any], tmp_path: Path
) -> None:
    """On a cluster the parsed lines are persisted, so a lost executor's part is recomputed;
    the tables are those of the (local default) checkpointed run."""
    root = batch_run["root"]
    db = new_database()
    spark.conf.set(KEEP_CONF, "persist")
    try:
        assert keep_mode(spark) == "persist"
        run_batch(spark, str(root / "landing"), str(tmp_path / "out"), database=db)
    finally:
        spark.conf.unset(KEEP_CONF)
    assert keep_mode(spark) == "checkpoint"  # local[2]
    for t in ("aggregates", "device_quality", "site_quality", "quarantine"):
        cols = [c for c in TABLES[t].columns if c not in ("site", "source_file")]
        got = sorted(map(repr, spark.table(f"{db}.{t}").select(*cols).collect()))
        want = sorted(map(repr, _table(spark, batch_run, t).select(*cols).collect()))
        assert got == want, t


def test_keep_modes(spark: Any) -> None:
    df = spark.range(10).repartition(2, "id")
    for mode, cached in (("persist", True), ("checkpoint", False)):
        spark.conf.set(KEEP_CONF, mode)
        try:
            kept = materialize(spark, df)
        finally:
            spark.conf.unset(KEEP_CONF)
        assert kept.is_cached is cached and kept.count() == 10
        release(kept)
        assert kept.is_cached is False
    spark.conf.set(KEEP_CONF, "cache")
    try:
        with pytest.raises(ValueError, match="checkpoint, persist"):
            keep_mode(spark)
    finally:
        spark.conf.unset(KEEP_CONF)


def test_summary_render(batch_run: dict[str, Any]) -> None:
    text = batch_run["summary"].render()
    assert "quarantined       10" in text and "malformed_json: 4" in text
    assert len(text.splitlines()) <= 24


def test_cli_second_run_reads_nothing_and_plot(
    spark: Any, batch_run: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    root, db = batch_run["root"], batch_run["db"]
    before = sorted(map(repr, _table(spark, batch_run, "aggregates").collect()))
    rc = cli.main(
        ["batch", "--landing", str(root / "landing"), "--out", str(root / "out"), "--json",
         "--database", db]
    )  # fmt: skip
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["files"], printed["run"], printed["lines"]) == (0, None, 0)
    assert sorted(map(repr, _table(spark, batch_run, "aggregates").collect())) == before

    png = root / "temp.png"
    args = ["plot", "--out", str(root / "out"), "--field", "value", "--topic", "temperature"]
    assert cli.main([*args, "--png", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "1 panel(s), 2 series" in capsys.readouterr().out
    # unknown field: a clear message listing what exists, exit 1
    rc = cli.main(
        ["plot", "--out", str(root / "out"), "--field", "nope", "--png", str(root / "x.png")]
    )
    assert rc == 1
    err = capsys.readouterr().err
    assert "no aggregates for field 'nope'" in err and "value" in err


def test_cli_missing_landing_is_a_clear_error(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = cli.main(["batch", "--landing", str(tmp_path / "nope"), "--out", str(tmp_path / "o")])
    assert rc == 1
    assert "does not exist" in capsys.readouterr().err


def test_parquet_landing_variant(spark: Any, tmp_path: Path) -> None:
    """The columnar landing variant gives the same aggregates; a row without id is
    quarantined with the row as JSON."""
    from spark_ingest.synth import Message, landing_name, write_parquet_messages

    _, msgs, _ = batch_zone()
    good = msgs[:12]
    nameless = Message(
        id=None,
        received_at=T0,
        producer=P1,
        topic_path="x/y",  # type: ignore[arg-type]
        fields={"value": "1"},
    )
    landing = tmp_path / "landing"
    write_parquet_messages(landing, landing_name(T0, 1, ".parquet"), [*good[:6], nameless])
    write_zone(landing, [list(good[6:])], first_seq=2)  # JSON lines next to it
    db = new_database()
    s = run_batch(spark, str(landing), str(tmp_path / "out"), database=db)
    assert (s.files, s.messages, s.quarantined) == (2, 12, {"missing_id": 1})
    got = spark_aggregates(spark.table(f"{db}.aggregates").collect())
    assert_same_aggregates(got, expected_aggregates(good))
    q = spark.table(f"{db}.quarantine").collect()
    assert len(q) == 1 and json.loads(q[0]["raw"])["topic_path"] == "x/y"
    assert q[0]["source_file"].endswith(".parquet")


def test_empty_landing_zone(spark: Any, tmp_path: Path) -> None:
    (tmp_path / "landing").mkdir()
    s = run_batch(spark, str(tmp_path / "landing"), str(tmp_path / "out"), database=new_database())
    assert (s.files, s.lines, s.run, s.devices) == (0, 0, None, 0)
    assert "nothing new" in s.render()


def test_landing_format_both_counts_each_id_once(
    spark: Any, batch_run: dict[str, Any], tmp_path: Path
) -> None:
    """Gateway `--landing-format both`: every record in a .jsonl AND a .parquet file of the
    same directory. Each id counts once: the tables equal the JSON-lines-only run; the
    summary counts the second copies as duplicates."""
    from spark_ingest.synth import landing_name, write_parquet_messages

    files, msgs, bads = batch_zone()
    landing = tmp_path / "landing"
    write_zone(landing, files)  # JSON lines, bad lines included (as in batch_run)
    for k, lines in enumerate(files):  # the same records as Parquet, same names
        write_parquet_messages(
            landing,
            landing_name(T0 + timedelta(minutes=k), 1 + k, ".parquet"),
            [m for m in lines if not isinstance(m, Bad)],
        )
    db = new_database()
    s = run_batch(spark, str(landing), str(tmp_path / "out"), database=db)
    assert (s.files, s.messages, s.duplicates) == (4, len(msgs), len(msgs))
    assert s.lines == 2 * len(msgs) + len(bads) == s.messages + s.duplicates + s.quarantined_total
    assert f"duplicates        {len(msgs)}" in s.render()
    for t in ("aggregates", "device_quality", "devices"):
        cols = [c for c in TABLES[t].columns if c not in ("site", "producers")]
        got = sorted(map(repr, spark.table(f"{db}.{t}").select(*cols).collect()))
        want = sorted(map(repr, _table(spark, batch_run, t).select(*cols).collect()))
        assert got == want, t
    sq = spark.table(f"{db}.site_quality").agg({"duplicates": "sum", "messages": "sum"}).collect()
    assert tuple(sq[0]) in ((len(msgs), len(msgs)),)
