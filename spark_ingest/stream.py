"""`wsn-ingest stream`: Structured Streaming over the landing zone, exactly once, with late
data written out instead of lost.

Two chained queries, each with its own checkpoint under `--checkpoint`:

1. **split** (`<ckpt>/split`): new landing files -> classified lines -> foreachBatch:
   quarantined lines to `<out>/quarantine/batch=N/`, late messages to `<out>/late/batch=N/`,
   every valid message, flagged late or not, to `<ckpt>/staged/b-N/` (written hidden, then
   renamed: the next query sees a batch whole or not at all; the device summary reads all of
   them), and the batch's counters and running maximum event time to
   `<ckpt>/split-state/N.json`.
   *Duplicates* are decided here too: a valid line whose `id` an earlier micro-batch staged,
   or that another line of the same micro-batch precedes, is counted and not staged.
   *Late* is decided here, with Spark's rule: a message is late when the end of its window is
   at or before the watermark = (greatest `at` of all earlier micro-batches) -
   `--watermark`. Messages of one micro-batch are never late to each other.
2. **aggregate** (`<ckpt>/aggregate`): staged messages -> measurements ->
   `withWatermark(at)` -> tumbling-window aggregates in append mode -> foreachBatch
   that writes micro-batch N's finished windows to `<out>/aggregates/date=D/batch=N/` with
   dynamic partition overwrite.
   This query sees only on-time messages, in order, so its own watermark is never ahead of
   the split's and it drops nothing (its `numRowsDroppedByWatermark` is reported; it is 0).

Exactly once: Spark re-runs an unfinished micro-batch with the same input and the same
state after a crash; every write above is keyed by the batch id and replaces what a failed
attempt left, so a restart neither loses nor duplicates a window, a quarantined line or a late
message. Landing files are tracked by name (the gateway never reuses one).

A window is written once the watermark passes its end; with `available-now` the newest
windows (end > watermark) stay in the state until newer data arrives, and the summary says how
many groups are waiting.
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_ingest.aggregate import measurements, window_aggregates
from spark_ingest.devices import device_summary
from spark_ingest.hfs import HFS
from spark_ingest.inputs import resolve
from spark_ingest.landing import (
    classify_lines,
    classify_parquet,
    stream_jsonl,
    stream_parquet,
)
from spark_ingest.schema import MESSAGE

# what the split query stages for the aggregate query and the device summary
STAGED = T.StructType([*MESSAGE.fields, T.StructField("late", T.BooleanType())])

Progress = Callable[[str], None]


@dataclass
class StreamOptions:
    window: str = "1 minute"
    watermark: str = "5 minutes"
    trigger: str = "available-now"  # or a processing-time interval, "10 seconds"
    gap_factor: float = 3.0
    max_files_per_trigger: int | None = None
    timeout: float | None = None  # stop an interval trigger after this many seconds
    devices_every: float = 60.0  # refresh <out>/devices this often with an interval trigger
    #: "received" or "event": the time windows, lateness and gaps use (landing.identity);
    #: keep it for the life of a checkpoint
    time: str = "received"


@dataclass
class StreamSummary:
    landing: str
    out: str
    checkpoint: str
    window: str
    watermark_delay: str
    trigger: str
    split_batches: int = 0
    aggregate_batches: int = 0
    files: int = 0
    lines: int = 0
    messages: int = 0
    quarantined: dict[str, int] = field(default_factory=dict)
    late: int = 0
    duplicates: int = 0
    windows_written: int = 0
    dropped_by_watermark: int = 0
    open_groups: int = 0
    watermark: str | None = None
    producers: int = 0
    seconds: float = 0.0
    totals: dict[str, Any] = field(default_factory=dict)

    @property
    def quarantined_total(self) -> int:
        return sum(self.quarantined.values())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["quarantined_total"] = self.quarantined_total
        return d

    def render(self) -> str:
        q = ", ".join(f"{k}: {v}" for k, v in sorted(self.quarantined.items()))
        t = self.totals
        lines = [
            f"wsn-ingest stream: {self.landing} -> {self.out}",
            f"  checkpoint        {self.checkpoint}  (trigger {self.trigger}, window "
            f"{self.window}, watermark delay {self.watermark_delay})",
            f"  this run          {self.split_batches} split + {self.aggregate_batches} "
            f"aggregate micro-batches in {self.seconds:.1f} s",
            f"  files / lines     {self.files} / {self.lines}",
            f"  messages          {self.messages}",
            f"  quarantined       {self.quarantined_total}" + (f"  ({q})" if q else ""),
            f"  late              {self.late}  -> {self.out}/late/ (window already closed)",
            f"  duplicates        {self.duplicates}  (id already read, e.g. --landing-format "
            "both: counted once)",
            f"  windows written   {self.windows_written}  -> {self.out}/aggregates/",
            f"  watermark         {self.watermark or '-'}; {self.open_groups} groups open "
            "(written when newer data moves the watermark past their window)",
            f"  dropped by Spark  {self.dropped_by_watermark}  (numRowsDroppedByWatermark; "
            "0 expected: late rows are split off first)",
            f"  devices           {self.producers}  -> {self.out}/devices/",
        ]
        if t:
            lines.append(
                f"  since the start   {t.get('lines', 0)} lines, {t.get('messages', 0)} "
                f"messages, {t.get('duplicates', 0)} duplicates, {t.get('quarantined', 0)} "
                f"quarantined, {t.get('late', 0)} late"
            )
        return "\n".join(lines)


def _iso_us(us: int | None) -> str | None:
    if us is None:
        return None
    return datetime.fromtimestamp(us / 1e6, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_UNITS_US = {
    "microsecond": 1, "millisecond": 1_000, "second": 1_000_000, "minute": 60_000_000,
    "hour": 3_600_000_000, "day": 86_400_000_000, "week": 604_800_000_000,
}
_INTERVAL = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+?)s?\b")


def interval_us(text: str) -> int:
    """`"5 minutes"`, `"1 hour 30 minutes"`, `"10 seconds"` -> microseconds, for the same
    strings that withWatermark and window accept (fixed units only: no months)."""
    t = text.strip().lower()
    t = t[len("interval"):].strip() if t.startswith("interval") else t
    total, pos = 0.0, 0
    for m in _INTERVAL.finditer(t):
        if t[pos:m.start()].strip() or m.group(2) not in _UNITS_US:
            break
        total += float(m.group(1)) * _UNITS_US[m.group(2)]
        pos = m.end()
    else:
        if pos and not t[pos:].strip() and total > 0:
            return int(total)
    raise ValueError(f"not a duration: {text!r} (e.g. \"1 minute\", \"30 seconds\")")


class _Paths:
    def __init__(self, out: str, ckpt: str) -> None:
        self.out = out.rstrip("/")
        self.ckpt = ckpt.rstrip("/")
        self.split_ckpt = f"{self.ckpt}/split"
        self.agg_ckpt = f"{self.ckpt}/aggregate"
        self.staged = f"{self.ckpt}/staged"
        self.state = f"{self.ckpt}/split-state"


class _Split:
    """foreachBatch of the split query (see module docstring)."""

    def __init__(self, spark: SparkSession, paths: _Paths, opts: StreamOptions,
                 say: Progress) -> None:
        self.spark = spark
        self.p = paths
        self.opts = opts
        self.say = say
        self.hfs = HFS(spark)
        self.delay_us = interval_us(opts.watermark)
        self.window_us = interval_us(opts.window)
        self.batches: list[int] = []

    def state(self, batch_id: int) -> dict[str, Any] | None:
        text = self.hfs.read_text(f"{self.p.state}/{batch_id}.json")
        return None if text is None else dict(json.loads(text))

    def previous_state(self, batch_id: int) -> dict[str, Any] | None:
        ids = [int(n[:-5]) for n in self.hfs.names(self.p.state)
               if n.endswith(".json") and n[:-5].isdigit()]
        before = [i for i in ids if i < batch_id]
        return self.state(max(before)) if before else None

    def seen_ids(self, batch_id: int, lo_us: int, hi_us: int) -> DataFrame | None:
        """Ids staged by earlier micro-batches (published, immutable: a re-run of `batch_id`
        sees exactly the same set, which keeps the dedupe exactly once) whose `at`
        lies in [lo_us, hi_us], the span of this micro-batch's valid lines.

        A copy of a message carries the message's `at`, so no staged row outside the
        span can be one. The bound is what keeps a long-running stream from slowing down:
        Spark skips each staged file whose `at` statistics fall outside the span, so
        the cost follows the overlap with this micro-batch, not the length of the history.
        """
        dirs = [f"{self.p.staged}/{n}" for n in self.hfs.names(self.p.staged)
                if n.startswith("b-") and n[2:].isdigit() and int(n[2:]) < batch_id]
        if not dirs:
            return None
        span = F.col("at").between(
            F.timestamp_micros(F.lit(lo_us)), F.timestamp_micros(F.lit(hi_us))
        )
        return (self.spark.read.schema(STAGED).parquet(*dirs).where(span).select("id")
                .distinct().withColumn("_seen", F.lit(True)))

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        prev = self.previous_state(batch_id)
        prev_max = prev["max_event_us"] if prev else None
        wm_us = prev_max - self.delay_us if prev_max is not None else None

        # the end of the tumbling window, as F.window computes it (epoch-aligned); not
        # F.window itself: it filters out rows without a time, i.e. the quarantined lines
        us = F.unix_micros("at")
        w = F.lit(self.window_us)
        wend_us = us - F.pmod(us, w) + w
        late_cond = F.lit(False) if wm_us is None else wend_us <= F.lit(wm_us)
        valid = F.col("reason").isNull()
        # kept: read twice (the span of its times, then the split), parsed once
        base = df.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            span = base.where(valid).agg(F.min(us).alias("lo"), F.max(us).alias("hi")).collect()[0]
            # `id` is the message's identity: with `--landing-format both` every record comes
            # twice (.jsonl and .parquet, in this micro-batch or another). A valid line is a
            # duplicate when an earlier micro-batch staged its id or another line of this one
            # comes first (by source file); duplicates are counted, not staged, not late.
            # Quarantined lines are never duplicates (not messages; their id may be null).
            seen = (self.seen_ids(batch_id, int(span["lo"]), int(span["hi"]))
                    if span["lo"] is not None else None)
            if seen is not None:
                df = base.join(seen, "id", "left")
            else:
                df = base.withColumn("_seen", F.lit(None).cast("boolean"))
            first = F.row_number().over(
                Window.partitionBy("id").orderBy("source_file", "received_at", "raw")) == 1
            dup = valid & (F.coalesce(F.col("_seen"), F.lit(False)) | ~first)
            df = (
                df.withColumn("_wend", F.timestamp_micros(wend_us))
                .withColumn("_dup", dup)
                .withColumn("_late", valid & ~F.col("_dup") & late_cond)
                .persist(StorageLevel.MEMORY_AND_DISK)
            )
            try:
                self._write(df, batch_id, prev, wm_us)
            finally:
                df.unpersist()
        finally:
            base.unpersist()

    def _write(self, df: DataFrame, batch_id: int, prev: dict[str, Any] | None,
               wm_us: int | None) -> None:
        stats = (
            df.groupBy("reason", "_late", "_dup")
            .agg(
                F.count(F.lit(1)).alias("n"),
                F.max(F.unix_micros("at")).alias("max_us"),
                F.collect_set("source_file").alias("files"),
            )
            .collect()
        )
        quarantined = {r["reason"]: int(r["n"]) for r in stats if r["reason"] is not None}
        late = sum(int(r["n"]) for r in stats if r["reason"] is None and r["_late"])
        messages = sum(int(r["n"]) for r in stats if r["reason"] is None and not r["_dup"])
        duplicates = sum(int(r["n"]) for r in stats if r["reason"] is None and r["_dup"])
        files = {f for r in stats for f in r["files"]}
        maxes = [r["max_us"] for r in stats
                 if r["reason"] is None and not r["_dup"] and r["max_us"] is not None]
        prev_max = prev["max_event_us"] if prev else None
        new_max = max([*maxes, *([prev_max] if prev_max is not None else [])], default=None)

        if quarantined:
            (df.where(F.col("reason").isNotNull()).select("reason", "source_file", "raw")
             .write.mode("overwrite").json(f"{self.p.out}/quarantine/batch={batch_id}"))
        if late:
            (df.where("_late").select(
                F.lit("late").alias("reason"),
                F.date_format("received_at", "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'")
                .alias("received_at"),
                F.date_format("_wend", "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'")
                .alias("window_end"),
                F.lit(_iso_us(wm_us)).alias("watermark"),
                F.date_format("at", "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'").alias("at"),
                "id", "device_id", "producer", "topic_path", "source_file", "raw",
            ).write.mode("overwrite").json(f"{self.p.out}/late/batch={batch_id}"))
        # every valid message, flagged: the aggregate query takes the on-time ones, the
        # device summary all of them
        final = f"{self.p.staged}/b-{batch_id:010d}"
        if messages and not self.hfs.exists(final):
            tmp = f"{self.p.staged}/_tmp-{batch_id:010d}"  # `_`: invisible to the reader
            (df.where(F.col("reason").isNull() & ~F.col("_dup"))
             .select(*MESSAGE.fieldNames(), F.col("_late").alias("late"))
             .write.mode("overwrite").parquet(tmp))
            self.hfs.rename(tmp, final)
        state = {
            "batch": batch_id,
            "max_event_us": new_max,
            "watermark_us": wm_us,
            "files": len(files),
            "lines": sum(int(r["n"]) for r in stats),
            "messages": messages,
            "late": late,
            "duplicates": duplicates,
            "quarantined": quarantined,
        }
        self.hfs.mkdirs(self.p.state)
        # once: a re-run of this batch computes the same state, and the next batch's
        # watermark must never see the file missing
        self.hfs.write_once(f"{self.p.state}/{batch_id}.json", json.dumps(state) + "\n")
        self.batches.append(batch_id)
        self.say(
            f"split batch {batch_id}: {len(files)} file(s), {state['lines']} lines, "
            f"{messages} messages, {duplicates} duplicates, "
            f"{sum(quarantined.values())} quarantined, {late} late "
            f"(watermark {_iso_us(wm_us) or '-'})"
        )


class _Aggregate:
    """foreachBatch of the aggregate query: finished windows of batch N, written once."""

    def __init__(self, paths: _Paths, say: Progress) -> None:
        self.p = paths
        self.say = say
        self.batches: list[int] = []
        self.rows = 0

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        df = df.withColumn("batch", F.lit(batch_id)).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            n = df.count()
            if n:
                # dynamic overwrite: replaces exactly (date=*, batch=N), what a failed
                # attempt of this batch may have left, and nothing else
                (df.write.mode("overwrite").option("partitionOverwriteMode", "dynamic")
                 .partitionBy("date", "batch").parquet(f"{self.p.out}/aggregates"))
        finally:
            df.unpersist()
        self.batches.append(batch_id)
        self.rows += n
        self.say(f"aggregate batch {batch_id}: {n} window rows written")


def refresh_devices(spark: SparkSession, paths: _Paths, gap_factor: float) -> int:
    hfs = HFS(spark)
    if not any(n.startswith("b-") for n in hfs.names(paths.staged)):
        return 0
    # each id once, as in batch (a batch read of everything staged, so this is exact)
    msgs = (spark.read.schema(STAGED).option("recursiveFileLookup", "true")
            .parquet(paths.staged).dropDuplicates(["id"]))
    rows = device_summary(msgs, gap_factor).coalesce(1)
    rows.write.mode("overwrite").parquet(f"{paths.out}/devices")
    return int(spark.read.parquet(f"{paths.out}/devices").count())


def _source(spark: SparkSession, landings: list[str], opts: StreamOptions) -> DataFrame:
    """Both formats of every landing location (a directory or a glob of directories), one
    file source each: the set of locations must stay the same for a checkpoint."""
    parts: list[DataFrame] = []
    for landing in landings:
        parts.append(classify_lines(stream_jsonl(spark, landing, opts.max_files_per_trigger),
                                    keep_raw=True, time=opts.time))
        parts.append(classify_parquet(stream_parquet(spark, landing, opts.max_files_per_trigger),
                                      keep_raw=True, time=opts.time))
    df = parts[0]
    for p in parts[1:]:
        df = df.unionByName(p)
    return df


def _staged_source(spark: SparkSession, paths: _Paths, opts: StreamOptions) -> DataFrame:
    reader = (
        spark.readStream.schema(STAGED)
        .option("recursiveFileLookup", "true")
        .option("maxFileAge", "36500d")
    )
    if opts.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", str(opts.max_files_per_trigger))
    return reader.parquet(paths.staged).where(~F.col("late")).drop("late")


def _trigger(writer: Any, trigger: str) -> Any:
    t = trigger.strip().lower()
    if t in ("available-now", "availablenow", "available_now", "once"):
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=trigger)


def _stop_between_batches(query: Any, wait: float = 120.0) -> None:
    """Stop `query` when no micro-batch is running: interrupting foreachBatch mid-way is safe
    (the batch is re-run after a restart) but noisy. Gives up waiting after `wait` s."""
    deadline = time.monotonic() + wait
    while query.isActive and time.monotonic() < deadline:
        status = query.status
        if not (status.get("isTriggerActive") or status.get("isDataAvailable")):
            break
        time.sleep(0.2)
    query.stop()


def _progress_sum(query: Any, key: str) -> int:
    total = 0
    for p in query.recentProgress:
        for op in p.get("stateOperators", []) if isinstance(p, dict) else []:
            total += int(op.get(key, 0) or 0)
    return total


def run_stream(
    spark: SparkSession,
    landing: str | Sequence[str],
    out: str,
    checkpoint: str,
    opts: StreamOptions | None = None,
    progress: Progress | None = None,
) -> StreamSummary:
    """Run both queries (see module docstring) and return what this run did.

    With the `available-now` trigger: process every file not yet processed, write the windows
    the watermark has closed, refresh `<out>/devices`, return. With an interval trigger: run
    until `opts.timeout`, SIGTERM or Ctrl-C, then stop both queries cleanly.
    """
    opts = opts or StreamOptions()
    say = progress or (lambda _m: None)
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    t0 = time.monotonic()
    paths = _Paths(out, checkpoint)
    hfs = HFS(spark)
    landings = [landing] if isinstance(landing, str) else list(landing)
    inputs = resolve(hfs, landings)  # FileNotFoundError when every location is missing
    for m in inputs.missing:
        say(f"WARNING: --landing {m} matches nothing (yet)")
    for d in (paths.staged, paths.state):
        hfs.mkdirs(d)
    summary = StreamSummary(landing=" ".join(landings), out=paths.out, checkpoint=paths.ckpt,
                            window=opts.window, watermark_delay=opts.watermark,
                            trigger=opts.trigger)
    split = _Split(spark, paths, opts, say)
    agg = _Aggregate(paths, say)

    def start_split() -> Any:
        w = (_source(spark, landings, opts).writeStream.queryName("wsn-ingest-split")
             .option("checkpointLocation", paths.split_ckpt).foreachBatch(split))
        return _trigger(w, opts.trigger).start()

    def start_aggregate() -> Any:
        aggs = window_aggregates(
            measurements(_staged_source(spark, paths, opts).withWatermark("at", opts.watermark)),
            opts.window,
        )
        w = (aggs.writeStream.queryName("wsn-ingest-aggregate").outputMode("append")
             .option("checkpointLocation", paths.agg_ckpt).foreachBatch(agg))
        return _trigger(w, opts.trigger).start()

    queries: list[Any] = []
    if opts.trigger.strip().lower().replace("_", "-") in ("available-now", "availablenow",
                                                           "once"):
        say("split: reading new landing files")
        q1 = start_split()
        q1.awaitTermination()
        say("aggregate: windows of the staged messages")
        q2 = start_aggregate()
        q2.awaitTermination()
        queries = [q1, q2]
    else:
        q1 = start_split()
        q2 = start_aggregate()
        queries = [q1, q2]
        stop = threading.Event()

        def on_signal(_sig: int, _frame: Any) -> None:
            stop.set()

        old = signal.signal(signal.SIGTERM, on_signal)
        next_devices = time.monotonic() + opts.devices_every
        try:
            while not stop.is_set():
                if opts.timeout is not None and time.monotonic() - t0 >= opts.timeout:
                    break
                for q in queries:
                    if not q.isActive and q.exception() is not None:
                        raise RuntimeError(f"{q.name} failed: {q.exception()}")
                if time.monotonic() >= next_devices:
                    n = refresh_devices(spark, paths, opts.gap_factor)
                    say(f"devices refreshed: {n} devices")
                    next_devices = time.monotonic() + opts.devices_every
                stop.wait(1.0)
        except KeyboardInterrupt:
            say("interrupted: stopping the queries")
        finally:
            signal.signal(signal.SIGTERM, old)
            say("stopping: letting running micro-batches finish")
            for q in queries:  # split first: no new data reaches the aggregate query
                _stop_between_batches(q)
    for q in queries:
        exc = q.exception()
        if exc is not None:
            raise RuntimeError(f"{q.name} failed: {exc}")

    if split.batches or not hfs.exists(f"{paths.out}/devices"):
        summary.producers = refresh_devices(spark, paths, opts.gap_factor)
        say(f"devices refreshed: {summary.producers} devices")
    else:
        summary.producers = int(spark.read.parquet(f"{paths.out}/devices").count())

    # this run's counters (from the split state of the batches it ran) and the totals
    for b in split.batches:
        st = split.state(b) or {}
        summary.files += int(st.get("files", 0))
        summary.lines += int(st.get("lines", 0))
        summary.messages += int(st.get("messages", 0))
        summary.late += int(st.get("late", 0))
        summary.duplicates += int(st.get("duplicates", 0))
        for k, v in dict(st.get("quarantined", {})).items():
            summary.quarantined[k] = summary.quarantined.get(k, 0) + int(v)
    totals: dict[str, int] = {"lines": 0, "messages": 0, "late": 0, "duplicates": 0,
                              "quarantined": 0}
    for name in hfs.names(paths.state):
        if name.endswith(".json") and name[:-5].isdigit():
            st = split.state(int(name[:-5])) or {}
            totals["lines"] += int(st.get("lines", 0))
            totals["messages"] += int(st.get("messages", 0))
            totals["late"] += int(st.get("late", 0))
            totals["duplicates"] += int(st.get("duplicates", 0))
            totals["quarantined"] += sum(int(v) for v in dict(st.get("quarantined", {})).values())
    summary.totals = dict(totals)
    summary.split_batches = len(split.batches)
    summary.aggregate_batches = len(agg.batches)
    summary.windows_written = agg.rows
    q2 = queries[1]
    summary.dropped_by_watermark = _progress_sum(q2, "numRowsDroppedByWatermark")
    last = q2.lastProgress
    if isinstance(last, dict):
        summary.open_groups = sum(int(op.get("numRowsTotal", 0) or 0)
                                  for op in last.get("stateOperators", []))
        wm = (last.get("eventTime") or {}).get("watermark")
        summary.watermark = wm
    summary.seconds = time.monotonic() - t0
    hfs.write_text(f"{paths.out}/_stream_summary.json",
                   json.dumps(summary.to_dict(), indent=2) + "\n")
    return summary

