"""Streaming: the same tables as batch from the same zone; a site's clock or late upload
makes nothing late elsewhere; windows are written at once and close when traffic stops;
SIGINT and SIGTERM during a micro-batch exit 0 with the summary; kill -9 and a restart
equal the batch job."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from ingest_data import (
    JVM_COMPLAINT,
    P1,
    T0,
    Bad,
    Message,
    assert_same_aggregates,
    expected_aggregates,
    msg,
    new_database,
    reading,
    spark_aggregates,
    steady,
    write_zone,
)
from pyspark.errors import StreamingQueryException

from spark_ingest.batch import run_batch
from spark_ingest.jvm import set_log_level
from spark_ingest.options import Options
from spark_ingest.schema import TABLES
from spark_ingest.stream import (
    StreamOptions,
    StreamSummary,
    _Batches,
    _query,
    _Stopper,
    checkpoint_of,
    run_stream,
)
from spark_ingest.synth import landing_name, producer_of, write_lines, write_parquet_messages

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
# columns that name where a row's files were read from (they differ between two landing
# directories holding the same lines) or when a run happened
PLACE = ("site", "source_file", "closed_until", "last_file_at", "files")


def _same_tables(spark: Any, a: str, b: str, tables: tuple[str, ...]) -> None:
    for t in tables:
        cols = [c for c in TABLES[t].columns if c not in PLACE]
        got = sorted(map(repr, spark.table(f"{a}.{t}").select(*cols).collect()))
        want = sorted(map(repr, spark.table(f"{b}.{t}").select(*cols).collect()))
        assert got == want, t


def test_stream_equals_batch_on_the_same_zone(spark: Any, tmp_path: Path) -> None:
    """One file per micro-batch (late lines, a copy of an earlier file, an id under two
    devices, bad lines) gives the tables one batch run gives; both keep each id once per
    window, the copy in the file whose name sorts first (the oracle agrees)."""
    first = steady(0, 300, devices=("esp32-01", "esp32-02", "pico-03"))
    late = [reading(100, P1, "esp32-01/temperature", "99.5")]  # in windows already written
    twin = msg(130, producer_of("pico-03"), "pico-03/temperature", {"value": "7"}, msg_id="dup-x")
    twin_b = msg(130, producer_of("esp32-02"), "esp32-02/temperature", {"value": "8"},
                 msg_id="dup-x")  # fmt: skip
    files: list[list[Message | Bad]] = [
        [*first[:40], Bad("{oops", "malformed_json")],
        [*first[40:], twin],
        [*late, twin_b, *steady(300, 420)],
    ]
    landing = tmp_path / "landing"
    write_zone(landing, files)
    write_lines(landing, landing_name(T0 + timedelta(hours=1), 9), [m.to_json() for m in first[:5]])
    s_db, b_db = new_database(), new_database()
    opts = StreamOptions(database=s_db, max_files=1)
    s = run_stream(spark, str(landing), str(tmp_path / "stream"), opts)
    b = run_batch(spark, str(landing), str(tmp_path / "batch"), database=b_db)
    assert (s.runs, s.files) == (4, 4) and b.files == 4
    assert s.lines == b.lines and s.duplicates == b.duplicates == 6
    assert s.messages == b.messages
    _same_tables(spark, s_db, b_db, ("aggregates", "device_quality", "site_quality",
                                     "quarantine", "devices"))  # fmt: skip
    kept = [m for f in files for m in f if isinstance(m, Message) and m is not twin_b]
    got = spark_aggregates(spark.table(f"{s_db}.aggregates").collect())
    assert_same_aggregates(got, expected_aggregates(kept))


def test_one_sites_clock_makes_nothing_late_at_another(spark: Any, tmp_path: Path) -> None:
    """Site B's gateway clock is an hour ahead: its windows close an hour ahead, site A's
    do not; A's next messages are not late and land in their windows. A's own upload of
    older files after an outage lands in its windows too (and is counted as late, being for
    windows A had closed)."""
    a, b = tmp_path / "site-a", tmp_path / "site-b"
    a1, a2, b1 = steady(0, 120), steady(120, 240), steady(3600, 3720, devices=("pico-03",))
    write_zone(a, [list(a1)])
    write_zone(b, [list(b1)])
    db = new_database()
    opts = StreamOptions(database=db, watermark="1 minute")
    out = str(tmp_path / "out")
    run_stream(spark, [str(a), str(b)], out, opts)
    write_zone(a, [list(a2)], first_seq=2)
    s = run_stream(spark, [str(a), str(b)], out, opts)
    assert s.late == 0, s.to_dict()
    outage = steady(0, 60, devices=("esp32-09",))
    write_zone(a, [list(outage)], first_seq=3)
    s = run_stream(spark, [str(a), str(b)], out, opts)
    assert s.late == len(outage)
    sites = {r["site"].rsplit("/", 1)[-1]: r for r in spark.table(f"{db}.sites").collect()}
    assert sites["site-a"]["closed_until"] < sites["site-b"]["closed_until"] - timedelta(minutes=50)
    got = spark_aggregates(spark.table(f"{db}.aggregates").collect())
    want = expected_aggregates([*a1, *a2, *outage, *b1])
    assert_same_aggregates(got, want)


def test_windows_are_written_at_once_and_close_when_traffic_stops(
    spark: Any, tmp_path: Path
) -> None:
    """A window is in the table after the first micro-batch that has its lines (it is not
    held back until the watermark passes it); once a site has sent nothing for the
    watermark's length, its newest windows are closed (sites.closed_until = its newest
    message)."""
    landing, db = tmp_path / "landing", new_database()
    lines = steady(0, 50)
    write_zone(landing, [list(lines)])
    opts = StreamOptions(database=db, trigger="1 second", watermark="15 seconds", timeout=120.0)
    seen: dict[str, Any] = {}
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            try:
                site = spark.table(f"{db}.sites").collect()
                aggs = spark.table(f"{db}.aggregates").count()
            except Exception:  # not created yet
                time.sleep(0.3)
                continue
            if aggs:  # the tables exist (empty) before the first micro-batch commits
                seen.setdefault("written", aggs)
            if site and site[0]["closed_until"] == site[0]["last_at"]:
                seen["closed"] = site[0]["closed_until"]
                os.kill(os.getpid(), signal.SIGTERM)  # run_stream stops cleanly
                return
            time.sleep(0.3)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        summary = run_stream(spark, str(landing), str(tmp_path / "out"), opts)
    finally:
        done.set()
        watcher.join()
    newest = max(m.received_at for m in lines)
    assert seen.get("written") == len(expected_aggregates(lines))
    assert "closed" in seen, summary.to_dict()
    assert seen["closed"].replace(tzinfo=newest.tzinfo) == newest
    assert summary.stopped_by == "SIGTERM"


def _spawn(landing: Path, out: Path, log: Path, conf_kv: dict[str, str], *extra: str) -> Any:
    conf = [a for k, v in conf_kv.items() for a in ("--conf", f"{k}={v}")]
    cmd = [sys.executable, "-m", "spark_ingest", "stream", "--landing", str(landing),
           "--out", str(out), "--window", "1 minute", "--master", "local[2]", *conf,
           *extra]  # fmt: skip
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": str(ROOT)}
    with open(log, "wb") as fh:
        # own session: the JVM is our child's child; a kill goes to the whole group
        return subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
        )


def _wait_for(proc: Any, ready: Any, log: Path, limit: float = 240) -> None:
    deadline = time.monotonic() + limit
    while not _now(ready):
        assert proc.poll() is None, "ended before the signal:\n" + log.read_text()
        assert time.monotonic() < deadline, "no progress:\n" + log.read_text()
        time.sleep(0.1)


def _now(ready: Any) -> bool:
    """`ready()`, False while the tree it walks changes under it: Spark's committer removes
    its `_temporary` directories as a micro-batch's writes finish (a check walking
    `_staging` met one gone between listing and reading it: FileNotFoundError)."""
    try:
        return bool(ready())
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_a_micro_batch_exits_0_with_the_summary(
    spark_test_conf: dict[str, str], tmp_path: Path, sig: signal.Signals
) -> None:
    """Ctrl-C (SIGINT to the process group, as a terminal sends it) or SIGTERM while a
    micro-batch runs and files keep arriving: the micro-batch finishes or is cancelled
    within the grace, the summary is printed, the exit status is 0, no trace."""
    landing, out, log = tmp_path / "landing", tmp_path / "out", tmp_path / "run.log"
    write_zone(landing, [list(steady(0, 600))])
    p = _spawn(landing, out, log, spark_test_conf, "--trigger", "1 second", "--stop-grace", "5")
    stop = threading.Event()

    def keep_landing() -> None:
        k = 2
        while not stop.wait(0.5):
            write_zone(landing, [list(steady(600 * k, 600 * k + 60))], first_seq=k)
            k += 1

    feeder = threading.Thread(target=keep_landing)
    try:
        _wait_for(p, lambda: "run 1 committed" in log.read_text(), log)
        feeder.start()
        _wait_for(p, lambda: "run 2: reading" in log.read_text(), log)
        t = time.monotonic()
        if sig == signal.SIGINT:
            os.killpg(p.pid, sig)
        else:
            p.send_signal(sig)
        rc = p.wait(timeout=60)
        took = time.monotonic() - t
    finally:
        stop.set()
        if feeder.is_alive():
            feeder.join()
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    text = log.read_text()
    assert rc == 0, text
    assert took < 30, f"{took:.0f} s to stop:\n{text}"
    assert "wsn-ingest stream:" in text and f"stopped by {sig.name}" in text, text
    assert "Traceback" not in text, text
    # nor Spark's and Hadoop's account of the cancelled jobs, aborted writes and killed
    # tasks, nor of stopping the query: 549 lines of Java traces and warnings (stream.CANCELLED)
    assert not JVM_COMPLAINT.findall(text), text


def test_a_signal_between_micro_batches_stops_quietly(
    spark_test_conf: dict[str, str], tmp_path: Path
) -> None:
    """SIGTERM while the stream waits for files (as systemd stops a service): exit 0, the
    summary, and not a warning: stopping the query had Spark warn twice that the job group
    it cancels has no job (stream.STOPPING)."""
    landing, out, log = tmp_path / "landing", tmp_path / "out", tmp_path / "run.log"
    write_zone(landing, [list(steady(0, 60))])
    p = _spawn(landing, out, log, spark_test_conf, "--trigger", "1 second")
    try:
        _wait_for(p, lambda: "run 1 committed" in log.read_text(), log)
        time.sleep(3)  # idle triggers
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    text = log.read_text()
    assert rc == 0, text
    assert "stopped by SIGTERM" in text and "cancelled" not in text, text
    assert "SIGTERM: stopping (no micro-batch is running)" in text, text
    assert not JVM_COMPLAINT.findall(text), text


def test_hushed_loggers_get_their_levels_back(spark: Any) -> None:
    """What the stream turns off while it stops is on again after it (a session that goes
    on, as here, logs as before), and a logger a user asked INFO of is left alone."""
    jvm = spark.sparkContext._jvm
    manager = jvm.org.apache.logging.log4j.LogManager
    inherits, own, verbose = (
        "org.apache.spark.scheduler.DAGScheduler",
        "org.apache.hadoop.util.Shell",
        "org.apache.parquet.hadoop",
    )
    set_log_level(spark, own, "ERROR")
    set_log_level(spark, verbose, "INFO")
    config = manager.getContext(False).getConfiguration()
    before = str(manager.getLogger(inherits).getLevel())  # its parent's
    try:
        with _Stopper(spark, 30.0, lambda _m: None) as stopper:
            stopper.hush([inherits, own, verbose])
            assert not manager.getLogger(inherits).isWarnEnabled()
            assert not manager.getLogger(own).isErrorEnabled()
            assert manager.getLogger(verbose).isInfoEnabled()
        # the first takes its parent's level again: a later change of the root reaches it
        assert config.getLoggerConfig(inherits).getExplicitLevel() is None
        assert str(manager.getLogger(inherits).getLevel()) == before
        assert str(config.getLoggerConfig(own).getExplicitLevel().name()) == "ERROR"
        assert manager.getLogger(verbose).isInfoEnabled()
    finally:
        set_log_level(spark, own, "WARN")
        set_log_level(spark, verbose, "WARN")


def test_a_cancel_is_known_only_once_the_loggers_are_off(spark: Any) -> None:
    """run_stream cancels the run's jobs too once it sees the stopper's `cancelled`: a task
    interrupted then logged BlockManager's warnings before the loggers were off (seen in
    the signal test), so `cancelled` is set only after they are. (This session logs at
    ERROR.)"""
    manager = spark.sparkContext._jvm.org.apache.logging.log4j.LogManager
    seen: list[bool] = []

    class Watched(_Stopper):
        def __setattr__(self, name: str, value: Any) -> None:
            if name == "cancelled" and value:
                logger = manager.getLogger("org.apache.spark.storage.BlockManager")
                seen.append(bool(logger.isErrorEnabled()))
            super().__setattr__(name, value)

    with Watched(spark, 30.0, lambda _m: None) as stopper:
        stopper._cancel()
    assert seen == [False]
    assert manager.getLogger("org.apache.spark.storage.BlockManager").isErrorEnabled()


def test_a_run_cancelled_as_the_query_stops_leaves_no_java_trace(
    spark: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A micro-batch whose Spark job fails after the query began to stop (interrupted by the
    stop, or cancelled, as at the stopper's grace): the stream keeps the run's error, and
    the JVM prints nothing. Spark matched the error's Python trace with a regex that recurses
    once per character: a StackOverflowError and 1,024 Java frames on stderr, seen in CI
    (stream.MicroBatchFailed)."""
    landing, out = tmp_path / "landing", tmp_path / "out"
    write_zone(landing, [list(steady(0, 60))])
    opts = StreamOptions(database=new_database())
    summary = StreamSummary(str(landing), str(out), opts.database, opts.window,
                            opts.watermark, opts.trigger)  # fmt: skip
    queries: list[Any] = []
    stopper = threading.Thread(target=lambda: queries[0].stop())
    ended = threading.Event()

    def cancel_each_job() -> None:
        while not ended.wait(0.2):
            if spark.sparkContext.statusTracker().getActiveJobsIds():
                spark.sparkContext.cancelAllJobs()

    class CancelledAsItStops(_Batches):
        def run(self, only: dict[str, int] | None) -> Any:
            stopper.start()
            while queries[0].isActive:
                time.sleep(0.05)
            # the stop interrupts this thread's job; cancelling ends it at any rate
            threading.Thread(target=cancel_each_job, daemon=True).start()
            return spark.range(10**12).selectExpr("max(id)").collect()

    batches = CancelledAsItStops(spark, [str(landing)], str(out), opts, lambda _m: None, summary)
    try:
        queries.append(_query(spark, [str(landing)], checkpoint_of(str(out)), opts, batches, True))
        # what Spark is told: one line
        with pytest.raises(StreamingQueryException, match="MicroBatchFailed: micro-batch 0: Py"):
            queries[0].awaitTermination(120)
        stopper.join(120)
    finally:
        ended.set()
    assert type(batches.error).__name__ == "Py4JJavaError", batches.error
    why = str(batches.error.java_exception)  # type: ignore[attr-defined]
    assert "InterruptedException" in why or "cancelled" in why, why
    err = capfd.readouterr().err
    assert "StackOverflowError" not in err and not JVM_COMPLAINT.findall(err), err[:3000]


# two stream processes (two JVMs) and a batch run: 186 s at a load average of 2-4 on the
# 2-core machine, past the default 300 s at 6
@pytest.mark.timeout(600)
def test_kill_9_and_restart_equals_batch(
    spark: Any, spark_test_conf: dict[str, str], tmp_path: Path
) -> None:
    """kill -9 in the middle of a micro-batch (after it wrote part of its tables, before
    it committed), then a restart: the tables equal one batch run over the zone."""
    landing, out = tmp_path / "landing", tmp_path / "out"
    files: list[list[Message | Bad]] = [
        [*steady(k * 180, (k + 1) * 180, devices=("esp32-01", "pico-03")), Bad(f"bad {k}", "x")]
        for k in range(3)
    ]
    write_zone(landing, files)
    write_parquet_messages(landing, landing_name(T0, 7, ".parquet"), steady(0, 100))  # copies
    log = tmp_path / "run1.log"
    p = _spawn(landing, out, log, spark_test_conf, "--max-files-per-trigger", "1")
    staged = out / "aggregates" / "_staging"
    try:
        _wait_for(p, lambda: "run 1 committed" in log.read_text() and staged.is_dir()
                  and any(staged.rglob("*.parquet")), log)  # fmt: skip
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    log2 = tmp_path / "run2.log"
    p = _spawn(landing, out, log2, spark_test_conf, "--database", "wsn")
    assert p.wait(timeout=300) == 0, log2.read_text()
    assert "recovering" in log2.read_text(), log2.read_text()
    assert not any((out / "aggregates").glob("_staging/r*/*")), "staging left behind"
    db = new_database()
    run_batch(spark, str(landing), str(tmp_path / "batch"), database=db)
    # the stream's tables are in its own metastore (out/_catalog): read its files
    from spark_ingest.plot import current_files

    for t in ("aggregates", "device_quality", "quarantine"):
        files_now = [str(f) for f in current_files(out / t)]
        cols = [c for c in TABLES[t].data_columns if c not in PLACE]
        got = sorted(map(repr, spark.read.parquet(*files_now).select(*cols).collect()))
        want = sorted(map(repr, spark.table(f"{db}.{t}").select(*cols).collect()))
        assert got == want, t


def test_no_copy_of_the_history_is_kept(spark: Any, tmp_path: Path) -> None:
    """What a stream keeps besides its tables is small and does not grow with what it read:
    no copy of the messages; a replaced partition version is deleted once `--retain` has
    passed; the manifest's run records are compacted."""
    landing, out, db = tmp_path / "landing", tmp_path / "out", new_database()
    opts = Options(database=db, retain="0 seconds")
    for k in range(3):
        write_zone(landing, [list(steady(k * 20, k * 20 + 20))], first_seq=k + 1)
        run_batch(spark, str(landing), str(out), opts=opts)
    versions = sorted(p.name for p in (out / "aggregates").glob("date=*/hour=*/v*"))
    assert versions == ["v00000003"], versions  # v1 and v2 were replaced and have expired
    kept = {p.name for p in (out / "_ingest").iterdir() if not p.name.startswith(".")}
    assert kept <= {"runs", "applied.json", "state-0000000000.json"}, kept
    assert not any(out.rglob("staged")) and not any(out.rglob("*.jsonl"))
