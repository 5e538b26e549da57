"""The `device_quality` table: per device, topic and window, readings received against the
readings the device's own period predicts, its gaps, and its clock skew.

**The gap rule** (docs/spark_ingest.md, "Gaps"). A series is one device's messages on one
topic, in time order; a *step* is the time between two consecutive ones. Steps shorter than
`--burst` (1 s) are not intervals: a device that reconnects flushes its buffered readings in
a burst of microsecond steps, and those must not become its "usual interval". Every other
step is judged against its neighbours: its *period* is the larger of the median of the
K = 3 steps before it and the median of the K steps after it (steps of at least `--burst`;
fewer at either end of the series), and it is a *gap* when it is longer than
`--gap-factor` x that period. So a device that changes its rate from 1 s to 3.5 s makes no
gap (the steps after the change say 3.5 s), jitter of a second on a 3 s period makes none,
a reconnect after a silence is one gap (the burst is skipped), and two silences with one
message between them are two gaps (a median of three steps ignores one outlier). `missed`
counts the readings a gap lost: round(step / period) - 1. `expected` is the window's length
over the period of its last step: what the device sends in a full window at its current rate.

**Incremental runs.** A window's row depends on its own messages and on the K steps before
and after its steps. So each row also keeps what its neighbours need, bounded: its first and
last 2K steps (`_head`, `_tail`; all of them when it has at most 4K) and the totals of the
steps whose neighbours all lie inside it (`_inner_*`). A run that adds data next to stored
rows re-judges their edge steps from these alone, without reading their landing lines
again; the result equals judging the whole series at once (the full run does that).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_ingest.aggregate import partition_of, window_bounds
from spark_ingest.landing import device_of_key
from spark_ingest.schema import DEVICE_QUALITY
from spark_ingest.timestamps import mean_skew_s, skew_parts, skew_s

if TYPE_CHECKING:
    from spark_ingest.consume import FileMap

K = 3  # steps each side that judge a step
STORED = 2 * K  # steps a row keeps at each end
MIN_ORD = -(2**63)
MAX_ORD = 2**63 - 1

SERIES = ["key", "topic_path"]
# the order of a series' elements: every window operator below sorts by it, so Spark sorts
# once (and the grouping by series and window after them needs no sort either). Two
# messages of one series at the same microsecond may come in either order: the second's
# step is 0 (a burst, never judged), so nothing depends on which.
ORDER = ["w", "ord"]


def _median3(near: Column, mid: Column, far: Column) -> Column:
    """Median of up to three steps, nearest first (a series' end leaves the far ones null):
    least/greatest arithmetic, which Spark compiles, rather than sorting a small array per
    row."""
    m = F.greatest(F.least(near, mid), F.least(F.greatest(near, mid), far))
    return (
        F.when(far.isNotNull(), m).when(mid.isNotNull(), (near + mid) / F.lit(2.0)).otherwise(near)
    )


def _around(col: str, order: list[str]) -> tuple[Column, Column]:
    """Median of the K non-null `col` values before and after each row of its series."""
    spec = f"PARTITION BY key, topic_path ORDER BY {', '.join(order)}"
    lags = [F.expr(f"lag({col}, {i}) IGNORE NULLS OVER ({spec})") for i in range(1, K + 1)]
    leads = [F.expr(f"lead({col}, {i}) IGNORE NULLS OVER ({spec})") for i in range(1, K + 1)]
    return _median3(*lags), _median3(*leads)


def judge(
    elements: DataFrame, burst_s: float, gap_factor: float, with_stored: bool = True
) -> DataFrame:
    """Steps of every series, judged.

    `elements` rows (key, topic_path, kind, w, ord, at, given, anchor, ...): a message
    (anchor "msg", `at` its time, ord its time in microseconds), or for a stored row its
    first and last message times (anchor "first", ord MIN_ORD / "last", ord MAX_ORD) and its
    kept steps (anchor "step", `given` the step, ord its position, at null). Adds `step`
    (seconds since the previous message of the series: for a "first" row the step into the
    stored window), `nb` (the step when it counts as an interval: a reading's, at least the
    burst), `period`, `gap` and `missed`.
    """
    spec = f"PARTITION BY key, topic_path ORDER BY {', '.join(ORDER)}"
    # stored elements' kept steps have no time of their own: skip them to find the previous
    # message's time (only a run with stored context has such rows)
    nulls = " IGNORE NULLS" if with_stored else ""
    prev = F.expr(f"lag(at){nulls} OVER ({spec})")
    step = F.coalesce(
        F.col("given"), (F.unix_micros(F.col("at")) - F.unix_micros(prev)) / F.lit(1e6)
    )
    with_step = elements.withColumn("step", F.when(F.col("anchor") != "last", step))
    nb = F.when((F.col("kind") == "reading") & (F.col("step") >= F.lit(burst_s)), F.col("step"))
    judged = with_step.withColumn("nb", nb)
    before, after = _around("nb", ORDER)
    period = F.greatest(before, after)
    gap = F.coalesce(F.col("nb") > F.lit(gap_factor) * F.col("period"), F.lit(False))
    return (
        judged.withColumn("period", F.when(F.col("nb").isNotNull(), period))
        .withColumn("gap", gap)
        .withColumn(
            "missed",
            F.when(F.col("gap"), F.round(F.col("nb") / F.col("period")).cast("long") - 1).otherwise(
                F.lit(0).cast("long")
            ),
        )
    )


def _positions(judged: DataFrame) -> DataFrame:
    """Adds, for message rows, `internal` (a step of a window's own messages that counts:
    not the step into the window from before), `pos` (its index among those) and `n` (how
    many the window has): what the kept steps and inner totals are chosen by."""
    series = f"PARTITION BY key, topic_path ORDER BY {', '.join(ORDER)}"
    first = F.expr(f"lag(w) OVER ({series})").isNull() | (
        F.expr(f"lag(w) OVER ({series})") != F.col("w")
    )
    internal = (F.col("anchor") == "msg") & ~first & F.col("nb").isNotNull()
    flagged = judged.withColumn("internal", internal)
    by_w = Window.partitionBy("key", "topic_path", "w").orderBy(*ORDER)
    flag = F.col("internal").cast("int")
    before = F.sum(flag).over(by_w.rowsBetween(Window.unboundedPreceding, -1))
    total = F.sum(flag).over(by_w.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing))
    return flagged.withColumn("pos", F.coalesce(before, F.lit(0))).withColumn("n", total)


def _empty_steps() -> Column:
    return F.array().cast(T.ArrayType(T.DoubleType()))


def from_messages(
    msgs: DataFrame,
    window_us: int,
    burst_s: float,
    gap_factor: float,
    fmap: FileMap,
    stored: DataFrame | None = None,
) -> tuple[DataFrame, DataFrame | None]:
    """device_quality rows of the windows of `msgs` (schema.MESSAGE, every message of those
    windows), and, when `stored` (device_quality rows of the same series next to them, with a
    boolean `rewrite`) is given, the stored rows marked `rewrite` with their edge steps
    judged again. The stored rows give context; those not marked are not returned.

    One window pass over the series (judge, _positions) and one grouping by series and
    window compute everything: no join of the message-sized rows.
    """
    elements = msgs.select(
        "key",
        "topic_path",
        "w",
        "kind",
        "id",
        "at",
        "received_at",
        "event_time",
        "producer",
        "gateway_id",
        "file_id",
        F.unix_micros("at").alias("ord"),
        F.lit(None).cast("double").alias("given"),
        F.lit("msg").alias("anchor"),
        F.lit(True).alias("count_me"),
    )
    if stored is not None:
        elements = elements.unionByName(_stored_elements(stored), allowMissingColumns=True)
    j = _positions(judge(elements, burst_s, gap_factor, with_stored=stored is not None))
    msg = F.col("anchor") == "msg"
    small = F.col("n") <= F.lit(2 * STORED)
    internal = F.col("internal")
    inner = internal & ~small & (F.col("pos") >= K) & (F.col("pos") < F.col("n") - K)
    head = internal & (F.col("pos") < F.when(small, F.col("n")).otherwise(F.lit(STORED)))
    tail = internal & ~small & (F.col("pos") >= F.col("n") - STORED)
    counted = msg | F.col("count_me")

    def kept(which: Column) -> Column:
        pairs = F.array_sort(F.collect_list(F.when(which, F.struct("pos", "nb"))))
        return F.transform(pairs, lambda p: p["nb"])

    def when_msg(c: Column) -> Column:
        return F.when(msg, c)

    skew_whole, skew_rest = skew_parts()  # an exact mean, whatever the order (timestamps.py)

    g = j.groupBy("key", "topic_path", "w").agg(
        F.max(msg).alias("_is_msg"),
        F.first(when_msg(F.col("kind")), ignorenulls=True).alias("kind"),
        F.count(when_msg(F.lit(1))).alias("received"),
        F.min(when_msg(F.col("at"))).alias("first_at"),
        F.max(when_msg(F.col("at"))).alias("last_at"),
        F.max(when_msg(F.struct("at", "id", "producer", "gateway_id", "file_id"))).alias("_last"),
        F.sum(when_msg(skew_whole)).alias("_skew_s"),
        F.sum(when_msg(skew_rest)).alias("_skew_us"),
        F.count(when_msg(skew_whole)).alias("_skew_n"),
        F.min(when_msg(skew_s())).alias("clock_skew_min_s"),
        F.max(when_msg(skew_s())).alias("clock_skew_max_s"),
        F.sum(F.when(counted & F.col("gap"), 1).otherwise(0)).alias("_g"),
        F.sum(F.when(counted, F.col("missed")).otherwise(0)).alias("_m"),
        F.max(F.when(counted, F.col("nb"))).alias("_l"),
        F.max_by("period", F.when(F.col("nb").isNotNull(), F.col("ord"))).alias("period_s"),
        F.max("n").alias("_n"),
        kept(head).alias("_head"),
        kept(tail).alias("_tail"),
        F.sum(F.when(inner & F.col("gap"), 1).otherwise(0)).alias("_ig"),
        F.sum(F.when(inner, F.col("missed")).otherwise(0)).alias("_im"),
        F.max(F.when(inner, F.col("nb"))).alias("_il"),
    )
    reading = F.col("kind") == "reading"
    new = fmap.add(g.where(F.col("_is_msg")), "_last.file_id", "site", "_site")
    new = new.select(
        *window_bounds(F.col("w"), window_us),
        F.col("key").alias("device_key"),
        device_of_key(F.col("key")).alias("device_id"),
        F.col("_last.producer").alias("producer"),
        F.col("_last.gateway_id").alias("gateway_id"),
        F.col("_site").alias("site"),
        "topic_path",
        "kind",
        "received",
        "first_at",
        "last_at",
        F.when(reading, F.col("period_s")).alias("period_s"),
        F.when(reading, F.lit(window_us / 1e6) / F.col("period_s")).alias("expected"),
        F.col("_g").cast("int").alias("gaps"),
        F.col("_m").cast("long").alias("missed"),
        F.col("_l").alias("longest_silence_s"),
        mean_skew_s(F.col("_skew_s"), F.col("_skew_us"), F.col("_skew_n")).alias(
            "clock_skew_mean_s"
        ),
        "clock_skew_min_s",
        "clock_skew_max_s",
        F.coalesce("_head", _empty_steps()).alias("_head"),
        F.coalesce("_tail", _empty_steps()).alias("_tail"),
        F.col("_ig").cast("int").alias("_inner_gaps"),
        F.col("_im").cast("long").alias("_inner_missed"),
        F.col("_il").alias("_inner_longest_s"),
        F.coalesce("_n", F.lit(0)).cast("int").alias("_steps"),
        *partition_of(F.timestamp_micros(F.col("w"))),
    ).select(*DEVICE_QUALITY.columns)
    if stored is None:
        return new, None
    edges = g.where(~F.col("_is_msg")).select(
        F.col("key").alias("device_key"), "topic_path", "w", "_g", "_m", "_l",
        F.col("period_s").alias("_p"),
    )  # fmt: skip
    return new, _rejudged(edges, stored, window_us)


def _stored_elements(stored: DataFrame) -> DataFrame:
    """The elements (see judge) of stored device_quality rows: first and last message time,
    and the kept steps with flags saying which of them this run may count again."""
    s = stored.where(F.col("kind") == "reading").select(
        F.col("device_key").alias("key"),
        "topic_path",
        F.unix_micros("window_start").alias("w"),
        "first_at",
        "last_at",
        "_head",
        "_tail",
        "_steps",
        "rewrite",
    )
    anchors = s.select(
        *SERIES,
        "w",
        F.explode(
            F.array(
                F.struct(F.col("first_at").alias("at"), F.lit(MIN_ORD).alias("ord"),
                         F.lit("first").alias("anchor")),
                F.struct(F.col("last_at").alias("at"), F.lit(MAX_ORD).alias("ord"),
                         F.lit("last").alias("anchor")),
            )
        ).alias("a"),
        "rewrite",
    ).select(
        *SERIES, "w", "a.at", "a.ord", "a.anchor",
        F.lit(None).cast("double").alias("given"),
        (F.col("rewrite") & (F.col("a.anchor") == "first")).alias("count_me"),
    )  # fmt: skip
    n = F.col("_steps")
    small = F.col("n") <= F.lit(2 * STORED)
    head = s.select(
        *SERIES, "w", "rewrite", n.alias("n"), F.posexplode("_head").alias("p", "given")
    )
    no_time = F.lit(None).cast("timestamp").alias("at")
    head_rows = head.select(
        *SERIES, "w", no_time, F.col("p").cast("long").alias("ord"), F.lit("step").alias("anchor"),
        "given",
        (F.col("rewrite") & (small | (F.col("p") < K))).alias("count_me"),
    )  # fmt: skip
    tail = s.select(
        *SERIES, "w", "rewrite", n.alias("n"), F.posexplode("_tail").alias("p", "given")
    )
    tail_rows = tail.select(
        *SERIES, "w", no_time,
        (F.col("n") - F.lit(STORED) + F.col("p")).cast("long").alias("ord"),
        F.lit("step").alias("anchor"), "given",
        (F.col("rewrite") & (F.col("p") >= STORED - K)).alias("count_me"),
    )  # fmt: skip
    rows = anchors.unionByName(head_rows).unionByName(tail_rows)
    return rows.withColumn("kind", F.lit("reading"))


def _rejudged(edges: DataFrame, stored: DataFrame, window_us: int) -> DataFrame:
    """Stored rows marked `rewrite`, their gap columns recomputed: the counted edge steps
    judged now (`edges`, per series and window), plus the inner totals they kept."""
    rows = stored.where(F.col("rewrite")).withColumn("w", F.unix_micros("window_start"))
    keys = ["device_key", "topic_path", "w"]
    out = rows.join(
        edges,
        [rows[k].eqNullSafe(edges[k]) for k in keys],
        "left",
    ).select(rows["*"], "_g", "_m", "_l", "_p")
    reading = F.col("kind") == "reading"
    changed = {
        "gaps": F.when(reading, F.coalesce("_g", F.lit(0)) + F.col("_inner_gaps")),
        "missed": F.when(reading, F.coalesce("_m", F.lit(0)) + F.col("_inner_missed")),
        "longest_silence_s": F.greatest("_l", "_inner_longest_s"),
        "period_s": F.when(reading, F.col("_p")),
        "expected": F.when(reading, F.lit(window_us / 1e6) / F.col("_p")),
    }
    return out.select(
        *[
            (changed[c] if c in changed else F.col(c))
            .cast(DEVICE_QUALITY.schema[c].dataType)
            .alias(c)
            for c in DEVICE_QUALITY.columns
        ]
    )
