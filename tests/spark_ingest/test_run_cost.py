"""What a run skips to cost less (issue 24's speed aims) without changing what it writes:
an incremental run of one small file starts no more Spark jobs than counted here (the
other tests say its values are right). That a full rebuild records its configuration only
when one may differ is checked in test_incremental, on the runs of its `--full` test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ingest_data import new_database, one_new_file, steady, write_zone

from spark_ingest.batch import run_batch

pytestmark = pytest.mark.spark


def _last_job(spark: Any) -> int:
    """The id of the newest Spark job of the session (-1 before any): the status store keeps
    the newest ones, so the difference of two is the number of jobs started between."""
    jobs = spark.sparkContext._jsc.sc().statusStore().jobsList(None)
    return max((int(jobs.apply(i).jobId()) for i in range(jobs.size())), default=-1)


# Spark jobs of an incremental run of one small new file next to stored windows (the zone
# below): 35 at 9656bd0. Gone since: a job per broadcast of a driver-side table (the file
# map, the recomputed windows, the sites' newest times: now literals in the plan), the
# second job of a limited collect, the job finding the stored device_quality hours to
# replace, the context check when no stored line lies beyond the context read, two of the
# summary's three jobs
INCREMENTAL_JOBS = 19


def test_an_incremental_run_of_one_small_file_starts_few_spark_jobs(
    spark: Any, tmp_path: Path
) -> None:
    zone, out, db = tmp_path / "landing", tmp_path / "out", new_database()
    one_new_file(spark, zone, out, db)
    before = _last_job(spark)
    s = run_batch(spark, str(zone), str(out), database=db)
    jobs = _last_job(spark) - before
    assert (s.files, s.reread) == (1, 1)  # the file before has lines in its first window
    print(f"incremental run: {jobs} Spark jobs")
    assert jobs <= INCREMENTAL_JOBS, f"{jobs} Spark jobs (at most {INCREMENTAL_JOBS})"


def test_after_a_run_pysparks_calls_look_no_class_up(spark: Any, tmp_path: Path) -> None:
    """PySpark names `functions` and `PythonUtils` on its JVM view at every Column and reader
    call, a class lookup each (py4j's `r u` command, 0.3-0.9 ms: the JVM scans its jars for
    a name that is not a class). After a run they are answered in Python, and name what the
    JVM says they name."""
    from py4j import protocol
    from py4j.java_gateway import JVMView
    from pyspark.sql import functions as F

    from spark_ingest.jvm import PYSPARK_NAMES

    write_zone(tmp_path / "landing", [list(steady(0, 60))])
    run_batch(spark, str(tmp_path / "landing"), str(tmp_path / "out"), database=new_database())
    client = spark.sparkContext._gateway._gateway_client
    lookup = protocol.REFLECTION_COMMAND_NAME + protocol.REFL_GET_UNKNOWN_SUB_COMMAND_NAME
    sent: list[str] = []
    send = client.send_command

    def counting(command: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(command)
        return send(command, *args, **kwargs)

    client.send_command = counting
    try:
        df = spark.range(3).select((F.col("id") + F.lit(1)).alias("n"))
        assert [r.n for r in df.collect()] == [1, 2, 3]
        assert spark.read.parquet(str(tmp_path / "out" / "aggregates")).count() > 0
    finally:
        del client.send_command
    assert sent and not [c for c in sent if c.startswith(lookup)], sent[:20]
    view = spark.sparkContext._jvm
    for name, fqn in PYSPARK_NAMES.items():
        assert JVMView.__getattr__(view, name)._fqn == fqn  # the JVM's own answer
