"""The JVM's class archive (spark_ingest/classes.py): a `wsn-ingest batch` process records
the classes its JVM loaded, the next process maps them, and the job's own output stays
clean. Real processes on a real JDK; the JVM's class-loading log says where each class came
from."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from ingest_data import JVM_COMPLAINT, START_UP_LINES

from spark_ingest import classes
from spark_ingest.synth import write_synthetic

ROOT = Path(__file__).resolve().parents[2]
# the JDK's words for a class mapped from a dynamic (top-layer) archive
FROM_ARCHIVE = "source: shared objects file (top)"
START = datetime(2026, 11, 21, tzinfo=UTC)


@pytest.fixture
def own_options() -> str:
    """A user's own JVM options, kept beside the archive's: those of the other tests'
    short-lived processes (conftest.SPARK_TEST_CONF: fewer CPU seconds than the defaults).

    Read from the file, not through the `spark_test_conf` fixture: a module using that one
    joins the Spark part, where the session's JVM runs in the test process, and
    `classes.plan` rightly adds nothing to a JVM it does not start."""
    spec = importlib.util.spec_from_file_location(
        "spark_ingest_tests_conftest_classes", Path(__file__).with_name("conftest.py")
    )
    assert spec is not None and spec.loader is not None
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    return str(conftest.SPARK_TEST_CONF[classes.JAVA_OPTIONS])


def _batch(zone: Path, out: Path, cache: Path, options: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable, "-m", "spark_ingest", "batch", "--landing", str(zone),
        "--out", str(out), "--json", "--master", "local[1]",
        "--conf", f"{classes.CONF}={cache}", "--conf", "spark.ui.enabled=false",
        "--conf", f"{classes.JAVA_OPTIONS}={options}",
    ]  # fmt: skip
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=800)


@pytest.mark.timeout(900)
def test_a_second_process_maps_the_classes_the_first_recorded(
    tmp_path: Path, own_options: str
) -> None:
    zone, cache = tmp_path / "landing", tmp_path / "jvm"
    write_synthetic(zone, 40, files=1, devices=2, start=START)
    # where the archive goes holds a damaged one (a copy cut short, a disk error): the JVM
    # must not start without it unnoticed, nor crash on it in every later process
    damaged = classes.plan({classes.CONF: str(cache), classes.JAVA_OPTIONS: own_options}, True)
    assert damaged is not None
    damaged.path.write_bytes(b"\xa8\xba\x0b\xf0" + bytes(4096))
    # beside it: the archive of the other pointer mode (a heap of 32 GB or more), which
    # serves other processes, and one of this mode for an older JDK, of use to none
    home, mode, _ = damaged.path.name.split("-")
    other_mode = cache / damaged.path.name.replace(f"-{mode}-", "-uc-" if mode == "cc" else "-cc-")
    older = cache / f"{home}-{mode}-{'0' * 20}.jsa"
    unnamed = cache / f"{home}-{'1' * 20}.jsa"  # named before the mode was: either mode
    for f in (other_mode, older, unnamed):
        f.write_bytes(b"archive")
    first = _batch(zone, tmp_path / "out", cache, own_options)
    assert first.returncode == 0, first.stderr[-3000:]
    assert json.loads(first.stdout)["files"] == 1  # nothing of the JVM's on stdout
    # nor, on stderr, the bundled Hive's and Spark's warnings no user can act on
    # (session.NOISE): they would bury those that matter
    for noise in ("Updating partition stats", "Updated size to", "METASTORE_FILTER_HOOK",
                  "HiveConf of name", "Truncated the string representation"):  # fmt: skip
        assert noise not in first.stderr, first.stderr
    # nor Spark's and Hadoop's start-up lines (session.LOG4J2_FILE)
    for line in START_UP_LINES:
        assert line not in first.stderr, first.stderr
    assert f"could not use its class archive {damaged.path}" in first.stderr, first.stderr
    assert "recording the JVM's classes" in first.stderr
    archives = sorted(p.name for p in cache.iterdir())
    # replaced, no dump left over, the older ones removed, the other mode's kept
    assert archives == sorted([damaged.path.name, other_mode.name]), archives
    assert damaged.path.stat().st_size > 1_000_000

    # the next file, three hours on: the incremental run looks for the gap rule's stored
    # context around its windows, as every micro-batch of a long-running stream does
    write_synthetic(zone / "later", 40, files=1, devices=2, start=START + timedelta(hours=3))
    for f in (zone / "later").iterdir():
        f.rename(zone / f.name.replace("landing-", "landing-later-"))
    (zone / "later").rmdir()
    log = tmp_path / "class-load.log"
    second = _batch(
        zone, tmp_path / "out", cache, f"{own_options} -Xlog:class+load=info:file={log}"
    )
    assert second.returncode == 0, second.stderr[-3000:]
    assert json.loads(second.stdout)["files"] == 1  # the first file was read by the first run
    assert "recording" not in second.stderr
    # nothing went wrong, so nothing warns (Spark's runtime Bloom filter did, three times:
    # engine.RUN_CONF; and the catalog's CREATE DATABASE at every process's first run)
    for run in (first, second):
        assert not JVM_COMPLAINT.findall(run.stderr), run.stderr
    lines = log.read_text().splitlines()
    mapped = [ln for ln in lines if FROM_ARCHIVE in ln]
    # Spark's own classes among them, not only the JDK's
    assert any("org.apache.spark.sql.SparkSession " in ln for ln in mapped), len(mapped)
    assert len(mapped) > len(lines) // 2, (len(mapped), len(lines))
    assert sorted(p.name for p in cache.iterdir()) == archives


def test_what_a_process_records_or_uses(tmp_path: Path) -> None:
    cache = str(tmp_path / "jvm")
    assert classes.plan({classes.CONF: "off"}, record=True) is None
    assert classes.plan({classes.CONF: cache}, record=False) is None  # a stream records nothing
    rec = classes.plan({classes.CONF: cache}, record=True)
    assert rec is not None and rec.dump is not None and rec.dump.parent == Path(cache)
    assert "-XX:ArchiveClassesAtExit=" in rec.options() and not rec.path.exists()
    rec.path.write_bytes(b"archive")
    use = classes.plan({classes.CONF: cache}, record=True)
    assert use is not None and use.dump is None and use.path == rec.path
    merged = use.conf({classes.JAVA_OPTIONS: "-Xmx1g"})[classes.JAVA_OPTIONS]
    assert merged.startswith("-Xmx1g ") and f"-XX:SharedArchiveFile={rec.path}" in merged
    # a user who manages class sharing gets nothing added
    own = {classes.CONF: cache, classes.JAVA_OPTIONS: "-Xshare:off"}
    assert classes.plan(own, record=True) is None
    # another class path is another archive
    other = classes.plan({classes.CONF: cache, "spark.jars": "/x.jar"}, record=True)
    assert other is not None and other.path != rec.path and other.dump is not None


def test_a_heap_of_32_gb_or_more_has_an_archive_of_its_own(tmp_path: Path) -> None:
    """The JVM refuses to map an archive recorded in the other pointer mode (`The saved
    state of UseCompressedOops ... is different from runtime`): a heap of 32 GB or more has
    no compressed pointers. Two deployments, one of each, must not replace each other's
    archive at every process. The JDK itself says which mode a heap gets."""
    cache = tmp_path / "jvm"

    def archive(**conf: str) -> Path:
        a = classes.plan({classes.CONF: str(cache), **conf}, record=True)
        assert a is not None
        return a.path

    small = archive()
    assert archive(**{"spark.driver.memory": "31g"}) == small  # same mode: one archive
    big = archive(**{"spark.driver.memory": "32g"})
    off = archive(**{classes.JAVA_OPTIONS: "-XX:+UseSerialGC -XX:-UseCompressedOops"})
    assert big != small and off == big
    # the JVM agrees: an archive recorded with compressed pointers is refused by a 32 GB heap
    java = classes._java()
    assert java is not None
    jsa = _small_archive(java, tmp_path / "small.jsa")
    for heap, maps in (("31g", True), ("32g", False)):
        r = subprocess.run([java, f"-Xmx{heap}", f"-XX:SharedArchiveFile={jsa}", classes.MAP,
                            "-version"], capture_output=True, text=True, timeout=120)  # fmt: skip
        assert (r.returncode == 0) is maps, (heap, r.stdout, r.stderr)


def test_the_report_of_a_jvm_that_crashed_on_a_truncated_archive_is_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real JDK on a real archive cut short: it does not refuse it, it crashes (SIGBUS)
    and writes `hs_err_pid*.log` into the working directory. That report is about our cache:
    it goes beside the archives and the message names it; other reports stay."""
    from pyspark.errors import PySparkRuntimeError

    java = classes._java()
    assert java is not None
    cache, work = tmp_path / "jvm", tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    conf = {classes.CONF: str(cache)}
    path = classes.plan(conf, record=True).path  # type: ignore[union-attr]
    whole = _small_archive(java, tmp_path / "whole.jsa")
    path.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    users = work / "hs_err_pid1.log"  # a crash of the user's own, earlier: not ours to move
    users.write_text("Command Line: -Xmx1g org.example.Job\n")
    crashed: list[int] = []

    def launch(c: dict[str, str]) -> str:
        options = c.get(classes.JAVA_OPTIONS, "")
        if "-XX:SharedArchiveFile" in options:
            r = subprocess.run([java, *options.split(), "-version"], capture_output=True,
                               timeout=120)  # fmt: skip
            crashed.append(r.returncode)
            raise PySparkRuntimeError(errorClass="JAVA_GATEWAY_EXITED", messageParameters={})
        return options

    said: list[str] = []
    started, again = classes.start(conf, True, launch, said.append)
    assert "-XX:ArchiveClassesAtExit=" in started
    assert crashed and crashed[0] != 0 and again is not None and again.dump is not None
    reports = list(cache.glob("hs_err_pid*.log"))
    assert len(reports) == 1 and "SharedArchiveFile" in reports[0].read_text()
    assert sorted(work.iterdir()) == [users]
    assert f"its report: {reports[0]}" in said[-1] and said[-1].endswith("recording a new one")


def test_an_archive_the_jvm_refuses_is_removed(tmp_path: Path) -> None:
    """What `start` does when the JVM refuses the archive (PySpark's error when its JVM
    exits before it answers): for a stream, a JVM that fails without it too, a batch."""
    from pyspark.errors import PySparkRuntimeError

    cache = tmp_path / "jvm"
    path = classes.plan({classes.CONF: str(cache)}, record=True).path  # type: ignore[union-attr]
    conf = {classes.CONF: str(cache)}
    said: list[str] = []

    def jvm(fails_without: bool) -> Any:
        def launch(c: dict[str, str]) -> str:
            options = c.get(classes.JAVA_OPTIONS, "")
            if "-XX:SharedArchiveFile" in options or fails_without:
                raise PySparkRuntimeError(errorClass="JAVA_GATEWAY_EXITED", messageParameters={})
            return options

        return launch

    path.write_bytes(b"damaged")
    # a stream: started without the archive, records none, leaves it to the batch
    # processes (they may run with settings that can use it)
    assert classes.start(conf, False, jvm(False), said.append) == ("", None)
    assert path.exists() and said[-1].endswith("started without it")
    # a JVM that does not start without the archive either: not the archive's fault
    with pytest.raises(PySparkRuntimeError):
        classes.start(conf, True, jvm(True), said.append)
    assert path.exists() and len(said) == 1
    # a batch process: started recording, the refused archive removed
    started, rec = classes.start(conf, True, jvm(False), said.append)
    assert "-XX:ArchiveClassesAtExit=" in started and rec is not None and rec.dump is not None
    assert not path.exists() and said[-1].endswith("removed; recording a new one")


def test_dumps_of_processes_that_ended_without_publishing_are_removed(tmp_path: Path) -> None:
    cache = tmp_path / "jvm"
    cache.mkdir()
    gone = _ended_pid()
    old = os.path.getmtime(cache) - classes.ORPHAN_S - 60
    orphan = cache / f"a-b.jsa.{gone}.tmp"  # its process ended, its JVM long done
    recent = cache / f"a-c.jsa.{gone}.tmp"  # its JVM may still be writing
    running = cache / f"a-d.jsa.{os.getpid()}.tmp"  # its process still runs
    for f in (orphan, recent, running):
        f.write_bytes(b"dump")
    os.utime(orphan, (old, old))
    os.utime(running, (old, old))
    assert classes.plan({classes.CONF: str(cache)}, record=True) is not None
    assert sorted(p.name for p in cache.iterdir()) == sorted([recent.name, running.name])


def test_archives_no_process_used_for_a_month_are_removed(tmp_path: Path) -> None:
    """The archive of a Spark installation since deleted (a venv of an earlier release)
    does not stay for good; the one a process uses is marked used."""
    cache = tmp_path / "jvm"
    cache.mkdir()
    mine = classes.plan({classes.CONF: str(cache)}, record=True).path  # type: ignore[union-attr]
    stale, recent = cache / "00000000-old.jsa", cache / "11111111-recent.jsa"
    # the reports of JVMs that crashed on a truncated archive, moved here: kept as long
    old_report, new_report = cache / "hs_err_pid7.log", cache / "hs_err_pid8.log"
    for f in (mine, stale, recent, old_report, new_report):
        f.write_bytes(b"archive")
    month_ago = time.time() - classes.UNUSED_S - 60
    for f in (mine, stale, old_report):
        os.utime(f, (month_ago, month_ago))
    for f in (recent, new_report):
        os.utime(f, (month_ago + 3600, month_ago + 3600))
    use = classes.plan({classes.CONF: str(cache)}, record=False)
    assert use is not None and use.path == mine and use.dump is None
    left = sorted(p.name for p in cache.iterdir())
    assert left == sorted([mine.name, recent.name, new_report.name]), left
    assert time.time() - mine.stat().st_mtime < 600  # used now


def test_nothing_is_recorded_short_of_room_or_on_a_read_only_cache(tmp_path: Path) -> None:
    """On an 8 MiB tmpfs a process records no archive: its dump would fill the file system,
    which may be the landing zone's. Nor on a read-only one (a hardened service's home),
    where the JVM would write it for nothing and the run then failed on removing it. Both
    mounted in a mount namespace of the test's own."""
    unshare = shutil.which("unshare")
    assert unshare, "util-linux unshare is needed (a mount namespace for the tmpfs)"
    small, ro = tmp_path / "small", tmp_path / "ro"
    small.mkdir()
    ro.mkdir()
    check = (
        "import sys; from spark_ingest import classes; "
        "print([classes.plan({classes.CONF: d + '/jvm'}, record=True) is not None "
        "for d in sys.argv[1:]])"
    )
    script = (
        f"mount -t tmpfs -o size=8m tmpfs {small} && mount -t tmpfs -o size=2g tmpfs {ro} && "
        f"mkdir {ro}/jvm && mount -o remount,ro {ro} && "
        f'exec "$0" -c "$1" {small} {ro} {tmp_path}'
    )
    r = subprocess.run(
        [unshare, "-rm", "sh", "-c", script, sys.executable, check],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    # the small tmpfs no, the read-only one no, tmp_path yes
    assert r.stdout.split() == ["[False,", "False,", "True]"], r.stdout


def _small_archive(java: str, path: Path) -> Path:
    """A real archive at `path`: the classes of a JVM that only printed its version."""
    rec = subprocess.run([java, f"-XX:ArchiveClassesAtExit={path}", "-Xlog:cds*=off", "-version"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert rec.returncode == 0 and path.is_file(), rec.stderr
    return path


def _ended_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid
