"""The tables (issue 24, points 2, 5 and 6): registered in the catalog with typed columns,
partitions replaced so that a reader never sees one missing, timestamps as UTC
microseconds, and the example queries of docs/spark_ingest.md running as written, in Spark
SQL and in DuckDB."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pytest
from ingest_data import new_database, steady, write_zone

from spark_ingest.batch import run_batch
from spark_ingest.schema import TABLES

pytestmark = pytest.mark.spark

DOCS = Path(__file__).resolve().parents[2] / "docs" / "spark_ingest.md"


@pytest.fixture(scope="module")
def tables(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("tables")
    write_zone(root / "landing", [list(steady(0, 600)), list(steady(3000, 3900))])
    db = new_database()
    run_batch(spark, str(root / "landing"), str(root / "out"), database=db)
    return {"root": root, "db": db, "out": root / "out"}


def test_every_table_is_in_the_catalog_with_typed_columns(
    spark: Any, tables: dict[str, Any]
) -> None:
    db = tables["db"]
    listed = {t.name: t for t in spark.catalog.listTables(db)}
    assert set(listed) == set(TABLES)
    assert all(t.tableType == "EXTERNAL" for t in listed.values())
    types = {f.name: f.dataType.simpleString() for f in spark.table(f"{db}.aggregates").schema}
    want = {"mean": "double", "last": "double", "unit": "string", "count": "bigint",
            "window_start": "timestamp", "date": "date", "hour": "int"}  # fmt: skip
    assert {k: types[k] for k in want} == want
    dq = {f.name: f.dataType.simpleString() for f in spark.table(f"{db}.device_quality").schema}
    assert (dq["received"], dq["expected"], dq["gaps"]) == ("bigint", "double", "int")
    parts = [r[0] for r in spark.sql(f"SHOW PARTITIONS {db}.aggregates").collect()]
    assert parts == ["date=2026-11-21/hour=5", "date=2026-11-21/hour=6"]


def test_timestamps_are_utc_microseconds(tables: dict[str, Any]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark_ingest.plot import current_files

    files = current_files(tables["out"] / "aggregates")
    assert len(files) == 2
    for f in files:
        schema = pq.read_schema(f)
        assert schema.field("window_start").type == pa.timestamp("us", tz="UTC")
        assert schema.field("last_at").type == pa.timestamp("us", tz="UTC")


def test_a_reader_never_sees_a_partition_missing(spark: Any, tables: dict[str, Any]) -> None:
    """A full rebuild into the same tables while a reader counts the rows again and again:
    every count is the whole table (the old job overwrote the output directory in place,
    and a reader found it empty for seconds)."""
    db, root = tables["db"], tables["root"]
    whole = spark.table(f"{db}.aggregates").count()
    counts: list[int] = []
    errors: list[str] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                counts.append(spark.sql(f"SELECT count(*) FROM {db}.aggregates").collect()[0][0])
            except Exception as e:  # a vanished file or partition
                errors.append(str(e).splitlines()[0])

    reader = threading.Thread(target=read)
    reader.start()
    try:
        run_batch(spark, str(root / "landing"), str(tables["out"]), database=db, full=True)
    finally:
        done.set()
        reader.join()
    assert not errors, errors[:3]
    assert len(counts) >= 3 and set(counts) == {whole}, counts


def _examples(lang: str) -> list[str]:
    """The fenced blocks of docs/spark_ingest.md marked ```sql <lang>."""
    text = DOCS.read_text()
    return [m.group(1).strip() for m in re.finditer(rf"```sql {lang}\n(.*?)```", text, re.S)]


def test_the_documented_spark_queries_run(spark: Any, tables: dict[str, Any]) -> None:
    queries = _examples("spark")
    assert len(queries) >= 4
    spark.sql(f"USE {tables['db']}")
    try:
        for q in queries:
            rows = spark.sql(q.replace("wsn.", "")).collect()
            assert rows, q
    finally:
        spark.sql("USE default")


def test_the_documented_duckdb_queries_run(tables: dict[str, Any]) -> None:
    import duckdb

    setup, *queries = _examples("duckdb")
    con = duckdb.connect()
    con.execute(setup.replace("'/data/ingest", f"'{tables['out']}"))
    assert len(queries) >= 4
    for q in queries:
        assert con.execute(q).fetchall(), q
    n = con.execute("SELECT count(*) FROM aggregates").fetchone()
    assert n is not None and n[0] == len(
        set(
            map(
                tuple,
                con.execute(
                    "SELECT window_start, device_key, topic_path, field FROM aggregates"
                ).fetchall(),
            )
        )
    )
