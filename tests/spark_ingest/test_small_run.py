"""A small run (a stream's micro-batch, an incremental run of a few files) executes its
queries interpreted: it compiles no generated code, which was most of its fixed cost
(engine.INTERPRETED_BYTES). Both ways write the same tables.

The lookups a run makes in driver-side tables (file map, recomputed windows, sites' newest
times) are literals in the plan up to a size and broadcast tables beyond it: both ways
write the same tables too. test_incremental checks interpreted runs with literal lookups
against a full run; here interpreted runs with table lookups are checked against a
compiled full run, so one history covers the two other ways."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ingest_data import COMPARED, incremental_history, new_database, one_new_file, table_rows

from spark_ingest import consume, devices, stored
from spark_ingest.batch import run_batch
from spark_ingest.engine import CODEGEN, INTERPRETED_CONF, run_once
from spark_ingest.options import Options

pytestmark = pytest.mark.spark


def _compiled(spark: Any) -> int:
    """Classes Spark has compiled from generated code in this JVM so far."""
    metrics = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics
    return int(metrics.METRIC_COMPILATION_TIME().getCount())


def test_a_small_run_compiles_no_code_and_leaves_the_session_as_it_was(
    spark: Any, tmp_path: Path
) -> None:
    zone, out, db = tmp_path / "landing", tmp_path / "out", new_database()
    one_new_file(spark, zone, out, db)
    before = {k: spark.conf.get(k, None) for k in CODEGEN}
    n = _compiled(spark)
    r = run_once(spark, str(zone), str(out), Options(database=db))
    assert (r.files, r.reread) == (1, 1)
    # every query of the run interpreted: 2 classes compiled (Spark generates a few helpers
    # whatever the mode), where the same run compiled 294 at 6ce495d
    assert _compiled(spark) - n <= 5
    assert {k: spark.conf.get(k, None) for k in CODEGEN} == before


def test_compiled_runs_and_table_lookups_write_the_same_tables(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    zone, out, db = tmp_path / "landing", tmp_path / "out", new_database()
    # incremental runs, interpreted, every lookup a broadcast table
    monkeypatch.setattr(consume, "LITERAL_FILES", 0)
    monkeypatch.setattr(stored, "LITERAL_WINDOWS", 0)
    monkeypatch.setattr(devices, "LITERAL_SITES", 0)
    incremental_history(spark, zone, out, db)
    monkeypatch.undo()
    full = new_database()
    spark.conf.set(INTERPRETED_CONF, "0")  # every run compiled
    try:
        n = _compiled(spark)
        f = run_batch(spark, str(zone), str(tmp_path / "full"), database=full, full=True)
        assert _compiled(spark) > n
    finally:
        spark.conf.unset(INTERPRETED_CONF)
    assert f.duplicates > 0 and f.quarantined_total == 1
    for t in COMPARED:
        assert table_rows(spark, db, t) == table_rows(spark, full, t), t
