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
    before the silence, end the first one after it.
    """
    m = messages.select("producer", "topic_path", "received_at")
    by_topic = Window.partitionBy("producer", "topic_path").orderBy("received_at")
    usual = (
        m.withColumn("prev", F.lag("received_at").over(by_topic))
        .where(F.col("prev").isNotNull())
        .select("producer", "topic_path", _seconds("received_at", "prev").alias("dt"))
        .groupBy("producer", "topic_path")
        .agg(F.percentile_approx("dt", 0.5).alias("median"))
        .groupBy("producer")
        .agg(F.min("median").alias("usual_interval_s"))
    )
    usual_j = usual.withColumnRenamed("producer", "_pu")
    by_producer = Window.partitionBy("producer").orderBy("received_at")
    steps = (
        m.withColumn("prev", F.lag("received_at").over(by_producer))
        .where(F.col("prev").isNotNull())
        .select("producer", "prev", "received_at", _seconds("received_at", "prev").alias("dt"))
    )
    gaps = (
        steps.join(usual, "producer")  # inner: a producer without usual interval has no gaps
        .where(F.col("dt") > F.col("usual_interval_s") * F.lit(gap_factor))
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
    basics = m.groupBy("producer").agg(
        F.min("received_at").alias("first_seen"),
        F.max("received_at").alias("last_seen"),
        F.count(F.lit(1)).alias("messages"),
        F.countDistinct("topic_path").alias("topics"),
    )
    return (
        basics.join(usual_j, basics["producer"].eqNullSafe(usual_j["_pu"]), "left")
        .join(gaps, basics["producer"].eqNullSafe(gaps["_pg"]), "left")
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
