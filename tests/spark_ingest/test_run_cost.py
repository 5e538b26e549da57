"""What a run skips to cost less (issue 24's speed aims) without changing what it writes:
a full rebuild records its configuration in the tables only when one may differ, and a run
with nothing stored looks up no stored rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ingest_data import new_database, steady, write_zone

from spark_ingest.batch import run_batch
from spark_ingest.catalog import CONFIG_PROPS, Catalog
from spark_ingest.schema import TABLES

pytestmark = pytest.mark.spark


def _props(spark: Any, db: str, table: str) -> dict[str, str]:
    rows = spark.sql(f"SHOW TBLPROPERTIES `{db}`.`{table}`").collect()
    return {r["key"]: r["value"] for r in rows if r["key"] in CONFIG_PROPS}


def test_full_rebuild_records_its_configuration_only_when_it_changes(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    zone, out, db = tmp_path / "landing", tmp_path / "out", new_database()
    write_zone(zone, [list(steady(0, 300))])
    recorded: list[dict[str, Any]] = []
    real = Catalog.set_config

    def spy(self: Catalog, config: dict[str, Any]) -> None:
        recorded.append(config)
        real(self, config)

    monkeypatch.setattr(Catalog, "set_config", spy)
    run_batch(spark, str(zone), str(out), database=db)  # the tables made now
    run_batch(spark, str(zone), str(out), database=db, full=True)  # the same configuration
    assert recorded == []
    run_batch(spark, str(zone), str(out), database=db, window="10 seconds", full=True)
    assert [c["wsn.window_us"] for c in recorded] == [10_000_000]
    # every table has the new window (an incremental run with it checks them all)
    assert {_props(spark, db, t)["wsn.window_us"] for t in TABLES} == {"10000000"}
