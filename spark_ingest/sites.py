"""The `sites` table: one row per landing directory (one gateway's zone), and when its
windows are closed.

A site's totals are sums over its `site_quality` rows, merged like the devices' (a run adds
its windows' rows and takes out the rows they replace). `closed_until` is its watermark,
per site so that one site's clock or a late upload at one site makes nothing late at
another: its newest message time (`last_at`) minus `--watermark`, or, once the site has
sent no new file for `--watermark` of wall-clock time, `last_at` itself: when traffic
stops, its newest windows close too. It never moves back. Windows that end at or before
it are closed: a line that arrives for them later still lands in them (every run
recomputes the windows its lines fall in) and is counted as `late` in the run's summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_ingest.manifest import RunRecord, State, location, now_ms, staging
from spark_ingest.options import interval_us
from spark_ingest.plan import parts_of_windows
from spark_ingest.schema import SITES

if TYPE_CHECKING:
    from spark_ingest.engine import Run, RunResult
    from spark_ingest.stored import Stored

SUMS = ("lines", "messages", "duplicates", "quarantined")


def dt(us: int | None) -> datetime | None:
    return None if us is None else datetime.fromtimestamp(us / 1e6, UTC)


@dataclass
class SiteUpdate:
    rows: list[dict[str, Any]] = field(default_factory=list)
    #: site -> newest message time (µs) before and after this run
    old_last: dict[str, int | None] = field(default_factory=dict)
    new_last: dict[str, int | None] = field(default_factory=dict)
    #: site -> closed_until (µs) before this run
    old_closed: dict[str, int | None] = field(default_factory=dict)
    #: this run's totals over its windows: new rows and the rows they replace
    new_messages: int = 0
    old_messages: int = 0


def _current(stored: Stored) -> dict[str, dict[str, Any]]:
    df = stored.current("sites")
    ts = ["first_at", "last_at", "closed_until", "last_file_at"]
    rows = df.select(
        *[c for c in df.columns if c not in ts], *[F.unix_micros(c).alias(c) for c in ts]
    ).collect()
    return {r["site"]: r.asDict() for r in rows}


def _per_site(sq: DataFrame) -> dict[str, dict[str, Any]]:
    rows = (
        sq.groupBy("site")
        .agg(
            *[F.sum(c).alias(c) for c in SUMS],
            F.unix_micros(F.min("first_at")).alias("first_at"),
            F.unix_micros(F.max("last_at")).alias("last_at"),
        )
        .collect()
    )
    return {r["site"]: r.asDict() for r in rows}


def _closed(
    last_us: int | None, last_file_ms: int | None, old: int | None, delay_us: int
) -> int | None:
    if last_us is None:
        return old
    idle = last_file_ms is not None and (now_ms() - last_file_ms) * 1000 >= delay_us
    at = last_us if idle else last_us - delay_us
    return at if old is None else max(old, at)


def _sum_rows(rows: list[Any]) -> dict[str, dict[str, Any]]:
    """site_quality rows (collected) summed per site, as _per_site does in Spark."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        d = out.setdefault(
            r["site"],
            {**dict.fromkeys(SUMS, 0), "first_at": None, "last_at": None, "gateway_ids": []},
        )
        for c in SUMS:
            d[c] += int(r[c] or 0)
        for c, pick in (("first_at", min), ("last_at", max)):
            v = r[c]
            if v is not None:
                us = int(v.timestamp() * 1_000_000) if hasattr(v, "timestamp") else int(v)
                d[c] = us if d[c] is None else pick(d[c], us)
    return out


def merged(
    run: Run, state: State, sq_rows: list[Any], stored: Stored, files_per_site: dict[str, int],
    marks: dict[str, dict[str, Any]],
) -> SiteUpdate:  # fmt: skip
    """The sites table after this run (rows for createDataFrame) and what changed."""
    delay = interval_us(run.opts.watermark)
    old = {} if run.opts.full else _current(stored)
    new = _sum_rows(sq_rows)
    removed: dict[str, dict[str, Any]] = {}
    if not run.opts.full and stored.windows:
        prev = stored.read("site_quality", parts_of_windows(stored.windows)).withColumn(
            "w", F.unix_micros("window_start")
        )
        removed = _per_site(stored.among(prev))
    up = SiteUpdate()
    up.new_messages = sum(int(v["messages"] or 0) for v in new.values())
    up.old_messages = sum(int(v["messages"] or 0) for v in removed.values())
    for site in sorted(set(old) | set(new)):
        o, n, r = old.get(site, {}), new.get(site, {}), removed.get(site, {})
        row: dict[str, Any] = {"site": site}
        for c in SUMS:
            row[c] = int(o.get(c) or 0) + int(n.get(c) or 0) - int(r.get(c) or 0)
        firsts = [x for x in (o.get("first_at"), n.get("first_at")) if x is not None]
        lasts = [x for x in (o.get("last_at"), n.get("last_at")) if x is not None]
        first, last = (min(firsts) if firsts else None), (max(lasts) if lasts else None)
        mark = {**state.sites.get(site, {}), **marks.get(site, {})}
        last_file = mark.get("last_file_at")
        up.old_last[site] = o.get("last_at")
        up.new_last[site] = last
        up.old_closed[site] = o.get("closed_until")
        closed = _closed(last, last_file, o.get("closed_until"), delay)
        row.update(
            files=files_per_site.get(site, 0),
            first_at=dt(first),
            last_at=dt(last),
            closed_until=dt(closed),
            last_file_at=None
            if last_file is None
            else datetime.fromtimestamp(last_file / 1000, UTC),
        )
        up.rows.append({c: row.get(c) for c in SITES.columns})
    return up


def late_count(
    run: Run, lines: DataFrame, fresh: list[str], old_closed: dict[str, int | None]
) -> int:
    """New messages whose window was already closed at their site when they arrived."""
    closed = {s: c for s, c in old_closed.items() if c is not None}
    if not closed or not fresh:
        return 0
    q = [run.hfs.qualify(f) for f in fresh]
    m = run.spark.createDataFrame(list(closed.items()), "_s string, _c long")
    wend = F.col("w") + F.lit(run.window_us)
    return int(
        lines.where(F.col("reason").isNull() & F.col("source_file").isin(q))
        .join(F.broadcast(m), F.col("site") == F.col("_s"))
        .where(wend <= F.col("_c"))
        .count()
    )


def close_idle(run: Run, state: State) -> RunResult:
    """A run without new files: nothing to read; a site that has been quiet for
    `--watermark` gets its newest windows closed (a run that writes only `sites`)."""
    from spark_ingest.engine import RunResult
    from spark_ingest.stored import Stored

    if not state.run:
        return RunResult()
    stored = Stored(run, state, [])
    old = _current(stored)
    delay = interval_us(run.opts.watermark)
    rows, moved = [], False
    for site, o in sorted(old.items()):
        last_file = state.sites.get(site, {}).get("last_file_at")
        closed = _closed(o.get("last_at"), last_file, o.get("closed_until"), delay)
        moved = moved or closed != o.get("closed_until")
        row = dict(o)
        for c in ("first_at", "last_at", "last_file_at"):
            row[c] = dt(o.get(c))
        row["closed_until"] = dt(closed)
        rows.append({c: row.get(c) for c in SITES.columns})
    if not moved:
        return RunResult()
    n = state.run + 1
    stage = staging(run.out, "sites", n)
    run.manifest.write_pending(n, [stage])
    run.spark.createDataFrame(rows, SITES.schema).coalesce(1).write.mode("overwrite").parquet(stage)
    rec = RunRecord(
        run=n, full=False, config=run.config, started_ms=now_ms(), finished_ms=now_ms(),
        parts={"sites": {"": n}}, staging={"sites": stage},
    )  # fmt: skip
    old_v = state.parts.get("sites", {}).get("")
    if old_v is not None:
        rec.superseded = [[location(run.out, "sites", "", old_v), now_ms()]]
    run.manifest.commit(state, rec)
    run.publish(rec, {t: set(p) for t, p in state.parts.items()})
    run.say(f"run {n}: closed the newest windows of {sum(1 for _ in rows)} quiet site(s)")
    return RunResult(run=n)
