"""Per-device health: first and last seen, message count, the gaps an operator asks about
first ("when did this device go quiet?") and its clock skew ("is its clock right?").

A device is a `key` (schema.MESSAGE): its device id where known, else its producer address;
so a device whose address changes (DHCP) is one device, with one history and no false gap.
A device's *usual interval* is the smallest, over its topics, of the median time between
two consecutive messages on that topic. Taking it per topic matters: a device publishing
three topics every 10 s sends three messages a few ms apart, so the median over all of its
messages would be milliseconds and every normal pause would look like a gap. A *gap* is a
pause between two consecutive messages of the device (any topic) longer than
`gap_factor` x the usual interval. Devices with fewer than two messages on every topic
have no usual interval and no gaps.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from spark_ingest.keep import materialize
from spark_ingest.landing import device_of_key

DEVICE_COLUMNS = (
    "device_id",
    "producer",
    "producers",
    "gateway_id",
    "first_seen",
    "last_seen",
    "messages",
    "topics",
    "usual_interval_s",
    "gap_threshold_s",
    "gap_count",
    "longest_gap_s",
    "gaps",
    "clock_skew_median_s",
    "clock_skew_min_s",
    "clock_skew_max_s",
)


def _seconds(later: str, earlier: str) -> Column:
    return (F.unix_micros(F.col(later)) - F.unix_micros(F.col(earlier))) / F.lit(1e6)


def device_summary(messages: DataFrame, gap_factor: float = 3.0) -> DataFrame:
    """messages (schema.MESSAGE) -> one row per device (`key`), DEVICE_COLUMNS.

    `producer` and `gateway_id` are those of the device's last message, `producers` every
    address it was seen at (sorted). Times are `at` (see aggregate.py). `clock_skew_*_s`
    are the median, least and greatest of event_time - received_at over its messages with
    an event time (null without any): how far the device's clock is ahead (positive) or
    behind, plus the transport delay.

    `gaps` is an array of (start, end, seconds), oldest first: start is the last message
    before the silence, end the first one after it. On messages hash-partitioned by key
    (batch.by_key) this shuffles nothing but the per-device rows: two sorts within
    partitions (by topic, then by key) do all the work.
    """
    m = messages.select("key", "topic_path", "at")
    by_topic = Window.partitionBy("key", "topic_path").orderBy("at")
    per_topic = (
        m.withColumn("prev", F.lag("at").over(by_topic))
        .groupBy("key", "topic_path")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.min("at").alias("first_seen"),
            F.max("at").alias("last_seen"),
            # nulls (each topic's first message) are ignored: a topic seen once has none
            F.percentile_approx(_seconds("at", "prev"), 0.5).alias("median"),
        )
    )
    basics = per_topic.groupBy("key").agg(
        F.min("first_seen").alias("first_seen"),
        F.max("last_seen").alias("last_seen"),
        F.sum("n").alias("messages"),
        F.count("topic_path").alias("topics"),  # distinct, non-null: one row per topic
        F.min("median").alias("usual_interval_s"),
    )
    skew = _seconds("event_time", "received_at")
    who = messages.groupBy(F.col("key").alias("_kw")).agg(
        F.max(F.struct("at", "id", "producer", "gateway_id")).alias("_last"),
        F.sort_array(F.collect_set("producer")).alias("producers"),
        F.percentile_approx(skew, 0.5).alias("clock_skew_median_s"),
        F.min(skew).alias("clock_skew_min_s"),
        F.max(skew).alias("clock_skew_max_s"),
    )
    # one row per device, read twice below (thresholds and the result): computed once,
    # instead of sorting every message by topic a second time
    basics = materialize(basics.sparkSession, basics, keep_partitioning=False)
    threshold = basics.where(F.col("usual_interval_s").isNotNull()).select(
        F.col("key").alias("_pu"),
        (F.col("usual_interval_s") * F.lit(gap_factor)).alias("_threshold"),
    )
    by_key = Window.partitionBy("key").orderBy("at")
    steps = (
        m.select("key", "at")
        .withColumn("prev", F.lag("at").over(by_key))
        .where(F.col("prev").isNotNull())
        .withColumn("dt", _seconds("at", "prev"))
    )
    gaps = (
        # one row per device on the right: broadcast, and the left keeps its partitioning.
        # Inner: a device without usual interval (or without a key) has no gaps.
        steps.join(F.broadcast(threshold), steps["key"] == threshold["_pu"])
        .where(F.col("dt") > F.col("_threshold"))
        .groupBy(F.col("key").alias("_pg"))
        .agg(
            F.sort_array(
                F.collect_list(
                    F.struct(
                        F.col("prev").alias("start"),
                        F.col("at").alias("end"),
                        F.col("dt").alias("seconds"),
                    )
                )
            ).alias("gaps"),
            F.max("dt").alias("longest_gap_s"),
        )
    )
    return (
        basics.join(gaps, basics["key"].eqNullSafe(gaps["_pg"]), "left")
        .join(who, basics["key"].eqNullSafe(who["_kw"]), "left")
        .select(
            device_of_key(F.col("key")).alias("device_id"),
            F.col("_last.producer").alias("producer"),
            "producers",
            F.col("_last.gateway_id").alias("gateway_id"),
            "first_seen",
            "last_seen",
            "messages",
            "topics",
            "usual_interval_s",
            (F.col("usual_interval_s") * F.lit(gap_factor)).alias("gap_threshold_s"),
            F.when(F.col("gaps").isNull(), F.lit(0)).otherwise(F.size("gaps")).alias("gap_count"),
            F.coalesce(F.col("longest_gap_s"), F.lit(0.0)).alias("longest_gap_s"),
            F.coalesce(
                F.col("gaps"),
                F.array().cast("array<struct<start:timestamp,end:timestamp,seconds:double>>"),
            ).alias("gaps"),
            "clock_skew_median_s",
            "clock_skew_min_s",
            "clock_skew_max_s",
        )
    )
