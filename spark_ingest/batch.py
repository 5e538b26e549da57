"""`wsn-ingest batch`: the whole landing zone -> aggregates, devices, quarantine.

The output directory is rewritten as a whole (each of its parts is overwritten), so running
the job twice on the same landing zone gives the same output: it is idempotent, and exactly
once by construction. Lines are parsed and partitioned by device key once; that form is kept
(keep.materialize) for the four outputs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from time import monotonic
from typing import Any

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from spark_ingest.aggregate import measurements, window_aggregates
from spark_ingest.devices import device_summary
from spark_ingest.hfs import HFS
from spark_ingest.inputs import Inputs, resolve
from spark_ingest.keep import materialize, release
from spark_ingest.landing import (
    REASONS,
    classify_lines,
    classify_parquet,
    quarantined,
    read_jsonl,
    read_parquet,
    valid_messages,
)

UNMATCHED_SHOWN = 5

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


@dataclass
class DeviceLine:
    device_id: str | None
    producer: str | None
    messages: int
    first_seen: str
    last_seen: str
    gap_count: int
    longest_gap_s: float
    clock_skew_median_s: float | None = None

    @property
    def name(self) -> str:
        return self.device_id or self.producer or "(no device, no producer)"


@dataclass
class BatchSummary:
    """What a batch run did; `render()` is the one-screen terminal summary."""

    landing: str
    out: str
    window: str
    time: str = "received"
    files: int = 0
    #: landing locations that matched nothing, and entries there that are not landing files
    missing: list[str] = field(default_factory=list)
    unmatched: int = 0
    unmatched_examples: list[str] = field(default_factory=list)
    lines: int = 0
    messages: int = 0
    duplicates: int = 0
    quarantined: dict[str, int] = field(default_factory=dict)
    measurements: int = 0
    windows: int = 0
    producers: int = 0
    first_received: str | None = None
    last_received: str | None = None
    devices: list[DeviceLine] = field(default_factory=list)
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
        out = [
            f"wsn-ingest batch: {self.landing} -> {self.out}  (window {self.window}, "
            f"time {self.time})",
            f"  files read        {self.files}"
            + ("  (NO LANDING FILES: nothing was read)" if not self.files else ""),
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
        out += [
            f"  lines read        {self.lines}  ({rate:,.0f} lines/s, {self.seconds:.1f} s)",
            f"  messages          {self.messages}  [{self.first_received or '-'} .. "
            f"{self.last_received or '-'}]",
            f"  duplicates        {self.duplicates}  (same id again, e.g. --landing-format "
            "both: counted once)",
            f"  quarantined       {self.quarantined_total}"
            + (
                "  (" + ", ".join(f"{k}: {v}" for k, v in sorted(self.quarantined.items())) + ")"
                if self.quarantined
                else ""
            ),
            f"  measurements      {self.measurements}",
            f"  aggregate rows    {self.windows}  -> {self.out}/aggregates/",
            f"  devices           {self.producers}  -> {self.out}/devices/",
        ]
        gappy = sorted(self.devices, key=lambda d: (-d.gap_count, d.name))
        for d in gappy[:8]:
            skew = (
                f", clock skew {d.clock_skew_median_s:+.1f} s"
                if d.clock_skew_median_s is not None
                else ""
            )
            at = f" at {d.producer}" if d.device_id and d.producer else ""
            out.append(
                f"    {d.name}{at}: {d.messages} msgs, last {d.last_seen}, "
                f"{d.gap_count} gaps (longest {d.longest_gap_s:.0f} s){skew}"
            )
        if len(gappy) > 8:
            out.append(f"    ... {len(gappy) - 8} more")
        if self.quarantined:
            out.append(f"  see {self.out}/quarantine/ (raw line, source file, reason)")
        return "\n".join(out)


def iso(col: str) -> Column:
    """A timestamp as `2026-11-21T05:00:00.123456Z` (formatted by Spark in UTC, so the Python
    process's local time zone never matters)."""
    return F.date_format(F.col(col), "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'")


def landing_files(spark: SparkSession, landing: str | Sequence[str]) -> dict[str, int]:
    """Bytes of each published landing file the `landing` location(s) name, by file name
    (inputs.resolve)."""
    landings = [landing] if isinstance(landing, str) else list(landing)
    return resolve(HFS(spark), landings).sizes_by_name()


def read_classified(spark: SparkSession, inputs: Inputs, time: str = "received") -> DataFrame:
    """Every landing file of `inputs` (JSON lines and the Parquet variant), classified."""
    parts: list[DataFrame] = []
    if inputs.jsonl:
        parts.append(classify_lines(read_jsonl(spark, inputs.jsonl), time=time))
    if inputs.parquet:
        parts.append(classify_parquet(read_parquet(spark, inputs.parquet), time=time))
    if not parts:  # nothing to read: an empty frame of the same columns
        empty = spark.createDataFrame([], "raw string, source_file string")
        parts.append(classify_lines(empty, time=time))
    df = parts[0]
    for p in parts[1:]:
        df = df.unionByName(p)
    return df


# Landing bytes per partition of the by-key shuffle: about 120,000 messages (half a
# million measurements to sort per task) in either format; Parquet compresses the landing
# records about 15x.
JSONL_BYTES_PER_PARTITION = 64 * 1024 * 1024
PARQUET_BYTES_PER_PARTITION = 4 * 1024 * 1024


def partition_count(spark: SparkSession, files: dict[str, int]) -> int:
    """Partitions for the by-key shuffle, sized by the landing files (name -> bytes).

    Each task sorts the measurements of its partition (4 per message in the benchmark), so
    the count follows the data, not the input splits: the 67 MB Parquet benchmark zone is
    2 input splits of 1M messages each. Measured with 4 GB of driver memory and 2M messages:
    4 partitions spilled 960 MiB to disk, 8 spilled 448 MiB (50 producers hash unevenly),
    16 nothing. At least two per core; a small zone gets no more (200 tiny tasks per stage,
    Spark's default, made small zones twice as slow)."""
    jsonl = sum(b for n, b in files.items() if n.endswith(".jsonl"))
    parquet = sum(b for n, b in files.items() if n.endswith(".parquet"))
    by_size = -(-jsonl // JSONL_BYTES_PER_PARTITION) + -(-parquet // PARQUET_BYTES_PER_PARTITION)
    return max(by_size, 2 * spark.sparkContext.defaultParallelism, 1)


def by_key(df: DataFrame, parts: int) -> DataFrame:
    """`df` hash-partitioned by device `key` (schema.MESSAGE): what
    aggregate.window_aggregates and devices.device_summary group by first, so neither
    shuffles again. Lines without a key (null) share one partition."""
    return df.repartition(parts, "key")


def run_batch(
    spark: SparkSession,
    landing: str | Sequence[str],
    out: str,
    window: str = "1 minute",
    gap_factor: float = 3.0,
    progress: Progress | None = None,
    time: str = "received",
) -> BatchSummary:
    """Aggregate every published file the `landing` location(s) name (directories, files,
    globs or URIs: inputs.resolve) into `out`; return what was done. `time` ("received" or
    "event") picks the time windows and gaps use (landing.identity).

    Writes (each overwritten): `out/aggregates/` (Parquet, partitioned by `date`),
    `out/devices/` (Parquet), `out/quarantine/` (JSON lines), `out/_summary.json`.
    Bad lines never fail the job. Messages are identified by `id`: a valid line whose id was
    already read (the other copy of `--landing-format both`) is counted in `duplicates` and
    not aggregated again, so `lines = messages + duplicates + quarantined`. Sets the session
    time zone to UTC.
    """
    say = progress or _quiet
    t0 = monotonic()
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    out = out.rstrip("/")
    landings = [landing] if isinstance(landing, str) else list(landing)
    summary = BatchSummary(landing=" ".join(landings), out=out, window=window, time=time)
    hfs = HFS(spark)
    inputs = resolve(hfs, landings)  # FileNotFoundError when every location is missing
    summary.missing = list(inputs.missing)
    summary.unmatched = len(inputs.unmatched)
    summary.unmatched_examples = [p.rsplit("/", 1)[-1] for p in inputs.unmatched[:UNMATCHED_SHOWN]]
    for m in inputs.missing:
        say(f"WARNING: --landing {m} matches nothing")
    if inputs.unmatched:
        say(
            f"WARNING: {len(inputs.unmatched)} entries are not landing files and are ignored: "
            + ", ".join(summary.unmatched_examples)
        )
    say(f"reading {len(inputs.files)} landing files from {' '.join(landings)}")

    # Parse once, shuffle once: every line is hash-partitioned by device key and kept. All
    # that follows (counts by reason, quarantine, dedupe check, window aggregates, devices)
    # groups by key plus other columns, so Spark reuses this partitioning and sorts
    # within partitions instead of shuffling 4x more measurement rows (docs/spark_ingest.md,
    # "Performance").
    files = inputs.sizes_by_name()
    summary.files = len(inputs.files)
    classified = read_classified(spark, inputs, time)
    parts = partition_count(spark, files)
    staged = materialize(spark, by_key(classified, parts))
    msgs: DataFrame | None = None
    try:
        # The lines are counted by reason while the quarantine is written: an Observation
        # collects the counts in the same pass over the kept lines (filters are not pushed
        # below it), instead of a second query.
        seen = Observation("lines")
        counted = staged.observe(
            seen,
            F.count(F.lit(1)).alias("lines"),
            F.count("reason").alias("quarantined"),
            *[F.count(F.when(F.col("reason") == r, 1)).alias(r) for r in REASONS],
        )
        quarantined(counted).write.mode("overwrite").json(f"{out}/quarantine")
        lines = seen.get
        summary.lines = int(lines["lines"])
        summary.quarantined = {r: int(lines[r]) for r in REASONS if lines[r]}
        if summary.quarantined_total != lines["quarantined"]:  # a reason missing in REASONS
            raise RuntimeError(f"quarantine reasons out of step with REASONS: {lines}")
        valid = summary.lines - summary.quarantined_total
        say(f"quarantine written: {out}/quarantine/")

        # `id` is the message's identity (design.md, "Landing zone"): a gateway writing
        # `--landing-format both` puts every record in a .jsonl and a .parquet file, so the
        # same id may arrive twice; each id counts once. Only valid lines are deduplicated
        # (a quarantined line is not a message and may have no id at all). The check groups
        # by (key, id), within the key partitions, so it shuffles nothing; the gateway's
        # ids are UUIDs, so this is the same as comparing ids. Only when there are
        # duplicates is a deduplicated copy materialized.
        msgs = valid_messages(staged)
        summary.duplicates = (
            int(
                msgs.groupBy("key", "id")
                .count()
                .where(F.col("count") > 1)
                .agg(F.sum(F.col("count") - 1).alias("n"))
                .collect()[0]["n"]
                or 0
            )
            if valid
            else 0
        )
        summary.messages = valid - summary.duplicates
        if summary.duplicates:
            msgs = materialize(spark, msgs.dropDuplicates(["key", "id"]))
        say(
            f"parsed {summary.lines} lines from {summary.files} files: "
            f"{summary.messages} messages, {summary.duplicates} duplicates, "
            f"{summary.quarantined_total} quarantined"
        )
        aggs = window_aggregates(measurements(msgs), window)
        # counted as they are written (an Observation), not read back
        written = Observation("aggregates")
        aggs.observe(
            written, F.count(F.lit(1)).alias("rows"), F.sum("count").alias("meas")
        ).write.mode("overwrite").partitionBy("date").parquet(f"{out}/aggregates")
        totals = written.get
        summary.windows = int(totals["rows"])
        summary.measurements = int(totals["meas"] or 0)
        say(f"aggregates written: {summary.windows} rows -> {out}/aggregates/")

        devices = device_summary(msgs, gap_factor)
        devices.coalesce(1).write.mode("overwrite").parquet(f"{out}/devices")
        devs = (
            spark.read.schema(devices.schema)
            .parquet(f"{out}/devices")
            .select(
                "device_id",
                "producer",
                "messages",
                iso("first_seen").alias("first_seen"),
                iso("last_seen").alias("last_seen"),
                "gap_count",
                "longest_gap_s",
                "clock_skew_median_s",
            )
            .collect()
        )
        say(f"devices written: {len(devs)} devices -> {out}/devices/")
    finally:
        if msgs is not None:
            release(msgs)
        release(staged)

    summary.producers = len(devs)
    summary.devices = [
        DeviceLine(
            device_id=d["device_id"],
            producer=d["producer"],
            messages=int(d["messages"]),
            first_seen=d["first_seen"],
            last_seen=d["last_seen"],
            gap_count=int(d["gap_count"]),
            longest_gap_s=float(d["longest_gap_s"]),
            clock_skew_median_s=d["clock_skew_median_s"],
        )
        for d in devs
    ]
    if devs:
        summary.first_received = min(d["first_seen"] for d in devs)
        summary.last_received = max(d["last_seen"] for d in devs)
    summary.seconds = monotonic() - t0
    hfs.write_text(f"{out}/_summary.json", json.dumps(summary.to_dict(), indent=2) + "\n")
    return summary
