"""`wsn-ingest` command line (also `python -m spark_ingest` and `spark-submit spark_ingest/job.py`).

Progress goes to stderr as it happens; the one-screen summary goes to stdout at the end.
Exit status: 0 done (also a stream stopped by SIGTERM or Ctrl-C), 1 the job could not run
(the message says why), 2 bad usage, 130 a batch interrupted by Ctrl-C.
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
    g.add_argument(
        "--metastore",
        metavar="DIR",
        help="local directory of the embedded Derby metastore (default: OUT/_catalog), "
        "unless --conf configures another metastore (spark.hadoop.hive.metastore.uris, ...)",
    )
    src = argparse.ArgumentParser(add_help=False)
    i = src.add_argument_group("input and tables")
    i.add_argument(
        "--landing",
        action="append",
        required=True,
        metavar="PATH",
        help="a landing directory, file or glob, local or any URI Spark reads (file://, "
        "hdfs://, s3a://; passed through as given); repeatable",
    )
    i.add_argument("--out", required=True, help="directory of the tables' files and the "
                   "ingest's state (keep it)")  # fmt: skip
    i.add_argument("--database", default="wsn", help="catalog database of the tables (wsn)")
    i.add_argument(
        "--time",
        choices=("received", "event"),
        default="received",
        help="time of a message for windows and gaps: the gateway's received_at (default) "
        "or the device's event_time (received_at where a line has none)",
    )
    i.add_argument("--window", default=WINDOW_DEFAULT, help='tumbling window ("1 minute")')
    i.add_argument(
        "--gap-factor",
        type=float,
        default=3.0,
        help="a gap is a silence longer than this x the period around it (3)",
    )
    i.add_argument(
        "--burst",
        default="1 second",
        help="steps shorter than this are a burst of buffered readings, not an interval",
    )
    i.add_argument(
        "--watermark",
        default=WATERMARK_DEFAULT,
        help="a site's windows close this long after its newest message, or once it has "
        "sent no file for this long (5 minutes)",
    )
    i.add_argument(
        "--state-horizon",
        default="1 hour",
        help="a camera state counts at most this long after the event that set it",
    )
    i.add_argument(
        "--retain",
        default="10 minutes",
        help="keep a replaced partition version this long for readers still reading it",
    )

    p = argparse.ArgumentParser(
        prog="wsn-ingest",
        description="Turn the wsn-edge gateway's landing zone into tables, with Spark.",
    )
    sub = p.add_subparsers(dest="cmd", required=True)

    b = sub.add_parser(
        "batch",
        parents=[spark_opts, src],
        help="read the landing files not read before and update the tables",
    )
    b.add_argument("--full", action="store_true", help="rebuild every table from every file")
    b.add_argument(
        "--require-input",
        action="store_true",
        help="exit 1 when no landing file exists (default: say so and exit 0)",
    )

    s = sub.add_parser(
        "stream", parents=[spark_opts, src], help="update the tables as new landing files arrive"
    )
    s.add_argument(
        "--trigger",
        default="available-now",
        help='"available-now" (read what is there, then stop) or an interval ("10 seconds") '
        "to run until stopped",
    )
    s.add_argument(
        "--max-files-per-trigger", type=int, default=None, help="landing files per micro-batch"
    )
    s.add_argument(
        "--timeout", type=float, default=None, help="stop an interval trigger after N seconds"
    )
    s.add_argument(
        "--stop-grace",
        type=float,
        default=20.0,
        help="on SIGTERM/SIGINT, let the running micro-batch finish for this many seconds, "
        "then cancel it (20)",
    )
    s.add_argument("--checkpoint", help=argparse.SUPPRESS)  # before issue 24; ignored

    pl = sub.add_parser("plot", help="PNG of one field per device over time")
    pl.add_argument("--out", required=True, help="the --out of batch/stream")
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
    """Reject a bad duration before Spark starts (exit 2)."""
    names = ("window", "watermark", "burst", "state_horizon", "retain")
    checks = [(f"--{n.replace('_', '-')}", getattr(args, n, None)) for n in names]
    trigger = getattr(args, "trigger", None)
    if trigger is not None and trigger.strip().lower().replace("_", "-") not in (
        "available-now",
        "availablenow",
        "once",
    ):
        checks.append(("--trigger", trigger))
    if not any(v is not None for _, v in checks):
        return
    from spark_ingest.options import interval_us

    for opt, value in checks:
        if value is None:
            continue
        try:
            interval_us(value, zero_ok=opt == "--retain")
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
    except KeyboardInterrupt:
        print("wsn-ingest: interrupted", file=sys.stderr)
        return 130


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


def _metastore(args: argparse.Namespace) -> str | None:
    """--metastore, else OUT/_catalog for a local --out (Derby needs a local directory)."""
    if args.metastore:
        return str(args.metastore)
    out = str(args.out)
    if "://" in out and not out.startswith("file:"):
        return None
    return str(Path(out.removeprefix("file://").removeprefix("file:")) / "_catalog")


def _options(args: argparse.Namespace) -> dict[str, object]:
    return {
        "database": args.database,
        "window": args.window,
        "time": args.time,
        "gap_factor": args.gap_factor,
        "burst": args.burst,
        "watermark": args.watermark,
        "state_horizon": args.state_horizon,
        "retain": args.retain,
    }


def _spark(args: argparse.Namespace) -> int:
    from spark_ingest import classes
    from spark_ingest.catalog import CatalogError
    from spark_ingest.manifest import LockedError
    from spark_ingest.session import get_session

    conf = _conf_pairs(args.conf)
    # a batch process records the JVM's classes for the next ones; a stream only uses them
    # (its exit must stay within the stop grace)
    _progress("starting Spark")
    spark, archive = classes.start(
        conf,
        args.cmd == "batch",
        lambda c: get_session(master=args.master, conf=c, metastore_dir=_metastore(args)),
        _progress,
    )
    _progress(f"Spark {spark.version} on {spark.sparkContext.master}")
    try:
        rc = _batch(spark, args) if args.cmd == "batch" else _stream(spark, args)
    except (CatalogError, LockedError, ValueError) as e:
        print(f"wsn-ingest: {e}", file=sys.stderr)
        rc = 1
    # not after an exception (an interrupt, a failed query): its JVM's dump is never renamed
    # and classes._sweep removes it; killing the JVM instead would lose the Java side of the
    # error the traceback is about to print
    if archive is not None:
        archive.finish(_progress)
    return rc


def _batch(spark: object, args: argparse.Namespace) -> int:
    from spark_ingest.batch import run_batch
    from spark_ingest.options import Options

    opts = Options(**_options(args), full=args.full)  # type: ignore[arg-type]
    summary = run_batch(spark, args.landing, args.out, progress=_progress, opts=opts)  # type: ignore[arg-type]
    for m in summary.missing:
        _progress(f"WARNING: --landing {m} matches nothing")
    print(json.dumps(summary.to_dict(), indent=2) if args.json else summary.render())
    if summary.run is None and not summary.files and summary.devices == 0:
        print(
            "wsn-ingest: no landing file was read from "
            + " ".join(args.landing)
            + " (files must be named landing-*.jsonl or landing-*.parquet)",
            file=sys.stderr,
        )
        if args.require_input:
            return 1
    return 0


def _stream(spark: object, args: argparse.Namespace) -> int:
    from spark_ingest.stream import StreamOptions, run_stream

    if args.checkpoint:
        _progress("note: --checkpoint is ignored: the stream checkpoints in OUT/_stream")
    opts = StreamOptions(
        **_options(args),  # type: ignore[arg-type]
        max_files=args.max_files_per_trigger,
        trigger=args.trigger,
        timeout=args.timeout,
        stop_grace=args.stop_grace,
    )
    ssum = run_stream(spark, args.landing, args.out, opts, progress=_progress)  # type: ignore[arg-type]
    print(json.dumps(ssum.to_dict(), indent=2) if args.json else ssum.render(), flush=True)
    return 0
