"""Where a batch run's time goes: wall time and Spark jobs per step of the engine, for a
full run and an incremental one (the last of F files arriving), in one warm session.

    .venv/bin/python tests/bench/ingest_profile.py --rows 1000000 --format jsonl

Each step is a function of spark_ingest wrapped with a timer (nested steps are counted in
their callers too; `calls` says how often a step ran); `jobs` are the Spark jobs started
while it ran (from the status store). With `--jobs` every job of the incremental run is
listed with the line that started it and its duration. The session start and the Python
imports are printed apart: the fixed cost of a process. Not collected by pytest.
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
#: step -> [first job, end) of each of its calls: its jobs, to time them
spans: dict[str, list[tuple[int, int]]] = defaultdict(list)
_sc: list[Any] = []


def jobs_started() -> int:
    return int(_sc[0]._jsc.sc().statusStore().jobsList(None).size()) if _sc else 0


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


def show(title: str, dt: float, j0: int) -> None:
    """Per step: wall time, calls, Spark jobs, the time some job of the step was running
    ("in jobs") and the rest ("driver": planning, py4j calls, metastore, file system,
    manifest, Python)."""
    times = job_times(j0)
    whole = busy(times, set(times))
    print(
        f"== {title}: {dt:.1f} s, {jobs_started() - j0} Spark jobs "
        f"(in jobs {whole:.1f} s, driver {dt - whole:.1f} s)",
        flush=True,
    )
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=100)
    ap.add_argument("--format", default="jsonl", choices=("jsonl", "parquet"))
    ap.add_argument("--memory", default="4g")
    ap.add_argument("--jobs", action="store_true", help="list the incremental run's jobs")
    ap.add_argument("--dir", help="work directory (default: a temporary one, removed)")
    args = ap.parse_args()
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="ingest-prof-"))
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        from spark_ingest.synth import write_synthetic

        land = work / f"landing-{args.format}"
        if not land.exists():
            write_synthetic(land, args.rows, files=args.files, devices=50, fmt=args.format)
        for m, a in STEPS:
            wrap(m, a)
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
            },
            metastore_dir=str(work / "catalog"),
        )
        print(f"session start (JVM, Spark, Hive client): {time.perf_counter() - t:.1f} s")
        _sc.append(spark.sparkContext)

        def timed_run(title: str, landing: Path, out: str, db: str, full: bool) -> None:
            j0, t = jobs_started(), time.perf_counter()
            run_batch(spark, str(landing), str(work / out), database=db, full=full)
            show(title, time.perf_counter() - t, j0)

        warm = work / "warm"
        write_synthetic(warm, 20_000, files=2, devices=5)
        timed_run("warm-up (creates the metastore)", warm, "warm-out", "warm", False)
        shutil.rmtree(work / "full", ignore_errors=True)
        timed_run(f"full run, {args.rows:,} rows", land, "full", "full_p", True)
        inc = work / "inc-landing"
        shutil.rmtree(inc, ignore_errors=True)
        inc.mkdir()
        names = sorted(p.name for p in land.iterdir() if p.name.startswith("landing-"))
        for n in names[:-1]:
            os.link(land / n, inc / n)
        shutil.rmtree(work / "inc", ignore_errors=True)
        timed_run(f"base of the incremental ({len(names) - 1} files)", inc, "inc", "inc_p", False)
        os.link(land / names[-1], inc / names[-1])
        j0 = jobs_started()
        timed_run("incremental run (1 new file)", inc, "inc", "inc_p", False)
        if args.jobs:
            list_jobs(j0)
        spark.stop()
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    print(f"process: {time.perf_counter() - T0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
