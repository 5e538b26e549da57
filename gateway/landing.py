"""Landing zone for Spark (design.md "Landing zone"): every accepted notification as one
JSON line under <data-dir>/landing/.

Files are written as hidden `.landing-<UTC>-<seq>.jsonl.tmp`, fsynced after every batch and
renamed to `landing-<UTC yyyymmddTHHMMSS>-<seq>.jsonl` when they reach --landing-max-bytes
or --landing-max-age (or on shutdown), so a reader only ever sees complete files.

Exactly once: lines first enter a SQLite outbox in the same transaction that accepts the
Notify; this writer appends them, fsyncs, then deletes them from the outbox. After a crash,
`recover()` cuts a torn last line from a leftover temporary file, removes the ids it holds
from the outbox (they are already on disk) and publishes the file; what is left in the
outbox is written again. No line is lost or written twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from pathlib import Path
from typing import IO

from gateway.landing_files import OutboxWriter
from gateway.landing_record import Item, RecordBuilder, items_for, record
from gateway.storage import Storage

__all__ = ["Item", "LandingWriter", "RecordBuilder", "items_for", "record"]


class LandingWriter(OutboxWriter):
    """JSON-lines landing files (see the module docstring); the shared run loop, stop
    protocol and file names are landing_files.OutboxWriter's."""

    suffix = ".jsonl"
    what = "landing flush"

    def __init__(
        self,
        directory: Path,
        storage: Storage,
        max_bytes: int = 64 * 1024 * 1024,
        max_age: float = 60.0,
    ) -> None:
        super().__init__(directory, storage, max_bytes, max_age)
        self._fh: IO[bytes] | None = None
        self._tmp: Path | None = None
        self._final_path: Path | None = None
        self._opened_at = 0.0
        self._size = 0
        self.lines_written = 0

    @property
    def open_file(self) -> tuple[str, int] | None:
        """The name and size of the temporary file being written now, if any (for
        gateway.status)."""
        return (self._tmp.name, self._size) if self._tmp is not None else None

    # ---- start / stop ----
    def recover(self) -> None:
        """Publish temporary files a crash left behind (see module docstring)."""
        self._scan_seq()
        for p in sorted(self.dir.glob(".landing-*.jsonl.tmp")):
            data = p.read_bytes()
            cut = data.rfind(b"\n") + 1
            good = data[:cut]
            ids = []
            for line in good.splitlines():
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    ids.append(json.loads(line)["id"])
            if cut != len(data):
                with open(p, "r+b") as fh:
                    fh.truncate(cut)
                    fh.flush()
                    os.fsync(fh.fileno())
            if ids:
                self.storage.landing_forget_ids_sync(ids)
            if good:
                final = self.dir / p.name[1:].removesuffix(".tmp")
                os.replace(p, final)
            else:
                p.unlink()
        self._fsync_dir()

    def start(self) -> None:
        self._start_task("landing-writer")

    async def _final(self) -> None:
        """Write what is left in the outbox, publish the open file (even if that failed)."""
        try:
            await self.flush()
        finally:
            self._rotate()

    def kick(self) -> None:
        self._wake.set()

    # ---- writing ----
    def _due(self) -> bool:
        return True  # every wake-up flushes: lines are appended as they come

    async def _work(self) -> None:
        await self.flush()

    def _after_work(self) -> None:
        if self._fh is not None and time.time() - self._opened_at >= self.max_age:
            self._rotate()

    async def flush(self) -> None:
        """Write everything in the outbox to the open file (fsynced), then delete it from
        the outbox. Exclusive: concurrent callers wait for each other."""
        async with self._lock:
            await self._flush_locked()

    async def _flush_locked(self) -> None:
        while True:
            rows = await self.storage.landing_pending(2000)
            if not rows:
                return
            data = b"".join(r[2].encode() + b"\n" for r in rows)
            await asyncio.get_running_loop().run_in_executor(None, self._append, data)
            await self.storage.landing_done(rows[-1][0])
            self.lines_written += len(rows)
            if self._size >= self.max_bytes:
                self._rotate()
            if len(rows) < 2000:
                return

    def _append(self, data: bytes) -> None:
        if self._fh is None:
            self._open()
        assert self._fh is not None
        self._fh.write(data)
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._size += len(data)

    def _open(self) -> None:
        self._tmp, self._final_path = self._new_name()
        self._fh = open(self._tmp, "ab")  # noqa: SIM115 - kept open across batches
        self._opened_at = time.time()
        self._size = 0

    def _rotate(self) -> None:
        if self._fh is None or self._tmp is None or self._final_path is None:
            return
        self._fh.close()
        self._fh = None
        if self._size:
            os.replace(self._tmp, self._final_path)
        else:
            self._tmp.unlink(missing_ok=True)
        self._fsync_dir()
