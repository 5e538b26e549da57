"""The ingest's memory, under `<out>/_ingest/`: which landing files it has consumed (and
where in time each one's lines lie), which version of every table partition is current,
and the order of steps that makes a run atomic and safe against a crash.

A run N (engine.py) goes through these steps; each is safe to repeat:

1. `pending-N.json`: the staging directories it is about to write (a crash before step 3
   leaves only these, which the next run deletes).
2. The tables' new partitions are written under `<out>/<table>/_staging/rN/`.
3. **Commit**: `runs/rN.json` (written whole, then renamed) records the files consumed and
   the partitions replaced. A run either has this record or never happened.
4. Publish: each staged partition is renamed to `<out>/<table>/<partition>/vN` (its
   version directory; the one it replaces stays for `--retain`, for readers that are
   still reading it).
5. The catalog's partitions are pointed at the new versions (catalog.py), and
   `applied.json` says N. A run that finds the last record not applied repeats 4 and 5.

State is the last compacted `state-M.json` plus the records after it; a record is small
(this run's files and partitions). A compaction (every COMPACT_EVERY runs) writes the state
whole, but for the files consumed long ago: the state keeps the entries of the files with
lines in the last FOLD_AFTER_HOURS of data (the newest line of any consumed file counts as
now); older entries are *folded* into day shards, `files/<day>-<M>.json` (a file's day is
the one in its landing name, `landing-<yyyymmdd>T...`), and the state keeps of each shard
only its summary: which days its files' lines lie in, how many files, bytes and files per
site. A run loads a shard only when it needs it: for windows of those days (late data), or
to tell whether a listed file of that day was consumed when the listing does not match the
summary. So what every run loads is bounded by FOLD_AFTER_HOURS of traffic plus one line
per day of history, not by every file ever consumed.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import os
import re
import socket
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from spark_ingest.hfs import HFS

INGEST_DIR = "_ingest"
COMPACT_EVERY = 50
#: a consumed file's entry stays in the state while it has lines within this many hours of
#: the newest consumed line; then it is folded into its day's shard (module docstring)
FOLD_AFTER_HOURS = 48
_DAY = re.compile(r"landing-(\d{8})T")
#: the format of what is kept here; a run refuses a state of another format
FORMAT = 1


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class FileEntry:
    """One consumed landing file."""

    bytes: int
    modified: int  # ms since the epoch
    site: str
    #: hour ("2026-11-21T05") -> [first, last] time (µs) of its lines in that hour
    hours: dict[str, list[int]] = field(default_factory=dict)
    lines: int = 0
    damaged: str | None = None

    @staticmethod
    def of(d: dict[str, Any]) -> FileEntry:
        return FileEntry(**d)


@dataclass
class State:
    run: int = 0
    config: dict[str, Any] = field(default_factory=dict)
    files: dict[str, FileEntry] = field(default_factory=dict)
    #: table -> partition key ("date=2026-11-21/hour=5", "" unpartitioned) -> version (run)
    parts: dict[str, dict[str, int]] = field(default_factory=dict)
    #: [location, ms since it was replaced]
    superseded: list[list[Any]] = field(default_factory=list)
    #: site -> {"last_file_at": ms, "cameras": bool}: when the site last published a file
    #: (its newest file's modification time), and whether it has cameras
    sites: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: shard (a day, "20261121", or "other") -> its summary: "v" (the compaction that wrote
    #: it), "files", "bytes", "days" (the days, "2026-11-21", its files' lines lie in),
    #: "sites" (site -> files)
    folded: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> str:
        d = {k: v for k, v in vars(self).items() if k != "files"}
        d["files"] = {p: vars(e) for p, e in self.files.items()}
        d["format"] = FORMAT
        return json.dumps(d, separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> State:
        d = json.loads(text)
        if d.pop("format", None) != FORMAT:
            raise ValueError("the ingest state under _ingest/ has an unknown format")
        d["files"] = {p: FileEntry.of(e) for p, e in d["files"].items()}
        return State(**d)

    def files_per_site(self, new: dict[str, FileEntry], full: bool) -> dict[str, int]:
        """Consumed files per site once `new` (the run's entries) are consumed too."""
        out: dict[str, int] = {}
        if not full:
            for e in self.files.values():
                out[e.site] = out.get(e.site, 0) + 1
            for summary in self.folded.values():
                for site, n in summary.get("sites", {}).items():
                    out[site] = out.get(site, 0) + int(n)
        for e in new.values():
            out[e.site] = out.get(e.site, 0) + 1
        return out


@dataclass
class RunRecord:
    """What run `run` changed (step 3 of the module docstring)."""

    run: int
    full: bool
    config: dict[str, Any]
    started_ms: int
    finished_ms: int = 0
    files: dict[str, FileEntry] = field(default_factory=dict)
    #: table -> partition key -> its new version (this run), or None when it was dropped
    parts: dict[str, dict[str, int | None]] = field(default_factory=dict)
    superseded: list[list[Any]] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)
    sites: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: staging directory of each table written
    staging: dict[str, str] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> RunRecord:
        d = json.loads(text)
        d["files"] = {p: FileEntry.of(e) for p, e in d["files"].items()}
        return RunRecord(**d)


def apply(state: State, rec: RunRecord) -> State:
    """The state after `rec` (pure)."""
    files = {} if rec.full else dict(state.files)
    files.update(rec.files)
    folded = {} if rec.full else dict(state.folded)
    parts = {t: dict(p) for t, p in state.parts.items()}
    for table, changes in rec.parts.items():
        mine = parts.setdefault(table, {})
        for key, version in changes.items():
            if version is None:
                mine.pop(key, None)
            else:
                mine[key] = version
    expired = set(rec.expired)
    superseded = [s for s in state.superseded if s[0] not in expired] + rec.superseded
    sites = {**state.sites, **rec.sites}
    return State(rec.run, dict(rec.config), files, parts, superseded, sites, folded)


def shard_of(path: str) -> str:
    """The shard a consumed file is folded into: the day in its landing name."""
    m = _DAY.search(path.rsplit("/", 1)[-1])
    return m.group(1) if m else "other"


def _days(e: FileEntry) -> list[str]:
    """The days (UTC, "2026-11-21") of a file's lines."""
    return sorted({h[:10] for h in e.hours})


def _newest_hour(e: FileEntry) -> str:
    return max(e.hours) if e.hours else ""


def to_fold(files: dict[str, FileEntry], hours: int = FOLD_AFTER_HOURS) -> list[str]:
    """The files (of `files`) to fold (pure): those whose newest line is more than `hours`
    before the newest line of any of them; a file without lines (empty, damaged) folds at
    once."""
    newest = max((_newest_hour(e) for e in files.values()), default="")
    if not newest:
        return sorted(files)
    t = calendar.timegm(time.strptime(newest, "%Y-%m-%dT%H")) - hours * 3600
    cut = time.strftime("%Y-%m-%dT%H", time.gmtime(t))
    return sorted(p for p, e in files.items() if _newest_hour(e) < cut)


def _digest(names: Iterable[str]) -> str:
    return hashlib.sha1("\n".join(sorted(names)).encode()).hexdigest()


def part_key(date: Any, hour: Any) -> str:
    return f"date={date}/hour={int(hour)}"


def location(out: str, table: str, key: str, version: int) -> str:
    """Where version `version` of a partition lives (`key` "" for an unpartitioned table)."""
    return f"{out}/{table}/{key + '/' if key else ''}v{version:08d}"


def staging(out: str, table: str, run: int) -> str:
    return f"{out}/{table}/_staging/r{run:08d}"


class LockedError(RuntimeError):
    """Another run holds `<out>/_ingest/LOCK`."""


class Manifest:
    """Reading and writing `<out>/_ingest/` (see the module docstring)."""

    def __init__(self, hfs: HFS, out: str) -> None:
        self.hfs = hfs
        self.out = out.rstrip("/")
        self.dir = f"{self.out}/{INGEST_DIR}"
        self._locked = False

    # -- the lock --------------------------------------------------------------------------
    def lock(self) -> None:
        """Take the lock, or raise LockedError naming its holder. A lock left by a process of
        this host that no longer runs (kill -9) is taken over."""
        me = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "since": now_ms()})
        path = f"{self.dir}/LOCK"
        self.hfs.mkdirs(self.dir)
        for _ in range(2):
            if self.hfs.create_exclusive(path, me):
                self._locked = True
                return
            text = self.hfs.read_text(path) or "{}"
            try:
                holder = json.loads(text)
            except ValueError:
                holder = {}
            mine = holder.get("pid") == os.getpid()  # an earlier run of this process died
            if holder.get("host") == socket.gethostname() and (
                mine or not _alive(holder.get("pid"))
            ):
                self.hfs.delete(path)
                continue
            raise LockedError(
                f"{path} is held by pid {holder.get('pid')} on {holder.get('host')} (another "
                "run on this --out); if that process is gone, delete the file"
            )
        raise LockedError(f"could not take {path}")

    def unlock(self) -> None:
        if self._locked:
            self.hfs.delete(f"{self.dir}/LOCK")
            self._locked = False

    # -- state -----------------------------------------------------------------------------
    def _records(self) -> list[int]:
        return sorted(
            int(n[1:-5])
            for n in self.hfs.names(f"{self.dir}/runs")
            if n.startswith("r") and n.endswith(".json") and n[1:-5].isdigit()
        )

    def _compactions(self) -> list[int]:
        return sorted(
            int(n[6:-5])
            for n in self.hfs.names(self.dir)
            if n.startswith("state-") and n.endswith(".json") and n[6:-5].isdigit()
        )

    def record(self, run: int) -> RunRecord | None:
        text = self.hfs.read_text(f"{self.dir}/runs/r{run:010d}.json")
        return None if text is None else RunRecord.from_json(text)

    def load(self) -> State:
        """The state after the last committed run (an empty State before the first)."""
        compact = self._compactions()
        state = State()
        if compact:
            text = self.hfs.read_text(f"{self.dir}/state-{compact[-1]:010d}.json")
            state = State.from_json(text or "")
        for n in self._records():
            if n > state.run:
                rec = self.record(n)
                if rec is not None:
                    state = apply(state, rec)
        return state

    def commit(self, state: State, rec: RunRecord) -> State:
        """Step 3: record `rec` (atomically), and compact now and then. Returns the new
        state."""
        self.hfs.mkdirs(f"{self.dir}/runs")
        self.hfs.write_once(f"{self.dir}/runs/r{rec.run:010d}.json", rec.to_json())
        new = apply(state, rec)
        if rec.full or rec.run % COMPACT_EVERY == 0:
            new = self._fold(new)
            self.hfs.write_once(f"{self.dir}/state-{rec.run:010d}.json", new.to_json())
            self._clean_shards(new)
            # what the compaction covers is no longer needed (the last records are kept for
            # a human reading what recent runs did)
            for n in self._compactions():
                if n < rec.run:
                    self.hfs.delete(f"{self.dir}/state-{n:010d}.json")
            for n in self._records():
                if n <= rec.run - COMPACT_EVERY:
                    self.hfs.delete(f"{self.dir}/runs/r{n:010d}.json")
        return new

    # -- folded entries (the module docstring) -------------------------------------------
    def _shard_path(self, key: str, version: int) -> str:
        return f"{self.dir}/files/{key}-{version:010d}.json"

    def shard(self, state: State, key: str) -> dict[str, FileEntry]:
        """The entries folded into shard `key` ({} when there is none)."""
        summary = state.folded.get(key)
        if summary is None:
            return {}
        text = self.hfs.read_text(self._shard_path(key, int(summary["v"])))
        if text is None:
            raise RuntimeError(f"{self.dir}: the shard {key} of the state is missing")
        return {p: FileEntry.of(e) for p, e in json.loads(text).items()}

    def _fold(self, state: State) -> State:
        """`state` with its old entries folded into their shards (written here, as version
        `state.run`; the state that names them is written after)."""
        by_key: dict[str, list[str]] = {}
        for p in to_fold(state.files):
            by_key.setdefault(shard_of(p), []).append(p)
        if not by_key:
            return state
        files = dict(state.files)
        folded = dict(state.folded)
        self.hfs.mkdirs(f"{self.dir}/files")
        for key, paths in sorted(by_key.items()):
            entries = self.shard(state, key)
            for p in paths:
                entries[p] = files.pop(p)
            text = json.dumps({p: vars(e) for p, e in entries.items()}, separators=(",", ":"))
            # replaced, not write_once: a compaction that crashed before its state was
            # written may have left this name with other entries
            self.hfs.write_text(self._shard_path(key, state.run), text)
            sites: dict[str, int] = {}
            for e in entries.values():
                sites[e.site] = sites.get(e.site, 0) + 1
            folded[key] = {
                "v": state.run,
                "files": len(entries),
                "bytes": sum(e.bytes for e in entries.values()),
                "names": _digest(entries),
                "days": sorted({d for e in entries.values() for d in _days(e)}),
                "sites": sites,
            }
        return State(
            state.run, state.config, files, state.parts, state.superseded, state.sites, folded
        )

    def _clean_shards(self, state: State) -> None:
        """Delete the shard versions `state` does not name (replaced, or left by a crash)."""
        keep = {
            self._shard_path(k, int(v["v"])).rsplit("/", 1)[-1] for k, v in state.folded.items()
        }
        for n in self.hfs.names(f"{self.dir}/files"):
            if n.endswith(".json") and n not in keep:
                self.hfs.delete(f"{self.dir}/files/{n}")

    def known(self, state: State, listed: dict[str, int]) -> dict[str, int]:
        """Of the `listed` files (path -> bytes), those consumed before, with their bytes
        then. A folded day is read only when its listed files are not exactly the ones its
        summary counts (same names, same total bytes)."""
        out = {p: state.files[p].bytes for p in listed if p in state.files}
        by_key: dict[str, list[str]] = {}
        for p in listed:
            if p not in out:
                by_key.setdefault(shard_of(p), []).append(p)
        for key, paths in by_key.items():
            summary = state.folded.get(key)
            if summary is None:
                continue
            if (
                len(paths) == int(summary["files"])
                and sum(listed[p] for p in paths) == int(summary["bytes"])
                and _digest(paths) == summary.get("names")
            ):
                out.update({p: listed[p] for p in paths})
                continue
            entries = self.shard(state, key)
            out.update({p: entries[p].bytes for p in paths if p in entries})
        return out

    def with_days(self, state: State, days: set[str]) -> dict[str, FileEntry]:
        """The consumed files that may have lines in `days` ("2026-11-21"): the state's and
        those of the shards whose lines reach into one of them."""
        out = dict(state.files)
        for key, summary in sorted(state.folded.items()):
            if days & set(summary.get("days", [])):
                out.update(self.shard(state, key))
        return out

    # -- pending and applied ---------------------------------------------------------------
    def write_pending(self, run: int, paths: list[str]) -> None:
        self.hfs.mkdirs(self.dir)
        self.hfs.write_text(f"{self.dir}/pending-{run:010d}.json", json.dumps(paths))

    def pending(self) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for n in self.hfs.names(self.dir):
            if n.startswith("pending-") and n.endswith(".json") and n[8:-5].isdigit():
                out[int(n[8:-5])] = list(json.loads(self.hfs.read_text(f"{self.dir}/{n}") or "[]"))
        return out

    def clear_pending(self, run: int) -> None:
        self.hfs.delete(f"{self.dir}/pending-{run:010d}.json")

    def applied(self) -> int:
        text = self.hfs.read_text(f"{self.dir}/applied.json")
        return int(json.loads(text)["run"]) if text else 0

    def mark_applied(self, run: int) -> None:
        self.hfs.write_text(f"{self.dir}/applied.json", json.dumps({"run": run}))


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
