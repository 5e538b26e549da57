"""A small run (a stream's micro-batch, an incremental run of a few files) executes its
queries interpreted: it compiles no generated code, which was most of its fixed cost
(engine.INTERPRETED_BYTES). Both ways write the same tables."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from ingest_data import P3, Bad, msg, new_database, reading, steady, write_zone

from spark_ingest.batch import run_batch
from spark_ingest.engine import CODEGEN, INTERPRETED_CONF, run_once
from spark_ingest.options import Options
from spark_ingest.schema import TABLES

pytestmark = pytest.mark.spark

PLACE = ("site", "source_file", "closed_until", "last_file_at", "files")


def _compiled(spark: Any) -> int:
    """Classes Spark has compiled from generated code in this JVM so far."""
    metrics = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics
    return int(metrics.METRIC_COMPILATION_TIME().getCount())


def _rows(spark: Any, db: str, t: str) -> list[str]:
    cols = [c for c in TABLES[t].columns if c not in PLACE]
    return sorted(map(repr, spark.table(f"{db}.{t}").select(*cols).collect()))


def test_a_small_run_compiles_no_code_and_leaves_the_session_as_it_was(
    spark: Any, tmp_path: Path
) -> None:
    zone, out, db = tmp_path / "landing", tmp_path / "out", new_database()
    write_zone(zone, [list(steady(0, 300)), list(steady(300, 620))])
    run_batch(spark, str(zone), str(out), database=db)
    write_zone(zone, [list(steady(620, 680))], first_seq=3)
    before = {k: spark.conf.get(k, None) for k in CODEGEN}
    n = _compiled(spark)
    r = run_once(spark, str(zone), str(out), Options(database=db))
    assert (r.files, r.reread) == (1, 1)
    # every query of the run interpreted: 2 classes compiled (Spark generates a few helpers
    # whatever the mode), where the same run compiled 294 at 6ce495d
    assert _compiled(spark) - n <= 5
    assert {k: spark.conf.get(k, None) for k in CODEGEN} == before


def test_compiled_and_interpreted_runs_write_the_same_tables(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hb = "pico-03/heartbeat"
    late = reading(130, "http://127.0.0.1:9001/wsn/producer", "esp32-01/temperature", "50.5")
    deliveries = [
        [[*steady(0, 240), *[msg(s, P3, hb, {"seq": str(s)}) for s in range(0, 240, 10)]]],
        [[*steady(240, 480), Bad("{torn", "malformed_json")], [late]],
        [[*steady(480, 720), *[msg(s, P3, hb, {"seq": str(s)}) for s in range(400, 720, 10)]]],
    ]
    zone, out, db = tmp_path / "landing", tmp_path / "out", new_database()
    seq = 1
    for k, delivery in enumerate(deliveries):  # incremental runs, interpreted
        write_zone(zone, delivery, first_seq=seq)
        seq += len(delivery)
        if k == 1:  # a file uploaded again under another name: every line a duplicate
            first = sorted(zone.glob("landing-*-000001.jsonl"))[0]
            shutil.copy(first, zone / "landing-20261121T090000-000099.jsonl")
        s = run_batch(spark, str(zone), str(out), database=db)
        assert s.files >= 1
    assert s.reread >= 1
    full = new_database()
    spark.conf.set(INTERPRETED_CONF, "0")  # every run compiled
    try:
        n = _compiled(spark)
        f = run_batch(spark, str(zone), str(tmp_path / "full"), database=full, full=True)
        assert _compiled(spark) > n
    finally:
        spark.conf.unset(INTERPRETED_CONF)
    assert f.duplicates > 0 and f.quarantined_total == 1
    for t in ("aggregates", "device_quality", "site_quality", "quarantine", "devices", "sites"):
        assert _rows(spark, db, t) == _rows(spark, full, t), t
