"""The stream's cost against its history, and its latency, on local[2]. Not collected by
pytest.

    .venv/bin/python tests/bench/stream_bench.py history [--points 10,300,1000,3000]
    .venv/bin/python tests/bench/stream_bench.py latency [--window "10 seconds" ...]

**history**: seconds per micro-batch of `wsn-ingest stream` (Structured Streaming, the
incremental run in foreachBatch) with 10 / 300 / 1,000 / 3,000 landing files consumed
before it. The zone is one site's synthetic files, one per minute of data (the gateway's
default 60 s rotation; `--lines` lines each, in time order). The history is built cheaply
and for real: the stream itself consumes the files up to a point in micro-batches of
`--chunk` files (available-now, `max_files`), then the bench adds one file at a time and
runs the stream over it `--measure` times: each of those is a micro-batch of one file with
N files behind it. What is behind it is exactly what N one-file micro-batches leave, but
for the number of Spark micro-batch ids and engine runs:

- files consumed: N, in the manifest (its compacted state and the run records after it)
  and in the file source's log and seen-files map under `OUT/_stream/`;
- the landing directory: N files, listed by the file source at every trigger;
- the tables: N minutes of data, so N/60 hourly partitions per table in the metastore;
- micro-batches in the offset and commit logs and runs in the manifest: N/chunk instead
  of N; Spark keeps the last `minBatchesToRetain` (100) of its logs and the manifest the
  runs since its last compaction (at most 50), so beyond ~150 micro-batches their number
  changes nothing but those two counters.

The load of a long bench changes, so at each point a **reference** runs the same
micro-batches (the same files) on a fresh `--out`, checkpoint and database whose history
is the 10 files before them; the ratio of the two medians cancels the load. The aim
(issue 24): the ratio within 1.2 at every point.

**latency**: a writer publishes a landing file every `--every` seconds as a gateway would
(lines received up to the moment it publishes), while the stream runs with an interval
trigger; for each file, the time from its landing to the moment the run that read it has
committed and pointed the catalog's `aggregates` partitions at the new rows (readable from
then), and for each window, from its end to that moment for its last line. Printed against
the aim window + watermark + 2 triggers (counted from the window's start). The first
micro-batch creates the metastore, the tables and the checkpoint, once in a stream's life:
the writer starts when it has committed, and nothing before is counted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from spark_ingest.synth import write_synthetic  # noqa: E402

START = datetime(2026, 11, 21, 0, 0, tzinfo=UTC)


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"


def session(work: Path, memory: str) -> Any:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from spark_ingest.session import get_session

    return get_session(
        master="local[2]",
        conf={
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.memory": memory,
        },
        metastore_dir=str(work / "catalog"),
    )


# ---- history ------------------------------------------------------------------------------


class Zone:
    """A landing directory, an --out and a database, fed from the pool of files."""

    def __init__(self, spark: Any, root: Path, database: str) -> None:
        self.spark = spark
        self.landing = root / "landing"
        self.out = root / "out"
        self.database = database
        self.landing.mkdir(parents=True)
        self.files = 0

    def add(self, pool: list[Path]) -> None:
        for p in pool:
            os.link(p, self.landing / p.name)  # the same file, published whole at once
        self.files += len(pool)

    def stream(self, chunk: int | None) -> tuple[float, Any, list[tuple[float, float]]]:
        """One available-now stream; (its wall seconds, summary, [(run start, end)])."""
        import spark_ingest.stream as st
        from spark_ingest.stream import StreamOptions, run_stream

        runs: list[tuple[float, float]] = []
        real = st._Batches.run

        def timed(self: Any, only: dict[str, int] | None) -> Any:
            t = time.perf_counter()
            try:
                return real(self, only)
            finally:
                if only:
                    runs.append((t, time.perf_counter()))

        st._Batches.run = timed  # type: ignore[method-assign]
        try:
            t0 = time.perf_counter()
            opts = StreamOptions(max_files=chunk, database=self.database, retain="0 seconds")
            s = run_stream(self.spark, str(self.landing), str(self.out), opts)
            return time.perf_counter() - t0, s, runs
        finally:
            st._Batches.run = real  # type: ignore[method-assign]


def sizes_of(out: Path) -> dict[str, int]:
    """What lies under --out's _ingest/ and _stream/ (bytes, and the source log's size)."""

    def du(p: Path) -> int:
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.exists() else 0

    return {
        "manifest": du(out / "_ingest"),
        "checkpoint": du(out / "_stream"),
        "source_log": du(out / "_stream" / "sources"),
    }


def one(zone: Zone, f: Path) -> tuple[float, float, float]:
    """(trigger s, run s, stream call s) of a micro-batch of the one file `f`."""
    zone.add([f])
    wall, s, runs = zone.stream(None)
    mb = [b for b in s.micro_batches if b["files"]]
    trig = mb[-1]["ms"].get("triggerExecution", 0) / 1000 if mb else float("nan")
    run = runs[-1][1] - runs[-1][0] if runs else float("nan")
    return trig, run, wall


def history(args: argparse.Namespace) -> int:
    points = sorted(int(p) for p in args.points.split(","))
    work = Path(tempfile.mkdtemp(prefix="stream-hist-", dir=args.tmp))
    try:
        need = points[-1] + args.measure * len(points) + 1
        per_tick = args.devices * 3
        ticks = max(1, args.lines // per_tick)
        t = time.perf_counter()
        pool = write_synthetic(
            work / "pool", need * ticks * per_tick, files=need, devices=args.devices,
            start=START, step_s=60.0 / ticks,
        )  # fmt: skip
        print(
            f"pool: {len(pool)} landing files of {ticks * per_tick} lines (one minute of "
            f"{args.devices} devices each) in {time.perf_counter() - t:.1f} s"
        )
        spark = session(work, args.memory)
        warm = Zone(spark, work / "warm", "warm")  # the JVM's first runs are slower
        warm.add(pool[:2])
        warm.stream(None)
        one(warm, pool[2])
        hist = Zone(spark, work / "hist", "hist")
        print(f"load at the start: {load()}")
        print(
            "\nprior files | micro-batch of 1 file: trigger / run / call (s), median of "
            f"{args.measure} | reference (10 prior) | ratio trigger, run | load | "
            "manifest, checkpoint, source log (KB)"
        )
        rows = []
        for n, point in enumerate(points):
            t = time.perf_counter()
            if point > hist.files:
                hist.add(pool[hist.files : point])
                hist.stream(args.chunk)
            built = time.perf_counter() - t
            sz = sizes_of(hist.out)
            prior = hist.files
            files = pool[hist.files : hist.files + args.measure]
            ref = Zone(spark, work / f"ref{n}", f"ref{n}")
            ref.add(pool[prior - 10 : prior])
            ref.stream(None)
            got, base = [], []
            for f in files:  # alternated, so a change of load hits both alike
                got.append(one(hist, f))
                base.append(one(ref, f))
            m = [statistics.median(x) for x in zip(*got, strict=True)]
            r = [statistics.median(x) for x in zip(*base, strict=True)]
            rows.append((prior, m, r))
            print(
                f"{prior:>11,} | {m[0]:6.2f} / {m[1]:6.2f} / {m[2]:6.2f} "
                f"| {r[0]:6.2f} / {r[1]:6.2f} / {r[2]:6.2f} "
                f"| {m[0] / r[0]:.2f}, {m[1] / r[1]:.2f} | {load()} "
                f"| {sz['manifest'] // 1024}, {sz['checkpoint'] // 1024}, "
                f"{sz['source_log'] // 1024}  (history built in {built:.0f} s)",
                flush=True,
            )
            for i, (a, b) in enumerate(zip(got, base, strict=True)):
                print(f"    file {prior + i}: " + " ".join(f"{x:6.2f}" for x in (*a, *b)))
            shutil.rmtree(ref.landing.parent, ignore_errors=True)
        spark.stop()
        ratios = [m[0] / r[0] for _, m, r in rows]
        print(
            f"\ntrigger ratio from {rows[0][0]} to {rows[-1][0]} prior files: "
            + ", ".join(f"{x:.2f}" for x in ratios)
            + f"; aim: each within 1.2 ({'held' if all(x <= 1.2 for x in ratios) else 'not held'})"
        )
        print(f"load at the end: {load()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


# ---- latency ------------------------------------------------------------------------------


def _lines(t0: float, t1: float, devices: int, step: float, seq: list[int]) -> str:
    """Readings of `devices` devices every `step` s received in [t0, t1) (wall clock), as
    the gateway lands them (synth.Message)."""
    from spark_ingest.synth import GATEWAY_ID, Message, producer_of

    out = []
    k = int(t0 // step) + (1 if t0 % step else 0)
    while k * step < t1:
        at = datetime.fromtimestamp(k * step, UTC)
        for d in range(devices):
            seq[0] += 1
            dev = f"dev-{d:03d}"
            fields = {"device": dev, "value": f"{20 + d / 10:.2f}", "unit": "Cel"}
            m = Message(
                id=f"{seq[0]:032x}", received_at=at, producer=producer_of(dev),
                topic_path=f"{dev}/temperature", fields=fields, device_id=dev,
                gateway_id=GATEWAY_ID, event_time=at,
            )  # fmt: skip
            out.append(m.to_json())
        k += 1
    return "".join(x + "\n" for x in out)


def latency(args: argparse.Namespace) -> int:
    from spark_ingest.options import interval_us
    from spark_ingest.synth import landing_name, publish

    work = Path(tempfile.mkdtemp(prefix="stream-lat-", dir=args.tmp))
    try:
        spark = session(work, args.memory)
        import spark_ingest.stream as st
        from spark_ingest.stream import StreamOptions, run_stream

        land, out = work / "landing", work / "out"
        land.mkdir()
        window = interval_us(args.window) / 1e6
        trigger = interval_us(args.trigger) / 1e6
        watermark = interval_us(args.watermark) / 1e6
        landed: dict[str, float] = {}  # file name -> wall time it was published
        spans: dict[str, tuple[float, float]] = {}  # file name -> its lines' [first, last]
        done: dict[str, float] = {}  # file name -> when the run that read it returned
        real = st._Batches.run

        # the first micro-batch creates the metastore, the tables and the checkpoint: the
        # clock starts when it has committed, and the writer with it (a deployed stream
        # pays that once, when it is first started)
        warm = threading.Event()
        started: list[float] = []

        def timed(self: Any, only: dict[str, int] | None) -> Any:
            r = real(self, only)
            t = time.time()
            for f in only or []:
                done.setdefault(f.rsplit("/", 1)[-1], t)
            if not warm.is_set():
                started.append(t)
                warm.set()
            return r

        st._Batches.run = timed  # type: ignore[method-assign]
        stop = threading.Event()
        seq = [0]

        def writer() -> None:
            while not warm.wait(0.5):
                if stop.is_set():
                    return
            last = time.time()
            n = 0
            while not stop.wait(max(0.0, last + args.every - time.time())):
                now = time.time()
                body = _lines(last, now, args.devices, args.step, seq)
                n += 1
                name = landing_name(datetime.fromtimestamp(now, UTC), n)
                if body:
                    publish(land, name, body.encode())
                    landed[name] = time.time()
                    spans[name] = (last, now)
                last = now

        # a first file, so the tables exist before the clock starts
        now = time.time()
        first = _lines(now - 60, now - 50, args.devices, args.step, seq)
        publish(land, landing_name(datetime.fromtimestamp(now - 60, UTC), 0), first.encode())
        opts = StreamOptions(
            trigger=args.trigger, window=args.window, watermark=args.watermark,
            timeout=args.seconds + args.warmup, database="lat",
        )  # fmt: skip
        print(
            f"window {args.window}, watermark {args.watermark}, trigger {args.trigger}; a "
            f"file every {args.every} s, {args.devices} devices every {args.step} s; "
            f"{args.seconds:.0f} s after the first micro-batch (given {args.warmup:.0f} s); "
            f"load at the start: {load()}",
            flush=True,
        )
        th = threading.Thread(target=writer, daemon=True)
        begun = time.time()
        th.start()
        try:
            s = run_stream(spark, str(land), str(out), opts)
        finally:
            stop.set()
            th.join()
            st._Batches.run = real  # type: ignore[method-assign]
        print(f"{s.runs} runs, {s.files} files, {s.lines} lines; load at the end: {load()}")
        if not started:
            print("no micro-batch committed within --seconds + --warmup: nothing measured")
            return 1
        t0 = started[0]
        print(
            f"first micro-batch (metastore, tables, checkpoint) committed after "
            f"{t0 - begun:.1f} s; measured from then (not counted below)"
        )
        per_file = [done[f] - landed[f] for f in landed if f in done]
        left = [f for f in landed if f not in done]
        # the micro-batches after the first, the ones the writer's files are in
        mbs = [b["ms"].get("triggerExecution", 0) / 1000 for b in s.micro_batches if b["batch"]]
        if mbs:
            print(
                f"micro-batches with files: {len(mbs)}, trigger execution median "
                f"{statistics.median(mbs):.1f} s, max {max(mbs):.1f} s"
            )
        if per_file:
            q = statistics.quantiles(per_file, n=10) if len(per_file) > 2 else per_file
            print(
                f"landing -> readable, per file ({len(per_file)} files, {len(left)} not read "
                f"before the end): median {statistics.median(per_file):.1f} s, "
                f"p90 {q[-1]:.1f} s, max {max(per_file):.1f} s"
            )
        # per window: from its end to the moment its last line's file was read
        wins: dict[float, float] = {}
        for f, (a, b) in spans.items():
            if f not in done:
                continue
            w = a - a % window
            while w < b:
                wins[w] = max(wins.get(w, 0.0), done[f])
                w += window
        end = begun + args.seconds + args.warmup - 30  # windows whose files had time to be read
        lat = sorted(wins[w] - (w + window) for w in wins if w >= t0 and w + window <= end)
        aim = window + watermark + 2 * trigger
        if lat:
            print(
                f"window end -> its row complete and readable ({len(lat)} windows): median "
                f"{statistics.median(lat):.1f} s, max {max(lat):.1f} s; from the window's "
                f"start: median {statistics.median(lat) + window:.1f} s, max "
                f"{max(lat) + window:.1f} s against the aim window + watermark + 2 triggers "
                f"= {aim:.0f} s ({'held' if max(lat) + window <= aim else 'not held'} at the max)"
            )
        n = spark.table("lat.aggregates").count()
        print(f"aggregates rows in the catalogued table at the end: {n}")
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memory", default="2g", help="spark.driver.memory")
    ap.add_argument("--tmp", default=None, help="where the work directory goes")
    sub = ap.add_subparsers(dest="what", required=True)
    h = sub.add_parser("history")
    h.add_argument("--points", default="10,300,1000,3000")
    h.add_argument("--lines", type=int, default=1000, help="lines per landing file")
    h.add_argument("--devices", type=int, default=50)
    h.add_argument("--chunk", type=int, default=500, help="files per history micro-batch")
    h.add_argument("--measure", type=int, default=3, help="micro-batches timed per point")
    la = sub.add_parser("latency")
    la.add_argument("--window", default="1 minute")
    la.add_argument("--watermark", default="5 minutes")
    la.add_argument("--trigger", default="10 seconds")
    la.add_argument("--every", type=float, default=10.0, help="a landing file every N s")
    la.add_argument("--devices", type=int, default=20)
    la.add_argument("--step", type=float, default=1.0, help="each device every N s")
    la.add_argument("--seconds", type=float, default=300.0, help="how long the stream runs")
    la.add_argument(
        "--warmup", type=float, default=90.0,
        help="seconds added to --seconds for the first micro-batch (not measured)",
    )  # fmt: skip
    args = ap.parse_args()
    return history(args) if args.what == "history" else latency(args)


if __name__ == "__main__":
    sys.exit(main())
