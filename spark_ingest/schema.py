"""Schemas: the landing zone (design.md "Landing zone"), the messages between parsing and the
tables, and the tables this job writes (docs/spark_ingest.md, "Tables").

The landing schema is explicit: no inference pass, no surprise when a file lacks a key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import types as T

CORRUPT = "_corrupt_record"

# Required keys: without them a line cannot be placed in a window (received_at), attributed
# (id) or measured (fields). producer and topic_path may be null per the contract: such
# messages are aggregated under a null key rather than rejected.
REQUIRED = ("id", "received_at", "fields")

# The JSON-lines landing line, as parsed. `payload` is not in it: the JSON parser then skips
# it without building a string (the payload is most of a line's bytes); only the lines of a
# camera (message_type below) have their payload read, from the raw line.
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
        T.StructField("message_type", T.StringType()),
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


# One parsed, valid message (internal, between parsing and the tables). `at` is the time it
# counts at (windows, gaps): its `received_at`, or with `--time event` its `event_time` where
# it has one. `key` is the device: "device:<device_id>" where known, else
# "producer:<producer>", null for a message with neither (all such messages are one group).
# `kind` is "reading", or "event" for a camera's ONVIF message (then `payload` is its
# tt:Message). `file_id` numbers the landing file it came from in this run (its path and its
# site, the landing directory, are looked up by it: a small integer per line instead of two
# long strings). `w` is the start of its window (microseconds since the epoch).
MESSAGE = T.StructType(
    [
        T.StructField("id", T.StringType(), False),
        T.StructField("received_at", T.TimestampType(), False),
        T.StructField("event_time", T.TimestampType()),
        T.StructField("at", T.TimestampType(), False),
        T.StructField("key", T.StringType()),
        T.StructField("producer", T.StringType()),
        T.StructField("gateway_id", T.StringType()),
        T.StructField("topic_path", T.StringType()),
        T.StructField("fields", T.MapType(T.StringType(), T.StringType())),
        T.StructField("kind", T.StringType()),
        T.StructField("payload", T.StringType()),
        T.StructField("file_id", T.IntegerType()),
        T.StructField("w", T.LongType()),
    ]
)

# ---- the tables ---------------------------------------------------------------------------

PARTITION = [T.StructField("date", T.DateType()), T.StructField("hour", T.IntegerType())]


@dataclass(frozen=True)
class Table:
    """One table of the catalog: its columns (partition columns last) and whether it is
    partitioned by (date, hour) of its time."""

    name: str
    schema: T.StructType
    partitioned: bool = True

    @property
    def columns(self) -> list[str]:
        return list(self.schema.fieldNames())

    @property
    def data_columns(self) -> list[str]:
        return [c for c in self.columns if not (self.partitioned and c in ("date", "hour"))]


def _s(*fields: tuple[str, T.DataType]) -> list[T.StructField]:
    return [T.StructField(n, t) for n, t in fields]


TS, STR, DBL, LONG, INT, BOOL = (
    T.TimestampType(),
    T.StringType(),
    T.DoubleType(),
    T.LongType(),
    T.IntegerType(),
    T.BooleanType(),
)
WINDOW = _s(("window_start", TS), ("window_end", TS))
WHO = _s(
    ("device_key", STR),
    ("device_id", STR),
    ("producer", STR),
    ("gateway_id", STR),
    ("site", STR),
)
STEPS = T.ArrayType(DBL)

AGGREGATES = Table(
    "aggregates",
    T.StructType(
        [
            *WINDOW,
            *WHO,
            *_s(
                ("topic_path", STR),
                ("field", STR),
                ("unit", STR),
                ("count", LONG),
                ("numeric_count", LONG),
                ("sum", DBL),
                ("min", DBL),
                ("max", DBL),
                ("mean", DBL),
                ("last", DBL),
                ("last_str", STR),
                ("last_at", TS),
            ),
            *PARTITION,
        ]
    ),
)

DEVICE_QUALITY = Table(
    "device_quality",
    T.StructType(
        [
            *WINDOW,
            *WHO,
            *_s(
                ("topic_path", STR),
                ("kind", STR),
                ("received", LONG),
                ("first_at", TS),
                ("last_at", TS),
                ("period_s", DBL),
                ("expected", DBL),
                ("gaps", INT),
                ("missed", LONG),
                ("longest_silence_s", DBL),
                ("clock_skew_mean_s", DBL),
                ("clock_skew_min_s", DBL),
                ("clock_skew_max_s", DBL),
                # kept so that data arriving later next to this window can update its gaps
                # without reading this window's landing lines again (quality.py)
                ("_head", STEPS),
                ("_tail", STEPS),
                ("_inner_gaps", INT),
                ("_inner_missed", LONG),
                ("_inner_longest_s", DBL),
                ("_steps", INT),
            ),
            *PARTITION,
        ]
    ),
)

SITE_QUALITY = Table(
    "site_quality",
    T.StructType(
        [
            *WINDOW,
            *_s(
                ("site", STR),
                ("lines", LONG),
                ("messages", LONG),
                ("duplicates", LONG),
                ("quarantined", LONG),
                ("quarantine_rate", DBL),
                ("first_at", TS),
                ("last_at", TS),
                ("clock_skew_mean_s", DBL),
                ("clock_skew_min_s", DBL),
                ("clock_skew_max_s", DBL),
            ),
            *PARTITION,
        ]
    ),
)

QUARANTINE = Table(
    "quarantine",
    T.StructType(
        [
            *_s(
                ("reason", STR),
                ("detail", STR),
                ("source_file", STR),
                ("site", STR),
                ("time", TS),
                ("raw", STR),
            ),
            *PARTITION,
        ]
    ),
)

CAMERA_EVENTS = Table(
    "camera_events",
    T.StructType(
        [
            *_s(("at", TS), ("utc_time", TS), ("id", STR)),
            *WHO,
            *_s(
                ("topic_path", STR),
                ("operation", STR),
                ("source", STR),
                ("item", STR),
                ("value", STR),
            ),
            *PARTITION,
        ]
    ),
)

CAMERA_STATES = Table(
    "camera_states",
    T.StructType(
        [
            *WINDOW,
            *WHO,
            *_s(
                ("topic_path", STR),
                ("source", STR),
                ("item", STR),
                ("events", LONG),
                ("changes", LONG),
                ("true_s", DBL),
                ("known_s", DBL),
                ("value_at_start", STR),
                ("last_value", STR),
                ("last_at", TS),
            ),
            *PARTITION,
        ]
    ),
)

DEVICES = Table(
    "devices",
    T.StructType(
        [
            *WHO,
            *_s(
                ("producers", T.ArrayType(STR)),
                ("topics", T.ArrayType(STR)),
                ("first_seen", TS),
                ("last_seen", TS),
                ("messages", LONG),
                ("period_s", DBL),
                ("gap_count", LONG),
                ("silent_s", DBL),
                ("silent", BOOL),
                ("clock_skew_s", DBL),
                ("clock_skew_min_s", DBL),
                ("clock_skew_max_s", DBL),
                # what a later run needs to merge its windows in (devices.py)
                ("_last_topic", STR),
                ("_skew_w", TS),
                ("_periods", T.MapType(STR, T.StructType(_s(("w", TS), ("p", DBL))))),
            ),
        ]
    ),
    partitioned=False,
)

SITES = Table(
    "sites",
    T.StructType(
        _s(
            ("site", STR),
            ("files", LONG),
            ("lines", LONG),
            ("messages", LONG),
            ("duplicates", LONG),
            ("quarantined", LONG),
            ("first_at", TS),
            ("last_at", TS),
            ("closed_until", TS),
            ("last_file_at", TS),
        )
    ),
    partitioned=False,
)

TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        AGGREGATES,
        DEVICE_QUALITY,
        SITE_QUALITY,
        QUARANTINE,
        CAMERA_EVENTS,
        CAMERA_STATES,
        DEVICES,
        SITES,
    )
}

# kept for callers of the previous layout (the plot, the tests of the aggregates' columns)
AGGREGATE_COLUMNS = tuple(AGGREGATES.columns)
QUARANTINE_COLUMNS = ("reason", "detail", "source_file", "raw")
