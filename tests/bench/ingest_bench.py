"""Ingest throughput: landing rows/s of the Spark job on local[2] next to the same aggregation
in DuckDB (2 threads), and what an incremental run costs against a full one, in one run.

    .venv/bin/python tests/bench/ingest_bench.py                 # 1,000,000 rows, 100 files
    .venv/bin/python tests/bench/ingest_bench.py --rows 200000   # quick

Landing files are written by spark_ingest.synth as JSON lines (the contract) and as the
Parquet landing variant. Rows measured, per format:

- `full run`: `run_batch(full=True)` into an empty --out: every table, the manifest, the
  catalog (the whole job);
- `aggregates`: the DuckDB query's work done the way the job does it (parse, partition by
  device, measurements, window aggregates, written as Parquet by date and hour);
- `incremental`: the zone without its last file is read first (not timed), then the last
  file (1 % of the rows with 100 files) arrives and one more run is timed: its cost as a
  share of the full run's;
- `duckdb`: the same aggregation (measured fields, unit, sum, last by (time, id)) in DuckDB;
- `plain SQL`: DuckDB's query translated to Spark SQL, in the same warm session: Spark's own
  floor for this aggregation on this machine, with none of the job's classification,
  quarantine, per-device partitioning or order-independent sums (not a way the job could
  run, a bound on what any Spark job here can reach; the better of two runs).

Two ways of timing the Spark job, each per format:

- within a warm session (`run_batch` in a session that has run once already, as a
  scheduled job on a long-running cluster session sees it): the rows above;
- the whole job as a user runs it (`--process`, on by default): `python -m spark_ingest
  batch ... --master local[2]` from process start to exit, JVM, session and Hive client
  included, into an `--out` whose metastore exists (a first run's metastore creation is
  printed apart); a full rebuild, then an incremental run after the last file arrives.
  The processes use the JVM's class archive of the user's cache (spark_ingest/classes.py);
  without one, the first process records it and pays for that.

The incremental ratio is given both ways. DuckDB's figure is from the same sitting. Not
collected by pytest.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from spark_ingest.synth import write_synthetic  # noqa: E402

DUCKDB_SQL = """
COPY (
  WITH msgs AS (
    SELECT id, CAST(received_at AS TIMESTAMPTZ) AS ts, device_id, producer, topic_path, fields
    FROM {source}
    WHERE id IS NOT NULL AND id <> '' AND received_at IS NOT NULL AND fields IS NOT NULL
  ), m AS (
    SELECT id, ts, coalesce('device:' || device_id, 'producer:' || producer) AS device_key,
           producer, topic_path, e.key AS field, e.value AS v, TRY_CAST(e.value AS DOUBLE) AS x,
           fields['unit'] AS unit
    FROM (SELECT *, unnest(map_entries(fields)) AS e FROM msgs)
    WHERE e.key NOT IN ('device', 'unit', 'time')
  )
  SELECT time_bucket(INTERVAL '1 minute', ts) AS window_start,
         time_bucket(INTERVAL '1 minute', ts) + INTERVAL '1 minute' AS window_end,
         device_key, topic_path, field, arg_max(unit, (ts, id)) AS unit,
         count(*) AS count, count(x) AS numeric_count, sum(x) AS sum, min(x) AS min,
         max(x) AS max, avg(x) AS mean, arg_max(x, (ts, id)) AS last,
         arg_max(v, (ts, id)) AS last_str, max(ts) AS last_at,
         CAST(time_bucket(INTERVAL '1 minute', ts) AS DATE) AS date,
         hour(time_bucket(INTERVAL '1 minute', ts)) AS hour
  FROM m GROUP BY ALL
) TO '{out}' (FORMAT parquet, PARTITION_BY (date, hour), OVERWRITE_OR_IGNORE)
"""

JSON_SOURCE = (
    "read_json('{landing}/landing-*.jsonl', format='newline_delimited', ignore_errors=true, "
    "columns={{id: 'VARCHAR', received_at: 'VARCHAR', device_id: 'VARCHAR', "
    "producer: 'VARCHAR', topic_path: 'VARCHAR', fields: 'MAP(VARCHAR, VARCHAR)'}})"
)
PARQUET_SOURCE = "read_parquet('{landing}/landing-*.parquet')"


# DuckDB's query in Spark SQL: the same filters, fields, aggregates and (date, hour) layout
PLAIN_SQL = """
WITH msgs AS (
  SELECT id, CAST(received_at AS TIMESTAMP) AS ts, device_id, producer, topic_path, fields
  FROM landing
  WHERE id IS NOT NULL AND id <> '' AND received_at IS NOT NULL AND fields IS NOT NULL
), m AS (
  SELECT id, ts, coalesce('device:' || device_id, 'producer:' || producer) AS device_key,
         topic_path, e.key AS field, e.value AS v, try_cast(e.value AS DOUBLE) AS x,
         fields['unit'] AS unit
  FROM msgs LATERAL VIEW explode(fields) e AS key, value
  WHERE e.key NOT IN ('device', 'unit', 'time')
), b AS (SELECT *, date_trunc('minute', ts) AS w FROM m)
SELECT w AS window_start, w + INTERVAL 1 MINUTE AS window_end, device_key, topic_path, field,
       max_by(unit, struct(ts, id)) AS unit, count(*) AS count, count(x) AS numeric_count,
       sum(x) AS sum, min(x) AS min, max(x) AS max, avg(x) AS mean,
       max_by(x, struct(ts, id)) AS last, max_by(v, struct(ts, id)) AS last_str,
       max(ts) AS last_at, CAST(w AS DATE) AS date, hour(w) AS hour
FROM b GROUP BY w, device_key, topic_path, field
"""
PLAIN_JSON_SCHEMA = (
    "id STRING, received_at STRING, device_id STRING, producer STRING, topic_path STRING, "
    "fields MAP<STRING, STRING>"
)


def spark_plain_sql(spark: Any, landing: Path, out: Path, fmt: str) -> int:
    """DuckDB's query as Spark SQL over the landing files (see PLAIN_SQL)."""
    # the directory and a file-name filter, not a glob: Spark looks for a file sink's
    # metadata at a glob path and warns with a trace that there is none
    reader = spark.read.option("pathGlobFilter", f"landing-*.{fmt}")
    if fmt == "jsonl":
        src = reader.schema(PLAIN_JSON_SCHEMA).json(str(landing))
    else:
        src = reader.parquet(str(landing))
    src.createOrReplaceTempView("landing")
    spark.sql(PLAIN_SQL).write.mode("overwrite").partitionBy("date", "hour").parquet(str(out))
    return int(spark.read.parquet(str(out)).count())


def duckdb_run(landing: Path, out: Path, fmt: str) -> tuple[float, int]:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads=2")
    con.execute("SET TimeZone='UTC'")
    src = (JSON_SOURCE if fmt == "jsonl" else PARQUET_SOURCE).format(landing=landing)
    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    con.execute(DUCKDB_SQL.format(source=src, out=out))
    dt = time.perf_counter() - t
    n = con.execute(f"SELECT count(*) FROM read_parquet('{out}/*/*/*.parquet')").fetchone()
    return dt, int(n[0]) if n else 0


def spark_session(memory: str, work: Path) -> Any:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from spark_ingest.session import get_session

    return get_session(
        master="local[2]",
        conf={
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.memory": memory,
            "spark.driver.extraJavaOptions": "-XX:+UseParallelGC",
        },
        metastore_dir=str(work / "catalog"),
    )


def spark_aggregates_only(spark: Any, landing: Path, out: Path) -> int:
    """The DuckDB query's work in Spark, the way a run does it: parse, partition by device,
    measurements, window aggregates, written by date and hour (no other table, no
    duplicates check, no catalog)."""
    from pyspark.sql import functions as F

    from spark_ingest.aggregate import measurements, window_aggregates
    from spark_ingest.consume import file_map, with_file_id
    from spark_ingest.engine import partitions_for
    from spark_ingest.hfs import HFS
    from spark_ingest.inputs import resolve
    from spark_ingest.landing import read_classified

    hfs = HFS(spark)
    inputs = resolve(hfs, [str(landing)])
    files = list(inputs.files)
    fmap = file_map(spark, hfs, files)
    lines = read_classified(spark, inputs.jsonl, inputs.parquet, 60_000_000)
    msgs = with_file_id(lines, fmap).where(F.col("reason").isNull())
    parts = partitions_for(spark, inputs.sizes_by_name())
    msgs = msgs.repartition(parts, "key")
    aggs = window_aggregates(measurements(msgs), 60_000_000, fmap)
    aggs.write.mode("overwrite").partitionBy("date", "hour").parquet(str(out))
    return int(spark.read.parquet(str(out)).count())


def cli_run(landing: Path, out: Path, database: str, memory: str, full: bool) -> float:
    """Seconds of one `python -m spark_ingest batch` process, start to exit (as a user runs
    it); fails on a non-zero exit."""
    cmd = [
        sys.executable, "-m", "spark_ingest", "batch", "--landing", str(landing),
        "--out", str(out), "--database", database, "--master", "local[2]",
        "--conf", f"spark.driver.memory={memory}", "--conf", "spark.ui.enabled=false",
        "--json", *(["--full"] if full else []),
    ]  # fmt: skip
    env = {**os.environ, "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
    t = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr[-3000:]}")
    return dt


def process_runs(
    fmt: str, land: Path, work: Path, memory: str
) -> tuple[float, float, float, float]:
    """(first run creating the metastore, full rebuild, base incremental, incremental after
    the last file): each a whole `wsn-ingest batch` process."""
    inc = work / f"landing-proc-{fmt}"
    shutil.rmtree(inc, ignore_errors=True)
    inc.mkdir()
    names = sorted(p.name for p in land.iterdir() if p.name.startswith("landing-"))
    for name in names:
        os.link(land / name, inc / name)
    out = work / f"proc-{fmt}"
    shutil.rmtree(out, ignore_errors=True)
    first = cli_run(inc, out, f"proc_{fmt}", memory, full=True)
    full = cli_run(inc, out, f"proc_{fmt}", memory, full=True)
    # the zone without its last file, then the last file: an incremental run of 1 %
    (inc / names[-1]).unlink()
    base = cli_run(inc, out, f"proc_{fmt}", memory, full=True)
    os.link(land / names[-1], inc / names[-1])
    one = cli_run(inc, out, f"proc_{fmt}", memory, full=False)
    return first, full, base, one


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=100)
    ap.add_argument("--devices", type=int, default=50)
    ap.add_argument("--formats", default="jsonl,parquet", help="jsonl,parquet")
    ap.add_argument("--memory", default="4g", help="spark.driver.memory")
    ap.add_argument("--dir", help="work directory (default: a temporary one, removed)")
    ap.add_argument(
        "--no-process",
        action="store_true",
        help="skip the whole-job runs (a `wsn-ingest batch` process each)",
    )
    args = ap.parse_args()
    formats = [f for f in args.formats.split(",") if f]
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="ingest-bench-"))
    results: list[tuple[str, str, float, int]] = []
    incremental: dict[str, tuple[float, float, int]] = {}
    process: dict[str, tuple[float, float, float, float]] = {}
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    try:
        lands: dict[str, Path] = {}
        for fmt in formats:
            land = work / f"landing-{fmt}"
            shutil.rmtree(land, ignore_errors=True)
            t = time.perf_counter()
            files = write_synthetic(land, args.rows, files=args.files, devices=args.devices,
                                    fmt=fmt)  # fmt: skip
            size = sum(f.stat().st_size for f in files)
            print(
                f"generated {args.rows:,} rows as {fmt}: {len(files)} files, "
                f"{size / 1e6:,.0f} MB ({size / args.rows:,.0f} bytes per row) in "
                f"{time.perf_counter() - t:.1f} s",
                flush=True,
            )
            lands[fmt] = land

        t = time.perf_counter()
        spark = spark_session(args.memory, work)
        print(
            f"Spark {spark.version} local[2] session start: {time.perf_counter() - t:.1f} s",
            flush=True,
        )
        from spark_ingest.batch import run_batch

        warm = work / "warm"
        write_synthetic(warm, 20_000, files=2, devices=5)
        t = time.perf_counter()
        run_batch(spark, str(warm), str(work / "warm-out"), database="warm")
        print(f"warm-up run (creates the metastore): {time.perf_counter() - t:.1f} s", flush=True)
        for fmt, land in lands.items():
            t = time.perf_counter()
            s = run_batch(spark, str(land), str(work / f"spark-{fmt}"), database=f"full_{fmt}",
                          full=True)  # fmt: skip
            full = time.perf_counter() - t
            assert s.lines == args.rows and s.quarantined_total == 0, s.to_dict()
            n = spark.table(f"full_{fmt}.aggregates").count()
            results.append((f"spark full run ({fmt})", "all tables", full, n))
            t = time.perf_counter()
            n = spark_aggregates_only(spark, land, work / f"spark-agg-{fmt}")
            results.append((f"spark aggregates ({fmt})", "aggregates", time.perf_counter() - t, n))
            plain = []
            for _ in range(2):  # a floor: the better of two, the JIT having seen the query
                t = time.perf_counter()
                n = spark_plain_sql(spark, land, work / f"spark-plain-{fmt}", fmt)
                plain.append(time.perf_counter() - t)
            results.append((f"spark plain SQL ({fmt})", "aggregates", min(plain), n))
            # incremental: all files but the last, then the last one (1 % with 100 files)
            inc = work / f"landing-inc-{fmt}"
            shutil.rmtree(inc, ignore_errors=True)
            inc.mkdir()
            names = sorted(p.name for p in land.iterdir() if p.name.startswith("landing-"))
            for name in names[:-1]:
                os.link(land / name, inc / name)
            run_batch(spark, str(inc), str(work / f"inc-{fmt}"), database=f"inc_{fmt}")
            os.link(land / names[-1], inc / names[-1])
            t = time.perf_counter()
            s = run_batch(spark, str(inc), str(work / f"inc-{fmt}"), database=f"inc_{fmt}")
            incremental[fmt] = (time.perf_counter() - t, full, s.lines)
            assert s.files == 1, s.to_dict()
        spark.stop()

        if not args.no_process:
            for fmt, land in lands.items():
                process[fmt] = process_runs(fmt, land, work, args.memory)
                results.append((f"spark process full ({fmt})", "all tables", process[fmt][1], 0))
        for fmt, land in lands.items():
            dt, n = duckdb_run(land, work / f"duckdb-{fmt}", fmt)
            results.append((f"duckdb 2 threads ({fmt})", "aggregates", dt, n))
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)

    print()
    duck = {
        name.split("(")[1].rstrip(")"): args.rows / dt
        for name, _, dt, _ in results
        if name.startswith("duckdb")
    }
    refs = [f for f in ("jsonl", "parquet") if f in duck]
    head = "".join(f" {'/duckdb ' + f:>15}" for f in refs)
    print(f"{'engine':<28} {'outputs':<12} {'seconds':>8} {'rows/s':>10} {'agg rows':>10}{head}")
    for name, what, dt, n in results:
        rate = args.rows / dt
        ratios = "".join(f" {rate / duck[f]:15.0%}" for f in refs)
        rows = f"{n:10,}" if n else f"{'-':>10}"
        print(f"{name:<28} {what:<12} {dt:8.1f} {rate:10,.0f} {rows}{ratios}")
    print()
    for fmt, (dt, full, lines) in incremental.items():
        print(
            f"incremental run ({fmt}): {lines:,} new lines in 1 of {args.files} files, "
            f"{dt:.1f} s = {dt / full:.0%} of the full run's {full:.1f} s (warm session)"
        )
    for fmt, (first, full, _base, one) in process.items():
        print(
            f"whole process ({fmt}): first run (creates the metastore) {first:.1f} s; "
            f"full rebuild {full:.1f} s; incremental after 1 of {args.files} files "
            f"{one:.1f} s = {one / full:.0%} of the full rebuild"
        )
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average at the end: {load}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
