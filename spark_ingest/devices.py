"""Per-producer health: first and last seen, message count and the gaps an operator asks
about first ("when did this device go quiet?").

A producer's *usual interval* is the smallest, over its topics, of the median time between
two consecutive messages on that topic. Taking it per topic matters: a device publishing
three topics every 10 s sends three messages a few ms apart, so the median over all of its
messages would be milliseconds and every normal pause would look like a gap. A *gap* is a
pause between two consecutive messages of the producer (any topic) longer than
`gap_factor` x the usual interval. Producers with fewer than two messages on every topic
have no usual interval and no gaps.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from spark_ingest.keep import materialize

DEVICE_COLUMNS = (
    "producer",
    "first_seen",
    "last_seen",
    "messages",
    "topics",
    "usual_interval_s",
    "gap_threshold_s",
    "gap_count",
    "longest_gap_s",
    "gaps",
)


def _seconds(later: str, earlier: str) -> Column:
    return (F.unix_micros(F.col(later)) - F.unix_micros(F.col(earlier))) / F.lit(1e6)


def device_summary(messages: DataFrame, gap_factor: float = 3.0) -> DataFrame:
    """messages(id, received_at, producer, topic_path, ...) -> one row per producer.

    `gaps` is an array of (start, end, seconds), oldest first: start is the last message
    before the silence, end the first one after it. On messages hash-partitioned by
    producer (batch.by_producer) this shuffles nothing but the per-producer rows: two sorts
    within partitions (by topic, then by producer) do all the work.
    """
    m = messages.select("producer", "topic_path", "received_at")
    by_topic = Window.partitionBy("producer", "topic_path").orderBy("received_at")
    per_topic = (
        m.withColumn("prev", F.lag("received_at").over(by_topic))
        .groupBy("producer", "topic_path")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.min("received_at").alias("first_seen"),
            F.max("received_at").alias("last_seen"),
            # nulls (each topic's first message) are ignored: a topic seen once has none
            F.percentile_approx(_seconds("received_at", "prev"), 0.5).alias("median"),
        )
    )
    basics = per_topic.groupBy("producer").agg(
        F.min("first_seen").alias("first_seen"),
        F.max("last_seen").alias("last_seen"),
        F.sum("n").alias("messages"),
        F.count("topic_path").alias("topics"),  # distinct, non-null: one row per topic
        F.min("median").alias("usual_interval_s"),
    )
    # one row per producer, read twice below (thresholds and the result): computed once,
    # instead of sorting every message by topic a second time
    basics = materialize(basics.sparkSession, basics, keep_partitioning=False)
    threshold = basics.where(F.col("usual_interval_s").isNotNull()).select(
        F.col("producer").alias("_pu"),
        (F.col("usual_interval_s") * F.lit(gap_factor)).alias("_threshold"),
    )
    by_producer = Window.partitionBy("producer").orderBy("received_at")
    steps = (
        m.select("producer", "received_at")
        .withColumn("prev", F.lag("received_at").over(by_producer))
        .where(F.col("prev").isNotNull())
        .withColumn("dt", _seconds("received_at", "prev"))
    )
    gaps = (
        # one row per producer on the right: broadcast, and the left keeps its partitioning.
        # Inner: a producer without usual interval (or without a name) has no gaps.
        steps.join(F.broadcast(threshold), steps["producer"] == threshold["_pu"])
        .where(F.col("dt") > F.col("_threshold"))
        .groupBy(F.col("producer").alias("_pg"))
        .agg(
            F.sort_array(
                F.collect_list(
                    F.struct(
                        F.col("prev").alias("start"),
                        F.col("received_at").alias("end"),
                        F.col("dt").alias("seconds"),
                    )
                )
            ).alias("gaps"),
            F.max("dt").alias("longest_gap_s"),
        )
    )
    return (
        basics.join(gaps, basics["producer"].eqNullSafe(gaps["_pg"]), "left")
        .select(
            "producer",
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
        )
    )
