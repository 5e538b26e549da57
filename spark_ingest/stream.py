"""`wsn-ingest stream`: Spark Structured Streaming over the landing zone, each micro-batch
one incremental run.

The query is a file source on every `--landing` (`readStream`, the binaryFile format reading
only the files' names) and a `foreachBatch` sink: each micro-batch hands the engine
(engine.py) the files that arrived since the last, and the engine runs over them exactly as
`batch` does. So the stream and a batch run over the same zone give the same tables, a late
line or a re-uploaded file lands in its windows, and a micro-batch's cost follows what it
reads (its new files and the few files that share their windows), not the history: the
de-duplication state is the tables themselves, not a state store. The run takes the
micro-batch's files and sizes from the source (it lists nothing), and the manifest it loads
is bounded (manifest.py, folding); what still follows the number of files in the zone is
the source's own listing and its log under the checkpoint (docs/spark_ingest.md).
Exactly once: the run commits atomically (manifest.py) before Spark commits the micro-batch;
a micro-batch Spark replays after a crash finds its files in the manifest and does nothing.
Windows close when traffic stops: with an interval trigger, a trigger with no new file runs
the engine over none (sites.close_idle); with available-now, once after the zone is read.

Stopping: SIGTERM or SIGINT (Ctrl-C) lets the running micro-batch finish if it can within
`stop_grace` seconds, else cancels its Spark jobs (Spark replays it at the next start); then
the query stops, the summary is printed and the exit status is 0. A second signal cancels at
once.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from spark_ingest.engine import RunResult, run_once
from spark_ingest.hfs import HFS
from spark_ingest.jvm import logs_at_warn_or_less, own_log_level, restore_log_level, set_log_level
from spark_ingest.options import Options, Progress, interval_us, iso_us

AVAILABLE_NOW = ("available-now", "availablenow", "available_now", "once")


@dataclass
class StreamOptions(Options):
    trigger: str = "available-now"  # or an interval, "10 seconds"
    timeout: float | None = None  # stop an interval trigger after this many seconds
    #: a signal lets the running micro-batch finish for this long, then cancels it
    stop_grace: float = 20.0


@dataclass
class StreamSummary:
    landing: str
    out: str
    database: str
    window: str
    watermark: str
    trigger: str
    runs: int = 0
    files: int = 0
    lines: int = 0
    messages: int = 0
    duplicates: int = 0
    quarantined: dict[str, int] = field(default_factory=dict)
    late: int = 0
    damaged: dict[str, str] = field(default_factory=dict)
    partitions: int = 0
    stopped_by: str | None = None
    abandoned: bool = False
    #: site -> closed_until (ISO), after the last run
    closed_until: dict[str, str | None] = field(default_factory=dict)
    totals: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    #: Spark's own account of each micro-batch with files (its last 100): batch id, files,
    #: and the durations (ms) of its steps: `triggerExecution` is the whole micro-batch,
    #: `addBatch` the run, `latestOffset` the listing of the landing directories
    micro_batches: list[dict[str, Any]] = field(default_factory=list)

    @property
    def quarantined_total(self) -> int:
        return sum(self.quarantined.values())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["quarantined_total"] = self.quarantined_total
        return d

    def add(self, r: RunResult) -> None:
        if r.run is not None:
            self.runs += 1
        self.files += r.files
        self.lines += r.lines
        self.messages += r.messages
        self.duplicates += r.duplicates
        self.late += r.late
        self.partitions += sum(r.partitions.values())
        self.damaged.update(r.damaged)
        for k, v in r.quarantined.items():
            self.quarantined[k] = self.quarantined.get(k, 0) + v

    def render(self) -> str:
        q = ", ".join(f"{k}: {v}" for k, v in sorted(self.quarantined.items()))
        t = self.totals
        lines = [
            f"wsn-ingest stream: {self.landing} -> {self.out} (tables in {self.database})",
            f"  trigger           {self.trigger}, window {self.window}, watermark "
            f"{self.watermark}; {self.runs} runs in {self.seconds:.1f} s"
            + (f"; stopped by {self.stopped_by}" if self.stopped_by else ""),
        ]
        if self.abandoned:
            lines.append("  the last micro-batch was cancelled; the next start cleans up after it")
        lines += [
            f"  files / lines     {self.files} / {self.lines}",
            f"  messages          {self.messages}",
            f"  duplicates        {self.duplicates}  (same id in the same window: kept once)",
            f"  quarantined       {self.quarantined_total}" + (f"  ({q})" if q else ""),
            f"  late              {self.late}  (for windows already closed: merged anyway)",
            f"  partitions        {self.partitions} replaced",
        ]
        for f, why in sorted(self.damaged.items()):
            lines.append(f"  DAMAGED FILE      {f.rsplit('/', 1)[-1]}: {why} (quarantined)")
        for site, until in sorted(self.closed_until.items()):
            lines.append(f"  closed until      {until or '-'}  {site}")
        if t:
            lines.append(
                f"  since the start   {t.get('lines', 0)} lines, {t.get('messages', 0)} messages, "
                f"{t.get('duplicates', 0)} duplicates, {t.get('quarantined', 0)} quarantined"
            )
        return "\n".join(lines)


# What a cancelled micro-batch makes Spark and Hadoop log: each aborted write, killed task
# and interrupted file operation, as an ERROR or a WARN with its Java trace (549 lines for a
# micro-batch of one small file, tests/spark_ingest/test_stream.py). The stream says it in
# one line and in its summary, and the next start cleans up: from the cancel on, they are
# off (at the default level; a user who asked for INFO or DEBUG gets all of it): the root
# logger (a shaded library's too: Guava's Closeables warned of an interrupted channel) and
# the packages whose loggers Spark's log profile sets levels of their own.
CANCELLED = ("", "org.apache.spark", "org.apache.hadoop", "org.apache.parquet", "org.sparkproject")
# Stopping a query between micro-batches has Spark cancel its job group, which then has no
# job: "WARN DAGScheduler: Failed to cancel job group ... Cannot find active jobs", twice.
STOPPING = ("org.apache.spark.scheduler.DAGScheduler",)


class _Stopper:
    """SIGTERM and SIGINT set `stop`; a micro-batch still running `grace` seconds later (or
    at a second signal) has its Spark jobs cancelled. No KeyboardInterrupt is raised inside
    a call into the JVM, which is what left Ctrl-C with a trace and no summary. Loggers it
    hushes get their levels back when it exits."""

    def __init__(
        self,
        spark: SparkSession,
        grace: float,
        say: Progress,
        busy: threading.Event | None = None,
    ) -> None:
        self.spark = spark
        self.grace = grace
        self.say = say
        #: set while a micro-batch runs (what a signal's message says it waits for)
        self.busy = busy
        self.stop = threading.Event()
        self.cancelled = False
        self.by: str | None = None
        self._timer: threading.Timer | None = None
        self._old: dict[int, Any] = {}
        #: logger -> its own level before `hush` (None: its parent's)
        self._levels: dict[str, str | None] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> _Stopper:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._old[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        if self._timer is not None:
            self._timer.cancel()
        if self.cancelled:
            self._settle()
        with self._lock:
            for name, level in self._levels.items():
                # a JVM gone already has no level to restore; its error is the one to see
                with contextlib.suppress(Exception):
                    restore_log_level(self.spark, name, level)
            self._levels.clear()

    def _settle(self, limit: float = 10.0) -> None:
        """Wait, at most `limit` seconds, until the cancelled jobs' tasks have ended: a task
        logs its abort as it ends, which can be after the run has given up (seen under
        load: the levels were back by then and its trace was printed). Spark's status
        store counts a task as running until the scheduler has handled, and logged, its
        end."""
        jsc = self.spark.sparkContext._jsc.sc()
        jtracker = jsc.statusTracker()
        tracker = self.spark.sparkContext.statusTracker()
        deadline = time.monotonic() + limit
        with contextlib.suppress(Exception):  # a JVM gone has nothing left to log
            while time.monotonic() < deadline:
                # the status store follows the scheduler's events as the listener bus
                # delivers them: a task just started is counted once its event is through
                left = max(1, int((deadline - time.monotonic()) * 1000))
                jsc.listenerBus().waitUntilEmpty(left)
                running = sum(int(e.numRunningTasks()) for e in jtracker.getExecutorInfos())
                if not running and not tracker.getActiveStageIds():
                    return
                time.sleep(0.1)

    def hush(self, loggers: Sequence[str]) -> None:
        """`loggers` off until the stopper exits, those at WARN or above (the default)."""
        with self._lock:
            for name in loggers:
                if name in self._levels or not logs_at_warn_or_less(self.spark, name):
                    continue
                self._levels[name] = own_log_level(self.spark, name)
                set_log_level(self.spark, name, "OFF")

    def _on_signal(self, sig: int, _frame: Any) -> None:
        name = signal.Signals(sig).name
        if self.stop.is_set():
            self.say(f"{name} again: cancelling the running micro-batch now")
            self._cancel()
            return
        self.by = name
        self.stop.set()
        if self.busy is None or self.busy.is_set():
            self.say(f"{name}: finishing the running micro-batch (at most {self.grace:.0f} s)")
        else:
            self.say(f"{name}: stopping (no micro-batch is running)")
        self._timer = threading.Timer(self.grace, self._cancel)
        self._timer.daemon = True
        self._timer.start()

    def _cancel(self) -> None:
        # hushed before `cancelled` is set: run_stream cancels too once it reads `cancelled`,
        # and a task interrupted then logged its warnings before the loggers were off
        self.hush(CANCELLED)
        self.cancelled = True
        self.spark.sparkContext.cancelAllJobs()


def _totals(spark: SparkSession, database: str) -> tuple[dict[str, int], dict[str, str | None]]:
    rows = (
        spark.table(f"`{database}`.`sites`")
        .select(
            "site",
            "lines",
            "messages",
            "duplicates",
            "quarantined",
            F.unix_micros("closed_until").alias("c"),
        )
        .collect()
    )
    totals = {
        k: sum(int(r[k] or 0) for r in rows)
        for k in ("lines", "messages", "duplicates", "quarantined")
    }
    return totals, {r["site"]: iso_us(r["c"]) for r in rows}


# What the file source hands each micro-batch: the binaryFile format reads a file's bytes
# only when `content` is selected, so selecting `path` lists the batch's files and reads none
# of them (the engine reads them, with what it reads again for their windows).
FILES = "path string, modificationTime timestamp, length long, content binary"
# The file source forgets a file (and ignores one that appears later with an older
# modification time) after this long, counted from the newest file it has seen. A site's
# upload after an outage keeps its files' old times (rsync -t, cp -p): ten years keeps them.
MAX_FILE_AGE = "3650d"
# Spark logs a query that ends with an error as an ERROR with its trace; the stream re-raises
# the error itself (or, when it cancelled the micro-batch, says so in one line)
QUIET = "org.apache.spark.sql.execution.streaming"


def checkpoint_of(out: str) -> str:
    """The Structured Streaming checkpoint of the stream into `out` (the files its source
    has handed over, and the micro-batch log)."""
    return f"{out.rstrip('/')}/_stream"


class MicroBatchFailed(RuntimeError):
    """What Spark is told of a micro-batch whose run failed (the error is the run's)."""


class _Batches:
    """The foreachBatch function: one engine run over the micro-batch's files, serialised
    with the idle ticks (one run at a time holds --out's lock)."""

    def __init__(
        self,
        spark: SparkSession,
        landings: list[str],
        out: str,
        opts: Options,
        say: Progress,
        summary: StreamSummary,
    ) -> None:
        self.spark, self.landings, self.out, self.opts, self.say = spark, landings, out, opts, say
        self.summary = summary
        self.lock = threading.Lock()
        self.busy = threading.Event()
        self.error: BaseException | None = None
        self.batches = 0

    def run(self, only: dict[str, int] | None) -> RunResult:
        with self.lock:
            r = run_once(self.spark, self.landings, self.out, self.opts, self.say, only=only)
        self.summary.add(r)
        return r

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        self.busy.set()
        try:
            # the files and their bytes as the source listed them: the run lists nothing
            files = {str(r["path"]): int(r["length"]) for r in df.collect()}
            self.say(f"micro-batch {batch_id}: {len(files)} new landing files")
            self.run(files)
            self.batches += 1
        except Exception as e:
            self.error = e
            # Spark gets one line; run_stream re-raises `e` itself. When the query is stopping
            # (the stopper cancelled this run), Spark reads the Python trace of the error with
            # a regex that recurses once per character after "Py4JJavaError: An error occurred
            # while calling" (StreamExecution.PROXY_ERROR; seen with Spark 4.3): a cancelled
            # job's Java trace overflowed the query thread's stack; the JVM printed 1,024 frames
            raise MicroBatchFailed(f"micro-batch {batch_id}: {type(e).__name__}") from None
        except BaseException as e:
            self.error = e
            raise
        finally:
            self.busy.clear()


def _quiet(spark: SparkSession) -> None:
    """Spark's and py4j's own reports of a failed micro-batch off: the stream re-raises the
    error of its foreachBatch function itself (py4j would print its trace as well)."""
    set_log_level(spark, QUIET, "OFF")
    # stopping the query interrupts its thread, also in a local file system's shell call
    set_log_level(spark, "org.apache.hadoop.util.Shell", "ERROR")
    logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)


def _query(spark: SparkSession, landings: list[str], checkpoint: str, opts: StreamOptions,
           batches: _Batches, once: bool) -> StreamingQuery:  # fmt: skip
    frames = []
    for landing in landings:
        reader = (
            spark.readStream.format("binaryFile")
            .schema(FILES)
            .option("pathGlobFilter", "landing-*")
            .option("maxFileAge", MAX_FILE_AGE)
        )
        if opts.max_files is not None:
            reader = reader.option("maxFilesPerTrigger", opts.max_files)
        frames.append(reader.load(landing).select("path", "length"))
    files = frames[0]
    for f in frames[1:]:
        files = files.union(f)
    writer = files.writeStream.foreachBatch(batches).option("checkpointLocation", checkpoint)
    writer = (
        writer.trigger(availableNow=True) if once else writer.trigger(processingTime=opts.trigger)
    )
    return writer.queryName(f"wsn-ingest {opts.database}").start()


def _drive(
    query: StreamingQuery,
    batches: _Batches,
    stopper: _Stopper,
    once: bool,
    every: float,
    timeout: float | None,
    t0: float,
) -> None:
    """Waits while the query runs, until a signal or the timeout; with an interval trigger,
    a tick that saw no micro-batch since the last runs the engine over no file, which closes
    the windows of sites whose traffic stopped (sites.close_idle)."""
    ticked = -1
    while query.isActive and not stopper.stop.is_set():
        stopper.stop.wait(every if every else 0.2)
        if timeout is not None and time.monotonic() - t0 >= timeout:
            return
        idle = not once and not batches.busy.is_set() and batches.batches == ticked
        if idle and query.isActive and not stopper.stop.is_set():
            batches.run({})
        ticked = batches.batches


def _progress(query: StreamingQuery) -> list[dict[str, Any]]:
    return [
        {"batch": p.batchId, "files": p.numInputRows, "ms": dict(p.durationMs)}
        for p in query.recentProgress
        if p.numInputRows
    ]


def run_stream(
    spark: SparkSession,
    landing: str | Sequence[str],
    out: str,
    opts: StreamOptions | None = None,
    progress: Progress | None = None,
) -> StreamSummary:
    """Runs until the zone is read (`available-now`) or, with an interval trigger, until
    `opts.timeout`, SIGTERM or SIGINT; returns what it did (module docstring)."""
    opts = opts or StreamOptions()
    say = progress or (lambda _m: None)
    landings = [landing] if isinstance(landing, str) else list(landing)
    summary = StreamSummary(
        landing=" ".join(landings), out=out.rstrip("/"), database=opts.database,
        window=opts.window, watermark=opts.watermark, trigger=opts.trigger,
    )  # fmt: skip
    once = opts.trigger.strip().lower() in AVAILABLE_NOW
    every = 0.0 if once else interval_us(opts.trigger) / 1e6
    checkpoint = checkpoint_of(out)
    # every micro-batch is an incremental run; the source's rate limit is the only limit
    each = replace(opts, full=False, max_files=None)
    batches = _Batches(spark, landings, out, each, say, summary)
    hfs = HFS(spark)
    t0 = time.monotonic()
    _quiet(spark)
    with _Stopper(spark, opts.stop_grace, say, batches.busy) as stopper:
        try:
            if opts.full:
                # a rebuild reads every file once; the source then starts afresh, and hands
                # over files the manifest has (no-ops) and those that arrive after
                with batches.lock:
                    r = run_once(spark, landings, out, replace(opts, max_files=None), say)
                summary.add(r)
                hfs.delete(checkpoint)
            query = _query(spark, landings, checkpoint, opts, batches, once)
            try:
                _drive(query, batches, stopper, once, every, opts.timeout, t0)
            finally:
                # a signal lets the running micro-batch finish (the stopper cancels it at
                # grace); then the query stops between micro-batches
                while batches.busy.is_set() and query.isActive:
                    if stopper.cancelled:
                        # a cancel reaches only the jobs running at that moment: the run's
                        # next job is cancelled too, until the run gives up
                        spark.sparkContext.cancelAllJobs()
                    time.sleep(0.2)
                stopper.hush(STOPPING)
                query.stop()
            summary.micro_batches = _progress(query)
            failed = query.exception()
            if failed is not None and batches.error is None and not stopper.cancelled:
                why = str(failed).strip().splitlines()[0] if str(failed).strip() else "?"
                raise RuntimeError(f"the stream's query failed: {why}")
            if once and batches.error is None and not stopper.stop.is_set():
                batches.run({})  # the zone is read: close what is idle
        except Exception:
            if not stopper.cancelled:
                raise
        if batches.error is not None:
            if stopper.cancelled:
                summary.abandoned = True
                say("micro-batch cancelled")
            else:
                raise batches.error
        summary.stopped_by = stopper.by
    summary.seconds = time.monotonic() - t0
    try:
        summary.totals, summary.closed_until = _totals(spark, opts.database)
    except Exception as e:  # no table yet (nothing was ever read): say so, do not fail
        say(f"no tables to sum up yet ({type(e).__name__})")
    return summary


__all__ = ["StreamOptions", "StreamSummary", "checkpoint_of", "interval_us", "run_stream"]
