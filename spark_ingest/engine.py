"""One run of the ingest: new landing files -> every table's changed partitions, atomically.

Batch (`wsn-ingest batch`) is one run; the stream (`wsn-ingest stream`) is a run per
trigger. Both go through this code, so the same zone gives the same tables whichever way
it was read, in one run or in many. A run (manifest.py has the order of its steps):

1. takes the lock of `--out`, finishes a run a crash interrupted, reads the state;
2. lists the landing zone; the new files are those the manifest does not have (all of them
   with `--full`);
3. reads them, classifies their lines, and notes in which windows they fall (plan.py);
4. reads again the consumed files with lines in those windows, so the windows are
   recomputed from every line they have, old and new;
5. computes every table's rows of those windows (compute.py), with the stored rows next to
   them as context (stored.py), and merges the devices and the sites;
6. writes each changed partition whole (the rows of that partition it did not recompute
   carried over from the current version), commits, publishes, and points the catalog at
   the new versions.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_ingest import consume, sites
from spark_ingest.catalog import Catalog
from spark_ingest.compute import compute
from spark_ingest.hfs import HFS
from spark_ingest.inputs import Inputs, resolve
from spark_ingest.jvm import pin_pyspark_names
from spark_ingest.keep import materialize, release
from spark_ingest.landing import read_classified
from spark_ingest.manifest import FORMAT, Manifest, RunRecord, State, location, now_ms, staging
from spark_ingest.options import Options, Progress, interval_us
from spark_ingest.plan import days_of_windows, files_for_windows, new_files
from spark_ingest.schema import TABLES
from spark_ingest.stored import among

# Landing bytes per partition of the by-device shuffle: about 120,000 messages in either
# format (Parquet compresses the records about 15x). At least two per core.
JSONL_BYTES_PER_PARTITION = 64 * 1024 * 1024
PARQUET_BYTES_PER_PARTITION = 4 * 1024 * 1024
# new landing bytes above which a run keeps the parsed new lines rather than parse them twice
KEEP_NEW_BYTES = 64 * 1024 * 1024


# Settings of the session while a run plans its queries (restored after it). The grouping by
# series and window follows window operators that sorted the rows already: a sort-based
# aggregation then needs no sort at all, where Spark's object hash aggregation (for
# collect_list, max of a struct with strings) falls back to sorting every row again once a
# task has more than 128 groups.
#
# Adaptive execution is off while a run plans: it runs every shuffle and broadcast of a query
# as a job of its own (measured: 40 jobs for an incremental run of two small files, 17 of
# them such stages), and the run sizes its shuffles itself (`spark.sql.shuffle.partitions`
# is set from the bytes it reads, engine.partitions_for).
#
# A `limit(n).collect()` scans every partition in its first job: by default it tries one
# partition, then more in a second job (measured: two jobs for the duplicates' candidates of
# a run of one small file, where one does).
#
# Spark's runtime Bloom filter is off while a run plans. A run joins frames it keeps as local
# checkpoints, whose size Spark does not know and takes for huge: it then built a filter
# sized for a million rows (4.1 MiB) for a join of a few hundred (the gap rule's stored
# context, stored.Stored._deficient), ran a job to build it, and shipped it in the task
# binary of three stages, warning "Broadcasting large task binary" three times: in every
# incremental run whose windows are more than an hour from the rest of the zone, so in every
# micro-batch of a stream that runs for long (docs/performance.md).
RUN_CONF = {
    "spark.sql.execution.useObjectHashAggregateExec": "false",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.limit.initialNumPartitions": str(2**31 - 1),
    "spark.sql.optimizer.runtime.bloomFilter.enabled": "false",
}
SHUFFLE = "spark.sql.shuffle.partitions"

# A small run is executed interpreted: no code is generated and compiled for its queries.
# Compiling the generated Java of a run's large queries (the classification, the gap rule,
# the merges) is most of the fixed cost of a small run, and a warm session pays it again at
# every run (measured, one warm session, incremental runs of one file alternated, load
# 8-25: 13-15 s interpreted against 27 s compiled for a 300-line file, 25-27 s against
# 31-34 s for a 10,000-line one, 75 s against 84 s for a run reading 48 MB;
# docs/performance.md). The two ways compute the same values (Spark has both for every
# expression; tests/spark_ingest/test_small_run.py compares the tables). A large run (a
# full run) stays compiled, where the rows' cost dominates. The bound is
# `spark.wsn.ingest.interpretedBytes`: landing bytes a run reads, its new files and those
# read again (0: always compiled).
INTERPRETED_CONF = "spark.wsn.ingest.interpretedBytes"
INTERPRETED_BYTES = 64 * 1024 * 1024  # docs/spark_ingest.md names it
CODEGEN = ("spark.sql.codegen.wholeStage", "spark.sql.codegen.factoryMode")


@dataclass
class RunResult:
    """What a run did (the batch and stream summaries are made of these)."""

    run: int | None = None  # None: nothing new, nothing written
    full: bool = False
    files: int = 0
    changed: list[str] = field(default_factory=list)
    damaged: dict[str, str] = field(default_factory=dict)
    reread: int = 0
    lines: int = 0
    messages: int = 0
    duplicates: int = 0
    quarantined: dict[str, int] = field(default_factory=dict)
    late: int = 0
    windows: int = 0
    partitions: dict[str, int] = field(default_factory=dict)
    first: str | None = None
    last: str | None = None
    seconds: float = 0.0
    any_quarantined: bool = False
    any_events: bool = False


def config_of(opts: Options) -> dict[str, Any]:
    """What the tables' rows depend on for good: a run with another one needs --full."""
    return {"wsn.window_us": interval_us(opts.window), "wsn.time": opts.time, "wsn.format": FORMAT}


def partitions_for(spark: SparkSession, sizes: dict[str, int]) -> int:
    """Partitions of the by-device shuffle for landing files of `sizes` (name -> bytes)."""
    jsonl = sum(b for n, b in sizes.items() if n.endswith(".jsonl"))
    parquet = sum(b for n, b in sizes.items() if n.endswith(".parquet"))
    by_size = -(-jsonl // JSONL_BYTES_PER_PARTITION) + -(-parquet // PARQUET_BYTES_PER_PARTITION)
    return max(by_size, 2 * spark.sparkContext.defaultParallelism, 1)


@dataclass
class _Lines:
    """What Run._lines read: the lines, their stats by file and window (collected), the
    windows recomputed, and the ids of the files read (new ones first)."""

    lines: DataFrame
    rows: list[Any]
    windows: list[int]
    ids: dict[str, int]
    fmap: consume.FileMap


class Run:
    def __init__(
        self,
        spark: SparkSession,
        landings: Sequence[str],
        out: str,
        opts: Options,
        say: Progress,
        only: Collection[str] | None = None,
    ) -> None:
        self.spark = spark
        pin_pyspark_names(spark)  # PySpark's per-call class lookups, once (jvm.py)
        #: the files this run may read (a stream's micro-batch); None: every listed file
        self.only = None if only is None else set(only)
        #: their bytes, when the caller listed them (the stream's file source): the run
        #: then does not list the landing zone, whose size grows with the history
        self.sizes = dict(only) if isinstance(only, Mapping) else None
        self.landings = list(landings)
        self.out = out.rstrip("/")
        self.opts = opts
        self.say = say
        self.window_us = interval_us(opts.window)
        self.hfs = HFS(spark)
        self.manifest = Manifest(self.hfs, self.out)
        self.catalog = Catalog(spark, self.out, opts.database)
        self.config = config_of(opts)
        self.inputs = Inputs(landings=self.landings)
        #: whether a table may carry another configuration than this run's (a full run then
        #: records its own in every table: 8 metastore updates, not needed otherwise)
        self._config_stale = True
        #: the session's settings before the run (restored after it)
        self._before: dict[str, str | None] = {}

    def execute(self) -> RunResult:
        t0 = time.monotonic()
        self.spark.conf.set("spark.sql.session.timeZone", "UTC")
        self.spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        restore = {k: self.spark.conf.get(k, None) for k in [*RUN_CONF, SHUFFLE, *CODEGEN]}
        self._before = restore
        for k, v in RUN_CONF.items():
            self.spark.conf.set(k, v)
        self.manifest.lock()
        try:
            state = self.recover(self.manifest.load())
            if state.run and state.config != self.config and not self.opts.full:
                raise ValueError(
                    f"{self.out} was built with {state.config}, this run asks for "
                    f"{self.config}: run again with --full to rebuild every table"
                )
            self.catalog.ensure(self.config, self.hfs.qualify, check=not self.opts.full)
            made_now = self.catalog.created >= set(TABLES)
            self._config_stale = not (made_now or (state.run and state.config == self.config))
            if self.sizes is not None:
                self.inputs = Inputs(landings=self.landings, files=dict(sorted(self.sizes.items())))
            else:
                self.inputs = resolve(self.hfs, self.landings)
            listed = self.inputs.files
            if self.only is not None:
                listed = {p: b for p, b in listed.items() if p in self.only}
            known = None if self.opts.full else self.manifest.known(state, listed)
            fresh, changed = new_files(listed, state, self.opts.full, self.opts.max_files, known)
            if fresh or self.opts.full:
                result = self.work(state, fresh)
            else:
                result = sites.close_idle(self, state)
            result.changed = changed
        finally:
            self.manifest.unlock()
            for k, old in restore.items():
                if old is None:
                    self.spark.conf.unset(k)
                else:
                    self.spark.conf.set(k, old)
        result.seconds = time.monotonic() - t0
        return result

    # -- crash safety ------------------------------------------------------------------------
    def recover(self, state: State) -> State:
        """Finish what a stopped run left: delete the staging of a run that never committed,
        publish and apply the last committed run if it was not applied."""
        for run, paths in self.manifest.pending().items():
            if run > state.run:
                self.say(f"recovering: run {run} did not commit; removing what it wrote")
                for p in paths:
                    self.hfs.delete(p)
                self.manifest.clear_pending(run)
        if state.run > self.manifest.applied():
            rec = self.manifest.record(state.run)
            if rec is not None:
                self.say(f"recovering: publishing run {rec.run}, committed before a stop")
                self.publish(rec, existed=None)
        return state

    def publish(self, rec: RunRecord, existed: dict[str, set[str]] | None) -> None:
        """Steps 4 and 5 of manifest.py for `rec` (repeatable)."""
        for tname, parts in rec.parts.items():
            stage = rec.staging.get(tname)
            for key, version in parts.items():
                if version != rec.run or stage is None:
                    continue
                dst = location(self.out, tname, key, version)
                src = f"{stage}/{key}" if key else stage
                if self.hfs.exists(dst):
                    continue
                if not self.hfs.exists(src):
                    raise RuntimeError(f"run {rec.run}: {src} is gone before it was published")
                self.hfs.mkdirs(dst.rsplit("/", 1)[0])
                if not self.hfs.rename(src, dst):
                    raise RuntimeError(f"run {rec.run}: could not rename {src} to {dst}")
        if rec.full and (existed is None or self._config_stale):
            self.catalog.set_config(rec.config)
        self.catalog.apply(rec.parts, existed)
        self.manifest.mark_applied(rec.run)
        self.manifest.clear_pending(rec.run)
        for stage in rec.staging.values():
            self.hfs.delete(stage)

    # -- the work --------------------------------------------------------------------------
    def _read(self, files: list[str]) -> DataFrame:
        return read_classified(
            self.spark,
            [f for f in files if f.endswith(".jsonl")],
            [f for f in files if f.endswith(".parquet")],
            self.window_us,
            self.opts.time,
        )

    def work(self, state: State, fresh: list[str]) -> RunResult:
        run, full = state.run + 1, self.opts.full
        res = RunResult(run=run, full=full, files=len(fresh))
        stages = {t: staging(self.out, t, run) for t in TABLES}
        self.manifest.write_pending(run, list(stages.values()))
        started = now_ms()
        sizes = {f: self.inputs.files[f] for f in fresh}
        bad: dict[str, str] = {}
        self._damaged(consume.damaged(self.hfs, sizes), bad, res)
        parts = partitions_for(self.spark, {f.rsplit("/", 1)[-1]: b for f, b in sizes.items()})
        self.spark.conf.set(SHUFFLE, str(parts))
        kept: list[DataFrame] = []
        computed = None
        try:
            got = self._lines(state, fresh, sizes, bad, res, parts, kept)
            # a Parquet file that passed the markers' check but gave fewer rows than its
            # footer counts had a part Spark could not read (ignoreCorruptFiles skipped the
            # rest of it): damaged, quarantined whole like a truncated one, read again without
            short = consume.short(self.hfs, sizes, got.ids, got.rows, bad)
            if short:
                self._damaged(short, bad, res)
                for k in kept:
                    release(k)
                kept.clear()
                self.say(f"run {state.run + 1}: reading the files again without the damaged")
                got = self._lines(state, fresh, sizes, bad, res, parts, kept, again=True)
            lines, rows, windows, ids, fmap = got.lines, got.rows, got.windows, got.ids, got.fmap
            entries = consume.entries(self.hfs, sizes, ids, rows, bad, started)
            res.windows = len(windows)
            site_of = {i: self.hfs.qualify(f).rsplit("/", 1)[0] for f, i in ids.items()}
            # when a site last published a file: its newest new file's modification time
            marks: dict[str, dict[str, Any]] = {}
            for e in entries.values():
                before = int(state.sites.get(e.site, {}).get("last_file_at") or 0)
                m = marks.setdefault(e.site, {"last_file_at": before})
                m["last_file_at"] = max(m["last_file_at"], e.modified)
            cameras_now = {site_of[int(r["file_id"])] for r in rows if int(r["events"] or 0)}
            for site in cameras_now:
                marks.setdefault(site, {})["cameras"] = True
            per_site = state.files_per_site(entries, full)
            new_ids = {ids[f] for f in fresh}
            computed = compute(
                self, state, lines, rows, fmap, new_ids, site_of, windows, res,
                cameras_now, per_site, marks,
            )  # fmt: skip
            written = self._write(computed.frames, stages, run)
            assert computed.stored is not None
            for tname, drops in computed.stored.dropped(written).items():
                written.setdefault(tname, {}).update(dict.fromkeys(drops))
        finally:
            if computed is not None:
                computed.release()
            for k in kept:
                release(k)
        rec = RunRecord(
            run=run,
            full=full,
            config=self.config,
            started_ms=started,
            finished_ms=now_ms(),
            files=entries,
            parts=written,
            staging={t: stages[t] for t in written},
            sites={s: {**state.sites.get(s, {}), **v} for s, v in marks.items()},
            summary={k: v for k, v in vars(res).items() if k != "changed"},
        )
        rec.superseded, rec.expired = self._supersede(state, written)
        self.manifest.commit(state, rec)
        self.publish(rec, {t: set(p) for t, p in state.parts.items()})
        for loc in rec.expired:
            self.hfs.delete(loc)
        res.partitions = {t: len(p) for t, p in written.items()}
        self.say(f"run {run} committed: {sum(res.partitions.values())} partitions replaced")
        return res

    def _damaged(self, found: dict[str, str], bad: dict[str, str], res: RunResult) -> None:
        bad.update(found)
        res.damaged = dict(bad)
        for f, why in found.items():
            self.say(f"WARNING: damaged landing file {f}: {why} (quarantined)")

    def _lines(
        self,
        state: State,
        fresh: list[str],
        sizes: dict[str, int],
        bad: dict[str, str],
        res: RunResult,
        parts: int,
        kept: list[DataFrame],
        again: bool = False,
    ) -> _Lines:
        """Steps 3 and 4 (the module docstring): the new files' lines, classified, with
        those of the consumed files that share their windows, kept (in `kept`), and their
        stats by file and window; a damaged file is one quarantine line."""
        run, full = state.run + 1, self.opts.full
        read = sum(sizes.values())
        self.interpret(read)
        if not again:
            self.say(f"run {run}: reading {len(fresh)} {'' if full else 'new '}landing files")
        ids = {f: i for i, f in enumerate(fresh)}
        fmap = consume.file_map(self.spark, self.hfs, fresh)
        new = self._read([f for f in fresh if f not in bad])
        if bad:
            new = new.unionByName(consume.damaged_lines(self.spark, self.hfs, bad, self.window_us))
        new = consume.with_file_id(new, fmap)
        windows: list[int] | None = None
        both = new
        if not full and state.files:
            # the windows the new lines fall in decide which consumed files to read again:
            # a few new files are parsed twice (once here), many are kept once instead
            if sum(sizes.values()) > KEEP_NEW_BYTES:
                new = materialize(self.spark, new, keep_partitioning=False)
                kept.append(new)
                both = new
            windows = sorted(int(r["w"]) for r in new.select("w").distinct().collect())
            consumed = self.manifest.with_days(state, days_of_windows(windows, self.window_us))
            reread = files_for_windows(consumed, windows, self.window_us, set(fresh))
            res.reread = len(reread)
            read += sum(consumed[f].bytes for f in reread)
            self.interpret(read)
            if reread:
                self.say(f"run {run}: reading {len(reread)} consumed files again for "
                         f"{len(windows)} windows")  # fmt: skip
                ids.update({f: len(fresh) + i for i, f in enumerate(reread)})
                fmap = consume.file_map(self.spark, self.hfs, fresh + reread)
                old = among(self.spark, self._read(reread), windows)
                both = new.unionByName(consume.with_file_id(old, fmap))
        lines = materialize(self.spark, self._keyed(both, parts))
        kept.append(lines)
        rows = consume.stats(lines).collect()
        if windows is None:
            windows = sorted({int(r["w"]) for r in rows})
        return _Lines(lines, rows, windows, ids, fmap)

    def interpret(self, read: int) -> bool:
        """Whether the queries of a run that reads `read` landing bytes run interpreted (see
        INTERPRETED_BYTES); sets the session so for the run (execute restores it)."""
        bound = int(self.spark.conf.get(INTERPRETED_CONF, None) or INTERPRETED_BYTES)
        small = read < bound
        for k, v in zip(CODEGEN, ("false", "NO_CODEGEN"), strict=True):
            old = self._before.get(k)
            if small:
                self.spark.conf.set(k, v)
            elif old is None:  # the session's own setting otherwise
                self.spark.conf.unset(k)
            else:
                self.spark.conf.set(k, old)
        return small

    @staticmethod
    def _keyed(lines: DataFrame, parts: int) -> DataFrame:
        """Lines with a row id, hash-partitioned by device: every table groups by device
        first, so what follows sorts within partitions instead of shuffling again."""
        return lines.withColumn("rid", F.monotonically_increasing_id()).repartition(parts, "key")

    def _write(
        self, frames: dict[str, DataFrame | None], stages: dict[str, str], run: int
    ) -> dict[str, dict[str, int | None]]:
        """Each table's partitions, whole, into its staging directory; the tables side by
        side (Spark runs the jobs concurrently). Returns the partitions written per table."""

        def write(item: tuple[str, DataFrame | None]) -> tuple[str, list[str]]:
            tname, df = item
            if df is None:
                return tname, []
            stage = stages[tname]
            if not TABLES[tname].partitioned:
                df.coalesce(1).write.mode("overwrite").parquet(stage)
                return tname, [""]
            df.repartition("date", "hour").write.mode("overwrite").partitionBy(
                "date", "hour"
            ).parquet(stage)
            return tname, [
                f"{d}/{h}"
                for d in self.hfs.names(stage)
                if d.startswith("date=")
                for h in self.hfs.names(f"{stage}/{d}")
                if h.startswith("hour=")
            ]

        with ThreadPoolExecutor(max_workers=4) as pool:
            done = dict(pool.map(write, sorted(frames.items())))
        return {t: dict.fromkeys(keys, run) for t, keys in done.items() if keys}

    def _supersede(
        self, state: State, written: dict[str, dict[str, int | None]]
    ) -> tuple[list[list[Any]], list[str]]:
        """Versions this run replaces (kept for --retain), and those replaced long enough
        ago to delete now."""
        t = now_ms()
        new = [
            [location(self.out, tname, key, old), t]
            for tname, parts in written.items()
            for key in parts
            if (old := state.parts.get(tname, {}).get(key)) is not None
        ]
        keep_ms = interval_us(self.opts.retain, zero_ok=True) // 1000
        expired = [loc for loc, since in [*state.superseded, *new] if t - int(since) >= keep_ms]
        gone = set(expired)
        return [s for s in new if s[0] not in gone], expired


def run_once(
    spark: SparkSession,
    landing: str | Sequence[str],
    out: str,
    opts: Options | None = None,
    progress: Progress | None = None,
    only: Collection[str] | None = None,
) -> RunResult:
    """One run (see the module docstring); with `only` (qualified paths, as Spark names
    files), of those of the new files only: a stream's micro-batch (a mapping path ->
    bytes: those files, not listed again)."""
    landings = [landing] if isinstance(landing, str) else list(landing)
    say = progress or (lambda _m: None)
    return Run(spark, landings, out, opts or Options(), say, only).execute()
