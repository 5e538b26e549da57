"""Landing zone for Spark (design.md "Landing zone"): every accepted notification as one
JSON line under <data-dir>/landing/.

Files are written as hidden `.landing-<UTC>-<seq>.jsonl.tmp`, fsynced after every batch and
renamed to `landing-<UTC yyyymmddTHHMMSS>-<seq>.jsonl` when they reach --landing-max-bytes
or --landing-max-age (or on shutdown), so a reader only ever sees complete files.

Exactly once: lines first enter a SQLite outbox in the same transaction that accepts the
Notify; this writer appends them, fsyncs, then deletes them from the outbox. After a crash,
`recover()` cuts a torn last line from a leftover temporary file, removes the ids it holds
from the outbox (they are already on disk) and publishes the file; what is left in the
outbox is written again. No line is lost or written twice:

- an append is all or nothing: when a write or its fsync fails (a full disk), the file is
  cut back to its last whole batch (`ftruncate`, which needs no space) before the error
  goes on, and checked again before the next append;
- lines on disk whose outbox rows could not be deleted (the database full too) are never
  written again: the writer remembers how far it wrote, deletes those rows first on its
  next round, and does not publish the file before (a restart meanwhile: `recover()`);
- a failing write is retried (the records wait in the outbox) and the writer says so:
  one WARNING when it starts failing, one when it recovers, and `problem` (for /readyz)
  meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from pathlib import Path
from typing import IO

from gateway.landing_files import OutboxWriter, wait_for_room
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
        #: the last outbox seq written to the open file whose rows are not deleted yet
        self._done_pending: int | None = None

    @property
    def open_file(self) -> tuple[str, int] | None:
        """The name and size of the temporary file being written now, if any (for
        gateway.status)."""
        return (self._tmp.name, self._size) if self._tmp is not None else None

    # ---- start / stop ----
    def recover(self) -> None:
        """Publish temporary files a crash left behind (see module docstring); on a full
        disk, once there is room (landing_files.wait_for_room)."""
        wait_for_room(self._recover, self.dir, self.what)

    def _recover(self) -> None:
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
        if self._done_pending is not None:  # on disk already: only the rows go
            await self.storage.landing_done(self._done_pending)
            self._done_pending = None
        while True:
            rows = await self.storage.landing_pending(2000)
            if not rows:
                return
            data = b"".join(r[2].encode() + b"\n" for r in rows)
            await asyncio.get_running_loop().run_in_executor(None, self._append, data)
            self._done_pending = rows[-1][0]
            self.lines_written += len(rows)
            await self.storage.landing_done(rows[-1][0])
            self._done_pending = None
            if self._size >= self.max_bytes:
                self._rotate()
            if len(rows) < 2000:
                return

    def _append(self, data: bytes) -> None:
        """Append `data` and fsync, or leave the file as it was (module docstring)."""
        if self._fh is None:
            self._open()
        assert self._fh is not None
        fd = self._fh.fileno()
        if os.fstat(fd).st_size != self._size:  # a failed append not cut back yet
            os.ftruncate(fd, self._size)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self._size)  # frees blocks: works on a full disk
            raise
        self._size += len(data)

    def _open(self) -> None:
        self._tmp, self._final_path = self._new_name()
        # unbuffered: what os.write wrote is what the file holds (kept open across batches)
        self._fh = open(self._tmp, "ab", buffering=0)  # noqa: SIM115
        self._opened_at = time.time()
        self._size = 0

    def _rotate(self) -> None:
        if self._fh is None or self._tmp is None or self._final_path is None:
            return
        if self._done_pending is not None:
            # its last lines' rows are still in the outbox: published only once they are
            # deleted (a stop meanwhile leaves it hidden for recover() at the next start)
            if self._stopping:
                self._fh.close()
                self._fh = None
            return
        self._fh.close()
        self._fh = None
        if self._size:
            os.replace(self._tmp, self._final_path)
        else:
            self._tmp.unlink(missing_ok=True)
        self._fsync_dir()
