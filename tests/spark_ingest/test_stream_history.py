"""What the stream keeps of its history, and what a micro-batch reads of it (issue 24: the
stream's cost must not grow with its past).

The manifest folds the entries of files consumed long ago into day shards
(manifest.FOLD_AFTER_HOURS): the state every run loads holds a bounded window of files, and
what a run decides (new files, files to read again for a window, files per site) is what
it would decide with every entry at hand. A micro-batch takes its files from the file
source and does not list the landing zone again."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from spark_ingest.manifest import (
    COMPACT_EVERY,
    FOLD_AFTER_HOURS,
    FileEntry,
    Manifest,
    RunRecord,
    State,
    apply,
    to_fold,
)
from spark_ingest.plan import days_of_windows, files_for_windows, hour_key, new_files

pytestmark = pytest.mark.spark

T0 = 1_763_683_200_000_000  # 2026-11-21T00:00:00Z in µs
MIN = 60_000_000
SITES = ("file:/zone/site-a", "file:/zone/site-b")


def entry_of(i: int) -> tuple[str, FileEntry]:
    """The i-th minute's landing file of a site (two sites, alternate minutes), its lines
    spread over that minute and 10 s into the next (so windows share files)."""
    lo = T0 + i * MIN
    hi = lo + MIN + 10_000_000
    stamp = f"2026112{1 + (i // 1440)}T{(i % 1440) // 60:02d}{i % 60:02d}00"
    site = SITES[i % 2]
    hours: dict[str, list[int]] = {}
    for us in (lo, hi):
        h = hours.setdefault(hour_key(us), [us, us])
        h[0], h[1] = min(h[0], us), max(h[1], us)
    return f"{site}/landing-{stamp}-{i:06d}.jsonl", FileEntry(1000 + i, 0, site, hours, 30)


DAYS = 8
PER_RUN = 30  # files per committed run: 11,520 minutes in 384 runs


@pytest.fixture(scope="module")
def history(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Eight days of one-minute files committed in runs of 30, as the engine commits them;
    and the same history kept whole, unfolded (what the manifest kept before)."""
    from spark_ingest.hfs import HFS

    out = tmp_path_factory.mktemp("history") / "out"
    m = Manifest(HFS(spark), str(out))
    state, whole = State(), State()
    n = DAYS * 1440
    for run, first in enumerate(range(0, n, PER_RUN), start=1):
        files = dict(entry_of(i) for i in range(first, first + PER_RUN))
        rec = RunRecord(run=run, full=False, config={}, started_ms=0, files=files)
        state = m.commit(state, rec)
        whole = apply(whole, rec)
    return {"out": out, "m": m, "state": state, "whole": whole, "n": n}


def test_the_state_a_run_loads_is_bounded_by_the_horizon(history: dict[str, Any]) -> None:
    m, whole = history["m"], history["whole"]
    loaded = m.load()
    assert loaded.run == history["state"].run
    # what the last compaction kept: the files with lines within FOLD_AFTER_HOURS of its
    # newest line, then the runs after it
    since = loaded.run % COMPACT_EVERY
    assert len(loaded.files) <= (FOLD_AFTER_HOURS + 2) * 60 + since * PER_RUN
    assert len(loaded.files) < len(whole.files) // 2
    compacted = sorted(Path(history["out"], "_ingest").glob("state-*.json"))
    assert len(compacted) == 1
    assert compacted[0].stat().st_size < len(whole.to_json()) // 2
    # every folded file is in exactly one shard, and no shard version is left over
    folded = sum(int(s["files"]) for s in loaded.folded.values())
    assert folded + len(loaded.files) == history["n"]
    shards = sorted(
        p.name
        for p in Path(history["out"], "_ingest", "files").iterdir()
        if not p.name.startswith(".")  # the local file system's checksums
    )
    assert shards == sorted(f"{k}-{int(s['v']):010d}.json" for k, s in loaded.folded.items())


def test_a_run_decides_what_it_would_with_every_entry(history: dict[str, Any]) -> None:
    m, whole = history["m"], history["whole"]
    state = m.load()
    listed = {p: e.bytes for p, e in whole.files.items()}
    new = dict([entry_of(history["n"]), entry_of(history["n"] + 1)])
    listed.update({p: e.bytes for p, e in new.items()})
    # a consumed file of the first day that grew since: the listing no longer matches that
    # day's summary, so the shard is read and the change reported
    grown = sorted(whole.files)[5]
    listed[grown] += 7
    fresh, changed = new_files(listed, state, False, known=m.known(state, listed))
    assert (fresh, changed) == new_files(listed, whole, False)
    assert fresh == sorted(new) and changed == [grown]
    # the consumed files to read again for windows: a late line of the first day, one of
    # the second day next to midnight, and the newest windows
    for ws in ([T0 + 7 * MIN], [T0 + 1439 * MIN, T0 + 1440 * MIN], [T0 + (history["n"] - 1) * MIN]):
        days = days_of_windows(ws, MIN)
        got = files_for_windows(m.with_days(state, days), ws, MIN, set())
        assert got == files_for_windows(whole.files, ws, MIN, set())
        assert got
    assert state.files_per_site(new, False) == whole.files_per_site(new, False)
    assert sum(state.files_per_site({}, False).values()) == history["n"]


def test_a_matching_listing_reads_no_shard(history: dict[str, Any]) -> None:
    """The listing of a day whose files are the ones its summary counts is consumed
    without reading that day's shard (a batch run lists the whole zone every time)."""
    m, whole = history["m"], history["whole"]
    state = m.load()
    listed = {p: e.bytes for p, e in whole.files.items()}
    read: list[str] = []
    real = m.shard

    def counting(st: State, key: str) -> dict[str, FileEntry]:
        read.append(key)
        got: dict[str, FileEntry] = real(st, key)
        return got

    m.shard = counting  # type: ignore[method-assign]
    try:
        assert m.known(state, listed) == listed
    finally:
        m.shard = real  # type: ignore[method-assign]
    assert read == []


def test_fold_keeps_what_has_recent_lines() -> None:
    files = dict(entry_of(i) for i in range(0, 4 * 1440, 60))
    newest = datetime.strptime(max(max(e.hours) for e in files.values()), "%Y-%m-%dT%H")
    gone = set(to_fold(files))
    assert gone and len(gone) < len(files)
    for p, e in files.items():
        behind = newest - datetime.strptime(max(e.hours), "%Y-%m-%dT%H")
        assert (p in gone) == (behind > timedelta(hours=FOLD_AFTER_HOURS))
    # a file without lines (empty, damaged) is never needed for a window: folded at once
    name = "file:/zone/site-a/landing-20261121T000000-000001.jsonl"
    assert to_fold({name: FileEntry(10, 0, SITES[0])}) == [name]


def test_a_micro_batch_does_not_list_the_landing_zone(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file source lists the zone at every trigger; the run of the micro-batch takes
    its files (and their bytes) from it instead of listing the zone a second time, which
    costs a call per file into the JVM: linear in the history."""
    from ingest_data import new_database

    import spark_ingest.engine as engine
    import spark_ingest.inputs as inputs
    from spark_ingest.stream import StreamOptions, run_stream
    from spark_ingest.synth import write_synthetic

    db = new_database()  # the counter the other Spark tests name their databases with
    land = tmp_path / "landing"
    write_synthetic(land, 120, files=3, devices=2)
    listings: list[Any] = []
    real = inputs.resolve

    def counted(*a: Any, **k: Any) -> Any:
        listings.append(a)
        return real(*a, **k)

    monkeypatch.setattr(engine, "resolve", counted)
    s = run_stream(spark, str(land), str(tmp_path / "out"), StreamOptions(database=db, max_files=2))
    assert s.runs == 2 and s.files == 3 and s.lines == 120
    assert listings == []
    assert [b["files"] for b in s.micro_batches] == [2, 1]
    assert all(b["ms"]["triggerExecution"] > 0 for b in s.micro_batches)
    rows = spark.table(f"{db}.sites").collect()
    assert [int(r["files"]) for r in rows] == [3]
