"""Reading the landing zone (design.md "Landing zone") and sorting lines into messages and
quarantine.

Why lines are read as text and parsed with `from_json` (docs/toolchain.md, PySpark): the
JSON source's PERMISSIVE `_corrupt_record` depends on which columns a query reads and
`badRecordsPath` is ignored by open-source Spark; text + `from_json` sees every line once,
keeps it verbatim for the quarantine, and never fails on bad input.

Every line ends up in exactly one place: a valid message (`reason` null) or the quarantine
with a reason from REASONS and a `detail` in words. Nothing is dropped.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_ingest import camera_xml, timestamps
from spark_ingest.schema import CORRUPT, LANDING_JSON, LANDING_PARQUET, MESSAGE

DEVICES_NS = "urn:wsn-edge:devices"  # design.md: a device's topics are dev:<id>/...
TIME_MODES = ("received", "event")

# reason codes of the quarantine table (documented in docs/spark_ingest.md)
REASONS = {
    "blank_line": "the line is empty or whitespace",
    "malformed_json": "not a JSON object, or a key has the wrong JSON type",
    "missing_id": "`id` is absent, null or empty",
    "missing_received_at": "`received_at` is absent or null",
    "bad_received_at": "`received_at` is not a date-time (`detail` says why)",
    "missing_fields": "`fields` is absent or null",
    "bad_camera_event": "an ONVIF message whose payload is not a tt:Message with a UtcTime",
    "damaged_file": "a landing file that cannot be read whole (`detail` says why)",
    "not_utf8": "the line is not UTF-8 (`raw` shows its invalid bytes as U+FFFD)",
}

# columns of a classified line: the quarantine's, the time it counts at, a message's, and
# the file it came from (as read; the engine replaces it with a small file id)
CLASSIFIED = (
    "reason",
    "detail",
    "raw",
    "time",
    *[c for c in MESSAGE.fieldNames() if c != "file_id"],
    "source_file",
)

# a landing file's name carries the UTC time it was opened: landing-20261121T050000-000001
FILE_STAMP_RE = r"landing-(\d{8}T\d{6})-[^/]*$"


def device_of_key(key: Column) -> Column:
    """The device id a `key` names (null for a `producer:` key or a null key)."""
    return F.when(key.startswith("device:"), key.substr(F.lit(8), F.length(key) - F.lit(7)))


def site_of(source_file: Column) -> Column:
    """The landing directory a file was read from (one gateway's zone: one site)."""
    return F.regexp_replace(source_file, "/[^/]*$", "")


def window_start_us(at: Column, window_us: int) -> Column:
    """Start of the epoch-aligned tumbling window of `at`, in microseconds (as F.window)."""
    us = F.unix_micros(at)
    return us - F.pmod(us, F.lit(window_us))


def identity(
    received_at: Column,
    event_time: Column,
    device_id: Column,
    topic_namespace: Column,
    topic_path: Column,
    producer: Column,
    time: str,
) -> list[Column]:
    """The MESSAGE columns event_time, at and key (docs/spark_ingest.md, "Identity and
    time"). A line without `device_id` (written before it existed, or by an unregistered
    producer) gets the root of a `dev:<id>/...` topic as its device id."""
    if time not in TIME_MODES:
        raise ValueError(f"--time must be one of {TIME_MODES}, not {time!r}")
    dev = F.coalesce(
        device_id,
        F.when(
            (topic_namespace == F.lit(DEVICES_NS)) & (F.coalesce(topic_path, F.lit("")) != ""),
            F.substring_index(topic_path, "/", 1),
        ),
    )
    at = received_at if time == "received" else F.coalesce(event_time, received_at)
    key = F.coalesce(F.concat(F.lit("device:"), dev), F.concat(F.lit("producer:"), producer))
    return [event_time.alias("event_time"), at.alias("at"), key.alias("key")]


def _file_time(source_file: Column, modified: Column) -> Column:
    """When a file was written: the stamp in its name, else its modification time (the time
    a line without a readable time of its own is filed under in the quarantine)."""
    stamp = F.regexp_extract(source_file, FILE_STAMP_RE, 1)
    return F.coalesce(
        F.when(stamp != "", F.try_to_timestamp(stamp, F.lit("yyyyMMdd'T'HHmmss"))), modified
    )


def _finish(
    base: DataFrame,
    reason: Column,
    detail: Column,
    raw: Column,
    received_at: Column,
    ident: list[Column],
    kind: Column,
    payload: Column,
    window_us: int,
) -> DataFrame:
    """The CLASSIFIED columns, from the parts a format computes its own way."""
    cols = base.select(
        reason.alias("reason"),
        detail.alias("detail"),
        F.when(reason.isNotNull(), raw).alias("raw"),
        F.col("id"),
        received_at.alias("received_at"),
        *ident,
        F.col("producer"),
        F.col("gateway_id"),
        F.col("topic_path"),
        F.col("fields"),
        kind.alias("kind"),
        F.when(reason.isNull() & (kind == "event"), payload).alias("payload"),
        F.col("source_file"),
        F.col("_modified"),
    )
    time = F.coalesce(
        F.col("at"), F.col("received_at"), _file_time(F.col("source_file"), F.col("_modified"))
    )
    return cols.select(
        *[c for c in cols.columns if c != "_modified"],
        time.alias("time"),
        window_start_us(time, window_us).alias("w"),
    ).select(*CLASSIFIED)


def _kind(message_type: Column) -> Column:
    return F.when(message_type == F.lit(camera_xml.MESSAGE_TYPE), F.lit("event")).otherwise(
        F.lit("reading")
    )


def classify_lines(lines: DataFrame, window_us: int, time: str = "received") -> DataFrame:
    """(raw, source_file, _modified) -> CLASSIFIED columns; `raw` is kept only for
    quarantined lines. `time` picks `at` (TIME_MODES). An `event_time` that is not a
    date-time is read as null (the gateway writes null then), not quarantined."""
    # a UTF-8 byte-order mark (an editor's, a Windows tool's) is not part of the JSON
    raw = F.when(F.col("raw").startswith("\ufeff"), F.substring("raw", 2, 1 << 30)).otherwise(
        F.col("raw")
    )
    j = F.from_json(raw, LANDING_JSON, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})
    # JSON text is UTF-8 (RFC 8259 §8.1). Spark keeps a line's bytes as they are and its
    # JSON parser reads a byte that is not UTF-8 as U+FFFD: a Latin-1 "café" became the
    # device "caf\ufffd", accepted without a word. Such a line is quarantined; its `raw` is
    # made valid UTF-8 (U+FFFD for each invalid sequence: readers such as DuckDB refuse a
    # Parquet string that is not UTF-8), and the landing file keeps its bytes.
    utf8 = F.is_valid_utf8(raw)
    # The parse sits behind a generator (`inline` of a one-element array) on purpose: a
    # filter on the result (`reason IS NULL`, in every caller) is otherwise pushed below the
    # projection with `j` substituted, and the optimizer then runs from_json once per
    # reference, seven times a line (measured: 35 s instead of 9 s for 2M lines). Filters
    # are never pushed below a generator whose output they read.
    parsed = lines.select(
        F.inline(
            F.array(
                F.struct(
                    raw.alias("raw"),
                    F.col("source_file"),
                    F.col("_modified"),
                    j.alias("j"),
                    utf8.alias("_utf8"),
                )
            )
        )
    )
    ts = timestamps.parse(F.col("j.received_at"))
    kind = _kind(F.col("j.message_type"))
    unparsed = F.col("j").isNull() | F.col(f"j.{CORRUPT}").isNotNull()
    payload = F.get_json_object(F.col("raw"), "$.payload")
    reason = (
        # blank or malformed is decided only for lines the parser rejected: trimming every
        # line copies it, and a JSON object never trims to ""
        F.when(~F.col("_utf8"), F.lit("not_utf8"))
        .when(unparsed & (F.trim("raw") == ""), F.lit("blank_line"))
        .when(unparsed, F.lit("malformed_json"))
        .when(F.col("j.id").isNull() | (F.col("j.id") == ""), F.lit("missing_id"))
        .when(F.col("j.received_at").isNull(), F.lit("missing_received_at"))
        .when(ts.isNull(), F.lit("bad_received_at"))
        .when(F.col("j.fields").isNull(), F.lit("missing_fields"))
        .when((kind == "event") & ~camera_xml.readable(payload), F.lit("bad_camera_event"))
    )
    detail = F.when(
        reason == "bad_received_at",
        F.concat(
            F.lit("received_at '"),
            F.substring(F.col("j.received_at"), 1, 64),
            F.lit("': "),
            timestamps.refusal(F.col("j.received_at")),
        ),
    ).when(
        reason == "not_utf8",
        F.concat(
            F.lit("a line of "),
            F.octet_length("raw").cast("string"),
            F.lit(" bytes that is not UTF-8: its bytes are in the landing file"),
        ),
    )
    flat = parsed.select(
        "raw",
        "source_file",
        "_modified",
        *[F.col(f"j.{c}").alias(c) for c in ("id", "producer", "gateway_id", "topic_path")],
        F.col("j.fields").alias("fields"),
        F.col("j"),
        F.col("_utf8"),
    )
    return _finish(
        flat,
        reason,
        detail,
        F.when(F.col("_utf8"), F.col("raw")).otherwise(F.make_valid_utf8("raw")),
        ts,
        identity(
            ts,
            timestamps.parse(F.col("j.event_time")),
            F.col("j.device_id"),
            F.col("j.topic_namespace"),
            F.col("j.topic_path"),
            F.col("j.producer"),
            time,
        ),
        kind,
        payload,
        window_us,
    )


def classify_parquet(rows: DataFrame, window_us: int, time: str = "received") -> DataFrame:
    """Parquet landing rows (+ source_file, _modified) -> CLASSIFIED columns; raw is the row
    as JSON. Files written before the identity columns existed read them as nulls."""
    raw = F.to_json(F.struct(*[F.col(f.name) for f in LANDING_PARQUET.fields]))
    kind = _kind(F.col("message_type"))
    reason = (
        F.when(F.col("id").isNull() | (F.col("id") == ""), F.lit("missing_id"))
        .when(F.col("received_at").isNull(), F.lit("missing_received_at"))
        .when(F.col("fields").isNull(), F.lit("missing_fields"))
        .when((kind == "event") & ~camera_xml.readable(F.col("payload")), F.lit("bad_camera_event"))
    )
    return _finish(
        rows,
        reason,
        F.lit(None).cast("string"),
        raw,
        F.col("received_at"),
        identity(
            F.col("received_at"),
            F.col("event_time"),
            F.col("device_id"),
            F.col("topic_namespace"),
            F.col("topic_path"),
            F.col("producer"),
            time,
        ),
        kind,
        F.col("payload"),
        window_us,
    )


def read_jsonl(spark: SparkSession, files: list[str]) -> DataFrame:
    """Batch read of the given published JSON-lines files (inputs.resolve lists them)."""
    df = spark.read.text(files)
    return df.select(
        F.col("value").alias("raw"),
        F.col("_metadata.file_path").alias("source_file"),
        F.col("_metadata.file_modification_time").alias("_modified"),
    )


def read_parquet(spark: SparkSession, files: list[str]) -> DataFrame:
    """The given Parquet landing files; a file Spark cannot read is skipped here
    (`ignoreCorruptFiles`) and reported by the caller, which knows which files gave rows."""
    df = spark.read.schema(LANDING_PARQUET).option("ignoreCorruptFiles", "true").parquet(*files)
    return df.select(
        "*",
        F.col("_metadata.file_path").alias("source_file"),
        F.col("_metadata.file_modification_time").alias("_modified"),
    )


def read_classified(
    spark: SparkSession,
    jsonl: list[str],
    parquet: list[str],
    window_us: int,
    time: str = "received",
) -> DataFrame:
    """Every given landing file (JSON lines and the Parquet variant), classified."""
    parts: list[DataFrame] = []
    if jsonl:
        parts.append(classify_lines(read_jsonl(spark, jsonl), window_us, time))
    if parquet:
        parts.append(classify_parquet(read_parquet(spark, parquet), window_us, time))
    if not parts:  # nothing to read: an empty frame of the same columns
        empty = spark.createDataFrame([], "raw string, source_file string, _modified timestamp")
        parts.append(classify_lines(empty, window_us, time))
    df = parts[0]
    for p in parts[1:]:
        df = df.unionByName(p)
    return df


def valid_messages(classified: DataFrame) -> DataFrame:
    return classified.where(F.col("reason").isNull()).select(*MESSAGE.fieldNames())
