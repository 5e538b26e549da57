"""Schemas of the landing zone (design.md "Landing zone") and of what this job writes.

The landing schema is explicit: no inference pass, no surprise when a file lacks a key.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import types as T

CORRUPT = "_corrupt_record"

# Required keys: without them a line cannot be placed in a window (received_at), attributed
# (id) or measured (fields). producer and topic_path may be null per the contract: such
# messages are aggregated under a null key rather than rejected.
REQUIRED = ("id", "received_at", "fields")

# The JSON-lines landing line, as parsed. `payload` and `message_type` are not needed for
# aggregation; leaving them out of the parse schema lets the JSON parser skip them without
# building strings (the payload is most of a line's bytes). `topic_namespace` is read to
# derive a device id from `dev:<id>/...` topics of lines written before `device_id` existed.
LANDING_JSON = T.StructType(
    [
        T.StructField("id", T.StringType()),
        T.StructField("received_at", T.StringType()),
        T.StructField("event_time", T.StringType()),
        T.StructField("producer", T.StringType()),
        T.StructField("device_id", T.StringType()),
        T.StructField("gateway_id", T.StringType()),
        T.StructField("topic_namespace", T.StringType()),
        T.StructField("topic_path", T.StringType()),
        T.StructField("fields", T.MapType(T.StringType(), T.StringType())),
        T.StructField(CORRUPT, T.StringType()),
    ]
)

# Parquet landing variant (docs/spark_ingest.md "Parquet landing"): the contract's columns,
# received_at as a UTC timestamp instead of text.
LANDING_PARQUET = T.StructType(
    [
        T.StructField("id", T.StringType()),
        T.StructField("received_at", T.TimestampType()),
        T.StructField("producer", T.StringType()),
        T.StructField("topic_namespace", T.StringType()),
        T.StructField("topic_path", T.StringType()),
        T.StructField("message_type", T.StringType()),
        T.StructField("fields", T.MapType(T.StringType(), T.StringType())),
        T.StructField("payload", T.StringType()),
        T.StructField("event_time", T.TimestampType()),
        T.StructField("device_id", T.StringType()),
        T.StructField("gateway_id", T.StringType()),
        T.StructField("fields_truncated", T.BooleanType()),
        T.StructField("payload_omitted", T.LongType()),
    ]
)


def parquet_landing_arrow() -> Any:
    """The Parquet landing variant as a pyarrow schema (what the gateway would write)."""
    import pyarrow as pa

    return pa.schema(
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


# One parsed, valid message (internal, between parsing and aggregation; also what the
# streaming job stages). `at` is the time it counts at (windows, watermark, gaps): its
# `received_at`, or with `--time event` its `event_time` where it has one. `key` is the
# group key: "device:<device_id>" where the device is known, else "producer:<producer>",
# null for a message with neither (all such messages form one group, as before).
MESSAGE = T.StructType(
    [
        T.StructField("id", T.StringType(), False),
        T.StructField("received_at", T.TimestampType(), False),
        T.StructField("event_time", T.TimestampType()),
        T.StructField("at", T.TimestampType(), False),
        T.StructField("key", T.StringType()),
        T.StructField("device_id", T.StringType()),
        T.StructField("producer", T.StringType()),
        T.StructField("gateway_id", T.StringType()),
        T.StructField("topic_path", T.StringType()),
        T.StructField("fields", T.MapType(T.StringType(), T.StringType())),
    ]
)

AGGREGATE_COLUMNS = (
    "window_start",
    "window_end",
    "device_id",
    "producer",
    "gateway_id",
    "topic_path",
    "field",
    "count",
    "numeric_count",
    "min",
    "max",
    "mean",
    "last",
    "last_str",
    "last_at",
    "date",
)

QUARANTINE_COLUMNS = ("reason", "source_file", "raw")
