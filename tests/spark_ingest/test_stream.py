"""Streaming: new files across runs without duplicates, late data written out (never lost),
and a kill -9 in the middle of a run followed by a restart from the checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from ingest_data import (
    P1,
    T0,
    Bad,
    Message,
    assert_same_aggregates,
    closed,
    expected_aggregates,
    reading,
    spark_aggregates,
    steady,
    write_zone,
)

from spark_ingest.batch import run_batch
from spark_ingest.stream import StreamOptions, run_stream
from spark_ingest.synth import landing_name, write_parquet_messages

pytestmark = pytest.mark.spark

OPTS = StreamOptions(window="1 minute", watermark="1 minute", trigger="available-now")
ROOT = Path(__file__).resolve().parents[2]


def _wm(s: str | None) -> datetime:
    assert s is not None
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def test_stream_runs_new_files_late_data_no_duplicates(spark: Any, tmp_path: Path) -> None:
    landing, out, ck = tmp_path / "landing", tmp_path / "out", tmp_path / "ck"
    run1: list[Message | Bad] = [*steady(0, 600), Bad("{oops", "malformed_json")]
    write_zone(landing, [run1], first_seq=1)
    s1 = run_stream(spark, str(landing), str(out), str(ck), OPTS)
    assert (s1.lines, s1.messages, s1.late, s1.quarantined) == (
        len(run1),
        len(run1) - 1,
        0,
        {"malformed_json": 1},
    )
    # max received_at 05:09:50.25 -> watermark 05:08:50.25: windows up to [05:07, 05:08)
    assert _wm(s1.watermark) == T0 + timedelta(minutes=8, seconds=50, milliseconds=250)
    assert s1.dropped_by_watermark == 0 and s1.open_groups > 0

    late_a = reading(180, P1, "esp32-01/temperature", "99.0")  # window ended long ago
    late_b = reading(7 * 60 + 30, P1, "esp32-01/temperature", "98.0")  # [05:07,05:08): written
    ontime = reading(8 * 60 + 30, P1, "esp32-01/temperature", "97.0")  # [05:08,05:09): open
    fresh = steady(600, 900)
    run2: list[Message | Bad] = [late_a, late_b, ontime, Bad("", "blank_line"), *fresh]
    write_zone(landing, [run2[:4]], first_seq=2)
    # the Parquet landing variant, next to JSON lines, in the same stream
    write_parquet_messages(landing, landing_name(T0 + timedelta(minutes=10), 3, ".parquet"), fresh)
    s2 = run_stream(spark, str(landing), str(out), str(ck), OPTS)
    assert (s2.lines, s2.late, s2.quarantined) == (len(run2), 2, {"blank_line": 1})
    assert s2.dropped_by_watermark == 0

    s3 = run_stream(spark, str(landing), str(out), str(ck), OPTS)  # nothing new
    assert (s3.lines, s3.windows_written, s3.split_batches) == (0, 0, 0)
    assert s3.totals == {
        "lines": len(run1) + len(run2),
        "messages": len(run1) + len(run2) - 2,
        "late": 2,
        "duplicates": 0,
        "quarantined": 2,
    }

    # every closed window exactly once, equal to the oracle over the on-time messages
    msgs = [m for m in run1 + run2 if isinstance(m, Message)]
    on_time = [m for m in msgs if m not in (late_a, late_b)]
    got = spark_aggregates(spark.read.parquet(str(out / "aggregates")).drop("batch").collect())
    assert_same_aggregates(got, closed(expected_aggregates(on_time), _wm(s2.watermark)))
    assert got[(T0 + timedelta(minutes=8), P1, "esp32-01/temperature", "value")]["max"] == 97.0

    late = spark.read.json(str(out / "late")).collect()
    assert sorted(r["id"] for r in late) == sorted([late_a.id, late_b.id])
    assert {r["raw"] for r in late} == {late_a.to_json(), late_b.to_json()}
    assert {r["watermark"] for r in late} == {"2026-11-21T05:08:50.250000Z"}
    q = spark.read.json(str(out / "quarantine")).collect()
    assert Counter(r["reason"] for r in q) == Counter({"malformed_json": 1, "blank_line": 1})
    devs = {r["producer"]: r for r in spark.read.parquet(str(out / "devices")).collect()}
    assert devs[P1]["messages"] == sum(1 for m in msgs if m.producer == P1)  # late ones too


def _spawn(
    landing: Path,
    out: Path,
    ck: Path,
    log: Path,
    conf_kv: dict[str, str],
    max_files: int | None = 1,
) -> subprocess.Popen[bytes]:
    conf = [a for k, v in conf_kv.items() for a in ("--conf", f"{k}={v}")]
    cmd = [
        sys.executable,
        "-m",
        "spark_ingest",
        "stream",
        "--landing",
        str(landing),
        "--out",
        str(out),
        "--checkpoint",
        str(ck),
        "--trigger",
        "available-now",
        "--window",
        "1 minute",
        "--watermark",
        "1 minute",
        "--master",
        "local[2]",
        *conf,
    ]
    if max_files:
        cmd += ["--max-files-per-trigger", str(max_files)]
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": str(ROOT)}
    with open(log, "wb") as fh:
        # own session: the JVM is our child's child, SIGKILL goes to the whole group
        return subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
        )


def _kill_when(proc: subprocess.Popen[bytes], ready: Any, log: Path, limit: float = 150) -> None:
    deadline = time.monotonic() + limit
    try:
        while not ready():
            assert proc.poll() is None, "finished before the kill:\n" + log.read_text()
            assert time.monotonic() < deadline, "no progress:\n" + log.read_text()
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, log.read_text()


def test_kill_9_and_restart_equals_batch(
    spark: Any, spark_test_conf: dict[str, str], tmp_path: Path
) -> None:
    landing, out, ck = tmp_path / "landing", tmp_path / "out", tmp_path / "ck"
    files: list[list[Message | Bad]] = [
        [
            *steady(k * 180, (k + 1) * 180, devices=("esp32-01", "esp32-02", "pico-03")),
            Bad(f"broken {k}", "malformed_json"),
        ]
        for k in range(4)
    ]
    write_zone(landing, files)
    # first kill: in the split query, once it has finished a micro-batch (of four)
    state = ck / "split-state"
    p = _spawn(landing, out, ck, tmp_path / "run1.log", spark_test_conf)
    _kill_when(p, lambda: state.is_dir() and any(state.glob("*.json")), tmp_path / "run1.log")
    # second kill: in the aggregate query, after it has committed its first micro-batch
    commits = ck / "aggregate" / "commits"
    p = _spawn(landing, out, ck, tmp_path / "run2.log", spark_test_conf)
    _kill_when(p, lambda: commits.is_dir() and any(commits.iterdir()), tmp_path / "run2.log")
    # restart: runs to the end (all remaining files at once)
    p = _spawn(landing, out, ck, tmp_path / "run3.log", spark_test_conf, max_files=None)
    assert p.wait(timeout=240) == 0, (tmp_path / "run3.log").read_text()
    log = (tmp_path / "run3.log").read_text()
    assert "dropped by Spark  0" in log, log

    batch = run_batch(spark, str(landing), str(tmp_path / "batch"), window="1 minute")
    b_aggs = spark_aggregates(spark.read.parquet(str(tmp_path / "batch" / "aggregates")).collect())
    s_aggs = spark_aggregates(spark.read.parquet(str(out / "aggregates")).drop("batch").collect())
    last = max(m.received_at for f in files for m in f if isinstance(m, Message))
    wm = last - timedelta(minutes=1)
    want = closed(b_aggs, wm)
    assert len(want) > 100 and len(want) < len(b_aggs)
    assert_same_aggregates(s_aggs, want)

    def rows(path: Path, fmt: str) -> Counter[str]:
        df = spark.read.format(fmt).load(str(path))
        return Counter(
            repr(sorted((k, v) for k, v in r.asDict().items() if k != "batch"))
            for r in df.collect()
        )

    assert rows(out / "quarantine", "json") == rows(tmp_path / "batch" / "quarantine", "json")
    assert rows(out / "devices", "parquet") == rows(tmp_path / "batch" / "devices", "parquet")
    assert batch.quarantined == {"malformed_json": len(files)}
    assert not (out / "late").exists()


def test_interval_trigger_picks_up_files_while_running(spark: Any, tmp_path: Path) -> None:
    """`--trigger "1 second"`: both queries run side by side; a file that lands while they
    run is aggregated; the run stops cleanly at --timeout."""
    import threading

    landing, out, ck = tmp_path / "landing", tmp_path / "out", tmp_path / "ck"
    first, second = steady(0, 300), steady(300, 600)
    write_zone(landing, [list(first)], first_seq=1)
    later = threading.Timer(6.0, lambda: write_zone(landing, [list(second)], first_seq=2))
    later.start()
    opts = StreamOptions(
        window="1 minute", watermark="1 minute", trigger="1 second", timeout=25.0, devices_every=5.0
    )
    try:
        s = run_stream(spark, str(landing), str(out), str(ck), opts)
    finally:
        later.cancel()
    assert s.lines == len(first) + len(second) and s.late == 0, s.to_dict()
    got = spark_aggregates(spark.read.parquet(str(out / "aggregates")).drop("batch").collect())
    wm = max(m.received_at for m in second) - timedelta(minutes=1)
    # the aggregate query trails the split query by a trigger or two: every window it wrote
    # is right, and it wrote at least those the first file's data closed
    want = closed(expected_aggregates(first + second), wm)
    assert set(got) <= set(want)
    assert_same_aggregates(got, {k: want[k] for k in got})
    assert len(got) >= len(closed(expected_aggregates(first), wm - timedelta(minutes=5)))


def test_stream_landing_format_both_counts_each_id_once(spark: Any, tmp_path: Path) -> None:
    """`--landing-format both`: each record in a .jsonl and a .parquet file. Copies in one
    micro-batch and copies of what an earlier run already staged are both counted once:
    aggregates, devices and late/ equal a single-format run."""
    landing, out, ck = tmp_path / "landing", tmp_path / "out", tmp_path / "ck"
    first, second = steady(0, 300), steady(300, 600)
    write_zone(landing, [list(first)], first_seq=1)
    s1 = run_stream(spark, str(landing), str(out), str(ck), OPTS)
    assert (s1.messages, s1.duplicates) == (len(first), 0)
    # the Parquet copy of run 1's file (seen in an earlier run), then a new record pair
    write_parquet_messages(landing, landing_name(T0, 1, ".parquet"), first)
    write_zone(landing, [list(second)], first_seq=2)
    write_parquet_messages(landing, landing_name(T0 + timedelta(minutes=1), 2, ".parquet"), second)
    s2 = run_stream(spark, str(landing), str(out), str(ck), OPTS)
    n = len(first) + len(second)
    assert (s2.files, s2.lines, s2.messages, s2.duplicates, s2.late) == (
        3,
        len(first) + 2 * len(second),
        len(second),
        n,
        0,
    )
    assert s2.totals["duplicates"] == n and s2.totals["messages"] == n
    assert s2.dropped_by_watermark == 0
    assert f"duplicates        {n}" in s2.render()
    devs = {r["producer"]: r for r in spark.read.parquet(str(out / "devices")).collect()}
    assert sum(r["messages"] for r in devs.values()) == n
    got = spark_aggregates(spark.read.parquet(str(out / "aggregates")).drop("batch").collect())
    want = closed(expected_aggregates(first + second), _wm(s2.watermark))
    assert len(want) > 10
    assert_same_aggregates(got, want)
    assert not (out / "late").exists()
