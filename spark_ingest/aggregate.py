"""Measurements and their per-window aggregates (the `aggregates` table): the same code for
every run, full or incremental.

A reading's `fields` are its payload's leaves (design.md): `value`, `unit`, `time` and the
`device` attribute for the project's devices, anything for others. Every field is a
measurement except `device`, `unit` and `time`, which say who, in what unit and when (the
unit becomes the `unit` column of `value`; the time is the line's `event_time`). Camera
events (`kind` "event") are not readings: they have tables of their own (camera.py).

Time is a message's `at`: the gateway's `received_at` by default, the device's `event_time`
with `--time event`. Groups are per device (`key`: the device id where known, else the
producer), so a device whose address changes stays one series; `producer`, `gateway_id` and
`site` are those of the window's last message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_ingest.landing import device_of_key
from spark_ingest.schema import AGGREGATES

if TYPE_CHECKING:
    from spark_ingest.consume import FileMap

# A number, as JSON and XML Schema write one: optional sign, digits with an optional
# fraction (or a bare fraction), optional exponent; surrounding blanks allowed. Only such
# text is cast: casting everything with try_cast costs a Java exception per non-number,
# which made the explode 3.5x slower (measured, 2M messages). NaN and Infinity are not
# matched: a reading that is not a finite number has no min or max.
NUMBER_RE = r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$"

# fields that describe a reading rather than measure something
RESERVED_FIELDS = ("device", "unit", "time")


def window_bounds(w: Column, window_us: int) -> list[Column]:
    """window_start, window_end (timestamps) of a window starting at `w` microseconds."""
    return [
        F.timestamp_micros(w).alias("window_start"),
        F.timestamp_micros(w + F.lit(window_us)).alias("window_end"),
    ]


def partition_of(ts: Column) -> list[Column]:
    """The (date, hour) partition of a time (UTC: the session time zone is UTC)."""
    return [F.to_date(ts).alias("date"), F.hour(ts).alias("hour")]


def measurements(messages: DataFrame) -> DataFrame:
    """One row per measured field of each reading (w, key, topic_path, field, value_str,
    value, unit, at, id, producer, gateway_id, file_id).

    `value` is the entry as a double when its text is a decimal or scientific number
    (NUMBER_RE), else null (text, empty, NaN, Infinity, hex, beyond a double's range);
    `value_str` keeps the text as received. Rows keep the partitioning of `messages`.
    """
    readings = messages.where(F.col("kind") == "reading").select(
        "w",
        "key",
        "topic_path",
        "at",
        "id",
        "producer",
        "gateway_id",
        "file_id",
        F.col("fields")["unit"].alias("unit"),
        F.map_filter("fields", lambda k, _v: ~k.isin(*RESERVED_FIELDS)).alias("fields"),
    )
    exploded = readings.select(
        *[c for c in readings.columns if c != "fields"],
        F.explode("fields").alias("field", "value_str"),
    )
    num = F.expr("try_cast(value_str AS DOUBLE)")  # only reached for NUMBER_RE text
    finite = F.when(F.abs(num) < F.lit(float("inf")), num)  # 1e999 overflows to Infinity
    return exploded.withColumn("value", F.when(F.col("value_str").rlike(NUMBER_RE), finite))


def window_aggregates(meas: DataFrame, window_us: int, fmap: FileMap) -> DataFrame:
    """Tumbling-window aggregates per (window, key, topic_path, field): the `aggregates`
    table's columns.

    `last`/`last_str` are the value with the greatest (at, id): ties on the time are broken
    by message id, so the result does not depend on row order; `producer`, `gateway_id`,
    `site` and the unit come from the same message. `sum` with `numeric_count` lets a reader
    combine windows exactly (an hourly mean is sum(sum) / sum(numeric_count), not a mean of
    means). On messages hash-partitioned by key the grouping needs no shuffle. `fmap`
    (consume.file_map) names the site of the last message's file.
    """
    # Adding doubles depends on the order, and the order rows reach a group depends on how
    # the lines were read (which files, in which run, new lines before re-read ones). Sorted
    # by time and id within each group, the sum and mean are the same bits whichever way the
    # zone was read. The sort-based aggregation needs its groups sorted anyway: this order
    # satisfies it, so Spark adds no second sort (its tasks sort on two more keys).
    meas = meas.sortWithinPartitions("w", "key", "topic_path", "field", "at", "id")
    grouped = meas.groupBy("w", "key", "topic_path", "field").agg(
        F.count(F.lit(1)).alias("count"),
        F.count("value").alias("numeric_count"),
        F.sum("value").alias("sum"),
        F.min("value").alias("min"),
        F.max("value").alias("max"),
        F.avg("value").alias("mean"),
        F.max(
            F.struct("at", "id", "value_str", "value", "producer", "gateway_id", "file_id", "unit")
        ).alias("_last"),
    )
    grouped = fmap.add(grouped, "_last.file_id", "site", "_site")
    return grouped.select(
        *window_bounds(F.col("w"), window_us),
        F.col("key").alias("device_key"),
        device_of_key(F.col("key")).alias("device_id"),
        F.col("_last.producer").alias("producer"),
        F.col("_last.gateway_id").alias("gateway_id"),
        F.col("_site").alias("site"),
        "topic_path",
        "field",
        F.when(F.col("field") == "value", F.col("_last.unit")).alias("unit"),
        "count",
        "numeric_count",
        "sum",
        "min",
        "max",
        "mean",
        F.col("_last.value").alias("last"),
        F.col("_last.value_str").alias("last_str"),
        F.col("_last.at").alias("last_at"),
        *partition_of(F.timestamp_micros(F.col("w"))),
    ).select(*AGGREGATES.columns)
