"""An incremental run whose gap rule judges stored rows again (its context) keeps every
other row of their partitions, and a device silent for longer than the run's first look
around its new window (stored.LOOKAROUND_US) still has its silence judged against its
stored readings before it: the tables equal a full run's. On 892ef93 the second run
rewrote the 05:00 partition with only the row it judged again (nine windows lost), and
the silence after it was no gap."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ingest_data import P1, new_database, reading, steady, write_zone

from spark_ingest.batch import run_batch

pytestmark = pytest.mark.spark

COLS = ["device_key", "topic_path", "window_start", "received", "gaps", "missed"]


def _dq(spark: Any, db: str) -> list[tuple[Any, ...]]:
    rows = spark.table(f"{db}.device_quality").select(*COLS).collect()
    return sorted(tuple(r) for r in rows)


def test_a_silence_longer_than_the_first_look_is_a_gap_as_in_a_full_run(
    spark: Any, tmp_path: Path
) -> None:
    zone, out, db = tmp_path / "landing", tmp_path / "out", new_database()
    hour = 3600.0
    # esp32-01 reads every 10 s, goes silent 8 hours, then reads again; esp32-02 keeps
    # the zone reaching past the first look (it reads all along, one file an hour, those
    # seven files read in one run: the stored tables are the same however they were read)
    write_zone(zone, [list(steady(0, 300))])
    run_batch(spark, str(zone), str(out), database=db)
    for k in range(1, 8):
        write_zone(zone, [list(steady(k * hour, k * hour + 60, devices=("esp32-02",)))],
                   first_seq=1 + k)  # fmt: skip
    assert run_batch(spark, str(zone), str(out), database=db).files == 7
    write_zone(zone, [list(steady(8 * hour, 8 * hour + 120))], first_seq=9)
    run_batch(spark, str(zone), str(out), database=db)
    full = new_database()
    run_batch(spark, str(zone), str(tmp_path / "full"), database=full, full=True)
    want, got = _dq(spark, full), _dq(spark, db)
    back = [r for r in want if r[0] == "device:esp32-01" and r[4]]
    assert back, "the full run sees esp32-01's silence as a gap"
    # no window lost: the partitions of the rows judged again kept their other rows
    assert {r[:3] for r in got} == {r[:3] for r in want}
    assert got == want


def test_a_slow_device_is_judged_against_steps_beyond_the_first_look(
    spark: Any, tmp_path: Path
) -> None:
    """A device that reads every 40 minutes has its K steps before a new reading more than
    an hour back: the run must look further than its first look (an hour) for them."""
    zone, out, db = tmp_path / "landing", tmp_path / "out", new_database()
    minute = 60.0
    temp = "esp32-01/temperature"
    # steps 40, 40 and 5 minutes: the period before the next step is their median, 40
    write_zone(zone, [[reading(t * minute, P1, temp, "20.5") for t in (0, 40, 80, 85)]])
    run_batch(spark, str(zone), str(out), database=db)
    # 150 minutes later: a gap of 3.75 periods of 40 (3 readings missed), where a run that
    # saw only the last step (5) would count 29, and one that saw none no gap at all
    write_zone(zone, [[reading(t * minute, P1, temp, "21.0") for t in (235, 236, 237)]],
               first_seq=2)  # fmt: skip
    run_batch(spark, str(zone), str(out), database=db)
    full = new_database()
    run_batch(spark, str(zone), str(tmp_path / "full"), database=full, full=True)
    want, got = _dq(spark, full), _dq(spark, db)
    assert [r[4:] for r in want if r[4]] == [(1, 3)], "the full run: one gap, 3 missed"
    assert got == want
