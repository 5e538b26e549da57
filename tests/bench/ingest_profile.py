"""Where a batch run's time goes: wall time and Spark jobs per step of the engine, for a
full run and an incremental one (the last of F files arriving), in one warm session.

    .venv/bin/python tests/bench/ingest_profile.py --rows 1000000 --format jsonl
    .venv/bin/python tests/bench/ingest_profile.py --history 10,3000 --jobs
    .venv/bin/python tests/bench/ingest_profile.py --rows 1000000 --repeat 4

With `--history N,M,..` the zone is one site's files of one minute each (`--lines` lines, as
`stream_bench.py history` makes them): per point, a run consumes N files, then `--measure`
incremental runs of one new file each are profiled: a stream micro-batch's run with N files
behind it (the points alternate between their runs, so a change of load hits each alike).

Each step is a function of spark_ingest wrapped with a timer (nested steps are counted in
their callers too; `calls` says how often a step ran); `jobs` are the Spark jobs started
while it ran (from the status store). With `--jobs` every job of the incremental run is
listed with the line that started it and its duration. The session start and the Python
imports are printed apart: the fixed cost of a process. Each run's CPU time is printed too
(Linux): the JVM's, of it its JIT compiler threads' and Spark's task threads' (lower
bounds), and Python's; with `--repeat N` the last N files arrive one at a time, an
incremental run each, so the runs after the first show the cost in a session whose JIT has
seen the incremental path. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

T0 = time.perf_counter()
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

STEPS = [
    ("engine", "Run.recover"),
    ("catalog", "Catalog.ensure"),
    ("engine", "resolve"),
    ("engine", "Run._read"),
    ("keep", "materialize"),
    ("consume", "entries"),
    ("engine", "compute"),
    ("tables", "losers"),
    ("stored", "Stored.dq_context"),
    ("quality", "from_messages"),
    ("sites", "merged"),
    ("stored", "Stored.camera_states"),
    ("stored", "Stored.replaced_dq"),
    ("devices", "merge"),
    ("stored", "Stored.whole"),
    ("engine", "Run._write"),
    ("manifest", "Manifest.load"),
    ("manifest", "Manifest.commit"),
    ("engine", "Run.publish"),
    ("catalog", "Catalog.apply"),
    ("catalog", "Catalog.set_config"),
    ("batch", "device_lines"),
]

stats: dict[str, list[float]] = defaultdict(lambda: [0.0, 0, 0])
#: SQL statements (the metastore's: DDL) run through SparkSession.sql, by their first words
statements: list[str] = []
#: step -> [first job, end) of each of its calls: its jobs, to time them
spans: dict[str, list[tuple[int, int]]] = defaultdict(list)
_sc: list[Any] = []


def jobs_started() -> int:
    return int(_sc[0]._jsc.sc().statusStore().jobsList(None).size()) if _sc else 0


def _ticks(stat: str) -> float:
    """utime + stime of a /proc/<pid>[/task/<tid>]/stat line, in seconds."""
    f = stat.rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def cpu() -> dict[str, float]:
    """CPU seconds so far (Linux /proc): "python" (this process), "jvm" (the JVM), and per
    JVM thread, "jit:<tid>" for its JIT compiler threads ("C1/C2 CompilerThread") and
    "tasks:<tid>" for Spark's task threads. See `cpu_spent`."""
    out = {"python": _ticks(Path("/proc/self/stat").read_text())}
    jvm = Path(f"/proc/{_jvm_pid[0]}") if _jvm_pid else None
    if jvm is None or not jvm.exists():
        return out
    out["jvm"] = _ticks((jvm / "stat").read_text())
    for t in (jvm / "task").iterdir():
        try:
            name, stat = (t / "comm").read_text(), (t / "stat").read_text()
        except OSError:  # the thread ended
            continue
        if "CompilerThre" in name:
            out[f"jit:{t.name}"] = _ticks(stat)
        elif name.startswith("Executor task"):
            out[f"tasks:{t.name}"] = _ticks(stat)
    return out


def cpu_spent(c0: dict[str, float], c1: dict[str, float]) -> dict[str, float]:
    """CPU seconds between two `cpu()` readings, the threads summed by kind. A thread that
    ended in between (Spark's task threads end after a minute idle) is not counted: the
    kinds are lower bounds; "python" and "jvm" are exact."""
    out = {"python": c1["python"] - c0["python"], "jvm": c1["jvm"] - c0["jvm"]}
    for kind in ("jit", "tasks"):
        out[kind] = sum(v - c0.get(k, 0.0) for k, v in c1.items() if k.startswith(f"{kind}:"))
    return out


_jvm_pid: list[int] = []


def wrap(modname: str, attr: str) -> None:
    mod = importlib.import_module(f"spark_ingest.{modname}")
    owner: Any = mod
    *path, name = attr.split(".")
    for p in path:
        owner = getattr(owner, p)
    fn = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    static = isinstance(fn, staticmethod)
    real = fn.__func__ if static else fn
    label = f"{modname}.{attr}"

    @functools.wraps(real)
    def timed(*a: Any, **k: Any) -> Any:
        j, t = jobs_started(), time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            s = stats[label]
            s[0] += time.perf_counter() - t
            s[1] += 1
            s[2] += jobs_started() - j
            spans[label].append((j, jobs_started()))

    setattr(owner, name, staticmethod(timed) if static else timed)
    if not path:  # modules that imported the function by name
        for m in list(sys.modules.values()):
            if getattr(m, "__name__", "").startswith("spark_ingest.") and (
                getattr(m, name, None) is real
            ):
                setattr(m, name, timed)


def count_sql() -> None:
    from pyspark.sql import SparkSession

    real = SparkSession.sql

    def sql(self: Any, query: str, *a: Any, **k: Any) -> Any:
        words = query.split()
        statements.append(" ".join(words[:2] + words[3:4]))  # not the table's name
        return real(self, query, *a, **k)

    SparkSession.sql = sql  # type: ignore[method-assign]


def job_times(j0: int) -> dict[int, tuple[float, float]]:
    """job id -> (submitted, completed) in seconds, of the jobs from `j0` on."""
    jobs = _sc[0]._jsc.sc().statusStore().jobsList(None)
    out = {}
    for i in range(jobs.size()):
        jd = jobs.apply(i)
        sub, end = jd.submissionTime(), jd.completionTime()
        if int(jd.jobId()) >= j0 and sub.isDefined() and end.isDefined():
            out[int(jd.jobId())] = (sub.get().getTime() / 1000, end.get().getTime() / 1000)
    return out


def busy(times: dict[int, tuple[float, float]], ids: set[int]) -> float:
    """Seconds during which at least one of the jobs `ids` ran (jobs side by side once)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(times[i] for i in ids if i in times):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def show(title: str, dt: float, j0: int, c0: dict[str, float] | None = None) -> None:
    """Per step: wall time, calls, Spark jobs, the time some job of the step was running
    ("in jobs") and the rest ("driver": planning, py4j calls, metastore, file system,
    manifest, Python)."""
    times = job_times(j0)
    whole = busy(times, set(times))
    kinds: dict[str, int] = defaultdict(int)
    for st in statements:
        kinds[st] += 1
    print(
        f"== {title}: {dt:.1f} s, {jobs_started() - j0} Spark jobs "
        f"(in jobs {whole:.1f} s, driver {dt - whole:.1f} s); SQL statements "
        f"{len(statements)}: " + ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items())),
        flush=True,
    )
    if c0 is not None and "jvm" in c0:
        d = cpu_spent(c0, cpu())
        print(
            f"   CPU: JVM {d['jvm']:.1f} s (of it JIT compiler threads {d['jit']:.1f} s, Spark "
            f"tasks {d['tasks']:.1f} s), Python {d['python']:.1f} s; the machine's "
            f"{os.cpu_count()} cores had {(os.cpu_count() or 1) * dt:.1f} s",
            flush=True,
        )
    statements.clear()
    for k, (s, n, j) in sorted(stats.items(), key=lambda x: -x[1][0]):
        if s >= 0.05:
            ids = {i for a, b in spans[k] for i in range(a, b)}
            b = busy(times, ids)
            print(
                f"   {k:<28} {s:7.2f} s  calls {int(n):2d}  jobs {int(j):3d}"
                f"  in jobs {b:6.2f} s  driver {s - b:6.2f} s"
            )
    stats.clear()
    spans.clear()


def list_jobs(j0: int) -> None:
    jobs = _sc[0]._jsc.sc().statusStore().jobsList(None)
    rows = []
    for i in range(jobs.size()):
        jd = jobs.apply(i)
        if int(jd.jobId()) < j0:
            continue
        sub, end = jd.submissionTime(), jd.completionTime()
        dt = (end.get().getTime() - sub.get().getTime()) / 1000 if end.isDefined() else -1.0
        rows.append((int(jd.jobId()), dt, str(jd.name())))
    for jid, dt, name in sorted(rows):
        print(f"   job {jid:4d} {dt:6.2f} s  {name}")


def batch(args: argparse.Namespace, work: Path, timed_run: Any, write_synthetic: Any) -> None:
    """A full run of `--rows` rows, then an incremental one of the last of `--files` files."""
    land = work / f"landing-{args.format}"
    if not land.exists():
        write_synthetic(land, args.rows, files=args.files, devices=50, fmt=args.format)
    shutil.rmtree(work / "full", ignore_errors=True)
    timed_run(f"full run, {args.rows:,} rows", land, "full", "full_p", True)
    inc = work / "inc-landing"
    shutil.rmtree(inc, ignore_errors=True)
    inc.mkdir()
    names = sorted(p.name for p in land.iterdir() if p.name.startswith("landing-"))
    held = max(args.repeat, 1)
    for n in names[:-held]:
        os.link(land / n, inc / n)
    shutil.rmtree(work / "inc", ignore_errors=True)
    timed_run(f"base of the incremental ({len(names) - held} files)", inc, "inc", "inc_p", False)
    for k in range(held):
        name = names[len(names) - held + k]
        os.link(land / name, inc / name)
        j0 = jobs_started()
        nth = f", {k + 1} of {held}" if held > 1 else ""
        timed_run(f"incremental run (1 new file{nth})", inc, "inc", "inc_p", False)
    if args.jobs:
        list_jobs(j0)


def history(args: argparse.Namespace, work: Path, timed_run: Any) -> None:
    """Per point N: a zone of N one-minute files consumed, then `--measure` incremental
    runs of one new file each, the points taking turns."""
    from datetime import UTC, datetime

    from spark_ingest.synth import write_synthetic

    points = sorted(int(p) for p in args.history.split(","))
    per_tick = 50 * 3
    ticks = max(1, args.lines // per_tick)
    need = points[-1] + args.measure
    pool = write_synthetic(
        work / "pool", need * ticks * per_tick, files=need, devices=50,
        start=datetime(2026, 11, 21, tzinfo=UTC), step_s=60.0 / ticks,
    )  # fmt: skip
    zones = {}
    for n in points:
        land = work / f"hist{n}"
        land.mkdir()
        for p in pool[:n]:
            os.link(p, land / p.name)
        timed_run(f"history of {n} files (one run)", land, f"out{n}", f"h{n}", False)
        zones[n] = land
    for i in range(args.measure):
        for n in points:
            p = pool[n + i]  # the minute after its history
            os.link(p, zones[n] / p.name)
            j0 = jobs_started()
            timed_run(f"{n + i} prior files: incremental run of 1 file", zones[n], f"out{n}",
                      f"h{n}", False)  # fmt: skip
            if args.jobs:
                list_jobs(j0)


def _is_child_jvm(p: Path) -> bool:
    """Whether /proc entry `p` is a java process started by this one (PySpark's JVM)."""
    try:
        stat = (p / "stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid() and "java" in stat
    except (OSError, ValueError, IndexError):
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=100)
    ap.add_argument("--format", default="jsonl", choices=("jsonl", "parquet"))
    ap.add_argument("--memory", default="4g")
    ap.add_argument("--jobs", action="store_true", help="list the incremental run's jobs")
    ap.add_argument("--dir", help="work directory (default: a temporary one, removed)")
    ap.add_argument("--history", help="N,M,..: incremental runs with N, M,... files behind")
    ap.add_argument("--lines", type=int, default=300, help="lines per file (--history)")
    ap.add_argument("--measure", type=int, default=2, help="runs per point (--history)")
    ap.add_argument(
        "--repeat", type=int, default=1,
        help="incremental runs of one new file each, in turn (the last N files held back)",
    )  # fmt: skip
    ap.add_argument(
        "--conf", action="append", default=[], metavar="K=V",
        help="a Spark setting for the session (repeatable)",
    )  # fmt: skip
    args = ap.parse_args()
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="ingest-prof-"))
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        from spark_ingest.synth import write_synthetic

        for m, a in STEPS:
            wrap(m, a)
        count_sql()
        print(f"python imports: {time.perf_counter() - T0:.1f} s", flush=True)
        from spark_ingest.batch import run_batch
        from spark_ingest.session import get_session

        t = time.perf_counter()
        spark = get_session(
            master="local[2]",
            conf={
                "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false",
                "spark.ui.retainedJobs": "100000",
                "spark.driver.memory": args.memory,
                "spark.driver.extraJavaOptions": "-XX:+UseParallelGC",
                **dict(c.split("=", 1) for c in args.conf),
            },
            metastore_dir=str(work / "catalog"),
        )
        print(f"session start (JVM, Spark, Hive client): {time.perf_counter() - t:.1f} s")
        _sc.append(spark.sparkContext)
        # the JVM PySpark started (its gateway's process), for the CPU accounting
        _jvm_pid.extend(
            int(p.name) for p in Path("/proc").iterdir()
            if p.name.isdigit() and _is_child_jvm(p)
        )  # fmt: skip

        def timed_run(title: str, landing: Path, out: str, db: str, full: bool) -> None:
            c0, j0, t = cpu(), jobs_started(), time.perf_counter()
            run_batch(spark, str(landing), str(work / out), database=db, full=full)
            show(title, time.perf_counter() - t, j0, c0)

        warm = work / "warm"
        write_synthetic(warm, 20_000, files=2, devices=5)
        timed_run("warm-up (creates the metastore)", warm, "warm-out", "warm", False)
        if args.history:
            history(args, work, timed_run)
        else:
            batch(args, work, timed_run, write_synthetic)
        spark.stop()
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    print(f"process: {time.perf_counter() - T0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
