"""The rows of every table for the windows a run recomputes, from the classified lines of
those windows (landing.CLASSIFIED, plus a row id `rid`), and the context stored rows give.

**Duplicates.** `id` is a message's identity; copies of a message (the gateway's
`--landing-format both` writes each one twice, a site's files may be uploaded twice) carry
its time, so they fall in the same window. In each window, of the valid lines that share an
id one is kept: the one whose landing file name sorts first (so the `.jsonl` copy of a
`both` zone), then by file path, time, producer, gateway, device, topic and fields. Batch
and stream runs use this one rule, so they keep the same copy.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from spark_ingest.aggregate import partition_of
from spark_ingest.schema import QUARANTINE

if TYPE_CHECKING:
    from spark_ingest.consume import FileMap

# up to this many candidate pairs are collected and broadcast
MANY = 100_000


def _name(path: Column) -> Column:
    return F.regexp_extract(path, r"([^/]*)$", 1)


def losers(spark: SparkSession, valid: DataFrame, fmap: FileMap) -> DataFrame | None:
    """(rid, file_id, w) of the valid lines that are a duplicate of a kept one (see the
    module docstring), None when there are none. A first pass over (window, hash of id) pairs finds
    the candidates (almost always none); only those are compared whole."""
    h = F.xxhash64("id")
    candidates = (
        valid.select("w", h.alias("h")).groupBy("w", "h").count().where(F.col("count") > 1)
    ).drop("count")
    found = candidates.limit(MANY + 1).collect()
    if not found:
        return None
    cand = (
        F.broadcast(spark.createDataFrame([(r["w"], r["h"]) for r in found], "w long, h long"))
        if len(found) <= MANY
        else candidates  # e.g. a `--landing-format both` zone: every message twice
    )
    rows = valid.withColumn("h", h).join(cand, ["w", "h"], "left_semi")
    rows = fmap.add(rows, "file_id", "source_file", "source_file")
    rank = Window.partitionBy("w", "id").orderBy(
        _name(F.col("source_file")), "source_file", "at", "producer", "gateway_id", "key",
        "topic_path", F.to_json("fields"), "rid",
    )  # fmt: skip
    ranked = rows.withColumn("_n", F.row_number().over(rank))
    return ranked.where(F.col("_n") > 1).select("rid", "file_id", "w")


def quarantine_rows(lines: DataFrame, fmap: FileMap) -> DataFrame:
    q = lines.where(F.col("reason").isNotNull())
    q = fmap.add(fmap.add(q, "file_id", "source_file", "source_file"), "file_id", "site", "site")
    return q.select(
        "reason", "detail", "source_file", "site", "time", "raw", *partition_of(F.col("time"))
    ).select(*QUARANTINE.columns)  # fmt: skip


def site_quality_rows(
    stats: list[Any], site_of: dict[int, str], dups: dict[tuple[int, int], int], window_us: int
) -> list[dict[str, Any]]:
    """Per site and window: lines, messages, duplicates, quarantined lines (and their
    share), the first and last message time, the clock skew of its devices; summed from
    the per-file stats rows (consume.stats; few: files x windows) and the duplicates per
    file and window, here on the driver (no Spark job for a table of a few rows)."""
    acc: dict[tuple[str, int], dict[str, Any]] = {}
    for r in stats:
        key = (site_of.get(int(r["file_id"]), ""), int(r["w"]))
        a = acc.setdefault(key, {"lines": 0, "valid": 0, "dups": 0, "first": None, "last": None,
                                 "ss": 0, "sus": 0, "sn": 0, "smin": None,
                                 "smax": None})  # fmt: skip
        a["lines"] += int(r["n"])
        a["valid"] += int(r["valid"])
        a["dups"] += dups.get((int(r["file_id"]), int(r["w"])), 0)
        for k, v, pick in (("first", r["first_us"], min), ("last", r["last_us"], max),
                           ("smin", r["skew_min"], min), ("smax", r["skew_max"], max)):  # fmt: skip
            if v is not None:
                a[k] = v if a[k] is None else pick(a[k], v)
        # exact sums (timestamps.skew_parts): the mean does not depend on the rows' order
        a["ss"] += int(r["skew_s"] or 0)
        a["sus"] += int(r["skew_us"] or 0)
        a["sn"] += int(r["skew_n"] or 0)
    rows = []
    for (site, w), a in sorted(acc.items()):
        start = _utc(w)
        quarantined = a["lines"] - a["valid"]
        rows.append(
            {
                "window_start": start,
                "window_end": _utc(w + window_us),
                "site": site,
                "lines": a["lines"],
                "messages": a["valid"] - a["dups"],
                "duplicates": a["dups"],
                "quarantined": quarantined,
                "quarantine_rate": quarantined / a["lines"] if a["lines"] else None,
                "first_at": None if a["first"] is None else _utc(a["first"]),
                "last_at": None if a["last"] is None else _utc(a["last"]),
                "clock_skew_mean_s": (
                    (a["ss"] * 1_000_000 + a["sus"]) / a["sn"] / 1e6 if a["sn"] else None
                ),
                "clock_skew_min_s": a["smin"],
                "clock_skew_max_s": a["smax"],
                "date": start.date(),
                "hour": start.hour,
            }
        )
    return rows


def _utc(us: int) -> datetime:
    return datetime.fromtimestamp(us / 1e6, UTC)
