"""Reading the landing zone (design.md "Landing zone") and sorting lines into messages and
quarantine.

Why lines are read as text and parsed with `from_json` (docs/toolchain.md, PySpark): the
JSON source's PERMISSIVE `_corrupt_record` depends on which columns a query reads and
`badRecordsPath` is ignored by open-source Spark; text + `from_json` sees every line once,
keeps it verbatim for the quarantine, and never fails on bad input.

Every line ends up in exactly one place: a valid message (`reason` null) or the quarantine
with a reason from REASONS. Nothing is dropped.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_ingest.schema import CORRUPT, LANDING_JSON, LANDING_PARQUET

JSONL_GLOB = "landing-*.jsonl"
PARQUET_GLOB = "landing-*.parquet"

# reason codes written to <out>/quarantine/ (documented in docs/spark_ingest.md)
REASONS = {
    "blank_line": "the line is empty or whitespace",
    "malformed_json": "not a JSON object, or a key has the wrong JSON type",
    "missing_id": "`id` is absent, null or empty",
    "missing_received_at": "`received_at` is absent or null",
    "bad_received_at": "`received_at` is not an ISO-8601 timestamp",
    "missing_fields": "`fields` is absent or null",
}

# columns of a classified line
CLASSIFIED = ("reason", "source_file", "raw", "id", "received_at", "producer", "topic_path",
              "fields")


def _reason(j: Column, ts: Column, raw: Column) -> Column:
    # blank or malformed is decided only for lines the parser rejected: trimming every line
    # copies it, and a JSON object never trims to ""
    unparsed = j.isNull() | j[CORRUPT].isNotNull()
    return (
        F.when(unparsed & (F.trim(raw) == ""), F.lit("blank_line"))
        .when(unparsed, F.lit("malformed_json"))
        .when(j["id"].isNull() | (j["id"] == ""), F.lit("missing_id"))
        .when(j["received_at"].isNull(), F.lit("missing_received_at"))
        .when(ts.isNull(), F.lit("bad_received_at"))
        .when(j["fields"].isNull(), F.lit("missing_fields"))
    )


def classify_lines(lines: DataFrame, keep_raw: bool = False) -> DataFrame:
    """(raw, source_file) -> CLASSIFIED columns; `raw` is kept only for quarantined lines,
    unless `keep_raw` (streaming keeps it to write late lines verbatim)."""
    j = F.from_json(
        F.col("raw"),
        LANDING_JSON,
        {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT},
    )
    # The parse sits behind a generator (`inline` of a one-element array) on purpose: a
    # filter on the result (`reason IS NULL`, in every caller) is otherwise pushed below the
    # projection with `j` substituted, and the optimizer then runs from_json once per
    # reference, seven times a line (measured: 35 s instead of 9 s for 2M lines). Filters
    # are never pushed below a generator whose output they read.
    parsed = lines.select(
        F.inline(F.array(F.struct(F.col("raw"), F.col("source_file"), j.alias("j"))))
    )
    # try_to_timestamp: ISO-8601 with `Z` or an offset; text without a zone is read as UTC
    # (the session time zone, set by session.py)
    ts = F.try_to_timestamp(F.col("j.received_at"))
    reason = _reason(F.col("j"), ts, F.col("raw"))
    return parsed.select(
        reason.alias("reason"),
        F.col("source_file"),
        (F.col("raw") if keep_raw else F.when(reason.isNotNull(), F.col("raw"))).alias("raw"),
        F.col("j.id").alias("id"),
        ts.alias("received_at"),
        F.col("j.producer").alias("producer"),
        F.col("j.topic_path").alias("topic_path"),
        F.col("j.fields").alias("fields"),
    )


def classify_parquet(rows: DataFrame, keep_raw: bool = False) -> DataFrame:
    """Parquet landing rows (+ source_file) -> CLASSIFIED columns; raw is the row as JSON."""
    raw = F.to_json(F.struct(*[F.col(f.name) for f in LANDING_PARQUET.fields]))
    reason = (
        F.when(F.col("id").isNull() | (F.col("id") == ""), F.lit("missing_id"))
        .when(F.col("received_at").isNull(), F.lit("missing_received_at"))
        .when(F.col("fields").isNull(), F.lit("missing_fields"))
    )
    return rows.select(
        reason.alias("reason"),
        F.col("source_file"),
        (raw if keep_raw else F.when(reason.isNotNull(), raw)).alias("raw"),
        "id",
        "received_at",
        "producer",
        "topic_path",
        "fields",
    )


def read_jsonl(spark: SparkSession, landing: str) -> DataFrame:
    """Batch read of every published JSON-lines file (hidden `.tmp` files never match)."""
    df = spark.read.option("pathGlobFilter", JSONL_GLOB).text(landing)
    return df.select(F.col("value").alias("raw"), F.col("_metadata.file_path").alias("source_file"))


def read_parquet(spark: SparkSession, landing: str) -> DataFrame:
    df = spark.read.schema(LANDING_PARQUET).option("pathGlobFilter", PARQUET_GLOB).parquet(landing)
    return df.select("*", F.col("_metadata.file_path").alias("source_file"))


def stream_jsonl(spark: SparkSession, landing: str, max_files: int | None) -> DataFrame:
    reader = (
        spark.readStream.option("pathGlobFilter", JSONL_GLOB)
        # default maxFileAge (7 days) would silently skip old files on a late (re)start
        .option("maxFileAge", "36500d")
    )
    if max_files:
        reader = reader.option("maxFilesPerTrigger", str(max_files))
    df = reader.text(landing)
    return df.select(F.col("value").alias("raw"), F.col("_metadata.file_path").alias("source_file"))


def stream_parquet(spark: SparkSession, landing: str, max_files: int | None) -> DataFrame:
    reader = (
        spark.readStream.schema(LANDING_PARQUET)
        .option("pathGlobFilter", PARQUET_GLOB)
        .option("maxFileAge", "36500d")
    )
    if max_files:
        reader = reader.option("maxFilesPerTrigger", str(max_files))
    df = reader.parquet(landing)
    return df.select("*", F.col("_metadata.file_path").alias("source_file"))


def valid_messages(classified: DataFrame) -> DataFrame:
    return classified.where(F.col("reason").isNull()).select(
        "id", "received_at", "producer", "topic_path", "fields"
    )


def quarantined(classified: DataFrame) -> DataFrame:
    return classified.where(F.col("reason").isNotNull()).select("reason", "source_file", "raw")
