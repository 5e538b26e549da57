"""One real local SparkSession for the whole test session (toolchain.md, PySpark): local[2],
no UI, UTC, one shuffle partition, the serial GC, and Spark's Hive
metastore on embedded Derby in a temporary directory (the catalog the tables are made in;
each test gets a database of its own)."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

# Self-contained on purpose: tests/integration loads this file by path for its `spark`.
SPARK_TEST_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "1",
    # as the job's own sessions (spark_ingest.session.DEFAULT_CONF): no Python call site
    # recorded per Column operation
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # for the short-lived `wsn-ingest` processes tests start: C1 only starts faster
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    # no JVM class archive written into the home of whoever runs the tests
    # (test_classes.py tests it in a directory of its own)
    "spark.wsn.ingest.classArchive": "off",
}
# The session's own JVM runs for a whole Spark part (hundreds of query plans): with the
# optimising C2 compiler as well, test_incremental took 11 % less CPU and 26 % less time
# than with C1 only (docs/performance.md, "The test command")
SESSION_JAVA_OPTIONS = "-XX:+UseSerialGC"

_databases = itertools.count(1)


@pytest.fixture(scope="session")
def spark_test_conf() -> dict[str, str]:
    """The settings of the `spark` session, for tests that start `wsn-ingest` processes
    (each of those gets its own metastore under its --out, as the CLI does)."""
    return dict(SPARK_TEST_CONF)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    from spark_ingest.session import metastore_conf

    # PySpark converts collected timestamps with the Python process's zone: UTC while the
    # Spark tests run (they run last; the zone is restored afterwards)
    old_tz = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    catalog = tempfile.mkdtemp(prefix="wsn-ingest-metastore-")
    builder = SparkSession.builder.master("local[2]").appName("wsn-ingest-tests")
    conf = {**SPARK_TEST_CONF, "spark.driver.extraJavaOptions": SESSION_JAVA_OPTIONS}
    for k, v in {**conf, **metastore_conf(catalog)}.items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    session.sparkContext._jvm.java.lang.System.setProperty(
        "derby.stream.error.file", os.path.join(catalog, "derby.log")
    )
    yield session
    session.stop()
    shutil.rmtree(catalog, ignore_errors=True)
    if old_tz is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = old_tz
    time.tzset()


def new_database() -> str:
    """A database name no other test uses (tables are per --out: one database each). "f",
    not ingest_data.new_database's "t": each counts on its own, and the two handed out
    t<pid>_1 twice in one session."""
    return f"f{os.getpid()}_{next(_databases)}"


@pytest.fixture
def db() -> str:
    return new_database()
