"""The lookups a run makes in driver-side tables (file map, recomputed windows, sites'
newest times) are literals in the plan up to a size and broadcast tables beyond it: both
ways give the same tables (test_incremental checks the literal way against a full run)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from ingest_data import P3, Bad, msg, new_database, reading, steady, write_zone

from spark_ingest import consume, devices, stored
from spark_ingest.batch import run_batch
from spark_ingest.schema import TABLES

pytestmark = pytest.mark.spark

PLACE = ("site", "source_file", "closed_until", "last_file_at", "files")


def _rows(spark: Any, db: str, t: str) -> list[str]:
    cols = [c for c in TABLES[t].columns if c not in PLACE]
    return sorted(map(repr, spark.table(f"{db}.{t}").select(*cols).collect()))


def test_table_lookups_equal_literal_ones(
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
    monkeypatch.setattr(consume, "LITERAL_FILES", 0)
    monkeypatch.setattr(stored, "LITERAL_WINDOWS", 0)
    monkeypatch.setattr(devices, "LITERAL_SITES", 0)
    seq = 1
    for k, delivery in enumerate(deliveries):
        write_zone(zone, delivery, first_seq=seq)
        seq += len(delivery)
        if k == 1:  # a file uploaded again under another name: every line a duplicate
            first = sorted(zone.glob("landing-*-000001.jsonl"))[0]
            shutil.copy(first, zone / "landing-20261121T090000-000099.jsonl")
        s = run_batch(spark, str(zone), str(out), database=db)
        assert s.files >= 1
    assert s.reread >= 1
    monkeypatch.undo()
    full = new_database()
    f = run_batch(spark, str(zone), str(tmp_path / "full"), database=full, full=True)
    assert f.duplicates > 0 and f.quarantined_total == 1
    for t in ("aggregates", "device_quality", "site_quality", "quarantine", "devices", "sites"):
        assert _rows(spark, db, t) == _rows(spark, full, t), t
