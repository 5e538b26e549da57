"""Ingest throughput: landing rows/s of the Spark batch job on local[2], next to the same
aggregation in DuckDB (2 threads) as the single-machine reference, in one run.

    .venv/bin/python tests/bench/ingest_bench.py              # 2,000,000 rows
    .venv/bin/python tests/bench/ingest_bench.py --rows 200000 # quick

Landing files are written by spark_ingest.synth (template formatting: seconds, not minutes),
as JSON lines (the contract) and as the Parquet landing variant. Spark's time excludes the
session start (printed separately); every Spark row is measured after one warm-up run on a
small zone, as a long-running cluster job would be. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import os
import shutil
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
    SELECT id, CAST(received_at AS TIMESTAMPTZ) AS ts, producer, topic_path, fields
    FROM {source}
    WHERE id IS NOT NULL AND id <> '' AND received_at IS NOT NULL AND fields IS NOT NULL
  ), m AS (
    SELECT id, ts, producer, topic_path, e.key AS field, e.value AS v,
           TRY_CAST(e.value AS DOUBLE) AS x
    FROM (SELECT *, unnest(map_entries(fields)) AS e FROM msgs)
  )
  SELECT time_bucket(INTERVAL '1 minute', ts) AS window_start,
         time_bucket(INTERVAL '1 minute', ts) + INTERVAL '1 minute' AS window_end,
         producer, topic_path, field,
         count(*) AS count, count(x) AS numeric_count, min(x) AS min, max(x) AS max,
         avg(x) AS mean, arg_max(x, (ts, id)) AS last, arg_max(v, (ts, id)) AS last_str,
         max(ts) AS last_at, CAST(time_bucket(INTERVAL '1 minute', ts) AS DATE) AS date
  FROM m GROUP BY ALL
) TO '{out}' (FORMAT parquet, PARTITION_BY (date), OVERWRITE_OR_IGNORE)
"""

JSON_SOURCE = (
    "read_json('{landing}/landing-*.jsonl', format='newline_delimited', ignore_errors=true, "
    "columns={{id: 'VARCHAR', received_at: 'VARCHAR', producer: 'VARCHAR', "
    "topic_path: 'VARCHAR', fields: 'MAP(VARCHAR, VARCHAR)'}})"
)
PARQUET_SOURCE = "read_parquet('{landing}/landing-*.parquet')"


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
    n = con.execute(f"SELECT count(*) FROM read_parquet('{out}/*/*.parquet')").fetchone()
    return dt, int(n[0]) if n else 0


def spark_session(memory: str) -> Any:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from spark_ingest.session import get_session

    return get_session(
        master="local[2]",
        conf={
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.memory": memory,
            "spark.sql.shuffle.partitions": "2",
            "spark.driver.extraJavaOptions": "-XX:+UseParallelGC",
        },
    )


def spark_aggregates_only(spark: Any, landing: Path, out: Path) -> int:
    """The DuckDB query's work in Spark, the way run_batch does it: parse, partition by
    device, explode, aggregate, write the aggregates (no quarantine, dedupe or devices)."""
    from spark_ingest.aggregate import measurements, window_aggregates
    from spark_ingest.batch import by_key, partition_count, read_classified
    from spark_ingest.hfs import HFS
    from spark_ingest.inputs import resolve
    from spark_ingest.landing import valid_messages

    inputs = resolve(HFS(spark), [str(landing)])
    classified = read_classified(spark, inputs)
    parts = partition_count(spark, inputs.sizes_by_name())
    msgs = by_key(valid_messages(classified), parts)
    aggs = window_aggregates(measurements(msgs), "1 minute")
    aggs.write.mode("overwrite").partitionBy("date").parquet(str(out))
    return int(spark.read.schema(aggs.schema).parquet(str(out)).count())


def landing_line_bytes() -> None:
    """Bytes per landing line of a device reading as the gateway writes it, before and
    after issue 15 (payload with only its own namespace declaration, plus the identity
    keys): the record functions of landing_bench.py, on the device's own envelope."""
    sys.path.insert(0, str(Path(__file__).parent))
    from datetime import UTC, datetime

    import landing_bench as lb

    from gateway import landing

    pl = lb.device_payload()
    args = (
        "0" * 32,
        datetime.now(UTC),
        "http://127.0.0.1:32905/wsn/producer",
        "urn:wsn-edge:devices",
        "sim-01/temperature",
        pl,
    )
    before = len(lb.record_before(*args).encode())
    after = len(landing.record(*args, device_id="sim-01", gateway_id="gw-01").encode())
    print(
        f"bytes per landing line (a device reading, gateway-written): before {before}, "
        f"after {after} ({after / before:.0%})",
        flush=True,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--devices", type=int, default=50)
    ap.add_argument("--formats", default="jsonl,parquet", help="jsonl,parquet")
    ap.add_argument("--memory", default="4g", help="spark.driver.memory")
    ap.add_argument("--dir", help="work directory (default: a temporary one, removed)")
    args = ap.parse_args()
    formats = [f for f in args.formats.split(",") if f]
    landing_line_bytes()
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="ingest-bench-"))
    results: list[tuple[str, str, float, int]] = []
    try:
        lands: dict[str, Path] = {}
        for fmt in formats:
            land = work / f"landing-{fmt}"
            shutil.rmtree(land, ignore_errors=True)
            t = time.perf_counter()
            files = write_synthetic(
                land, args.rows, files=args.files, devices=args.devices, fmt=fmt
            )
            size = sum(f.stat().st_size for f in files)
            print(
                f"generated {args.rows:,} rows as {fmt}: {len(files)} files, "
                f"{size / 1e6:,.0f} MB ({size / args.rows:,.0f} bytes per row) in "
                f"{time.perf_counter() - t:.1f} s",
                flush=True,
            )
            lands[fmt] = land

        t = time.perf_counter()
        spark = spark_session(args.memory)
        print(
            f"Spark {spark.version} local[2] session start: {time.perf_counter() - t:.1f} s",
            flush=True,
        )
        from spark_ingest.batch import run_batch

        warm = work / "warm"
        write_synthetic(warm, 20_000, files=2, devices=5)
        run_batch(spark, str(warm), str(work / "warm-out"))
        for fmt, land in lands.items():
            t = time.perf_counter()
            s = run_batch(spark, str(land), str(work / f"spark-{fmt}"))
            dt = time.perf_counter() - t
            assert s.lines == args.rows and s.quarantined_total == 0, s.to_dict()
            results.append((f"spark run_batch ({fmt})", "all outputs", dt, s.windows))
            # like for like with DuckDB: parse, explode, aggregate, write aggregates only
            t = time.perf_counter()
            n = spark_aggregates_only(spark, land, work / f"spark-agg-{fmt}")
            results.append((f"spark aggregates ({fmt})", "aggregates", time.perf_counter() - t, n))
        spark.stop()

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
        print(f"{name:<28} {what:<12} {dt:8.1f} {rate:10,.0f} {n:10,}{ratios}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
