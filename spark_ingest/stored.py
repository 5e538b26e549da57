"""What a run needs of the tables as they are: the current version of a partition, the rows
its new rows replace and the rows it carries over, and the stored neighbours that give the
gap rule and the camera states their context.

Reads go to the current version directories the manifest names (never through a glob), so
a run sees exactly the committed state, whatever a reader or a crashed run left around.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_ingest import camera
from spark_ingest.aggregate import partition_of
from spark_ingest.keep import materialize, release
from spark_ingest.manifest import State, location
from spark_ingest.options import interval_us
from spark_ingest.plan import part_of, parts_of_windows
from spark_ingest.quality import K
from spark_ingest.schema import TABLES
from spark_ingest.sites import SiteUpdate

if TYPE_CHECKING:
    from spark_ingest.engine import Run

# the column each partitioned table's (date, hour) come from
TIME_COLUMN = {
    "aggregates": "window_start",
    "device_quality": "window_start",
    "site_quality": "window_start",
    "camera_states": "window_start",
    "quarantine": "time",
    "camera_events": "at",
}
HOUR_US = 3_600_000_000
# how far around the recomputed windows a run looks for a series' stored neighbours first,
# then (only for a series that has older or newer data than it found) further. The gap rule
# needs K steps each side, a few minutes of a device that reads every few seconds: the first
# look reads the hour partitions within an hour of the windows, where 6 hours cost a
# micro-batch ~1.3 s more at 1M rows (docs/performance.md); a slower device costs one more
# look
LOOKAROUND_US = (HOUR_US, 6 * HOUR_US, 7 * 24 * HOUR_US, 400 * 24 * HOUR_US)
# up to this many windows a run's filter "in a recomputed window" is a literal set (no Spark
# job; a broadcast join with a driver-side table of windows runs one per query); more are
# a table (a literal of 10,000 costs seconds to plan: measured)
LITERAL_WINDOWS = 256


def among(spark: SparkSession, df: DataFrame, windows: list[int], inside: bool = True) -> DataFrame:
    """Rows of `df` (with a column `w`, a window start in µs) whose window is one of
    `windows` (`inside`), or the others (a null `w` counts as in none)."""
    if len(windows) <= LITERAL_WINDOWS:
        ws = ",".join(str(int(w)) for w in windows)
        isin = F.coalesce(F.expr(f"`w` IN ({ws})"), F.lit(False)) if ws else F.lit(False)
        return df.where(isin if inside else ~isin)
    w_df = spark.createDataFrame([(w,) for w in windows], "w long")
    return df.join(F.broadcast(w_df), "w", "left_semi" if inside else "left_anti")


class Stored:
    def __init__(self, run: Run, state: State, windows: list[int]) -> None:
        self.run = run
        self.spark = run.spark
        self.out = run.out
        self.full = run.opts.full
        self.state = state
        self.windows = windows
        self.window_us = run.window_us
        self.cam_range: tuple[int, int] | None = None
        #: the first and last time of the lines consumed before (manifest), once needed
        self._zone: tuple[int, int] | None = None
        #: the device_quality partitions the context came from (dq_context)
        self.dq_keys: set[str] = set()
        #: frames kept (materialized) for this run; the caller releases them
        self.kept: list[DataFrame] = []

    # -- current versions ------------------------------------------------------------------
    def _parts(self, table: str) -> dict[str, int]:
        return {} if self.full else self.state.parts.get(table, {})

    def read(self, table: str, keys: set[str]) -> DataFrame:
        """Rows of the current versions of `keys` (partition keys) of `table`, with their
        partition columns."""
        t = TABLES[table]
        have = self._parts(table)
        locs = [location(self.out, table, k, have[k]) for k in sorted(keys) if k in have]
        schema = T.StructType([f for f in t.schema.fields if f.name in t.data_columns])
        if not locs:
            return self.spark.createDataFrame([], t.schema)
        df = self.spark.read.schema(schema).parquet(*locs)
        if not t.partitioned:
            return df.select(*t.columns)
        return df.select(*t.data_columns, *partition_of(F.col(TIME_COLUMN[table])))

    def current(self, table: str) -> DataFrame:
        """All of an unpartitioned table (devices, sites) as it is now (empty before)."""
        return self.read(table, {""})

    def among(self, df: DataFrame, inside: bool = True) -> DataFrame:
        """Rows of `df` (with a column `w`) in the windows the run recomputes, or not."""
        return among(self.spark, df, self.windows, inside)

    def _in_windows(self, ts: Column) -> Column:
        """Whether the window of time `ts` is one the run recomputes (a semi-join helper)."""
        us = F.unix_micros(ts)
        return (us - F.pmod(us, F.lit(self.window_us))).alias("w")

    # -- the whole partitions to write -----------------------------------------------------
    def whole(self, table: str, new: DataFrame) -> DataFrame | None:
        """`new` rows plus the rows of their partitions that the run does not replace."""
        t = TABLES[table]
        if not t.partitioned:
            return new
        if table == "camera_states":
            if self.cam_range is None:
                return new
            lo, hi = self.cam_range
            keys = {part_of(w) for w in range(lo - lo % HOUR_US, hi + 1, HOUR_US)}
            keys &= set(self._parts(table))
            old = self.read(table, keys)
            us = F.unix_micros("window_start")
            carried = old.where((us < F.lit(lo)) | (us > F.lit(hi)))
            return new.unionByName(carried)
        have = set(self._parts(table))
        keys = parts_of_windows(self.windows) & have
        # device_quality: stored rows the run judged again (the gap rule's context, from the
        # partitions `dq_context` read) come back with `new`, maybe in a partition of no
        # recomputed window; that partition's other rows must be carried too, or writing
        # it would drop them
        context = (self.dq_keys & have) - keys if table == "device_quality" else set()
        if not keys and not context:
            return new
        tcol = F.col(TIME_COLUMN[table])
        old = self.read(table, keys).withColumn("w", self._in_windows(tcol))
        carried = self.among(old, inside=False).drop("w")
        if context:  # only those `new` writes: the others stay as they are
            written = new.select("date", "hour").distinct()
            carried = carried.unionByName(
                self.read(table, context).join(F.broadcast(written), ["date", "hour"], "left_semi")
            )
        if table == "device_quality":
            # stored rows the run judged again come back with `new`
            keys_cols = ["device_key", "topic_path", "window_start"]
            carried = carried.join(
                new.select(*keys_cols),
                [carried[c].eqNullSafe(new[c]) for c in keys_cols],
                "left_anti",
            )
        return new.unionByName(carried)

    def replaced_dq(self, dq_rows: DataFrame) -> DataFrame:
        """The stored device_quality rows that `dq_rows` replace (the devices merge takes
        them out before it adds the new ones)."""
        keys = {part_of(w) for w in self.windows}
        have = set(self._parts("device_quality"))
        if not have:  # nothing stored (a full run, a first run): no job to find the hours
            return self.read("device_quality", set())
        # `dq_rows` are the recomputed windows' rows and the stored rows judged again, which
        # come from the partitions the context was read from: the driver knows them all (a
        # superset; the join below picks the rows), no Spark job needed to find them
        old = self.read("device_quality", (keys | self.dq_keys) & have)
        cols = ["device_key", "topic_path", "window_start"]
        return old.join(
            dq_rows.select(*[F.col(c).alias(f"_{c}") for c in cols]),
            [old[c].eqNullSafe(F.col(f"_{c}")) for c in cols],
            "left_semi",
        )

    def dropped(self, written: dict[str, dict[str, int | None]]) -> dict[str, list[str]]:
        """A full run drops the partitions it did not write (their windows have no lines)."""
        if not self.full:
            return {}
        out = {}
        for table, parts in self.state.parts.items():
            gone = [k for k in parts if k not in written.get(table, {})]
            if gone:
                out[table] = gone
        return out

    # -- context of the gap rule -----------------------------------------------------------
    def dq_context(self, msgs: DataFrame) -> DataFrame | None:
        """Stored device_quality rows next to the recomputed windows of the series in `msgs`,
        each marked `rewrite` when this run judges its steps again (it is within K steps of
        a recomputed window) or only read for context (the K steps beyond those)."""
        have = self._parts("device_quality")
        if not have or not self.windows:
            return None
        series = (
            msgs.where(F.col("kind") == "reading")
            .groupBy(F.col("key").alias("_k"), F.col("topic_path").alias("_t"))
            .agg(F.min("w").alias("_lo"), F.max("w").alias("_hi"))
        )
        bounds = self.current("devices").select(
            F.col("device_key").alias("_dk"),
            F.unix_micros("first_seen").alias("_first"),
            F.unix_micros("last_seen").alias("_last"),
            F.col("topics").alias("_topics"),
        )
        lo, hi = self.windows[0], self.windows[-1] + self.window_us
        picked: DataFrame | None = None
        for around in LOOKAROUND_US:
            first = lo - around - (lo - around) % HOUR_US
            keys = {part_of(t) for t in range(first, hi + around + 1, HOUR_US)} & set(have)
            if picked is not None:
                release(picked)
            picked = materialize(
                self.spark, self._neighbours(series, keys), keep_partitioning=False
            )
            self.dq_keys = keys
            if self._zone_within(lo - around, hi + around):
                break  # no device has data beyond the range: none can be short of context
            if not self._deficient(picked, series, bounds, lo - around, hi + around):
                break
        assert picked is not None
        self.kept.append(picked)
        return picked

    def _zone_within(self, from_us: int, to_us: int) -> bool:
        """Whether every line consumed before lies within [from_us, to_us] (the manifest's
        index of the files: so does every stored message, and every device's data)."""
        if self._zone is None:
            spans = [x for e in self.state.files.values() for x in e.hours.values()]
            lo = min((int(a) for a, _b in spans), default=0)
            self._zone = (lo, max((int(b) for _a, b in spans), default=0))
        return not self.state.files or (self._zone[0] >= from_us and self._zone[1] <= to_us)

    def _neighbours(self, series: DataFrame, keys: set[str]) -> DataFrame:
        rows = (
            self.read("device_quality", keys)
            .where(F.col("kind") == "reading")
            .withColumn("w", F.unix_micros("window_start"))
        )
        rows = self.among(rows, inside=False)
        j = rows.join(
            F.broadcast(series),
            rows["device_key"].eqNullSafe(series["_k"])
            & rows["topic_path"].eqNullSafe(series["_t"]),
        )
        side = F.when(F.col("w") < F.col("_lo"), "before").when(F.col("w") > F.col("_hi"), "after")
        j = j.withColumn("_side", F.coalesce(side, F.lit("inside")))
        dist = F.when(F.col("_side") == "before", -F.col("w")).otherwise(F.col("w"))
        by = Window.partitionBy("_k", "_t", "_side").orderBy(dist)
        j = j.withColumn("_c", (F.col("_steps") + 1).cast("long")).withColumn(
            "_cum",
            F.coalesce(F.sum("_c").over(by.rowsBetween(Window.unboundedPreceding, -1)), F.lit(0)),
        )
        inside = F.col("_side") == "inside"
        j = j.withColumn("rewrite", inside | (F.col("_cum") < K))
        side_all = Window.partitionBy("_k", "_t", "_side")
        reach = F.max(F.when(F.col("rewrite") & ~inside, F.col("_cum") + F.col("_c")))
        j = j.withColumn("_reach", F.coalesce(reach.over(side_all), F.lit(0)))
        picked = j.where(inside | (F.col("_cum") < F.col("_reach") + K))
        return picked.select(
            *TABLES["device_quality"].columns, "rewrite", "_k", "_t", "_side", "_reach", "_c"
        )

    @staticmethod
    def _deficient(
        picked: DataFrame, series: DataFrame, bounds: DataFrame, from_us: int, to_us: int
    ) -> bool:
        """Whether a series ran out of stored rows within the range short of the context it
        needs while its device has data beyond the range (then a wider look is needed). A
        side with no stored row in the range is short too: a device silent for longer than
        the range has its silence judged against the readings before it."""
        known = F.array_contains(F.col("_topics"), F.col("_t"))
        have = (
            picked.where(F.col("_side") != "inside")
            .groupBy(
                F.col("_k").alias("_hk"), F.col("_t").alias("_ht"), F.col("_side").alias("_hs")
            )
            .agg(F.sum("_c").alias("_have"), F.max("_reach").alias("_r"))
        )
        sides = series.select(
            "_k", "_t", F.explode(F.array(F.lit("before"), F.lit("after"))).alias("_side")
        )
        short = (
            sides.join(
                have,
                F.col("_k").eqNullSafe(F.col("_hk"))
                & F.col("_t").eqNullSafe(F.col("_ht"))
                & (F.col("_side") == F.col("_hs")),
                "left",
            )
            .where(F.coalesce("_have", F.lit(0)) < F.coalesce("_r", F.lit(0)) + K)
            .join(F.broadcast(bounds), F.col("_k").eqNullSafe(F.col("_dk")))
            .where(
                ((F.col("_side") == "before") & (F.col("_first") < F.lit(from_us)))
                | ((F.col("_side") == "after") & (F.col("_last") > F.lit(to_us)))
            )
            # a series the device never had before (a new topic) has no stored context
            .where(F.col("_have").isNotNull() | F.coalesce(known, F.lit(True)))
        )
        return bool(short.limit(1).count())

    # -- camera states ---------------------------------------------------------------------
    def camera_states(
        self, ev: DataFrame, known: DataFrame, up: SiteUpdate, cameras_now: set[str]
    ) -> DataFrame | None:
        """camera_states rows to write (None when nothing can have changed): everything in a
        full run; else the windows from the earliest recomputed one (when there are new
        events) or the point where a camera site's evidence ended before this run, to its
        newest evidence now."""
        horizon = interval_us(self.run.opts.state_horizon)
        if self.full:
            return camera.states(ev, known, self.window_us, horizon) if cameras_now else None
        cam_sites = {s for s, v in self.state.sites.items() if v.get("cameras")} | cameras_now
        moved = {s for s in cam_sites if up.new_last.get(s) != up.old_last.get(s)}
        if not cameras_now and not moved:
            return None
        starts = [self.windows[0]] if cameras_now else []
        starts += [v for s, v in up.old_last.items() if s in moved and v is not None]
        ends = [v for s, v in up.new_last.items() if s in cam_sites and v is not None]
        if not starts or not ends:
            return None
        lo = min(starts) - min(starts) % self.window_us
        hi = max(ends) - max(ends) % self.window_us
        self.cam_range = (lo, hi)
        first = lo - horizon - (lo - horizon) % HOUR_US
        keys = {part_of(t) for t in range(first, hi + HOUR_US + 1, HOUR_US)}
        old = self.read("camera_events", keys & set(self._parts("camera_events")))
        old = self.among(old.withColumn("w", self._in_windows(F.col("at"))), inside=False)
        old = old.drop("w")
        return camera.states(old.unionByName(ev), known, self.window_us, horizon, lo, hi)
