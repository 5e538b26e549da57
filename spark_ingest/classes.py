"""A class-data-sharing archive for the JVM a `wsn-ingest` process starts, so that a process
per run (cron, a systemd timer) does not load and verify Spark's classes from its jars
every time.

The JDK records the classes a JVM loaded into an archive when it exits
(`-XX:ArchiveClassesAtExit`, dynamic AppCDS, JEP 350); a later JVM with the same JDK and
class path maps them from it (`-XX:SharedArchiveFile`) instead. Measured on a 2-core
machine, a `wsn-ingest batch` process of a small zone: 36-40 s without, 24-31 s with
(docs/performance.md, "A process per run: the JVM's class archive").

What a caller may rely on:

- a `batch` process with no archive yet records one on its way out: the process ends once
  its JVM has written it (about half a minute, once), and the archive appears whole or not
  at all (written under another name, renamed when the JVM exited with 0); it records
  nothing where less than RECORD_FREE_BYTES are free;
- a `stream` process only uses an archive, never records one, so a stop signal still ends
  it within its grace;
- nothing changes when the JVM is not ours to start (spark-submit, a session already
  running in this process);
- an archive of another JDK, Spark or class path is never used: its name is a digest of
  them, and the JVM checks them again itself; an archive no process used for UNUSED_S is
  removed;
- an archive of one pointer mode is never offered to a JVM of the other: a heap of 32 GB or
  more has no compressed pointers, and the JVM cannot map an archive recorded with them (nor
  the reverse), so the mode is part of the name too and the two kinds of process keep an
  archive each instead of replacing each other's;
- an archive the JVM cannot map (damaged, or of JVM settings it cannot be used with) is
  not silently ignored: the JVM is told to refuse it (`-Xshare:on`) and is started again
  without it; a `batch` process then replaces the archive with a new one, a `stream`
  process leaves it to them; the report of a JVM that crashed on it (a truncated archive)
  is moved from the working directory to the archives' and named in the message;
- the JVM's stdout is the process's stderr, and its CDS messages are silenced: `--json`
  prints on stdout.

`spark.wsn.ingest.classArchive` (a `--conf`): the directory of the archives (default
`$XDG_CACHE_HOME/wsn-ingest/jvm`, else `~/.cache/wsn-ingest/jvm`), or `off`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

CONF = "spark.wsn.ingest.classArchive"
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
# settings that change the driver's class path: part of an archive's name
CLASS_PATH_KEYS = ("spark.driver.extraClassPath", "spark.jars", "spark.jars.packages")
# the JVM's CDS warnings (a signed jar's classes are not archived, ...)
QUIET = "-Xlog:cds*=off"
# A JVM told to map an archive refuses to start when it cannot, rather than start without it
# (the default, -Xshare:auto): the caller then knows the archive is of no use (start below)
MAP = "-Xshare:on"
# options of a user who manages class sharing themselves: then we add nothing
OWN = ("-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit", "-Xshare")
# JVM options that decide the pointer mode, with the heap's size (spark.driver.memory)
POINTER_OPTIONS = ("-XX:+UseCompressed", "-XX:-UseCompressed", "-XX:ObjectAlignmentInBytes")
POINTER_FLAGS = ("UseCompressedOops", "UseCompressedClassPointers")
# what PySpark's launcher gives the driver JVM without spark.driver.memory (-Xmx)
DEFAULT_DRIVER_MEMORY = "1g"
# A dump whose process is gone is never renamed: removed once its JVM must have finished
# writing it (a dump takes ~25 s), so failing runs from cron cannot fill the disk with them
ORPHAN_S = 600
# A process records only where at least this much is free: the archive is ~230 MB, and the
# file system may be the one the gateway lands on, which must not fill up for a cache
RECORD_FREE_BYTES = 1 << 30
EXIT_WAIT_S = 300.0
# An archive no process used for this long is removed when a process plans its own: that of
# a Spark installation since deleted (the venv of an earlier release) would stay ~230 MB for
# good otherwise. A process marks the archive it uses (its modification time).
UNUSED_S = 30 * 86400


def default_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "wsn-ingest" / "jvm"


@dataclass
class ClassArchive:
    """Where this process's JVM maps its classes from (`path`, when it exists) or records
    them at its exit (`dump`)."""

    path: Path
    dump: Path | None
    spark_home: str | None = None

    def options(self) -> str:
        if self.dump is not None:
            return f"-XX:ArchiveClassesAtExit={self.dump} {QUIET}"
        return f"-XX:SharedArchiveFile={self.path} {MAP} {QUIET}"

    def conf(self, conf: dict[str, str]) -> dict[str, str]:
        """`conf` with the archive's options after the driver's own (the user's `--conf`,
        else spark-defaults.conf's, which a `--conf` of the same key would replace)."""
        own = _java_options(conf, self.spark_home)
        return {**conf, JAVA_OPTIONS: f"{own} {self.options()}".strip()}

    def finish(self, say: Callable[[str], None] | None = None) -> bool:
        """After the session stopped: end our JVM, wait for it to write the archive and
        publish it. True when an archive was published."""
        if self.dump is None:
            return False
        from pyspark import SparkContext

        gateway = SparkContext._gateway
        proc = getattr(gateway, "proc", None)
        if gateway is None or proc is None or proc.stdin is None:
            return False
        if say is not None:
            say(f"recording the JVM's classes for the next processes (once): {self.path}")
        active = SparkContext._active_spark_context
        if active is not None:
            active.stop()
        gateway.shutdown()
        proc.stdin.close()  # PySpark's JVM exits when its stdin ends
        try:
            code = proc.wait(timeout=EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            # still writing: never published half-written; _sweep removes it
            if say is not None:
                say(f"the JVM was still writing its classes after {EXIT_WAIT_S:.0f} s: not "
                    "recorded, the next batch process tries again")  # fmt: skip
            return False
        SparkContext._gateway = None
        SparkContext._jvm = None
        # a cache that fails is no reason to fail the run that used it: said, not raised
        try:
            if code != 0 or not self.dump.is_file() or self.dump.stat().st_size == 0:
                self.dump.unlink(missing_ok=True)
                raise OSError(f"exit {code}")
            os.replace(self.dump, self.path)
        except OSError as e:
            if say is not None:
                say(f"the JVM's classes were not recorded ({e}): the next batch process "
                    "tries again")  # fmt: skip
            return False
        home, mode, _ = self.path.name.split("-")
        for old in self.path.parent.glob(f"{home}-*.jsa"):
            # the same Spark home's archives of this pointer mode for an older JDK or jars,
            # and those named before the mode was (`<home>-<digest>.jsa`, of either mode);
            # the other mode's archive serves other processes
            parts = old.name.split("-")
            if old != self.path and (len(parts) == 2 or parts[1] == mode):
                with suppress(OSError):  # _forget_unused tries again in a month
                    old.unlink(missing_ok=True)
        return True


T = TypeVar("T")


def start(
    conf: dict[str, str],
    record: bool,
    launch: Callable[[dict[str, str]], T],
    say: Callable[[str], None],
) -> tuple[T, ClassArchive | None]:
    """`launch(conf)` (it starts the JVM: a SparkSession) with the archive `plan` gives;
    returns what it returned and the archive to `finish`. When the JVM refused the archive
    and starts without it, the archive is removed and recorded again with `record` (left
    as it is without); when it does not start without it either, the archive stays and
    launch's error is raised."""
    archive = plan(conf, record)
    with _jvm_stdout_to_stderr():
        if archive is None or archive.dump is not None:
            return launch(archive.conf(conf) if archive else conf), archive
        began = time.time()
        try:
            return launch(archive.conf(conf)), archive
        except Exception as e:  # PySpark's error when its JVM exits before it answers
            if getattr(e, "getCondition", lambda: None)() != "JAVA_GATEWAY_EXITED":
                raise
        report = _move_crash_report(archive.path, began)
        again = _recording(archive.path, archive.spark_home) if record else None
        started = launch(again.conf(conf) if again else conf)
    why = f"the JVM could not use its class archive {archive.path} (damaged, or made with "
    why += "other JVM settings" + (f"; its report: {report}" if report else "") + ")"
    if not record:
        # A stream leaves it to the batch processes: those may run with settings that can
        # use it, and a damaged one is replaced by the next of them
        say(why + ": started without it")
        return started, None
    try:
        archive.path.unlink(missing_ok=True)
        done = "removed" + ("; recording a new one" if again else "")
    except OSError as e:  # every later process starts its JVM twice until someone does
        done = f"could not remove it ({e}): please do"
    say(f"{why}: {done}")
    return started, again


@contextmanager
def _jvm_stdout_to_stderr() -> Iterator[None]:
    """A JVM started inside writes its stdout to our stderr (fd 1 is ours again after)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _move_crash_report(archive: Path, since: float) -> Path | None:
    """The report (`hs_err_pid*.log`, in the working directory) of a JVM that crashed
    mapping `archive` (a truncated one: SIGBUS) since `since`, moved beside the archives:
    it is about our cache, not about the user's job. None when there is none."""
    for f in Path.cwd().glob("hs_err_pid*.log"):
        try:
            if f.stat().st_mtime < since - 1:
                continue
            with f.open(encoding="utf-8", errors="replace") as fh:
                if f"-XX:SharedArchiveFile={archive} " not in fh.read(1 << 20):
                    continue
            moved = archive.parent / f.name
            shutil.move(f, moved)
            return moved
        except OSError:  # another process's, or gone meanwhile
            continue
    return None


def plan(conf: dict[str, str], record: bool) -> ClassArchive | None:
    """The archive this process's JVM uses or (with `record`, when there is none) records;
    None when off, when we do not start the JVM, or when the user's options manage class
    sharing."""
    setting = conf.get(CONF, "")
    if setting.lower() in ("off", "false", "0", "no"):
        return None
    if not starts_jvm():
        return None
    home = _spark_home()
    if home is None or any(o in _java_options(conf, home) for o in OWN):
        return None
    name = _name(conf, home)
    if name is None:
        return None
    d = Path(setting) if setting else default_dir()
    path = d / name
    _forget_unused(d, path)
    if path.is_file():
        return ClassArchive(path, None, home)
    return _recording(path, home) if record else None


def _recording(path: Path, home: str | None) -> ClassArchive | None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # a read-only cache (a hardened service: ProtectHome=read-only) is only read from
        if not os.access(path.parent, os.W_OK):
            return None
        if shutil.disk_usage(path.parent).free < RECORD_FREE_BYTES:
            return None  # a later process records, once there is room
    except OSError:
        return None
    _sweep(path.parent)
    return ClassArchive(path, path.parent / f"{path.name}.{os.getpid()}.tmp", home)


def _forget_unused(d: Path, mine: Path) -> None:
    """Mark `mine` used; remove the other archives no process used for UNUSED_S, and the
    crash reports moved here (_move_crash_report) older than that."""
    now = time.time()
    for f in [*d.glob("*.jsa"), *d.glob("hs_err_pid*.log")]:
        try:
            if f == mine:
                os.utime(f)
            elif now - f.stat().st_mtime > UNUSED_S:
                f.unlink()
        except OSError:  # another user's, or gone meanwhile
            pass


def _sweep(d: Path) -> None:
    """Remove the dumps of processes that ended without publishing them."""
    now = time.time()
    for f in d.glob("*.jsa.*.tmp"):
        try:
            pid = int(f.name.rsplit(".", 2)[-2])
            if not _alive(pid) and now - f.stat().st_mtime > ORPHAN_S:
                f.unlink()
        except (OSError, ValueError):
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _spark_home() -> str | None:
    try:
        from pyspark.find_spark_home import _find_spark_home

        return os.path.realpath(_find_spark_home())
    except Exception:  # no Spark home: PySpark says so when it starts
        return None


def _java() -> str | None:
    """The java PySpark's launcher runs: $JAVA_HOME/bin/java, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(java) if java and os.path.exists(java) else None


def _stat(p: str | Path) -> list[object]:
    try:
        st = os.stat(p)
    except OSError:
        return [str(p), None]
    return [str(p), st.st_size, int(st.st_mtime)]


def _name(conf: dict[str, str], home: str) -> str | None:
    """`<Spark home digest>-<pointer mode>-<digest of the JDK, the jars and the class
    path>.jsa`."""
    java = _java()
    if java is None:
        return None
    pointers = _pointer_mode(java, conf, home)
    if pointers is None:
        return None
    jdk = Path(java).parent.parent
    jars = Path(home) / "jars"
    listing = sorted(_stat(e.path) for e in os.scandir(jars)) if jars.is_dir() else []
    defaults = _defaults(home)
    parts = [
        _stat(java),
        _stat(jdk / "lib" / "server" / "libjvm.so"),
        _stat(jdk / "lib" / "modules"),
        listing,
        [conf.get(k) or defaults.get(k) for k in CLASS_PATH_KEYS],
    ]
    digest = hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:20]
    return f"{hashlib.sha256(home.encode()).hexdigest()[:8]}-{pointers}-{digest}.jsa"


def _pointer_mode(java: str, conf: dict[str, str], home: str) -> str | None:
    """The pointer flags (POINTER_FLAGS) the driver JVM will run with, as that JDK decides
    them for the heap and options the launcher gives it (about 50 ms), as one letter each
    (`c` compressed, `u` not: `cc` below a heap of 32 GB); None when it cannot say (the JVM
    would not start with these either)."""
    memory = (
        conf.get("spark.driver.memory")
        or _defaults(home).get("spark.driver.memory")
        or os.environ.get("SPARK_DRIVER_MEMORY")
        or os.environ.get("SPARK_MEM")
        or DEFAULT_DRIVER_MEMORY
    )  # the order of Spark's launcher (SparkSubmitCommandBuilder), which adds -Xmx itself
    own = [o for o in _java_options(conf, home).split() if o.startswith(POINTER_OPTIONS)]
    cmd = [java, f"-Xmx{memory}", *own, "-XX:+PrintFlagsFinal", "-version"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    # lines as `     bool UseCompressedOops          = true          {product lp64_product}`
    flags = {w[1]: w[3] for w in map(str.split, out.splitlines()) if len(w) > 3 and w[2] == "="}
    if any(flags.get(f) not in ("true", "false") for f in POINTER_FLAGS):
        return None
    return "".join("c" if flags[f] == "true" else "u" for f in POINTER_FLAGS)


def starts_jvm() -> bool:
    """Whether a session made now starts its JVM with the options given to it: not when one
    runs in this process already, nor when spark-submit started it (PySpark then connects
    to it)."""
    from pyspark import SparkContext

    return SparkContext._gateway is None and not os.environ.get("PYSPARK_GATEWAY_PORT")


def driver_java_options(conf: dict[str, str]) -> str:
    """The driver JVM's own options a launch with `conf` gets: the `--conf`'s, else
    spark-defaults.conf's (a `--conf` of the same key replaces those)."""
    return _java_options(conf, _spark_home())


def spark_conf_dir() -> str:
    """The directory spark-submit reads its configuration from and puts on the driver's
    class path: $SPARK_CONF_DIR, else the Spark home's `conf` ("" without a home)."""
    return _conf_dir(_spark_home())


def _conf_dir(spark_home: str | None) -> str:
    return os.environ.get("SPARK_CONF_DIR") or (
        os.path.join(spark_home, "conf") if spark_home else ""
    )


def _java_options(conf: dict[str, str], spark_home: str | None) -> str:
    return conf.get(JAVA_OPTIONS) or _defaults(spark_home).get(JAVA_OPTIONS, "")


def _defaults(spark_home: str | None) -> dict[str, str]:
    """spark-defaults.conf (what spark-submit reads: $SPARK_CONF_DIR, else the home's conf)."""
    out: dict[str, str] = {}
    try:
        with open(
            os.path.join(_conf_dir(spark_home), "spark-defaults.conf"), encoding="utf-8"
        ) as fh:
            for line in fh:
                kv = line.strip().split(None, 1)
                if len(kv) == 2 and not kv[0].startswith("#"):
                    out[kv[0]] = kv[1].strip()
    except OSError:
        pass
    return out
