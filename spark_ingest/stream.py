"""`wsn-ingest stream`: the incremental run, again and again, as files arrive.

Every trigger is one run (engine.py) over the files that arrived since the last: the same
code as `batch`, so the stream and a batch run over the same zone give the same tables, a
late line or a re-uploaded file lands in its windows, and a run's cost follows what it
reads (its new files and the few files that share their windows), not the history.
Exactly once: a run commits atomically (manifest.py); a run stopped by a crash, kill -9 or
a signal leaves nothing the next run does not clean up or finish.

Stopping: SIGTERM or SIGINT (Ctrl-C) lets the running micro-batch finish if it can within
`stop_grace` seconds, else cancels its Spark jobs (the next start cleans up after it); then
the summary is printed and the exit status is 0. A second signal cancels at once.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_ingest.engine import RunResult, run_once
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


class _Stopper:
    """SIGTERM and SIGINT set `stop`; a micro-batch still running `grace` seconds later (or
    at a second signal) has its Spark jobs cancelled. No KeyboardInterrupt is raised inside
    a call into the JVM, which is what left Ctrl-C with a trace and no summary."""

    def __init__(self, spark: SparkSession, grace: float, say: Progress) -> None:
        self.spark = spark
        self.grace = grace
        self.say = say
        self.stop = threading.Event()
        self.cancelled = False
        self.by: str | None = None
        self._timer: threading.Timer | None = None
        self._old: dict[int, Any] = {}

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

    def _on_signal(self, sig: int, _frame: Any) -> None:
        name = signal.Signals(sig).name
        if self.stop.is_set():
            self.say(f"{name} again: cancelling the running micro-batch now")
            self._cancel()
            return
        self.by = name
        self.stop.set()
        self.say(f"{name}: finishing the running micro-batch (at most {self.grace:.0f} s)")
        self._timer = threading.Timer(self.grace, self._cancel)
        self._timer.daemon = True
        self._timer.start()

    def _cancel(self) -> None:
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
    t0 = time.monotonic()
    with _Stopper(spark, opts.stop_grace, say) as stopper:
        while not stopper.stop.is_set():
            started = time.monotonic()
            try:
                r = run_once(spark, landings, out, opts, say)
            except Exception:
                if stopper.cancelled:
                    summary.abandoned = True
                    say("micro-batch cancelled")
                    break
                raise
            summary.add(r)
            if opts.timeout is not None and time.monotonic() - t0 >= opts.timeout:
                break
            if once:
                if not r.files:
                    break
                continue
            stopper.stop.wait(max(0.0, every - (time.monotonic() - started)))
        summary.stopped_by = stopper.by
    summary.seconds = time.monotonic() - t0
    try:
        summary.totals, summary.closed_until = _totals(spark, opts.database)
    except Exception as e:  # no table yet (nothing was ever read): say so, do not fail
        say(f"no tables to sum up yet ({type(e).__name__})")
    return summary


__all__ = ["StreamOptions", "StreamSummary", "interval_us", "run_stream"]
