"""`wsn-ingest` command line (also `python -m spark_ingest` and `spark-submit spark_ingest/job.py`).

Progress goes to stderr as it happens; the one-screen summary goes to stdout at the end.
Exit status: 0 done, 1 the job could not run (message says why), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

WINDOW_DEFAULT = "1 minute"
WATERMARK_DEFAULT = "5 minutes"


def _progress(msg: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


def _conf_pairs(items: Sequence[str]) -> dict[str, str]:
    conf: dict[str, str] = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise SystemExit(f"wsn-ingest: --conf expects KEY=VALUE, got {item!r}")
        conf[k] = v
    return conf


def build_parser() -> argparse.ArgumentParser:
    spark_opts = argparse.ArgumentParser(add_help=False)
    g = spark_opts.add_argument_group("Spark")
    g.add_argument(
        "--master",
        help="Spark master URL (default: $WSN_INGEST_MASTER, $MASTER, spark-submit's, "
        "else local[*])",
    )
    g.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting"
    )
    g.add_argument("--json", action="store_true", help="print the summary as JSON")
    src = argparse.ArgumentParser(add_help=False)
    i = src.add_argument_group("input")
    i.add_argument(
        "--landing",
        action="append",
        required=True,
        metavar="PATH",
        help="a landing directory, file or glob, local or any URI Spark reads (file://, "
        "hdfs://, s3a://; passed through as given); repeatable",
    )
    i.add_argument(
        "--time",
        choices=("received", "event"),
        default="received",
        help="time of a message for windows, lateness and gaps: the gateway's received_at "
        "(default: one device's wrong clock cannot move the watermark for all) or the "
        "device's event_time (received_at where a line has none)",
    )

    p = argparse.ArgumentParser(
        prog="wsn-ingest",
        description="Aggregate the wsn-edge gateway's landing zone with Spark.",
    )
    sub = p.add_subparsers(dest="cmd", required=True)

    b = sub.add_parser("batch", parents=[spark_opts, src], help="aggregate the whole landing zone")
    b.add_argument("--out", required=True, help="output directory (rewritten)")
    b.add_argument(
        "--require-input",
        action="store_true",
        help="exit 1 when no landing file was read (default: say so and write empty outputs)",
    )
    b.add_argument("--window", default=WINDOW_DEFAULT, help='tumbling window ("1 minute")')
    b.add_argument(
        "--gap-factor",
        type=float,
        default=3.0,
        help="a device gap is a silence longer than this x its usual interval (3)",
    )

    s = sub.add_parser(
        "stream", parents=[spark_opts, src], help="aggregate new landing files as they arrive"
    )
    s.add_argument("--out", required=True)
    s.add_argument("--checkpoint", required=True, help="checkpoint directory (keep it!)")
    s.add_argument(
        "--trigger",
        default="available-now",
        help='"available-now" (process what is there, then stop) or an interval '
        '("10 seconds") to run until stopped',
    )
    s.add_argument("--window", default=WINDOW_DEFAULT)
    s.add_argument(
        "--watermark",
        default=WATERMARK_DEFAULT,
        help="how late a message may arrive (by received_at) and still be aggregated",
    )
    s.add_argument("--gap-factor", type=float, default=3.0)
    s.add_argument(
        "--max-files-per-trigger", type=int, default=None, help="landing files per micro-batch"
    )
    s.add_argument(
        "--timeout", type=float, default=None, help="stop an interval trigger after N seconds"
    )

    pl = sub.add_parser("plot", help="PNG of one field per device over time")
    pl.add_argument("--out", required=True, help="output directory of batch/stream")
    pl.add_argument("--field", required=True, help="field name (e.g. value)")
    pl.add_argument("--producer", help="only this device id or producer address")
    pl.add_argument("--topic", help="only this topic (e.g. temperature)")
    pl.add_argument("--png", required=True, help="PNG file to write")

    sy = sub.add_parser("synth", help="write a synthetic landing zone (demo, benchmark)")
    sy.add_argument("--landing", required=True, help="a local directory")
    sy.add_argument("--rows", type=int, default=10_000)
    sy.add_argument("--files", type=int, default=4)
    sy.add_argument("--devices", type=int, default=10)
    sy.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl")
    return p


def _check_durations(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Reject a bad --window/--watermark/--trigger before Spark starts (exit 2)."""
    checks = [
        ("--window", getattr(args, "window", None)),
        ("--watermark", getattr(args, "watermark", None)),
    ]
    trigger = getattr(args, "trigger", None)
    if trigger is not None and trigger.strip().lower().replace("_", "-") not in (
        "available-now",
        "availablenow",
        "once",
    ):
        checks.append(("--trigger", trigger))
    if not any(v is not None for _, v in checks):
        return
    from spark_ingest.stream import interval_us

    for opt, value in checks:
        if value is None:
            continue
        try:
            interval_us(value)
        except ValueError as e:
            parser.error(f"{opt}: {e}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_durations(parser, args)
    try:
        if args.cmd == "plot":
            return _plot(args)
        if args.cmd == "synth":
            return _synth(args)
        return _spark(args)
    except FileNotFoundError as e:
        print(f"wsn-ingest: {e}", file=sys.stderr)
        return 1


def _plot(args: argparse.Namespace) -> int:
    from spark_ingest.plot import PlotError, plot

    try:
        r = plot(args.out, args.field, args.png, producer=args.producer, topic=args.topic)
    except PlotError as e:
        print(f"wsn-ingest plot: {e}", file=sys.stderr)
        return 1
    print(f"wrote {r.png}: {r.panels} panel(s), {r.series} series, {r.points} windows")
    return 0


def _synth(args: argparse.Namespace) -> int:
    from spark_ingest.synth import write_synthetic

    t = time.monotonic()
    files = write_synthetic(
        Path(args.landing), args.rows, files=args.files, devices=args.devices, fmt=args.format
    )
    print(
        f"wrote {args.rows} rows in {len(files)} files to {args.landing} "
        f"in {time.monotonic() - t:.1f} s"
    )
    return 0


def _spark(args: argparse.Namespace) -> int:
    from spark_ingest.session import get_session

    conf = _conf_pairs(args.conf)
    _progress("starting Spark")
    spark = get_session(master=args.master, conf=conf)
    _progress(f"Spark {spark.version} on {spark.sparkContext.master}")
    if args.cmd == "batch":
        from spark_ingest.batch import run_batch

        summary = run_batch(
            spark,
            args.landing,
            args.out,
            window=args.window,
            gap_factor=args.gap_factor,
            progress=_progress,
            time=args.time,
        )
        print(json.dumps(summary.to_dict(), indent=2) if args.json else summary.render())
        if not summary.files:
            print(
                "wsn-ingest: no landing file was read from "
                + " ".join(args.landing)
                + " (files must be named landing-*.jsonl or landing-*.parquet)",
                file=sys.stderr,
            )
            if args.require_input:
                return 1
        return 0
    from spark_ingest.stream import StreamOptions, run_stream

    opts = StreamOptions(
        window=args.window,
        watermark=args.watermark,
        trigger=args.trigger,
        gap_factor=args.gap_factor,
        max_files_per_trigger=args.max_files_per_trigger,
        timeout=args.timeout,
        time=args.time,
    )
    ssum = run_stream(spark, args.landing, args.out, args.checkpoint, opts, progress=_progress)
    print(json.dumps(ssum.to_dict(), indent=2) if args.json else ssum.render())
    return 0
