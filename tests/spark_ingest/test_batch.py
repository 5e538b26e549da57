"""Batch job on a hand-made landing zone: every aggregate value, every quarantined line, the
device gaps, the CLI and the plot."""

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
    spark_aggregates,
    write_zone,
)

from spark_ingest import cli
from spark_ingest.batch import run_batch
from spark_ingest.keep import KEEP_CONF, keep_mode, materialize, release
from spark_ingest.schema import AGGREGATE_COLUMNS

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def batch_run(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("batch")
    files, msgs, bads = batch_zone()
    paths = write_zone(root / "landing", files)
    # what a reader must never pick up: the gateway's file in progress, other files
    (root / "landing" / ".landing-20261121T060000-000009.jsonl.tmp").write_text("{torn")
    (root / "landing" / "notes.txt").write_text("not landing data\n")
    summary = run_batch(spark, str(root / "landing"), str(root / "out"), window="1 minute")
    return {"root": root, "msgs": msgs, "bads": bads, "paths": paths, "summary": summary}


def test_aggregates_value_by_value(spark: Any, batch_run: dict[str, Any]) -> None:
    df = spark.read.parquet(str(batch_run["root"] / "out" / "aggregates"))
    assert tuple(sorted(df.columns)) == tuple(sorted(AGGREGATE_COLUMNS))
    got = spark_aggregates(df.collect())
    want = expected_aggregates(batch_run["msgs"], 60)
    assert_same_aggregates(got, want)
    # spot checks that say in words what the oracle computes
    w0 = T0
    t = got[(w0, P1, "esp32-01/temperature", "value")]
    # 20.5, 21.0, 19.5 from file 1 and the late 30.0 from file 2
    assert (t["count"], t["min"], t["max"], t["last"]) == (4, 19.5, 30.0, 19.5)
    assert t["mean"] == pytest.approx((20.5 + 21.0 + 19.5 + 30.0) / 4)
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
    # the wrong device clock does not move the reading out of its received_at window
    clock = got[(w0 + timedelta(minutes=1), P2, "esp32-02/temperature", "time")]
    assert clock["last_str"] == "1970-01-01T00:00:00Z"
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


def test_partitioned_by_date(batch_run: dict[str, Any]) -> None:
    out = batch_run["root"] / "out" / "aggregates"
    assert [p.name for p in out.iterdir() if p.is_dir()] == ["date=2026-11-21"]


def test_quarantine_keeps_every_bad_line(spark: Any, batch_run: dict[str, Any]) -> None:
    q = spark.read.json(str(batch_run["root"] / "out" / "quarantine")).collect()
    bads = batch_run["bads"]
    got = Counter((r["reason"], r["raw"], Path(r["source_file"]).name) for r in q)
    want = Counter((b.reason, b.raw, batch_run["paths"][0].name) for b in bads)
    assert got == want
    s = batch_run["summary"]
    assert s.quarantined == dict(Counter(b.reason for b in bads))
    # nothing silently dropped: every line is a message or quarantined
    assert s.lines == len(batch_run["msgs"]) + len(bads)
    assert s.messages == len(batch_run["msgs"])
    assert s.files == 2
    assert s.measurements == sum(len(m.fields) for m in batch_run["msgs"])


def test_devices_first_last_count_and_gaps(spark: Any, batch_run: dict[str, Any]) -> None:
    rows = spark.read.parquet(str(batch_run["root"] / "out" / "devices")).collect()
    devs = {r["producer"]: r for r in rows}
    msgs = batch_run["msgs"]
    assert set(devs) == {m.producer for m in msgs}
    for p, r in devs.items():
        mine = [m for m in msgs if m.producer == p]
        assert r["messages"] == len(mine)
        assert r["first_seen"].replace(tzinfo=UTC) == min(m.received_at for m in mine)
        assert r["last_seen"].replace(tzinfo=UTC) == max(m.received_at for m in mine)
    hb = devs[P3]
    # heartbeats at 0,10,20,30({}),40 then 190,200: usual 10 s, one 150 s silence
    assert hb["usual_interval_s"] == 10.0
    assert hb["gap_count"] == 1
    g = hb["gaps"][0]
    assert (g["start"], g["end"], g["seconds"]) == (
        datetime(2026, 11, 21, 5, 0, 40),
        datetime(2026, 11, 21, 5, 3, 10),
        150.0,
    )
    # P1: temperature at 5,15,25,45,65,90,130 (median step 20 s), humidity at 10,40,70
    # (30 s): usual 20 s; its longest pause (90 s -> 130 s) is below 3 x 20 s
    assert devs[P1]["usual_interval_s"] == 20.0
    assert devs[P1]["gap_count"] == 0
    assert devs[None]["messages"] == 1 and devs[None]["gap_count"] == 0


def test_persisted_run_gives_the_same_outputs(
    spark: Any, batch_run: dict[str, Any], tmp_path: Path
) -> None:
    """On a cluster the parsed lines are persisted, so a lost executor's part is recomputed;
    the outputs are those of the (local default) checkpointed run."""
    root = batch_run["root"]
    spark.conf.set(KEEP_CONF, "persist")
    try:
        assert keep_mode(spark) == "persist"
        s = run_batch(spark, str(root / "landing"), str(tmp_path / "out"))
    finally:
        spark.conf.unset(KEEP_CONF)
    assert keep_mode(spark) == "checkpoint"  # local[2]
    assert s.to_dict() | {"out": None, "seconds": 0} == (
        batch_run["summary"].to_dict() | {"out": None, "seconds": 0}
    )
    for part in ("aggregates", "devices"):
        got = sorted(map(repr, spark.read.parquet(str(tmp_path / "out" / part)).collect()))
        want = sorted(map(repr, spark.read.parquet(str(root / "out" / part)).collect()))
        assert got == want, part


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


def test_summary_file_and_render(batch_run: dict[str, Any]) -> None:
    s = batch_run["summary"]
    text = s.render()
    assert "quarantined       10" in text and "malformed_json: 4" in text
    assert len(text.splitlines()) <= 24
    on_disk = json.loads((batch_run["root"] / "out" / "_summary.json").read_text())
    assert on_disk["messages"] == s.messages
    assert on_disk["first_received"] == "2026-11-21T05:00:00.000000Z"


def test_cli_batch_rerun_is_idempotent_and_plot(
    spark: Any, batch_run: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    root = batch_run["root"]
    before = sorted(map(repr, spark.read.parquet(str(root / "out" / "aggregates")).collect()))
    rc = cli.main(
        ["batch", "--landing", str(root / "landing"), "--out", str(root / "out"), "--json"]
    )
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["messages"] == batch_run["summary"].messages
    after = sorted(map(repr, spark.read.parquet(str(root / "out" / "aggregates")).collect()))
    assert after == before

    png = root / "temp.png"
    rc = cli.main(
        [
            "plot",
            "--out",
            str(root / "out"),
            "--field",
            "value",
            "--topic",
            "temperature",
            "--png",
            str(png),
        ]
    )
    assert rc == 0
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
    s = run_batch(spark, str(landing), str(tmp_path / "out"))
    assert (s.files, s.messages, s.quarantined) == (2, 12, {"missing_id": 1})
    got = spark_aggregates(spark.read.parquet(str(tmp_path / "out" / "aggregates")).collect())
    assert_same_aggregates(got, expected_aggregates(good))
    q = spark.read.json(str(tmp_path / "out" / "quarantine")).collect()
    assert len(q) == 1 and json.loads(q[0]["raw"])["topic_path"] == "x/y"
    assert q[0]["source_file"].endswith(".parquet")


def test_empty_landing_zone(spark: Any, tmp_path: Path) -> None:
    (tmp_path / "landing").mkdir()
    s = run_batch(spark, str(tmp_path / "landing"), str(tmp_path / "out"))
    assert (s.files, s.lines, s.windows, s.producers) == (0, 0, 0, 0)
    assert "[- .. -]" in s.render()


def test_landing_format_both_counts_each_id_once(
    spark: Any, batch_run: dict[str, Any], tmp_path: Path
) -> None:
    """Gateway `--landing-format both`: every record in a .jsonl AND a .parquet file of the
    same directory. Each id counts once: the aggregates, the devices and the quarantine equal
    the JSON-lines-only run; the summary counts the second copies as duplicates."""
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
    s = run_batch(spark, str(landing), str(tmp_path / "out"), window="1 minute")
    single = batch_run["summary"]
    assert (s.files, s.messages, s.duplicates) == (4, len(msgs), len(msgs))
    assert s.lines == 2 * len(msgs) + len(bads) == s.messages + s.duplicates + s.quarantined_total
    assert (s.quarantined, s.measurements, s.windows, s.producers) == (
        single.quarantined,
        single.measurements,
        single.windows,
        single.producers,
    )
    assert single.duplicates == 0
    assert f"duplicates        {len(msgs)}" in s.render()

    def read(out: Path, part: str) -> Any:
        return spark.read.format("json" if part == "quarantine" else "parquet").load(
            str(out / part)
        )

    both_out, single_out = tmp_path / "out", batch_run["root"] / "out"
    got = spark_aggregates(read(both_out, "aggregates").collect())
    assert_same_aggregates(got, spark_aggregates(read(single_out, "aggregates").collect()))
    assert_same_aggregates(got, expected_aggregates(msgs, 60))
    assert sorted(map(repr, read(both_out, "devices").collect())) == sorted(
        map(repr, read(single_out, "devices").collect())
    )
    assert sorted(r["raw"] for r in read(both_out, "quarantine").collect()) == sorted(
        b.raw for b in bads
    )
    on_disk = json.loads((both_out / "_summary.json").read_text())
    assert on_disk["duplicates"] == len(msgs)
