"""Robust edges (issue 24, point 4): what `received_at` may be (RFC 3339 and the ISO 8601
basic format) and why anything else is refused; a UTF-8 byte-order mark; a damaged Parquet
file said in one line and quarantined while the run goes on; the gap rule under bursts,
rate changes and jitter."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from ingest_data import T0, msg, new_database, write_zone

from spark_ingest import timestamps
from spark_ingest.batch import run_batch
from spark_ingest.synth import landing_name, producer_of, publish, write_parquet_messages

pytestmark = pytest.mark.spark

ACCEPTED = {
    "2026-11-21T05:00:00.123456Z": datetime(2026, 11, 21, 5, 0, 0, 123456),
    "2026-11-21t05:00:00z": datetime(2026, 11, 21, 5, 0),  # RFC 3339 §5.6: t and z
    "2026-11-21 05:00:00Z": datetime(2026, 11, 21, 5, 0),  # RFC 3339 §5.6: a space
    "2026-11-21T06:30:00+01:30": datetime(2026, 11, 21, 5, 0),
    "2026-11-21T00:00:00-05:00": datetime(2026, 11, 21, 5, 0),
    "2026-11-21T05:00:00.1234567891Z": datetime(2026, 11, 21, 5, 0, 0, 123456),
    "2026-11-21T05:00:00,5Z": datetime(2026, 11, 21, 5, 0, 0, 500000),  # ISO 8601 comma
    "20261121T050000Z": datetime(2026, 11, 21, 5, 0),  # ISO 8601 basic format
    "20261121T063000+0130": datetime(2026, 11, 21, 5, 0),
    "2026-11-21T05:00Z": datetime(2026, 11, 21, 5, 0),  # reduced precision (ISO 8601)
    "2026-12-31T23:59:60Z": datetime(2026, 12, 31, 23, 59, 59, 999999),  # leap second
    "2026-11-21T05:00:00": datetime(2026, 11, 21, 5, 0),  # no offset: UTC, as before
    " 2026-11-21T05:00:00Z ": datetime(2026, 11, 21, 5, 0),
}
REFUSED = {
    "2026-11-21": timestamps.DATE_ONLY,
    "20261121": timestamps.DATE_ONLY,
    "2026-02-30T00:00:00Z": timestamps.NO_SUCH_TIME,
    "2026-11-21T24:00:00Z": timestamps.NO_SUCH_TIME,
    "2026-11-21T05:61:00Z": timestamps.NO_SUCH_TIME,
    "yesterday": timestamps.NOT_A_DATE_TIME,
    "2026-W47-5T05:00:00Z": timestamps.NOT_A_DATE_TIME,  # week dates: not RFC 3339
    "1732165200": timestamps.NOT_A_DATE_TIME,
}


def test_received_at_forms(spark: Any) -> None:
    from pyspark.sql import functions as F

    rows = [(k,) for k in [*ACCEPTED, *REFUSED]]
    df = spark.createDataFrame(rows, "s string").select(
        "s", timestamps.parse(F.col("s")).alias("t"), timestamps.refusal(F.col("s")).alias("why")
    )
    got = {r["s"]: (r["t"], r["why"]) for r in df.collect()}
    for text, want in ACCEPTED.items():
        assert got[text] == (want, None), text
    for text, why in REFUSED.items():
        assert got[text] == (None, why), text


def _bom_zone(landing: Path) -> None:
    ok = msg(5, producer_of("esp32-01"), "esp32-01/temperature", {"value": "20"})
    date_only = json.loads(ok.to_json()) | {"id": "d1", "received_at": "2026-11-21"}
    lower = json.loads(ok.to_json()) | {"id": "l1", "received_at": "2026-11-21t05:00:30z"}
    lines = [ok.to_json(), json.dumps(date_only), json.dumps(lower)]
    publish(landing, landing_name(T0, 1), ("\ufeff" + "\n".join(lines) + "\n").encode())


def test_bom_date_only_and_a_damaged_parquet_file(spark: Any, tmp_path: Path) -> None:
    """A file starting with a UTF-8 BOM is read; a date-only received_at is quarantined with
    its reason in words; a truncated Parquet file is said in one line, quarantined as a
    file, and the rest of the run goes on (exit 0, its other files aggregated)."""
    landing = tmp_path / "landing"
    _bom_zone(landing)
    whole = write_parquet_messages(
        landing, landing_name(T0, 2, ".parquet"),
        [msg(40, producer_of("esp32-02"), "esp32-02/temperature", {"value": "21"})],
    )  # fmt: skip
    torn = landing / landing_name(T0, 3, ".parquet")
    torn.write_bytes(whole.read_bytes()[:-20])  # cut short: no footer
    db = new_database()
    said: list[str] = []
    s = run_batch(spark, str(landing), str(tmp_path / "out"), database=db, progress=said.append)
    assert (s.files, s.messages) == (3, 3)
    assert s.quarantined == {"bad_received_at": 1, "damaged_file": 1}
    assert list(s.damaged) and "truncated" in next(iter(s.damaged.values()))
    warning = [m for m in said if "damaged landing file" in m]
    assert len(warning) == 1 and "\n" not in warning[0] and torn.name in warning[0]
    assert f"DAMAGED FILE      {torn.name}" in s.render()
    q = {r["reason"]: r for r in spark.table(f"{db}.quarantine").collect()}
    assert (
        q["bad_received_at"]["detail"] == "received_at '2026-11-21': a date without a time of day"
    )
    assert q["damaged_file"]["source_file"].endswith(torn.name) and q["damaged_file"]["raw"] is None
    counts = {r["device_id"]: r["messages"] for r in spark.table(f"{db}.devices").collect()}
    assert counts == {"esp32-01": 2, "esp32-02": 1}


def test_a_line_that_is_not_utf8_is_quarantined_not_altered(spark: Any, tmp_path: Path) -> None:
    """JSON text is UTF-8 (RFC 8259 §8.1). A line written in Latin-1 (a hand-made or
    re-encoded file) was read with U+FFFD for its byte: the device "café" became "caf\ufffd"
    and was counted as a device of its own, without a word. Now it is quarantined, and the
    tables stay readable by other readers (DuckDB refuses a Parquet string that is not
    UTF-8). A line that is UTF-8 and holds U+FFFD itself is a message like any other."""
    import duckdb

    landing = tmp_path / "landing"

    def text(m: Any) -> str:  # as written, not \u-escaped
        return json.dumps(json.loads(m.to_json()), ensure_ascii=False, separators=(",", ":"))

    cafe = text(msg(5, producer_of("café"), "café/temperature", {"value": "20"}))
    odd = text(msg(10, producer_of("esp32-01"), "esp32-01/temperature", {"note": "a \ufffd"}))
    assert "\ufffd".encode() in odd.encode()  # the three bytes of U+FFFD in UTF-8
    publish(landing, landing_name(T0, 1), cafe.encode("latin-1") + b"\n" + odd.encode() + b"\n")
    db = new_database()
    s = run_batch(spark, str(landing), str(tmp_path / "out"), database=db)
    assert (s.messages, s.quarantined) == (1, {"not_utf8": 1}), s.to_dict()
    q = spark.table(f"{db}.quarantine").collect()
    assert [r["reason"] for r in q] == ["not_utf8"]
    assert "caf\ufffd" in q[0]["raw"] and "not UTF-8" in q[0]["detail"]
    devices = [r["device_id"] for r in spark.table(f"{db}.devices").collect()]
    assert devices == ["esp32-01"]
    files = [str(f) for f in (tmp_path / "out" / "quarantine").rglob("*.parquet")]
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet({files!r})").fetchall() == [(1,)]


def _garble(path: Path, start: int, end: int) -> None:
    """Bytes [start, end) of `path` inverted, as a bad disk sector or a faulty copy leaves
    them: the markers and the footer stay whole."""
    data = bytearray(path.read_bytes())
    data[start:end] = bytes(b ^ 0xFF for b in data[start:end])
    path.write_bytes(bytes(data))


def test_a_parquet_file_damaged_inside_is_said_and_quarantined_whole(
    spark: Any, tmp_path: Path
) -> None:
    """A Parquet file whose markers and footer are whole but whose data is not: Spark
    skips what it cannot decode (ignoreCorruptFiles), so the file read as fewer rows than
    its footer counts, or none, and nothing said so. Each such file is now a damaged file,
    said in one line and quarantined whole, even the row group that could be read; the run
    goes on with the other files. So is a file with a column of another type."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    landing = tmp_path / "landing"
    dev = [msg(k, producer_of("esp32-01"), "esp32-01/temperature", {"value": "20"})
           for k in range(0, 60, 5)]  # fmt: skip
    write_parquet_messages(landing, landing_name(T0, 1, ".parquet"), dev)
    other = [msg(k, producer_of("esp32-02"), "esp32-02/temperature", {"value": str(k)})
             for k in range(0, 60, 5)]  # fmt: skip
    # all of its data garbled: it read as no row at all
    none = write_parquet_messages(landing, landing_name(T0, 2, ".parquet"), other)
    footer = int.from_bytes(none.read_bytes()[-8:-4], "little")
    _garble(none, 4, none.stat().st_size - 8 - footer)
    # two row groups, the second garbled: the first read, the rest of the file skipped
    half = write_parquet_messages(tmp_path, landing_name(T0, 3, ".parquet"), other)
    pq.write_table(pq.read_table(half), landing / half.name, row_group_size=6)
    half = landing / half.name
    # a column of another type than the landing schema's (an id as a number): Spark
    # skipped the whole file the same way
    typed = write_parquet_messages(landing, landing_name(T0, 4, ".parquet"), other)
    t = pq.read_table(typed)
    ids = pa.array(range(len(t)), pa.int64())
    pq.write_table(t.set_column(t.schema.get_field_index("id"), "id", ids), typed)
    meta = pq.read_metadata(half)
    assert meta.num_row_groups == 2
    chunks = [meta.row_group(1).column(i) for i in range(meta.num_columns)]
    second = min(c.dictionary_page_offset or c.data_page_offset for c in chunks)
    footer = int.from_bytes(half.read_bytes()[-8:-4], "little")
    _garble(half, second, half.stat().st_size - 8 - footer)

    db = new_database()
    said: list[str] = []
    s = run_batch(spark, str(landing), str(tmp_path / "out"), database=db, progress=said.append)
    assert set(s.damaged) == {f"file:{none}", f"file:{half}", f"file:{typed}"}, s.damaged
    assert "12 of the 12 rows" in s.damaged[f"file:{none}"]
    assert "6 of the 12 rows" in s.damaged[f"file:{half}"]
    assert "another type" in s.damaged[f"file:{typed}"]
    warnings = [m for m in said if "damaged landing file" in m]
    assert len(warnings) == 3 and all("\n" not in w for w in warnings), warnings
    assert f"DAMAGED FILE      {half.name}" in s.render()
    assert (s.files, s.messages, s.quarantined) == (4, 12, {"damaged_file": 3})
    q = spark.table(f"{db}.quarantine").where("reason = 'damaged_file'").collect()
    got = sorted(r["source_file"].rsplit("/", 1)[-1] for r in q)
    assert got == sorted([none.name, half.name, typed.name])
    counts = {r["device_id"]: r["messages"] for r in spark.table(f"{db}.devices").collect()}
    assert counts == {"esp32-01": 12}  # none of the half-read file's rows


def _series(device: str, times: list[float]) -> list[Any]:
    return [msg(t, producer_of(device), f"{device}/temperature", {"value": "1"}) for t in times]


def test_the_gap_rule_survives_bursts_rate_changes_and_jitter(spark: Any, tmp_path: Path) -> None:
    # a 10 s device silent for 5 minutes, which then flushes 30 buffered readings at once
    flush = [
        *[t * 10.0 for t in range(30)],
        *[590 + k * 0.001 for k in range(30)],
        *[600 + t * 10.0 for t in range(30)],
    ]
    # 1 s for two minutes, then every 3.5 s with a second of jitter: a new rate, no gap
    jitter = [(0.6, -0.4, 0.1, 0.5, -0.2)[k % 5] for k in range(40)]
    rate = [*[float(t) for t in range(120)], *[120 + 3.5 * k + jitter[k] for k in range(1, 40)]]
    # 10 s, then two silences with one message between them: two gaps
    twice = [*[t * 10.0 for t in range(20)], 400.0, 700.0, *[710 + t * 10.0 for t in range(20)]]
    landing = tmp_path / "landing"
    write_zone(landing, [[*_series("flush-01", flush), *_series("rate-02", rate),
                          *_series("twice-03", twice)]])  # fmt: skip
    db = new_database()
    run_batch(spark, str(landing), str(tmp_path / "out"), database=db)
    devs = {r["device_id"]: r for r in spark.table(f"{db}.devices").collect()}
    assert {d: devs[d]["gap_count"] for d in devs} == {"flush-01": 1, "rate-02": 0, "twice-03": 2}
    dq = [r for r in spark.table(f"{db}.device_quality").collect() if r["device_id"] == "flush-01"]
    (gap,) = [r for r in dq if r["gaps"]]
    assert gap["window_start"] == datetime(2026, 11, 21, 5, 9) and gap["missed"] == 29
    assert devs["flush-01"]["period_s"] == 10.0
    assert devs["rate-02"]["period_s"] == pytest.approx(3.5, abs=0.6)
