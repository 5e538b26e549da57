"""The Arrow aggregator (spark_ingest.arrow_aggregate) against the oracle, alone and inside a
real Spark batch run next to Spark's own plan (`--aggregator sql`): the same rows, value by
value, on edge cases (ties, null keys, null values, times before 1970, odd numbers)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from ingest_data import (
    P1,
    P2,
    T0,
    assert_same_aggregates,
    batch_zone,
    expected_aggregates,
    msg,
    spark_aggregates,
    write_zone,
)

from spark_ingest.arrow_aggregate import aggregate_batches, use_arrow, window_micros
from spark_ingest.batch import run_batch
from spark_ingest.synth import Message


def edge_messages() -> list[Message]:
    t = "edge/temperature"
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    out = [
        # same received_at: the greater id is the last one, whatever the arrival order
        msg(3, P1, t, {"value": "2.0"}, msg_id="tie-b"),
        msg(3, P1, t, {"value": "1.0"}, msg_id="tie-a"),
        msg(4, P1, t, {"value": "oops", "unit": "Cel"}),  # last reading is no number
        msg(14, P1, t, {"value": "1e999"}),  # overflows: no finite reading
        msg(15, P1, t, {"value": " 7 ", "x": "\x0b5", "y": "+.5e1", "z": "5."}),
        msg(16, P1, t, {"value": None}),  # type: ignore[dict-item]  # JSON null
        msg(17, P1, t, {}),  # no fields: no rows
        msg(21, None, None, {"value": "1"}),  # producer and topic may be null
        msg(22, None, t, {"value": "2"}),
        msg(23, P2, None, {"value": "3"}),
    ]
    # before 1970: windows are floored, not truncated toward zero
    for k, sec in enumerate((-25, -15, -5, 0, 5)):
        out.append(Message(id=f"old-{k}", received_at=epoch + timedelta(seconds=sec),
                           producer=P2, topic_path="pico/old", fields={"value": str(sec)}))
    return out


def arrow_batches(msgs: list[Message], size: int) -> list[Any]:
    schema = pa.schema([
        ("id", pa.string()),
        ("received_at", pa.timestamp("us", tz="UTC")),
        ("producer", pa.string()),
        ("topic_path", pa.string()),
        ("fields", pa.map_(pa.string(), pa.string())),
    ])
    rows = [{"id": m.id, "received_at": m.received_at, "producer": m.producer,
             "topic_path": m.topic_path, "fields": list(m.fields.items())} for m in msgs]
    return pa.Table.from_pylist(rows, schema).to_batches(max_chunksize=size)


def arrow_aggregates(batches: list[Any]) -> dict[Any, dict[str, Any]]:
    got: dict[Any, dict[str, Any]] = {}
    for b in batches:
        for d in b.to_pylist():
            key = (d.pop("window_start"), d.pop("producer"), d.pop("topic_path"),
                   d.pop("field"))
            assert key not in got, f"duplicate aggregate row {key}"
            d["date"] = key[0].date()
            got[key] = d
    return got


@pytest.mark.parametrize(("chunk", "size"), [(10**9, 1000), (3, 2), (1, 1), (7, 5)])
def test_chunks_in_any_order_give_the_oracle(chunk: int, size: int) -> None:
    """Partial aggregates of chunks merge to the whole: the same rows however the messages
    are cut and ordered (executors get them in no particular order)."""
    _, zone, _ = batch_zone()
    msgs = zone + edge_messages()
    random.Random(chunk).shuffle(msgs)
    out = list(aggregate_batches(iter(arrow_batches(msgs, size)), 10_000_000, chunk=chunk))
    assert_same_aggregates(arrow_aggregates(out), expected_aggregates(msgs, 10))
    # spot checks in words
    got = arrow_aggregates(out)
    tie = got[(T0, P1, "edge/temperature", "value")]
    assert (tie["count"], tie["numeric_count"], tie["last"], tie["last_str"]) == (
        3, 2, None, "oops")
    odd = {k[3]: v["last"] for k, v in got.items()
           if k[:3] == (T0 + timedelta(seconds=10), P1, "edge/temperature")}
    assert odd == {"value": None, "x": 5.0, "y": 5.0, "z": 5.0}
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    old = {k[0]: v["count"] for k, v in got.items() if k[2] == "pico/old"}
    assert old == {epoch - timedelta(seconds=30): 1, epoch - timedelta(seconds=20): 1,
                   epoch - timedelta(seconds=10): 1, epoch: 2}


def test_no_messages_no_rows() -> None:
    assert list(aggregate_batches(iter(arrow_batches([], 10)), 60_000_000)) == []


@pytest.mark.spark
def test_arrow_and_sql_give_the_same_aggregates(spark: Any, tmp_path: Path) -> None:
    """Both aggregators of a real batch run equal the oracle, on a 10-second window."""
    files, zone, _ = batch_zone()
    edge = edge_messages()
    write_zone(tmp_path / "landing", [*files, edge])
    want = expected_aggregates(zone + edge, 10)
    results = {}
    for agg in ("arrow", "sql"):
        s = run_batch(spark, str(tmp_path / "landing"), str(tmp_path / agg),
                      window="10 seconds", aggregator=agg)
        got = spark_aggregates(spark.read.parquet(str(tmp_path / agg / "aggregates")).collect())
        assert_same_aggregates(got, want)
        results[agg] = (s.windows, s.measurements, s.messages)
    assert results["arrow"] == results["sql"]


@pytest.mark.spark
def test_window_length_is_read_by_spark(spark: Any) -> None:
    assert window_micros(spark, "1 minute") == 60_000_000
    assert window_micros(spark, "90 seconds") == 90_000_000
    with pytest.raises(Exception, match=r"(?i)interval|duration|window"):
        window_micros(spark, "soon")


def test_aggregator_choice() -> None:
    assert use_arrow("sql")[0] is False
    assert use_arrow("auto") == (True, "Arrow on the executors")
    assert use_arrow("arrow")[0] is True
