"""What a run reads and rewrites, decided on the driver from the manifest (no Spark here).

A run recomputes the *windows* its new lines fall in, completely: every line of those
windows, old or new, is read again, so duplicates, late lines and re-uploaded files land
exactly where a full run would put them. The manifest knows, per consumed file and hour,
the first and last time of its lines; the files to read again are those whose lines reach
into a recomputed window (for a zone written in time order: the file before the new ones).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from spark_ingest.manifest import FileEntry, State


def hour_key(us: int) -> str:
    """`2026-11-21T05`: the hour (UTC) a time in µs since the epoch falls in."""
    return datetime.fromtimestamp(us / 1e6, UTC).strftime("%Y-%m-%dT%H")


def part_of(us: int) -> str:
    """The (date, hour) partition key of a time in µs since the epoch."""
    t = datetime.fromtimestamp(us / 1e6, UTC)
    return f"date={t:%Y-%m-%d}/hour={t.hour}"


def new_files(
    listed: dict[str, int],
    state: State,
    full: bool,
    limit: int | None = None,
    known: Mapping[str, int] | None = None,
) -> tuple[list[str], list[str]]:
    """(files to read now, files consumed before whose size changed since). Without `full`,
    a file is new when the manifest does not have it (`known`: the listed files consumed
    before, with their bytes then, Manifest.known; default the state's entries); the
    gateway never rewrites a published file, so a changed one is reported, not read twice.
    `limit` keeps the first files by name (a stream's --max-files-per-trigger)."""
    if known is None:
        known = {p: e.bytes for p, e in state.files.items()}
    if full:
        fresh = sorted(listed)
        changed: list[str] = []
    else:
        fresh = sorted(p for p in listed if p not in known)
        changed = sorted(p for p, b in listed.items() if p in known and known[p] != b)
    if limit is not None:
        fresh = fresh[:limit]
    return fresh, changed


def hours_of_windows(windows: Iterable[int], window_us: int) -> set[str]:
    """The hours ("2026-11-21T05") the windows starting at `windows` (µs) cover: one for a
    window that divides an hour; a longer or an unaligned one reaches into the next."""
    hours: set[str] = set()
    for w in set(windows):
        t = w
        while t < w + window_us:
            hours.add(hour_key(t))
            t += 3_600_000_000 - (t % 3_600_000_000)
    return hours


def days_of_windows(windows: Iterable[int], window_us: int) -> set[str]:
    """The days ("2026-11-21") the windows cover (Manifest.with_days)."""
    return {h[:10] for h in hours_of_windows(windows, window_us)}


def files_for_windows(
    files: dict[str, FileEntry], windows: Iterable[int], window_us: int, exclude: set[str]
) -> list[str]:
    """Consumed files (not in `exclude`, not damaged) with a line in one of `windows`
    (window starts, µs)."""
    ws = sorted(set(windows))
    if not ws:
        return []
    hours = hours_of_windows(ws, window_us)
    out = []
    for path, e in files.items():
        if path in exclude or e.damaged:
            continue
        for h, (lo, hi) in e.hours.items():
            if h not in hours:
                continue
            # the last window starting at or before `hi` must end after `lo`
            i = bisect.bisect_right(ws, hi) - 1
            if i >= 0 and ws[i] + window_us > lo:
                out.append(path)
                break
    return sorted(out)


def parts_of_windows(windows: Iterable[int]) -> set[str]:
    return {part_of(w) for w in windows}
