"""`wsn-ingest stream`: Structured Streaming over the landing zone, exactly once, with late
data written out instead of lost.

Two chained queries, each with its own checkpoint under `--checkpoint`:

1. **split** (`<ckpt>/split`, spark_ingest/stream_split.py): new landing files ->
   classified lines -> foreachBatch:
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
import signal
import threading
import time
from collections.abc import Sequence
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

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
from spark_ingest.stream_options import Progress, StreamOptions, StreamSummary, interval_us
from spark_ingest.stream_split import STAGED, Split, StreamPaths

__all__ = ["StreamOptions", "StreamSummary", "interval_us", "refresh_devices", "run_stream"]


class _Aggregate:
    """foreachBatch of the aggregate query: finished windows of batch N, written once."""

    def __init__(self, paths: StreamPaths, say: Progress) -> None:
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
                (
                    df.write.mode("overwrite")
                    .option("partitionOverwriteMode", "dynamic")
                    .partitionBy("date", "batch")
                    .parquet(f"{self.p.out}/aggregates")
                )
        finally:
            df.unpersist()
        self.batches.append(batch_id)
        self.rows += n
        self.say(f"aggregate batch {batch_id}: {n} window rows written")


def refresh_devices(spark: SparkSession, paths: StreamPaths, gap_factor: float) -> int:
    hfs = HFS(spark)
    if not any(n.startswith("b-") for n in hfs.names(paths.staged)):
        return 0
    # each id once, as in batch (a batch read of everything staged, so this is exact)
    msgs = (
        spark.read.schema(STAGED)
        .option("recursiveFileLookup", "true")
        .parquet(paths.staged)
        .dropDuplicates(["id"])
    )
    rows = device_summary(msgs, gap_factor).coalesce(1)
    rows.write.mode("overwrite").parquet(f"{paths.out}/devices")
    return int(spark.read.parquet(f"{paths.out}/devices").count())


def _source(spark: SparkSession, landings: list[str], opts: StreamOptions) -> DataFrame:
    """Both formats of every landing location (a directory or a glob of directories), one
    file source each: the set of locations must stay the same for a checkpoint."""
    parts: list[DataFrame] = []
    for landing in landings:
        parts.append(
            classify_lines(
                stream_jsonl(spark, landing, opts.max_files_per_trigger),
                keep_raw=True,
                time=opts.time,
            )
        )
        parts.append(
            classify_parquet(
                stream_parquet(spark, landing, opts.max_files_per_trigger),
                keep_raw=True,
                time=opts.time,
            )
        )
    df = parts[0]
    for p in parts[1:]:
        df = df.unionByName(p)
    return df


def _staged_source(spark: SparkSession, paths: StreamPaths, opts: StreamOptions) -> DataFrame:
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
    paths = StreamPaths(out, checkpoint)
    hfs = HFS(spark)
    landings = [landing] if isinstance(landing, str) else list(landing)
    inputs = resolve(hfs, landings)  # FileNotFoundError when every location is missing
    for m in inputs.missing:
        say(f"WARNING: --landing {m} matches nothing (yet)")
    for d in (paths.staged, paths.state):
        hfs.mkdirs(d)
    summary = StreamSummary(
        landing=" ".join(landings),
        out=paths.out,
        checkpoint=paths.ckpt,
        window=opts.window,
        watermark_delay=opts.watermark,
        trigger=opts.trigger,
    )
    split = Split(spark, paths, opts, say)
    agg = _Aggregate(paths, say)

    def start_split() -> Any:
        w = (
            _source(spark, landings, opts)
            .writeStream.queryName("wsn-ingest-split")
            .option("checkpointLocation", paths.split_ckpt)
            .foreachBatch(split)
        )
        return _trigger(w, opts.trigger).start()

    def start_aggregate() -> Any:
        aggs = window_aggregates(
            measurements(_staged_source(spark, paths, opts).withWatermark("at", opts.watermark)),
            opts.window,
        )
        w = (
            aggs.writeStream.queryName("wsn-ingest-aggregate")
            .outputMode("append")
            .option("checkpointLocation", paths.agg_ckpt)
            .foreachBatch(agg)
        )
        return _trigger(w, opts.trigger).start()

    queries: list[Any] = []
    if opts.trigger.strip().lower().replace("_", "-") in ("available-now", "availablenow", "once"):
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
    totals: dict[str, int] = {
        "lines": 0,
        "messages": 0,
        "late": 0,
        "duplicates": 0,
        "quarantined": 0,
    }
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
        summary.open_groups = sum(
            int(op.get("numRowsTotal", 0) or 0) for op in last.get("stateOperators", [])
        )
        wm = (last.get("eventTime") or {}).get("watermark")
        summary.watermark = wm
    summary.seconds = time.monotonic() - t0
    hfs.write_text(
        f"{paths.out}/_stream_summary.json", json.dumps(summary.to_dict(), indent=2) + "\n"
    )
    return summary
