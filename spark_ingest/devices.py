"""The `devices` table: one row per device, all of its history, kept up to date by merging
each run's windows into it instead of re-reading the history.

A device is a `key` (schema.MESSAGE): its device id where known, else its producer address;
so a device whose address changes (DHCP) is one device, with one history. Every column is
one of three kinds, which is what lets a run merge instead of recompute: sums over the
device's `device_quality` rows (`messages`, `gap_count`: a run adds its new rows and
subtracts the rows they replace), bounds that only grow as data is added (`first_seen`,
`last_seen`, addresses, topics, clock-skew extremes, the last message's producer), and
"latest" values kept with the window they come from (the clock skew and each topic's
period). `silent_s` is measured against its site's newest message (`sites.last_at`), so a
zone read long after it was written does not call every device silent.
"""

from __future__ import annotations

import json

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_ingest.landing import device_of_key
from spark_ingest.schema import DEVICES

_PERIOD = T.StructType([T.StructField("w", T.TimestampType()), T.StructField("p", T.DoubleType())])
_PERIODS = T.MapType(T.StringType(), _PERIOD)
_STRS = T.ArrayType(T.StringType())

# up to this many sites their newest times are a literal in the plan
LITERAL_SITES = 256

# the merged columns (everything but those finish() derives)
PARTIAL = [
    "device_key",
    "producer",
    "gateway_id",
    "site",
    "producers",
    "topics",
    "first_seen",
    "last_seen",
    "messages",
    "gap_count",
    "clock_skew_s",
    "clock_skew_min_s",
    "clock_skew_max_s",
    "_last_topic",
    "_skew_w",
    "_periods",
]


def producers_of(msgs: DataFrame) -> DataFrame:
    """(device_key, producers): the addresses each device's messages came from, sorted."""
    return msgs.groupBy(F.col("key").alias("device_key")).agg(
        F.sort_array(F.collect_set("producer")).alias("producers")
    )


def partial(dq: DataFrame, producers: DataFrame | None = None) -> DataFrame:
    """device_quality rows (and the devices' addresses, producers_of) -> the PARTIAL
    columns per device."""
    topic = F.coalesce(F.col("topic_path"), F.lit(""))
    per_topic = dq.groupBy("device_key", topic.alias("_t")).agg(
        F.max_by(
            F.struct(F.col("window_start").alias("w"), F.col("period_s").alias("p")),
            F.when(F.col("period_s").isNotNull(), F.col("window_start")),
        ).alias("_pt")
    )
    periods = (
        per_topic.where(F.col("_pt").isNotNull() & F.col("_pt.p").isNotNull())
        .groupBy(F.col("device_key").alias("_pk"))
        .agg(F.map_from_entries(F.collect_list(F.struct("_t", "_pt"))).alias("_periods"))
    )
    has_skew = F.col("clock_skew_mean_s").isNotNull()
    skewed = F.when(has_skew, F.col("window_start"))
    # a device has a row per topic in its latest window: the skew of the topic it published
    # last there (not whichever row came first: a full run and incremental ones disagreed)
    skew_order = F.when(has_skew, F.struct("window_start", "last_at", "topic_path"))
    main = dq.groupBy("device_key").agg(
        F.max(F.struct("last_at", "topic_path", "producer", "gateway_id", "site")).alias("_l"),
        F.sort_array(F.collect_set("topic_path")).alias("topics"),
        F.min("first_at").alias("first_seen"),
        F.max("last_at").alias("last_seen"),
        F.sum("received").alias("messages"),
        F.sum("gaps").cast("long").alias("gap_count"),
        F.max_by("clock_skew_mean_s", skew_order).alias("clock_skew_s"),
        F.max(skewed).alias("_skew_w"),
        F.min("clock_skew_min_s").alias("clock_skew_min_s"),
        F.max("clock_skew_max_s").alias("clock_skew_max_s"),
    )
    if producers is None:
        producers = main.select("device_key", F.array().cast(_STRS).alias("producers")).where(
            "false"
        )
    who = producers.select(F.col("device_key").alias("_wk"), "producers")
    joined = main.join(periods, main["device_key"].eqNullSafe(periods["_pk"]), "left").join(
        who, main["device_key"].eqNullSafe(who["_wk"]), "left"
    )
    return joined.select(
        "device_key",
        F.col("_l.producer").alias("producer"),
        F.col("_l.gateway_id").alias("gateway_id"),
        F.col("_l.site").alias("site"),
        F.coalesce(F.col("producers"), F.array().cast(_STRS)).alias("producers"),
        "topics",
        "first_seen",
        "last_seen",
        "messages",
        "gap_count",
        "clock_skew_s",
        "clock_skew_min_s",
        "clock_skew_max_s",
        F.col("_l.topic_path").alias("_last_topic"),
        "_skew_w",
        F.coalesce(F.col("_periods"), F.create_map().cast(_PERIODS)).alias("_periods"),
    )


def _struct_last(prefix: str) -> Column:
    return F.struct(
        F.col(f"{prefix}.last_seen"),
        F.col(f"{prefix}._last_topic"),
        F.col(f"{prefix}.producer"),
        F.col(f"{prefix}.gateway_id"),
        F.col(f"{prefix}.site"),
    )


def merge(old: DataFrame, new: DataFrame, removed: DataFrame) -> DataFrame:
    """PARTIAL rows: `old` (the devices table) with `new` (partial of this run's rows) added
    and `removed` (partial of the stored rows they replace) subtracted."""
    o, n, r = old.select(*PARTIAL).alias("o"), new.alias("n"), removed.alias("r")
    j = o.join(n, F.col("o.device_key").eqNullSafe(F.col("n.device_key")), "full").join(
        r,
        F.coalesce(F.col("o.device_key"), F.col("n.device_key")).eqNullSafe(F.col("r.device_key")),
        "left",
    )

    def total(c: str) -> Column:
        return (
            F.coalesce(F.col(f"o.{c}"), F.lit(0))
            + F.coalesce(F.col(f"n.{c}"), F.lit(0))
            - F.coalesce(F.col(f"r.{c}"), F.lit(0))
        ).cast("long")

    last = F.greatest(
        F.when(F.col("o.last_seen").isNotNull(), _struct_last("o")),
        F.when(F.col("n.last_seen").isNotNull(), _struct_last("n")),
    )
    newer_skew = F.col("n._skew_w").isNotNull() & (
        F.col("o._skew_w").isNull() | (F.col("n._skew_w") >= F.col("o._skew_w"))
    )
    periods = F.map_zip_with(
        F.coalesce(F.col("o._periods"), F.create_map().cast(_PERIODS)),
        F.coalesce(F.col("n._periods"), F.create_map().cast(_PERIODS)),
        lambda _k, a, b: (
            F.when(b.isNull(), a).when(a.isNull(), b).when(b["w"] >= a["w"], b).otherwise(a)
        ),
    )
    empty = F.array().cast(_STRS)

    def union(c: str) -> Column:
        return F.array_sort(F.array_union(F.coalesce(f"o.{c}", empty), F.coalesce(f"n.{c}", empty)))

    def newer(c: str) -> Column:
        return F.when(newer_skew, F.col(f"n.{c}")).otherwise(F.col(f"o.{c}"))

    return j.select(
        F.coalesce(F.col("o.device_key"), F.col("n.device_key")).alias("device_key"),
        last["producer"].alias("producer"),
        last["gateway_id"].alias("gateway_id"),
        last["site"].alias("site"),
        union("producers").alias("producers"),
        union("topics").alias("topics"),
        F.least("o.first_seen", "n.first_seen").alias("first_seen"),
        F.greatest("o.last_seen", "n.last_seen").alias("last_seen"),
        total("messages").alias("messages"),
        total("gap_count").alias("gap_count"),
        newer("clock_skew_s").alias("clock_skew_s"),
        F.least("o.clock_skew_min_s", "n.clock_skew_min_s").alias("clock_skew_min_s"),
        F.greatest("o.clock_skew_max_s", "n.clock_skew_max_s").alias("clock_skew_max_s"),
        last["_last_topic"].alias("_last_topic"),
        newer("_skew_w").alias("_skew_w"),
        periods.alias("_periods"),
    )  # fmt: skip


def finish(parts: DataFrame, last_at: dict[str, int], gap_factor: float) -> DataFrame:
    """The devices table from PARTIAL rows and the sites' newest times (site -> µs since
    the epoch): `period_s` is the shortest of its topics' latest periods, `silent_s` the
    time from its last message to its site's newest one, `silent` whether that exceeds
    gap_factor x period_s."""
    period = F.array_min(F.transform(F.map_values("_periods"), lambda v: v["p"]))
    if len(last_at) <= LITERAL_SITES:
        # a literal in the plan: a broadcast join of a driver-side table is a Spark job
        m = F.from_json(F.lit(json.dumps(last_at)), "map<string,bigint>")
        j = parts.withColumn("_site_last_us", F.try_element_at(m, F.col("site")))
    else:
        spark = parts.sparkSession
        s = spark.createDataFrame(list(last_at.items()), "_site string, _site_last_us long")
        j = parts.join(F.broadcast(s), parts["site"].eqNullSafe(s["_site"]), "left")
    silent_s = (F.col("_site_last_us") - F.unix_micros("last_seen")) / F.lit(1e6)
    return j.select(
        "device_key",
        device_of_key(F.col("device_key")).alias("device_id"),
        "producer",
        "gateway_id",
        "site",
        "producers",
        "topics",
        "first_seen",
        "last_seen",
        "messages",
        period.alias("period_s"),
        "gap_count",
        silent_s.alias("silent_s"),
        F.coalesce(silent_s > F.lit(gap_factor) * period, F.lit(False)).alias("silent"),
        "clock_skew_s",
        "clock_skew_min_s",
        "clock_skew_max_s",
        "_last_topic",
        "_skew_w",
        "_periods",
    ).select(*DEVICES.columns)
