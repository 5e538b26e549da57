"""Query 1 of `wsn-ingest stream` (spark_ingest.stream): **split**.

New landing files -> classified lines -> this foreachBatch, checkpointed at `<ckpt>/split`:
quarantined lines to `<out>/quarantine/batch=N/`, late messages to `<out>/late/batch=N/`,
every valid message, flagged late or not, to `<ckpt>/staged/b-N/` (written hidden, then
renamed: the next query sees a batch whole or not at all; the device summary reads all of
them), and the batch's counters and running maximum event time to
`<ckpt>/split-state/N.json`.

*Duplicates* are decided here too: a valid line whose `id` an earlier micro-batch staged, or
that another line of the same micro-batch precedes, is counted and not staged.
*Late* is decided here, with Spark's rule: a message is late when the end of its window is at
or before the watermark = (greatest `at` of all earlier micro-batches) - `--watermark`.
Messages of one micro-batch are never late to each other.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_ingest.hfs import HFS
from spark_ingest.schema import MESSAGE
from spark_ingest.stream_options import Progress, StreamOptions, interval_us, iso_us

# what the split query stages for the aggregate query and the device summary
STAGED = T.StructType([*MESSAGE.fields, T.StructField("late", T.BooleanType())])


class StreamPaths:
    def __init__(self, out: str, ckpt: str) -> None:
        self.out = out.rstrip("/")
        self.ckpt = ckpt.rstrip("/")
        self.split_ckpt = f"{self.ckpt}/split"
        self.agg_ckpt = f"{self.ckpt}/aggregate"
        self.staged = f"{self.ckpt}/staged"
        self.state = f"{self.ckpt}/split-state"


class Split:
    """foreachBatch of the split query (see this module's docstring)."""

    def __init__(
        self, spark: SparkSession, paths: StreamPaths, opts: StreamOptions, say: Progress
    ) -> None:
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
        ids = [
            int(n[:-5])
            for n in self.hfs.names(self.p.state)
            if n.endswith(".json") and n[:-5].isdigit()
        ]
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
        dirs = [
            f"{self.p.staged}/{n}"
            for n in self.hfs.names(self.p.staged)
            if n.startswith("b-") and n[2:].isdigit() and int(n[2:]) < batch_id
        ]
        if not dirs:
            return None
        span = F.col("at").between(
            F.timestamp_micros(F.lit(lo_us)), F.timestamp_micros(F.lit(hi_us))
        )
        return (
            self.spark.read.schema(STAGED)
            .parquet(*dirs)
            .where(span)
            .select("id")
            .distinct()
            .withColumn("_seen", F.lit(True))
        )

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
            seen = (
                self.seen_ids(batch_id, int(span["lo"]), int(span["hi"]))
                if span["lo"] is not None
                else None
            )
            if seen is not None:
                df = base.join(seen, "id", "left")
            else:
                df = base.withColumn("_seen", F.lit(None).cast("boolean"))
            first = (
                F.row_number().over(
                    Window.partitionBy("id").orderBy("source_file", "received_at", "raw")
                )
                == 1
            )
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

    def _write(
        self, df: DataFrame, batch_id: int, prev: dict[str, Any] | None, wm_us: int | None
    ) -> None:
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
        maxes = [
            r["max_us"]
            for r in stats
            if r["reason"] is None and not r["_dup"] and r["max_us"] is not None
        ]
        prev_max = prev["max_event_us"] if prev else None
        new_max = max([*maxes, *([prev_max] if prev_max is not None else [])], default=None)

        if quarantined:
            (
                df.where(F.col("reason").isNotNull())
                .select("reason", "source_file", "raw")
                .write.mode("overwrite")
                .json(f"{self.p.out}/quarantine/batch={batch_id}")
            )
        if late:
            (
                df.where("_late")
                .select(
                    F.lit("late").alias("reason"),
                    F.date_format("received_at", "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'").alias(
                        "received_at"
                    ),
                    F.date_format("_wend", "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'").alias("window_end"),
                    F.lit(iso_us(wm_us)).alias("watermark"),
                    F.date_format("at", "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'").alias("at"),
                    "id",
                    "device_id",
                    "producer",
                    "topic_path",
                    "source_file",
                    "raw",
                )
                .write.mode("overwrite")
                .json(f"{self.p.out}/late/batch={batch_id}")
            )
        # every valid message, flagged: the aggregate query takes the on-time ones, the
        # device summary all of them
        final = f"{self.p.staged}/b-{batch_id:010d}"
        if messages and not self.hfs.exists(final):
            tmp = f"{self.p.staged}/_tmp-{batch_id:010d}"  # `_`: invisible to the reader
            (
                df.where(F.col("reason").isNull() & ~F.col("_dup"))
                .select(*MESSAGE.fieldNames(), F.col("_late").alias("late"))
                .write.mode("overwrite")
                .parquet(tmp)
            )
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
            f"(watermark {iso_us(wm_us) or '-'})"
        )
