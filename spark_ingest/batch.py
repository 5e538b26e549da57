"""`wsn-ingest batch`: the landing files not read before -> the tables, in one run.

Incremental: a run reads only the files its `--out` has not consumed, recomputes the windows
their lines fall in (reading again the few consumed files with lines in those windows) and
replaces those partitions; `--full` rebuilds every table from every file. Either way the
tables are the same as one full run over the same zone (engine.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_ingest.engine import RunResult, run_once
from spark_ingest.inputs import Inputs
from spark_ingest.options import Options, Progress

UNMATCHED_SHOWN = 5
DEVICES_SHOWN = 8


@dataclass
class DeviceLine:
    device: str
    producer: str | None
    messages: int
    last_seen: str | None
    gap_count: int
    silent_s: float | None
    clock_skew_s: float | None


@dataclass
class BatchSummary:
    """What a batch run did; `render()` is the one-screen terminal summary."""

    landing: str
    out: str
    database: str
    window: str
    time: str = "received"
    full: bool = False
    run: int | None = None
    files: int = 0
    #: landing locations that matched nothing, and entries there that are not landing files
    missing: list[str] = field(default_factory=list)
    unmatched: int = 0
    unmatched_examples: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    damaged: dict[str, str] = field(default_factory=dict)
    reread: int = 0
    lines: int = 0
    messages: int = 0
    duplicates: int = 0
    quarantined: dict[str, int] = field(default_factory=dict)
    late: int = 0
    windows: int = 0
    partitions: dict[str, int] = field(default_factory=dict)
    first_received: str | None = None
    last_received: str | None = None
    #: devices in the devices table, and the ones with the most gaps
    devices: int = 0
    device_lines: list[DeviceLine] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def quarantined_total(self) -> int:
        return sum(self.quarantined.values())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["quarantined_total"] = self.quarantined_total
        return d

    def render(self) -> str:
        rate = self.lines / self.seconds if self.seconds else 0.0
        kind = "full rebuild" if self.full else "incremental"
        out = [
            f"wsn-ingest batch: {self.landing} -> {self.out}  ({kind}, window {self.window}, "
            f"time {self.time}, tables in {self.database})",
            f"  new files read    {self.files}"
            + ("  (nothing new: tables unchanged)" if self.run is None else "")
            + (f"; {self.reread} read again for their windows" if self.reread else ""),
        ]
        for m in self.missing:
            out.append(f"  matched nothing   {m}")
        if self.unmatched:
            more = self.unmatched - len(self.unmatched_examples)
            out.append(
                f"  not landing files {self.unmatched} (ignored; names must be "
                "landing-*.jsonl or landing-*.parquet): "
                + ", ".join(self.unmatched_examples)
                + (f", ... {more} more" if more > 0 else "")
            )
        if self.changed:
            out.append(
                f"  changed since read {len(self.changed)} (not read again; --full to rebuild): "
                + ", ".join(p.rsplit("/", 1)[-1] for p in self.changed[:UNMATCHED_SHOWN])
            )
        for f, why in sorted(self.damaged.items()):
            out.append(f"  DAMAGED FILE      {f.rsplit('/', 1)[-1]}: {why} (quarantined)")
        q = ", ".join(f"{k}: {v}" for k, v in sorted(self.quarantined.items()))
        out += [
            f"  lines read        {self.lines}  ({rate:,.0f} lines/s, {self.seconds:.1f} s)",
            f"  messages          {self.messages}  [{self.first_received or '-'} .. "
            f"{self.last_received or '-'}]",
            f"  duplicates        {self.duplicates}  (same id in the same window: kept once)",
            f"  quarantined       {self.quarantined_total}" + (f"  ({q})" if q else ""),
            f"  late              {self.late}  (for windows already closed: merged anyway)",
            f"  windows           {self.windows} recomputed; partitions replaced: "
            + (", ".join(f"{t} {n}" for t, n in sorted(self.partitions.items())) or "none"),
            f"  devices           {self.devices}  -> {self.database}.devices",
        ]
        for d in self.device_lines:
            skew = f", clock skew {d.clock_skew_s:+.1f} s" if d.clock_skew_s is not None else ""
            silent = f", silent {d.silent_s:.0f} s" if d.silent_s else ""
            at = f" at {d.producer}" if d.producer and d.producer != d.device else ""
            out.append(
                f"    {d.device}{at}: {d.messages} msgs, last {d.last_seen}, "
                f"{d.gap_count} gaps{silent}{skew}"
            )
        if self.devices > len(self.device_lines):
            out.append(f"    ... {self.devices - len(self.device_lines)} more")
        if self.quarantined:
            out.append(f"  see {self.database}.quarantine (raw line, source file, reason, detail)")
        return "\n".join(out)


def device_lines(spark: SparkSession, database: str) -> tuple[int, list[DeviceLine]]:
    """The number of devices and the ones with the most gaps (then by name)."""
    df = spark.table(f"`{database}`.`devices`")
    iso = "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'"
    # the count and the first rows in one aggregation: one Spark job (a broadcast join of
    # the count and a sorted limit ran three); gap_count is never null, `d` never is
    entry = F.struct(
        (-F.col("gap_count")).alias("_g"),
        F.coalesce("device_id", "producer", F.lit("(no device, no producer)")).alias("d"),
        "producer",
        "messages",
        F.date_format("last_seen", iso).alias("last_seen"),
        "gap_count",
        "silent_s",
        "clock_skew_s",
    )
    top = df.agg(
        F.count(F.lit(1)).alias("n"),
        F.slice(F.sort_array(F.collect_list(entry)), 1, DEVICES_SHOWN).alias("top"),
    ).collect()[0]
    rows = top["top"] if top["n"] else []
    n = int(top["n"])
    return n, [
        DeviceLine(r["d"], r["producer"], int(r["messages"]), r["last_seen"], int(r["gap_count"]),
                   r["silent_s"], r["clock_skew_s"])
        for r in rows
    ]  # fmt: skip


def summarize(
    res: RunResult, inputs: Inputs, landings: list[str], out: str, opts: Options
) -> BatchSummary:
    s = BatchSummary(
        landing=" ".join(landings),
        out=out,
        database=opts.database,
        window=opts.window,
        time=opts.time,
        full=opts.full,
    )
    s.missing = list(inputs.missing)
    s.unmatched = len(inputs.unmatched)
    s.unmatched_examples = [p.rsplit("/", 1)[-1] for p in inputs.unmatched[:UNMATCHED_SHOWN]]
    for k in ("run", "files", "changed", "damaged", "reread", "lines", "messages", "duplicates",
              "quarantined", "late", "windows", "partitions", "seconds"):  # fmt: skip
        setattr(s, k, getattr(res, k))
    s.first_received, s.last_received = res.first, res.last
    return s


def run_batch(
    spark: SparkSession,
    landing: str | Sequence[str],
    out: str,
    window: str = "1 minute",
    gap_factor: float = 3.0,
    progress: Progress | None = None,
    time: str = "received",
    *,
    full: bool = False,
    database: str = "wsn",
    opts: Options | None = None,
) -> BatchSummary:
    """One run over the `landing` location(s) (directories, files, globs or URIs:
    inputs.resolve) into the tables of `database`, stored under `out`; returns what was done.
    `opts` wins over the keyword arguments when given. Bad lines never fail the job: they
    go to the quarantine table, so `lines = messages + duplicates + quarantined`. Sets the
    session time zone to UTC and Parquet timestamps to microseconds."""
    from spark_ingest.engine import Run

    o = opts or Options(
        database=database, window=window, time=time, gap_factor=gap_factor, full=full
    )
    landings = [landing] if isinstance(landing, str) else list(landing)
    for_missing = Run(spark, landings, out, o, progress or (lambda _m: None))
    res = for_missing.execute()
    s = summarize(res, for_missing.inputs, landings, out.rstrip("/"), o)
    s.devices, s.device_lines = device_lines(spark, o.database)
    return s


__all__ = ["BatchSummary", "DeviceLine", "run_batch", "run_once"]
