"""What a run learns of the files it consumes, in one pass over their lines: which are
damaged (said in one line each and quarantined, so the rest of the run goes on), and per
file and window the counts the summary, the manifest's index (in which hours and between
which times a file's lines lie, plan.py) and the `site_quality` table are made of."""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_ingest.hfs import HFS
from spark_ingest.landing import CLASSIFIED, REASONS
from spark_ingest.manifest import FileEntry
from spark_ingest.plan import hour_key
from spark_ingest.schema import MESSAGE
from spark_ingest.timestamps import skew_parts, skew_s

_TYPES: dict[str, Any] = {f.name: f.dataType for f in MESSAGE.fields} | {
    "reason": "string",
    "detail": "string",
    "raw": "string",
    "time": "timestamp",
    "source_file": "string",
}


def damaged(hfs: HFS, sizes: dict[str, int]) -> dict[str, str]:
    """Parquet files (of `sizes`: path -> bytes) that cannot be whole Parquet files: no
    `PAR1` at both ends, or a footer longer than the file. A torn JSON-lines file needs no
    such check: its last line is quarantined as malformed."""
    bad: dict[str, str] = {}
    for f, size in sorted(sizes.items()):
        if not f.endswith(".parquet"):
            continue
        if size < 12:
            bad[f] = f"{size} bytes: too short to be a Parquet file"
            continue
        head = hfs.read_bytes_at(f, 0, 4)
        tail = hfs.read_bytes_at(f, size - 8, 8)
        footer = int.from_bytes(tail[:4], "little")
        if head != b"PAR1" or tail[4:] != b"PAR1":
            bad[f] = "not a whole Parquet file (no PAR1 marker at its start and end: truncated?)"
        elif footer + 12 > size:
            bad[f] = f"its footer claims {footer} bytes of a {size}-byte file: truncated"
    return bad


def short(
    hfs: HFS, sizes: dict[str, int], ids: dict[str, int], rows: list[Any], bad: dict[str, str]
) -> dict[str, str]:
    """New Parquet files (of `sizes`) that gave fewer lines (stats `rows`; `ids`: path ->
    file id) than their footers count, or whose footer cannot be read: Spark skips the
    rest of a file it cannot decode (landing.read_parquet), so each is damaged, and why."""
    got: dict[int, int] = {}
    for r in rows:
        got[int(r["file_id"])] = got.get(int(r["file_id"]), 0) + int(r["n"])
    out: dict[str, str] = {}
    for f in sorted(sizes):
        if not f.endswith(".parquet") or f in bad:
            continue
        want = hfs.parquet_rows(f)
        have = got.get(ids[f], 0)
        if want is None:
            out[f] = "its Parquet footer cannot be read"
        elif have < want:
            out[f] = (
                f"{want - have} of the {want} rows its footer counts cannot be read "
                "(damaged data, or a column of another type than the landing schema's)"
            )
    return out


def damaged_lines(spark: SparkSession, hfs: HFS, bad: dict[str, str], window_us: int) -> DataFrame:
    """One quarantine line (landing.CLASSIFIED columns) per damaged file, at the file's
    modification time."""
    rows = [(hfs.qualify(p), r, hfs.modified_ms(p) or 0) for p, r in sorted(bad.items())]
    df = spark.createDataFrame(rows, "source_file string, detail string, ms long")
    t = F.timestamp_millis(F.col("ms"))
    us = F.unix_micros(t)
    cols: dict[str, Column] = {c: F.lit(None) for c in CLASSIFIED}
    cols.update(
        reason=F.lit("damaged_file"),
        detail=F.col("detail"),
        source_file=F.col("source_file"),
        time=t,
        w=us - F.pmod(us, F.lit(window_us)),
    )
    return df.select(*[cols[c].cast(_TYPES[c]).alias(c) for c in CLASSIFIED])


# up to this many files a run's file map is a literal in the plan (a few dozen bytes a
# file): a lookup then needs no Spark job. A broadcast join of a driver-side table runs a
# job per query (measured: ~10 of the 35 jobs of an incremental run of one small file);
# a literal of 10,000 files costs seconds to plan instead (measured), so a large map stays
# a table.
LITERAL_FILES = 256


class FileMap:
    """(file_id, source_file, site) of the files a run reads, numbered 0.. in order:
    source_file as Spark reports a file's path, site its landing directory."""

    def __init__(self, spark: SparkSession, rows: list[tuple[int, str, str]]) -> None:
        assert all(r[0] == i for i, r in enumerate(rows)), "file ids are 0.. in order"
        self.spark = spark
        self.rows = rows
        self._df: DataFrame | None = None

    @property
    def literal(self) -> bool:
        return len(self.rows) <= LITERAL_FILES

    @property
    def df(self) -> DataFrame:
        """The map as a (driver-side) table."""
        if self._df is None:
            self._df = self.spark.createDataFrame(
                self.rows, "file_id int, source_file string, site string"
            )
        return self._df

    def add(self, df: DataFrame, file_id: str, which: str, alias: str) -> DataFrame:
        """`df` with a column `alias`: the `which` ("source_file" or "site") of the file
        whose id is the SQL expression `file_id` (null for none)."""
        if self.literal:
            i = ("file_id", "source_file", "site").index(which)
            arr = F.from_json(F.lit(json.dumps([r[i] for r in self.rows])), "array<string>")
            return df.withColumn(alias, F.try_element_at(arr, F.expr(file_id).cast("int") + 1))
        right = self.df.select(F.col("file_id").alias("_fid"), F.col(which).alias(alias))
        return df.join(F.broadcast(right), F.expr(file_id) == F.col("_fid"), "left").drop("_fid")


def file_map(spark: SparkSession, hfs: HFS, paths: list[str]) -> FileMap:
    """The FileMap of `paths` (numbered in order)."""
    rows = []
    for i, p in enumerate(paths):
        q = hfs.qualify(p)
        rows.append((i, q, q.rsplit("/", 1)[0]))
    return FileMap(spark, rows)


def with_file_id(lines: DataFrame, fmap: FileMap) -> DataFrame:
    """`lines` (CLASSIFIED) with `source_file` replaced by its `file_id` (schema.MESSAGE)."""
    if fmap.literal:
        ids = json.dumps({q: i for i, q, _s in fmap.rows})
        of = F.try_element_at(F.from_json(F.lit(ids), "map<string,int>"), F.col("source_file"))
        return lines.withColumn("file_id", of).drop("source_file")
    ids_df = F.broadcast(fmap.df.select("file_id", "source_file"))
    return lines.join(ids_df, "source_file", "left").drop("source_file")


def stats(lines: DataFrame) -> DataFrame:
    """Per file and window: lines, their first and last time (µs), valid lines, camera
    events, lines by quarantine reason, the first and last message time (µs) and the exact
    sum (timestamps.skew_parts), count and bounds of the clock skew of its messages.
    Fixed-width aggregates only, so Spark hash-aggregates them in one pass; the rows are few
    (files x windows) and are collected: the manifest, the summary and the site_quality
    table are made of them."""
    return _stats(lines)


def _stats(lines: DataFrame) -> DataFrame:
    us = F.unix_micros("time")
    ok = F.col("reason").isNull()
    skew = F.when(ok, skew_s())
    skew_whole, skew_rest = (F.when(ok, c) for c in skew_parts())
    return lines.groupBy("file_id", "w").agg(
        F.count(F.lit(1)).alias("n"),
        F.min(us).alias("lo"),
        F.max(us).alias("hi"),
        F.count(F.when(ok, 1)).alias("valid"),
        F.count(F.when(ok & (F.col("kind") == "event"), 1)).alias("events"),
        *[F.count(F.when(F.col("reason") == r, 1)).alias(f"q_{r}") for r in REASONS],
        F.min(F.when(ok, F.unix_micros("at"))).alias("first_us"),
        F.max(F.when(ok, F.unix_micros("at"))).alias("last_us"),
        F.sum(skew_whole).alias("skew_s"),
        F.sum(skew_rest).alias("skew_us"),
        F.count(skew).alias("skew_n"),
        F.min(skew).alias("skew_min"),
        F.max(skew).alias("skew_max"),
    )


def entries(
    hfs: HFS,
    sizes: dict[str, int],
    ids: dict[str, int],
    rows: list[Any],
    bad: dict[str, str],
    at_ms: int,
) -> dict[str, FileEntry]:
    """The manifest entry of each new file (`sizes`: path -> bytes; `ids`: path -> file
    id), from stats `rows` (rows of files read again are skipped)."""
    back = {i: p for p, i in ids.items() if p in sizes}
    out: dict[str, FileEntry] = {}

    def entry(f: str) -> FileEntry:
        if f not in out:
            site = hfs.qualify(f).rsplit("/", 1)[0]
            out[f] = FileEntry(sizes[f], hfs.modified_ms(f) or at_ms, site)
        return out[f]

    for r in rows:
        f = back.get(r["file_id"])
        if f is None or f in bad:
            continue
        e = entry(f)
        e.lines += int(r["n"])
        for us in (int(r["lo"]), int(r["hi"])):
            h = e.hours.setdefault(hour_key(us), [us, us])
            h[0], h[1] = min(h[0], us), max(h[1], us)
    for f in sizes:
        e = entry(f)
        if f in bad:
            e.damaged = bad[f]
    return out
