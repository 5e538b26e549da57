"""Incremental batch (issue 24, point 1): a run reads only the files it has not read, and
the tables after any number of runs equal one full run over the same zone, with late lines,
a site's files uploaded again, gaps across runs, and a run stopped at its two dangerous
points (after writing, before committing; after committing, before publishing)."""

from __future__ import annotations

import math
import shutil
from dataclasses import replace
from datetime import timedelta
from itertools import permutations
from pathlib import Path
from typing import Any

import pytest
from ingest_data import (
    P1,
    P3,
    Bad,
    Message,
    msg,
    new_database,
    reading,
    steady,
    write_zone,
)

from spark_ingest.batch import run_batch
from spark_ingest.catalog import CONFIG_PROPS, Catalog
from spark_ingest.engine import Run
from spark_ingest.options import Options
from spark_ingest.schema import TABLES
from spark_ingest.synth import write_synthetic

pytestmark = pytest.mark.spark

PLACE = ("site", "source_file", "closed_until", "last_file_at", "files")
COMPARED = ("aggregates", "device_quality", "site_quality", "quarantine", "devices", "sites")


def _rows(spark: Any, db: str, t: str) -> list[str]:
    cols = [c for c in TABLES[t].columns if c not in PLACE]
    return sorted(map(repr, spark.table(f"{db}.{t}").select(*cols).collect()))


def _props(spark: Any, db: str, table: str) -> dict[str, str]:
    rows = spark.sql(f"SHOW TBLPROPERTIES `{db}`.`{table}`").collect()
    return {r["key"]: r["value"] for r in rows if r["key"] in CONFIG_PROPS}


def _zone_parts() -> list[list[list[Message | Bad]]]:
    """Four deliveries: steady readings from three devices (one slow: every 5 minutes), a
    heartbeat with a silence across two deliveries, a burst, late lines, bad lines."""
    slow = [reading(s, "http://127.0.0.1:9005/wsn/producer", "slow-05/temperature", f"{s}")
            for s in range(0, 3600, 300)]  # fmt: skip
    hb = "pico-03/heartbeat"
    beats = [msg(s, P3, hb, {"seq": str(s)}) for s in (*range(0, 600, 10), *range(900, 1500, 10))]
    burst = [msg(1500 + k * 0.002, P3, hb, {"seq": f"b{k}"}) for k in range(20)]
    parts: list[list[list[Message | Bad]]] = [
        [[*steady(0, 600), *slow[:2], *beats[:60]]],
        [[*steady(600, 1200), *slow[2:4], Bad("{torn", "malformed_json")]],
        [[*steady(1200, 1800), *slow[4:6], *beats[60:], *burst],
         [reading(650, "http://127.0.0.1:9001/wsn/producer", "esp32-01/temperature", "50.5")]],
        [[*steady(1800, 2400), *slow[6:]]],
    ]  # fmt: skip
    return parts


def test_incremental_runs_equal_one_full_run(spark: Any, tmp_path: Path) -> None:
    zone, out, db = tmp_path / "landing", tmp_path / "out", new_database()
    seq = 1
    summaries = []
    for k, delivery in enumerate(_zone_parts()):
        write_zone(zone, delivery, first_seq=seq)
        seq += len(delivery)
        if k == 2:  # the site's first file, uploaded again under another name
            first = sorted(zone.glob("landing-*-000001.jsonl"))[0]
            shutil.copy(first, zone / "landing-20261121T090000-000099.jsonl")
        summaries.append(run_batch(spark, str(zone), str(out), database=db))
    # each run read its new files only, and again at most the few files whose lines share
    # the windows of the new ones
    assert [s.files for s in summaries] == [1, 1, 3, 1]
    assert all(s.reread <= 3 for s in summaries), [s.reread for s in summaries]
    assert summaries[2].duplicates == len(_zone_parts()[0][0])  # the copy: all duplicates
    assert summaries[2].late > 0  # the line for 05:10 arrived after that window had closed

    full = new_database()
    f = run_batch(spark, str(zone), str(tmp_path / "full"), database=full, full=True)
    assert f.files == 6 and f.full
    for t in COMPARED:
        assert _rows(spark, db, t) == _rows(spark, full, t), t
    devices = {r["device_id"]: r for r in spark.table(f"{db}.devices").collect()}
    assert devices["pico-03"]["gap_count"] == 1  # 600 -> 900 s; the burst is no interval
    assert devices["slow-05"]["gap_count"] == 0 and devices["slow-05"]["period_s"] == 300.0


def test_a_window_sums_the_same_however_its_lines_were_read(spark: Any, tmp_path: Path) -> None:
    """Adding doubles depends on the order: a window's sum and mean, and its clock-skew mean
    (device_quality, site_quality), must not depend on which run read its lines nor on the
    order the files were read in. Three files of one window, their lines interleaved in
    time, read by three incremental runs and by one full run."""
    topic = "esp32-01/temperature"
    # (received second, value) per file; the device's clock says the whole second, so each
    # line's skew is minus its fraction
    files = [
        [(5.186, "14.1"), (20.670, "17.2")],
        [(10.393, "7.4"), (25.965, "0.4")],
        [(15.849, "16.3"), (30.407, "6.5")],
    ]

    def added(values: list[float]) -> float:
        total = 0.0
        for v in values:
            total += v
        return total

    def file_orders(per_line: Any) -> set[float]:
        return {added([per_line(x) for k in p for x in files[k]]) for p in permutations(range(3))}

    in_time = added([float(v) for _, v in sorted(x for f in files for x in f)])
    # the values tell the orders apart: no order file by file adds them in time order
    assert in_time not in file_orders(lambda x: float(x[1]))
    skews_us = [-round(s % 1 * 1e6) for f in files for s, _ in f]
    # and the skews' per-file sums, added in any order, are not all one number
    per_file = [added([-round(s % 1 * 1e6) / 1e6 for s, _ in f]) for f in files]
    assert len({added([per_file[k] for k in p]) for p in permutations(range(3))}) > 1

    def line(s: float, v: str) -> Message:
        m = reading(s, P1, topic, v)
        return replace(m, event_time=m.received_at.replace(microsecond=0))

    zone, out, db = tmp_path / "landing", tmp_path / "out", new_database()
    for seq, lines in enumerate(files, start=1):
        write_zone(zone, [[line(s, v) for s, v in lines]], first_seq=seq)
        run_batch(spark, str(zone), str(out), database=db)
    full = new_database()
    run_batch(spark, str(zone), str(tmp_path / "full"), database=full, full=True)
    got = {}
    for d in (db, full):
        (agg,) = spark.table(f"{d}.aggregates").where("field = 'value'").collect()
        assert (agg["numeric_count"], agg["sum"], agg["mean"]) == (6, in_time, in_time / 6), d
        (dq,) = spark.table(f"{d}.device_quality").collect()
        (sq,) = spark.table(f"{d}.site_quality").collect()
        got[d] = (dq["clock_skew_mean_s"], sq["clock_skew_mean_s"])
    exact = sum(skews_us) / 6 / 1e6
    assert got[db] == got[full], got
    assert None not in got[db], got
    assert all(math.isclose(m, exact, rel_tol=1e-15) for m in got[db]), (got, exact)


def test_a_devices_clock_skew_is_that_of_the_topic_it_published_last(
    spark: Any, tmp_path: Path
) -> None:
    """`devices.clock_skew_s` is its latest window's mean skew; a device publishing several
    topics in that window has one mean per topic: the one of the topic it published last
    in the window, in a full run as in incremental ones (it was whichever row came first)."""

    def line(s: float, topic: str, skew_ms: int) -> Message:
        m = reading(s, P1, f"esp32-01/{topic}", "20.5")
        return replace(m, event_time=m.received_at + timedelta(milliseconds=skew_ms))

    # one window, three topics; in each file the topic published last is written first
    files = [
        [line(40, "humidity", -300), line(10, "temperature", -100)],
        [line(50, "pressure", -700), line(20, "temperature", -200)],
    ]
    zone, out, db = tmp_path / "landing", tmp_path / "out", new_database()
    for seq, lines in enumerate(files, start=1):
        write_zone(zone, [lines], first_seq=seq)
        run_batch(spark, str(zone), str(out), database=db)
    full = new_database()
    run_batch(spark, str(zone), str(tmp_path / "full"), database=full, full=True)
    for d in (db, full):
        (dev,) = spark.table(f"{d}.devices").collect()
        assert dev["clock_skew_s"] == -0.7, d  # pressure, at 50 s
        assert (dev["clock_skew_min_s"], dev["clock_skew_max_s"]) == (-0.7, -0.1), d


def _plain(v: Any) -> Any:
    """A collected value with its maps as sorted pairs: a map's entry order is no part of it."""
    if isinstance(v, dict):
        return sorted((k, _plain(x)) for k, x in v.items())
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def test_a_zone_delivered_out_of_order_gives_the_tables_of_one_full_run(
    spark: Any, tmp_path: Path
) -> None:
    """Synthetic readings (decimals, three topics per device, clock skews of milliseconds)
    in six files arriving out of order, late ones among them: every table after four
    incremental runs equals one full run's, bit for bit (the hand-made zones above have
    values whose sums are exact in any order)."""
    names = [p.name for p in write_synthetic(tmp_path / "pool", 3_000, files=6, devices=8)]
    zone, out, db = tmp_path / "landing", tmp_path / "out", new_database()
    zone.mkdir()
    for delivery in ([0, 3], [1], [5, 2], [4]):
        for k in delivery:
            shutil.copy(tmp_path / "pool" / names[k], zone / names[k])
        run_batch(spark, str(zone), str(out), database=db)
    full = new_database()
    run_batch(spark, str(zone), str(tmp_path / "full"), database=full, full=True)
    for t in TABLES:
        cols = [c for c in TABLES[t].columns if c not in PLACE]
        got, want = (
            sorted(map(repr, (_plain(r.asDict(recursive=True)) for r in
                              spark.table(f"{d}.{t}").select(*cols).collect())))
            for d in (db, full)
        )  # fmt: skip
        assert got == want, t
    assert spark.table(f"{db}.aggregates").count() > 100


@pytest.fixture(scope="module")
def rebuilt(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One zone run three times: the tables made, `--full` with the same configuration,
    `--full` with a new window (and, between the first two, a new window without `--full`,
    refused). What the tests below check is recorded at each step: the two tests of these
    runs used to make the same three runs each."""
    root = tmp_path_factory.mktemp("rebuilt")
    zone, out, db = root / "landing", root / "out", new_database()
    write_zone(zone, [list(steady(0, 300))])
    got: dict[str, Any] = {"out": out, "db": db, "recorded": []}
    real = Catalog.set_config

    def spy(self: Catalog, config: dict[str, Any]) -> None:
        got["recorded"].append(config)
        real(self, config)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Catalog, "set_config", spy)
        run_batch(spark, str(zone), str(out), database=db)  # the tables made now
        got["before"] = _rows(spark, db, "aggregates")
        try:
            run_batch(spark, str(zone), str(out), database=db, window="10 seconds")
        except ValueError as e:
            got["refused"] = e
        got["same"] = run_batch(spark, str(zone), str(out), database=db, full=True)
        got["recorded_same"] = list(got["recorded"])
        got["same_rows"] = _rows(spark, db, "aggregates")
        got["versions"] = sorted(p.name for p in (out / "aggregates").glob("date=*/hour=*/v*"))
        run_batch(spark, str(zone), str(out), database=db, window="10 seconds", full=True)
    return got


def test_full_flag_rebuilds_and_new_options_need_it(spark: Any, rebuilt: dict[str, Any]) -> None:
    db, before = rebuilt["db"], rebuilt["before"]
    assert "refused" in rebuilt, "a new window without --full ran"
    assert "--full" in str(rebuilt["refused"])
    s = rebuilt["same"]
    assert s.files == 1 and s.partitions["aggregates"] == 1
    assert rebuilt["same_rows"] == before
    assert rebuilt["versions"] == ["v00000001", "v00000002"]  # the old one kept for --retain
    assert spark.table(f"{db}.aggregates").count() > len(before)


def test_full_rebuild_records_its_configuration_only_when_it_changes(
    spark: Any, rebuilt: dict[str, Any]
) -> None:
    """(From test_run_cost, issue 24's speed aims.) A full rebuild records its
    configuration in the tables only when one may differ."""
    db = rebuilt["db"]
    # the tables made by the first run; the refused run and `--full` with the same
    # configuration recorded nothing
    assert rebuilt["recorded_same"] == []
    assert [c["wsn.window_us"] for c in rebuilt["recorded"]] == [10_000_000]
    # every table has the new window (an incremental run with it checks them all)
    assert {_props(spark, db, t)["wsn.window_us"] for t in TABLES} == {"10000000"}


@pytest.mark.parametrize("where", ["write", "publish"])
def test_a_run_stopped_midway_leaves_nothing_wrong(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A run that dies after writing its partitions but before committing leaves nothing a
    reader sees and nothing the next run keeps; one that dies after committing, before
    publishing, is published by the next run. Either way the tables end equal to a clean
    run's."""
    zone, out, db = tmp_path / "landing", tmp_path / "out", new_database()
    write_zone(zone, [list(steady(0, 300))])
    run_batch(spark, str(zone), str(out), database=db)
    late = reading(30, "http://127.0.0.1:9001/wsn/producer", "esp32-01/temperature", "1.5")
    write_zone(zone, [[*steady(300, 600), late]], first_seq=2)
    target = {"write": "_write", "publish": "publish"}[where]
    real = getattr(Run, target)

    def dies(self: Run, *a: Any, **k: Any) -> Any:
        if where == "write":
            real(self, *a, **k)  # the staged partitions are written, then the process dies
        raise KeyboardInterrupt("stopped")

    monkeypatch.setattr(Run, target, dies)
    visible = _rows(spark, db, "aggregates")
    with pytest.raises(KeyboardInterrupt):
        run_batch(spark, str(zone), str(out), database=db)
    monkeypatch.undo()
    assert _rows(spark, db, "aggregates") == visible  # readers saw nothing of it
    seen: list[str] = []
    s = run_batch(spark, str(zone), str(out), database=db, progress=seen.append)
    assert any(m.startswith("recovering") for m in seen), seen
    assert s.files == (1 if where == "write" else 0)
    clean = new_database()
    run_batch(spark, str(zone), str(tmp_path / "clean"), database=clean, full=True)
    for t in COMPARED:
        assert _rows(spark, db, t) == _rows(spark, clean, t), t
    assert not list(out.glob("*/_staging/r*"))


def test_a_file_changed_after_it_was_read_is_reported_not_read_twice(
    spark: Any, tmp_path: Path
) -> None:
    zone, out, db = tmp_path / "landing", tmp_path / "out", new_database()
    (path,) = write_zone(zone, [list(steady(0, 60))])
    run_batch(spark, str(zone), str(out), database=db)
    with open(path, "a") as fh:
        fh.write(msg(65, P3, "pico-03/heartbeat", {"seq": "x"}).to_json() + "\n")
    s = run_batch(spark, str(zone), str(out), opts=Options(database=db))
    assert [p.rsplit("/", 1)[-1] for p in s.changed] == [path.name] and s.files == 0
    assert "changed since read 1" in s.render()
