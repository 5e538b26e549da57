"""The lookups a run makes in driver-side tables (file map, recomputed windows, sites'
newest times) are literals in the plan up to a size and broadcast tables beyond it: both
ways give the same tables (test_incremental checks the literal way against a full run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ingest_data import COMPARED, incremental_history, new_database, table_rows

from spark_ingest import consume, devices, stored
from spark_ingest.batch import run_batch

pytestmark = pytest.mark.spark


def test_table_lookups_equal_literal_ones(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    zone, out, db = tmp_path / "landing", tmp_path / "out", new_database()
    monkeypatch.setattr(consume, "LITERAL_FILES", 0)
    monkeypatch.setattr(stored, "LITERAL_WINDOWS", 0)
    monkeypatch.setattr(devices, "LITERAL_SITES", 0)
    incremental_history(spark, zone, out, db)
    monkeypatch.undo()
    full = new_database()
    f = run_batch(spark, str(zone), str(tmp_path / "full"), database=full, full=True)
    assert f.duplicates > 0 and f.quarantined_total == 1
    for t in COMPARED:
        assert table_rows(spark, db, t) == table_rows(spark, full, t), t
