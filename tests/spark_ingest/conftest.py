"""One real local SparkSession for the whole test session (toolchain.md, PySpark): local[2],
no UI, UTC, one shuffle partition, the JVM flags that halve start-up cost."""

from __future__ import annotations

import os
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
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}


@pytest.fixture(scope="session")
def spark_test_conf() -> dict[str, str]:
    """The settings of the `spark` session, for tests that start `wsn-ingest` processes."""
    return dict(SPARK_TEST_CONF)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    # PySpark converts collected timestamps with the Python process's zone: UTC while the
    # Spark tests run (they run last; the zone is restored afterwards)
    old_tz = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    builder = SparkSession.builder.master("local[2]").appName("wsn-ingest-tests")
    for k, v in SPARK_TEST_CONF.items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    if old_tz is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = old_tz
    time.tzset()
