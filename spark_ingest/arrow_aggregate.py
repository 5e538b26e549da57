"""The batch job's window aggregates, computed with Arrow on the executors.

The same rows as `aggregate.window_aggregates` (tests/spark_ingest compare both with the
oracle on the same zone), in about 40 % less time (docs/spark_ingest.md, "Performance").
Spark's own plan explodes every message into one row per field and sorts those rows by
(window, producer, topic path, field): the `last` aggregate keeps a string, so Spark cannot
hash-aggregate. Here each partition's messages go to a Python worker as Arrow record batches
(`mapInArrow`); pyarrow explodes them and hash-aggregates on small integer keys.

Memory: a worker holds one chunk of messages (CHUNK_ROWS) and one partial row per group of
its partition; partial rows of several chunks are merged as they accumulate.

The price: executors need Python with pyarrow and pandas (PySpark's `sql` extra; Spark
requires pandas for any Arrow UDF). `--aggregator sql` runs Spark's plan instead, for a
cluster whose executors have no such Python. The streaming job always uses Spark's plan: its
windows are Spark state across micro-batches.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_ingest.aggregate import BLANKS, NUMBER_RE
from spark_ingest.schema import AGGREGATE_COLUMNS

# Messages per pyarrow aggregation call: big enough that per-call overhead is noise, small
# enough to keep a worker's memory in the tens of megabytes.
CHUNK_ROWS = 262_144

# What the Python worker returns (`date` is added by Spark, in the session time zone).
ARROW_OUT = T.StructType(
    [
        T.StructField("window_start", T.TimestampType()),
        T.StructField("window_end", T.TimestampType()),
        T.StructField("producer", T.StringType()),
        T.StructField("topic_path", T.StringType()),
        T.StructField("field", T.StringType()),
        T.StructField("count", T.LongType()),
        T.StructField("numeric_count", T.LongType()),
        T.StructField("min", T.DoubleType()),
        T.StructField("max", T.DoubleType()),
        T.StructField("mean", T.DoubleType()),
        T.StructField("last", T.DoubleType()),
        T.StructField("last_str", T.StringType()),
        T.StructField("last_at", T.TimestampType()),
    ]
)


def available() -> str | None:
    """None when this driver can run Arrow UDFs, else why not (what to install)."""
    try:
        import pandas  # noqa: F401  (Spark refuses Arrow UDFs without pandas)
        import pyarrow  # noqa: F401
    except ImportError as e:
        return f"{e.name} is not installed (pip install 'pyspark[sql]')"
    return None


def window_micros(spark: SparkSession, window: str) -> int:
    """The length of a tumbling `window` ("1 minute", "10 seconds") in microseconds, as
    Spark's `window()` reads it (same parser, same error for a bad duration)."""
    row = (
        spark.range(1)
        .select(F.window(F.lit(0).cast("timestamp"), window).alias("w"))
        .select((F.unix_micros("w.end") - F.unix_micros("w.start")).alias("us"))
        .first()
    )
    assert row is not None
    return int(row["us"])


def window_aggregates_arrow(messages: DataFrame, window: str) -> DataFrame:
    """Tumbling `window` aggregates of valid `messages` (id, received_at, producer,
    topic_path, fields), AGGREGATE_COLUMNS, equal to aggregate.window_aggregates(
    aggregate.measurements(messages), window).

    `messages` must be partitioned by producer (batch.by_producer), as in run_batch: each
    partition is aggregated on its own, so a group split over two partitions would give two
    rows."""
    spark = messages.sparkSession
    _ship_by_value()
    width = window_micros(spark, window)

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        return aggregate_batches(batches, width)

    return (
        messages.select("id", "received_at", "producer", "topic_path", "fields")
        .mapInArrow(run, ARROW_OUT)
        .withColumn("date", F.to_date("window_start"))
        .select(*AGGREGATE_COLUMNS)
    )


def _ship_by_value() -> None:
    # Executors import nothing of this package: the worker function and what it calls are
    # pickled by value (cloudpickle), so only pyspark, pyarrow and pandas must be there.
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]


def aggregate_batches(
    batches: Iterator[Any], width: int, chunk: int = CHUNK_ROWS
) -> Iterator[Any]:
    """Record batches of messages, in any order -> record batches of ARROW_OUT, one row per
    (window, producer, topic_path, field) of the input. Runs on an executor (imports only
    pyarrow); holds one chunk of messages and at most about two partial rows per group."""
    import pyarrow as pa

    pending: list[Any] = []
    rows = 0
    partials: list[Any] = []
    partial_rows = 0
    merged_rows = 0  # rows of the last merge: merging again only once they have doubled,
    # so a partition whose groups do not repeat across chunks is not merged over and over
    for batch in batches:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        rows += batch.num_rows
        if rows >= chunk:
            partials.append(_partial(pa.Table.from_batches(pending), width))
            partial_rows += partials[-1].num_rows
            pending, rows = [], 0
            if len(partials) > 1 and partial_rows >= max(chunk, 2 * merged_rows):
                partials = [_merge(partials)]
                partial_rows = merged_rows = partials[0].num_rows
    if rows:
        partials.append(_partial(pa.Table.from_batches(pending), width))
    if partials:
        yield from _final(_merge(partials) if len(partials) > 1 else partials[0], width)


def _window_start(received_at: Any, width: int) -> Any:
    """Epoch microseconds of each row's window start: floor(t / width) * width, the same
    tumbling windows as Spark's `window()` (aligned to the epoch, also before 1970)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = pc.cast(received_at, pa.int64())
    start = pc.multiply(pc.divide(t, width), width)  # integer division truncates toward 0
    return pc.if_else(pc.greater(start, t), pc.subtract(start, width), start)


KEYS = ["ws", "producer", "topic_path", "field"]
# a partial row's columns and how partial rows of one group merge (the `last` ones after
# sorting by (last_at, last_id))
MERGE = [(k, "key") for k in KEYS] + [
    ("count", "sum"), ("numeric_count", "sum"), ("min", "min"), ("max", "max"), ("sum", "sum"),
    ("last", "last"), ("last_str", "last"), ("last_at", "last"), ("last_id", "last"),
]


def _partial(msgs: Any, width: int) -> Any:
    """Messages -> one partial row per group: count, numeric_count, min, max, sum, and the
    entry with the greatest (received_at, id) as last, last_str, last_at, last_id."""
    import pyarrow as pa
    import pyarrow.compute as pc

    # (received_at, id) ascending, so that the ordered `last` of a single-threaded grouping
    # is the greatest (received_at, id), as in aggregate.window_aggregates; sorting the
    # messages before exploding them sorts 4x fewer rows
    msgs = msgs.take(pc.sort_indices(msgs, [("received_at", "ascending"), ("id", "ascending")]))
    fields = msgs.column("fields").combine_chunks()
    # a Map array is a list of (key, value) structs, read here from its offsets, so a
    # sliced array starts at its own first entry
    entries = pa.ListArray.from_arrays(fields.offsets, fields.values)
    owner = pc.list_parent_indices(entries)  # message index of each entry, in order
    flat = pc.list_flatten(entries)
    key, text = flat.field("key"), flat.field("value")

    # aggregate.NUMBER_RE decides what is a number; Arrow's parser then reads it as Spark's
    # cast does (blanks trimmed, sign, exponent). 1e999 overflows to Infinity, which is no
    # finite reading (NaN and Infinity are not matched at all).
    is_number = pc.fill_null(pc.match_substring_regex(text, NUMBER_RE), False)
    parsed = pc.cast(pc.utf8_trim(pc.if_else(is_number, text, None), BLANKS), pa.float64())
    value = pc.if_else(pc.fill_null(pc.is_finite(parsed), False), parsed, None)

    # Group on small integers: the string keys are dictionary-encoded once per message (not
    # per entry), the entry's message index (`owner`, ascending in (received_at, id)) stands
    # in for its time and id, and is turned back into them per group only.
    received = msgs.column("received_at").combine_chunks()
    producer = pc.dictionary_encode(msgs.column("producer").combine_chunks())
    topic = pc.dictionary_encode(msgs.column("topic_path").combine_chunks())
    field = pc.dictionary_encode(key)
    rows = pa.table(
        {
            "ws": _window_start(received, width).take(owner),
            "p": producer.indices.take(owner),
            "t": topic.indices.take(owner),
            "f": field.indices,
            "value": value,
            "value_str": text,
            "owner": owner,
        }
    )
    keep_nulls = pc.ScalarAggregateOptions(skip_nulls=False)
    g = rows.group_by(["ws", "p", "t", "f"], use_threads=False).aggregate(
        [
            ([], "count_all"),
            ("value", "count"),
            ("value", "min"),
            ("value", "max"),
            ("value", "sum"),
            ("value", "last", keep_nulls),
            ("value_str", "last", keep_nulls),
            ("owner", "max"),
        ]
    )
    last = g.column("owner_max")
    return pa.table(
        {
            "ws": g.column("ws"),
            "producer": producer.dictionary.take(g.column("p")),
            "topic_path": topic.dictionary.take(g.column("t")),
            "field": field.dictionary.take(g.column("f")),
            "count": g.column("count_all"),
            "numeric_count": g.column("value_count"),
            "min": g.column("value_min"),
            "max": g.column("value_max"),
            "sum": g.column("value_sum"),
            "last": g.column("value_last"),
            "last_str": g.column("value_str_last"),
            "last_at": received.take(last),
            "last_id": msgs.column("id").take(last),
        }
    )


def _merge(partials: list[Any]) -> Any:
    """Partial rows of several chunks -> one partial row per group."""
    import pyarrow as pa
    import pyarrow.compute as pc

    both = pa.concat_tables(partials)
    both = both.take(pc.sort_indices(both, [("last_at", "ascending"), ("last_id", "ascending")]))
    keep_nulls = pc.ScalarAggregateOptions(skip_nulls=False)
    g = both.group_by(KEYS, use_threads=False).aggregate(
        [(c, how, keep_nulls) if how == "last" else (c, how) for c, how in MERGE[len(KEYS):]]
    )
    # by name: the column order of a grouping's result differs between pyarrow versions
    return pa.table({c: g.column(c if c in KEYS else f"{c}_{how}") for c, how in MERGE})


def _final(p: Any, width: int) -> Iterator[Any]:
    """Partial rows -> ARROW_OUT record batches (mean = sum / numeric_count)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ts = pa.timestamp("us", tz="UTC")
    ws = p.column("ws")
    numeric = p.column("numeric_count")
    mean = pc.if_else(
        pc.greater(numeric, 0), pc.divide(p.column("sum"), pc.cast(numeric, pa.float64())), None
    )
    out = pa.table(
        {
            "window_start": pc.cast(ws, ts),
            "window_end": pc.cast(pc.add(ws, width), ts),
            "producer": p.column("producer"),
            "topic_path": p.column("topic_path"),
            "field": p.column("field"),
            "count": pc.cast(p.column("count"), pa.int64()),
            "numeric_count": pc.cast(numeric, pa.int64()),
            "min": p.column("min"),
            "max": p.column("max"),
            "mean": mean,
            "last": p.column("last"),
            "last_str": p.column("last_str"),
            "last_at": pc.cast(p.column("last_at"), ts),
        }
    )
    yield from out.to_batches(max_chunksize=65_536)


def use_arrow(choice: str) -> tuple[bool, str]:
    """The `--aggregator` choice ("auto", "arrow" or "sql") -> (use Arrow?, why), for the
    progress line. "auto" picks Arrow when this driver has pandas and pyarrow."""
    if choice == "sql":
        return False, "Spark SQL (--aggregator sql)"
    missing = available()
    if choice == "arrow" and missing:
        raise RuntimeError(f"--aggregator arrow: {missing}")
    if missing:
        return False, f"Spark SQL ({missing})"
    return True, "Arrow on the executors"
