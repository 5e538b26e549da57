"""Every table's rows for one run, from the classified lines of the windows it recomputes
(engine.py) and their per-file stats (consume.stats): the duplicates resolved (tables.py),
then aggregates, quarantine, device and site quality, camera events and states, and the
merged devices and sites."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_ingest import camera, devices, quality, sites, tables
from spark_ingest.aggregate import measurements, window_aggregates
from spark_ingest.keep import materialize, release
from spark_ingest.landing import REASONS
from spark_ingest.manifest import State
from spark_ingest.options import interval_us, iso_us
from spark_ingest.schema import TABLES
from spark_ingest.stored import Stored

if TYPE_CHECKING:
    from spark_ingest.consume import FileMap
    from spark_ingest.engine import Run, RunResult


@dataclass
class Computed:
    #: table -> rows to write (whole partitions; None: the table does not change)
    frames: dict[str, DataFrame | None] = field(default_factory=dict)
    stored: Stored | None = None
    kept: list[DataFrame] = field(default_factory=list)

    def release(self) -> None:
        if self.stored is not None:
            self.kept += self.stored.kept
            self.stored.kept = []
        for df in self.kept:
            release(df)
        self.kept.clear()


def count_new(res: RunResult, rows: list[Any], new_ids: set[int]) -> None:
    """The summary's counts of the new files' lines, from the stats rows (lines = messages
    + duplicates + quarantined; messages are those the run added, filled in later)."""
    mine = [r for r in rows if r["file_id"] in new_ids]
    res.lines = sum(int(r["n"]) for r in mine)
    res.quarantined = {q: n for q in REASONS if (n := sum(int(r[f"q_{q}"]) for r in mine))}
    firsts = [int(r["first_us"]) for r in mine if r["first_us"] is not None]
    lasts = [int(r["last_us"]) for r in mine if r["last_us"] is not None]
    res.first = iso_us(min(firsts)) if firsts else None
    res.last = iso_us(max(lasts)) if lasts else None
    res.any_quarantined = any(int(r["n"]) > int(r["valid"]) for r in rows)
    res.any_events = any(int(r["events"]) for r in rows)


def late(
    rows: list[Any], new_ids: set[int], site_of: dict[int, str], closed: dict[str, int | None],
    window_us: int,
) -> int:  # fmt: skip
    """Valid lines of the new files whose window had already closed at their site."""
    n = 0
    for r in rows:
        c = closed.get(site_of.get(int(r["file_id"]), ""))
        if r["file_id"] in new_ids and c is not None and int(r["w"]) + window_us <= c:
            n += int(r["valid"])
    return n


def compute(
    run: Run,
    state: State,
    lines: DataFrame,
    rows: list[Any],
    fmap: FileMap,
    new_ids: set[int],
    site_of: dict[int, str],
    windows: list[int],
    res: RunResult,
    cameras_now: set[str],
    per_site: dict[str, int],
    marks: dict[str, dict[str, Any]],
) -> Computed:
    """The rows of every table this run writes (see the module docstring)."""
    spark = run.spark
    c = Computed(stored=Stored(run, state, windows))
    stored = c.stored
    assert stored is not None

    def keep(df: DataFrame) -> DataFrame:
        kept = materialize(spark, df, keep_partitioning=False)
        c.kept.append(kept)
        return kept

    count_new(res, rows, new_ids)
    valid = lines.where(F.col("reason").isNull())
    lost = tables.losers(spark, valid, fmap)
    if lost is not None:
        lost = keep(lost)
    msgs = valid.join(lost.select("rid"), "rid", "left_anti") if lost is not None else valid
    out = c.frames
    out["aggregates"] = window_aggregates(measurements(msgs), run.window_us, fmap)
    out["quarantine"] = tables.quarantine_rows(lines, fmap) if res.any_quarantined else None

    burst_s = interval_us(run.opts.burst) / 1e6
    ctx = stored.dq_context(msgs)
    dq_new, rejudged = quality.from_messages(
        msgs, run.window_us, burst_s, run.opts.gap_factor, fmap, ctx
    )
    dq = keep(dq_new if rejudged is None else dq_new.unionByName(rejudged))
    out["device_quality"] = dq
    dups: dict[tuple[int, int], int] = {}
    if lost is not None:
        for r in lost.groupBy("file_id", "w").count().collect():
            dups[(int(r["file_id"]), int(r["w"]))] = int(r["count"])
    sq_rows = tables.site_quality_rows(rows, site_of, dups, run.window_us)
    cols = TABLES["site_quality"].columns
    sq = spark.createDataFrame(
        [tuple(r[c] for c in cols) for r in sq_rows], TABLES["site_quality"].schema
    )
    out["site_quality"] = sq

    ev = keep(camera.events(msgs, fmap, run.opts.time)) if res.any_events else None
    out["camera_events"] = ev
    up = sites.merged(run, state, sq_rows, stored, per_site, marks)
    known = spark.createDataFrame(
        [(s, sites.dt(v)) for s, v in up.new_last.items() if v is not None],
        "site string, until timestamp",
    )
    events = ev if ev is not None else spark.createDataFrame([], TABLES["camera_events"].schema)
    out["camera_states"] = stored.camera_states(events, known, up, cameras_now)

    merged = devices.merge(
        stored.current("devices"),
        devices.partial(dq, devices.producers_of(msgs)),
        devices.partial(stored.replaced_dq(dq)),
    )
    # each site's newest time in µs, as the timestamps of `known` hold it
    as_us = T.TimestampType().toInternal
    last_at = {s: int(as_us(d)) for s, v in up.new_last.items() if (d := sites.dt(v)) is not None}
    out["devices"] = devices.finish(merged, last_at, run.opts.gap_factor)
    out["sites"] = spark.createDataFrame(up.rows, TABLES["sites"].schema)

    res.messages = up.new_messages - up.old_messages
    res.duplicates = res.lines - sum(res.quarantined.values()) - res.messages
    res.late = late(rows, new_ids, site_of, up.old_closed, run.window_us)
    for t, df in list(out.items()):
        out[t] = None if df is None else stored.whole(t, df)
    return c
