"""Camera events (issue 25): the `camera_events` and `camera_states` tables.

A camera publishes ONVIF *property* events: each `tt:Message` (camera_xml.py) sets the state
of the items in its `Data` (`IsMotion=true`) for what its `Source` names (a video source, a
rule), with `PropertyOperation` `Initialized` (the state when a subscription starts),
`Changed`, or `Deleted` (the property is gone: its state is unknown from then on).

`camera_events`: one row per event and Data item (an event without Data items, such as a
`Deleted`, is one row with a null item, standing for every item of its source).

`camera_states`: per camera, topic, source, item and window: the events in the window, the
changes of value among them, and how long the state was known and, for a boolean item
(`true`/`false`/`1`/`0`, xs:boolean), how long it was true. A state holds from its event
until the next event of the same item, but never longer than `--state-horizon` (so a lost
"false" event cannot keep a camera in motion forever) and never past the newest message of
its site (`sites.last_at`): time the ingest has no evidence for is not counted. Time is the
message's `at` (the gateway's `received_at`; with `--time event`, the camera's UtcTime).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from spark_ingest import camera_xml
from spark_ingest.aggregate import partition_of, window_bounds
from spark_ingest.landing import device_of_key
from spark_ingest.schema import CAMERA_EVENTS, CAMERA_STATES

if TYPE_CHECKING:
    from spark_ingest.consume import FileMap

SERIES = ["device_key", "topic_path", "source", "item"]
TRUE_VALUES = ("true", "1")
BOOLEAN_VALUES = ("true", "false", "1", "0")


def events(msgs: DataFrame, fmap: FileMap, time: str = "received") -> DataFrame:
    """camera_events rows of the event messages (schema.MESSAGE, kind "event"); `fmap`
    (consume.file_map) names their sites."""
    ev = fmap.add(msgs.where(F.col("kind") == "event"), "file_id", "site", "site").withColumn(
        "m", camera_xml.parse(F.col("payload"))
    )
    utc = F.try_to_timestamp(F.col("m._UtcTime"))
    at = F.col("at") if time == "received" else F.coalesce(utc, F.col("at"))
    data = F.coalesce(F.col("m.Data.SimpleItem"), F.array())
    items = F.when(F.size(data) > 0, data).otherwise(
        F.array(
            F.struct(
                F.lit(None).cast("string").alias("_Name"),
                F.lit(None).cast("string").alias("_Value"),
            )
        )
    )
    rows = ev.select(
        at.alias("at"),
        utc.alias("utc_time"),
        "id",
        F.col("key").alias("device_key"),
        device_of_key(F.col("key")).alias("device_id"),
        "producer",
        "gateway_id",
        "site",
        "topic_path",
        F.col("m._PropertyOperation").alias("operation"),
        camera_xml.items(F.col("m.Source")).alias("source"),
        F.explode(items).alias("i"),
    )
    return rows.select(
        *[c for c in rows.columns if c != "i"],
        F.col("i._Name").alias("item"),
        F.col("i._Value").alias("value"),
        *partition_of(F.col("at")),
    ).select(*CAMERA_EVENTS.columns)


def _deleted_for_every_item(ev: DataFrame) -> DataFrame:
    """An event with a null item (a Deleted without Data) applies to every item its source
    has had; the rows are expanded here so that each item's series sees it."""
    known = (
        ev.where(F.col("item").isNotNull())
        .select("device_key", "topic_path", "source", F.col("item").alias("_item"))
        .distinct()
    )
    blanket = ev.where(F.col("item").isNull()).join(
        known, ["device_key", "topic_path", "source"], "inner"
    )
    return ev.where(F.col("item").isNotNull()).unionByName(
        blanket.withColumn("item", F.col("_item")).drop("_item")
    )


def states(
    ev: DataFrame,
    known_until: DataFrame,
    window_us: int,
    horizon_us: int,
    lo_us: int | None = None,
    hi_us: int | None = None,
) -> DataFrame:
    """camera_states rows of the windows starting in [lo_us, hi_us] (all when None), from
    camera_events rows `ev` (covering at least [lo_us - horizon, hi_us + window]) and the
    newest time of each site (`known_until`: site, until)."""
    e = _deleted_for_every_item(ev)
    order = Window.partitionBy(*SERIES).orderBy("at", "id")
    ku = known_until.select(F.col("site").alias("_ks"), F.col("until").alias("_ku"))
    iv = (
        e.withColumn("_next", F.lead("at").over(order))
        .withColumn("_prev_value", F.lag("value").over(order))
        .join(F.broadcast(ku), F.col("site").eqNullSafe(F.col("_ks")), "left")
    )
    start = F.unix_micros("at")
    end = F.least(
        F.coalesce(F.unix_micros("_next"), F.lit(2**62)),
        start + F.lit(horizon_us),
        F.coalesce(F.unix_micros("_ku"), start),
    )
    state = F.when(F.col("operation") != "Deleted", F.col("value"))
    iv = iv.select(
        *SERIES,
        "device_id",
        "producer",
        "gateway_id",
        "site",
        "id",
        "at",
        start.alias("_s"),
        F.greatest(end, start).alias("_e"),
        state.alias("_v"),
        (
            (F.col("operation") == "Changed") & ~F.col("value").eqNullSafe(F.col("_prev_value"))
        ).alias("_changed"),
    )
    w0 = F.col("_s") - F.pmod(F.col("_s"), F.lit(window_us))
    last_w = F.col("_e") - F.lit(1) - F.pmod(F.col("_e") - F.lit(1), F.lit(window_us))
    spans = iv.withColumn(
        "w",
        F.explode(
            F.when(F.col("_e") > F.col("_s"), F.sequence(w0, last_w, F.lit(window_us))).otherwise(
                F.array(w0)
            )
        ),
    )
    if lo_us is not None:
        spans = spans.where(F.col("w") >= F.lit(lo_us))
    if hi_us is not None:
        spans = spans.where(F.col("w") <= F.lit(hi_us))
    wend = F.col("w") + F.lit(window_us)
    # in µs, summed as integers: exact in any order, where seconds as doubles summed five
    # states of a minute to 60.00000000000001 s
    overlap = F.greatest(F.least("_e", wend) - F.greatest("_s", "w"), F.lit(0))
    in_w = (F.col("_s") >= F.col("w")) & (F.col("_s") < wend)
    known = F.when(F.col("_v").isNotNull(), overlap).otherwise(F.lit(0))
    is_bool = F.lower(F.col("_v")).isin(*BOOLEAN_VALUES)
    true_part = F.when(F.lower(F.col("_v")).isin(*TRUE_VALUES), overlap).otherwise(F.lit(0))
    covers_start = (F.col("_s") <= F.col("w")) & (F.col("_e") > F.col("w"))
    grouped = spans.groupBy(*SERIES, "w").agg(
        F.sum(F.when(in_w, 1).otherwise(0)).cast("long").alias("events"),
        F.sum(F.when(in_w & F.col("_changed"), 1).otherwise(0)).cast("long").alias("changes"),
        F.sum(known).alias("_known_us"),
        F.sum(true_part).alias("_true_us"),
        F.max(F.col("_v").isNotNull() & is_bool).alias("_bool"),
        F.max(F.when(covers_start, F.col("_v"))).alias("value_at_start"),
        F.max(F.struct("at", "id", "_v", "device_id", "producer", "gateway_id", "site")).alias(
            "_l"
        ),
    )
    rows = grouped.where((F.col("events") > 0) | (F.col("_known_us") > 0))
    return rows.select(
        *window_bounds(F.col("w"), window_us),
        "device_key",
        F.col("_l.device_id").alias("device_id"),
        F.col("_l.producer").alias("producer"),
        F.col("_l.gateway_id").alias("gateway_id"),
        F.col("_l.site").alias("site"),
        "topic_path",
        "source",
        "item",
        "events",
        "changes",
        F.when(F.col("_bool"), F.col("_true_us") / F.lit(1e6)).alias("true_s"),
        (F.col("_known_us") / F.lit(1e6)).alias("known_s"),
        "value_at_start",
        F.col("_l._v").alias("last_value"),
        F.col("_l.at").alias("last_at"),
        *partition_of(F.timestamp_micros(F.col("w"))),
    ).select(*CAMERA_STATES.columns)
