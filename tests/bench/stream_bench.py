"""Streaming ingest over a growing history: seconds per micro-batch of `wsn-ingest stream`
(Structured Streaming, foreachBatch running the incremental run) as the number of prior
micro-batches grows, on local[2]. Not collected by pytest.

    .venv/bin/python tests/bench/stream_bench.py                       # 1,000,000 rows, 20 files
    .venv/bin/python tests/bench/stream_bench.py --rows 60000 --files 60

Landing files are written by spark_ingest.synth in time order; the stream takes one file per
micro-batch (`max_files=1`, available-now), so micro-batch N has N micro-batches (and N
consumed files) behind it. A flat line means the per-batch cost does not grow with history.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from spark_ingest.synth import write_synthetic  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--devices", type=int, default=50)
    ap.add_argument("--memory", default="4g", help="spark.driver.memory")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="stream-bench-"))
    try:
        land = work / "landing"
        write_synthetic(land, args.rows, files=args.files, devices=args.devices)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        from spark_ingest.session import get_session
        from spark_ingest.stream import StreamOptions, run_stream

        spark = get_session(
            master="local[2]",
            conf={
                "spark.ui.enabled": "false",
                "spark.driver.memory": args.memory,
                "spark.sql.shuffle.partitions": "2",
            },
            metastore_dir=str(work / "catalog"),
        )
        marks: list[tuple[float, str]] = []

        def say(msg: str) -> None:
            marks.append((time.perf_counter(), msg))

        t0 = time.perf_counter()
        s = run_stream(
            spark,
            str(land),
            str(work / "out"),
            StreamOptions(max_files=1, retain="0 seconds"),
            progress=say,
        )
        total = time.perf_counter() - t0
        spark.stop()
        # a micro-batch starts with its "micro-batch N:" line and ends with "run K committed"
        starts = [t for t, m in marks if m.startswith("micro-batch ")]
        ends = [t for t, m in marks if m.startswith("run ") and " committed" in m]
        per = [e - b for b, e in zip(starts, ends, strict=False)]
        print(
            f"{args.rows:,} rows in {args.files} files, one file per micro-batch: "
            f"{len(per)} micro-batches, {s.messages:,} messages, {total:.1f} s in all"
        )
        for i, dt in enumerate(per):
            print(f"  micro-batch {i:3d}: {dt:6.2f} s  ({i} micro-batches behind it)")
        if len(per) >= 6:
            first = sum(per[1:4]) / 3
            last = sum(per[-3:]) / 3
            print(
                f"mean of batches 1-3: {first:.2f} s; of the last 3: {last:.2f} s "
                f"({last / first:.2f}x)"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
