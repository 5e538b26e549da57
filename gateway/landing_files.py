"""What the two landing writers share (landing.LandingWriter for JSON lines,
landing_parquet.ParquetLandingWriter): a background task that moves records from a SQLite
outbox into files of the landing directory, file names, and the stop protocol.

A caller may rely on: files are named `landing-<UTC yyyymmddTHHMMSS>-<seq><suffix>`, are
written as hidden `.<name>.tmp` first, and a sequence number is never reused in a directory;
`stop()` never cancels a write half-way (the write runs in a thread that cannot be stopped,
and an unrecorded write followed by another would land the same outbox rows twice), it lets
the write in progress finish and then runs the writer's final step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from gateway.storage import FULL_BELOW, OPEN_RETRY_MAX, Storage, StorageError, free_bytes

log = logging.getLogger("gateway.landing")


def name_pattern(suffix: str) -> re.Pattern[str]:
    """Published and temporary landing file names with `suffix` (".jsonl", ".parquet")."""
    return re.compile(r"^\.?landing-(\d{8}T\d{6})-(\d+)" + re.escape(suffix) + r"(\.tmp)?$")


class OutboxWriter:
    """Base of the landing writers. Subclasses set `suffix` and `what` (for logs) and
    implement `_due()`, `_work()` and `_final()`."""

    suffix = ""
    what = "landing file"

    def __init__(self, directory: Path, storage: Storage, max_bytes: int, max_age: float) -> None:
        self.dir = directory
        self.storage = storage
        self.max_bytes = max_bytes
        self.max_age = max_age
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # makes writes exclusive; stop() sets _stopping and wakes the run loop, which
        # returns between writes (see the module docstring)
        self._lock = asyncio.Lock()
        self._stopping = False
        self._seq = 0
        #: the error of the failing write, and since when (time.time()); None when writing
        self.error: str | None = None
        self.failing_since: float | None = None
        self._failures = 0

    # ---- hooks ----
    def _due(self) -> bool:
        """Whether the run loop should call _work() now."""
        raise NotImplementedError

    async def _work(self) -> None:
        """Move what is due from the outbox to a file."""
        raise NotImplementedError

    def _after_work(self) -> None:
        """Called by the run loop after each wake-up that was due, failed or not."""

    async def _final(self) -> None:
        """The last write at stop(), after the run loop has returned."""
        raise NotImplementedError

    # ---- start / stop ----
    def _scan_seq(self) -> None:
        """Continue the sequence after every landing file of this kind in the directory."""
        self.dir.mkdir(parents=True, exist_ok=True)
        pattern = name_pattern(self.suffix)
        for p in self.dir.iterdir():
            m = pattern.match(p.name)
            if m:
                self._seq = max(self._seq, int(m.group(2)))

    def _start_task(self, name: str) -> None:
        self._task = asyncio.create_task(self._run(), name=name)

    async def stop(self) -> None:
        """Let a write in progress finish, then run the final write (errors are logged:
        what was not written stays in the outbox for the next start)."""
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
            self._task = None
        try:
            await self._final()
        except (OSError, StorageError) as e:  # what is not written waits in the outbox
            log.warning("final %s failed: %s; written at the next start", self.what, _describe(e))
        except Exception:
            log.exception("final %s failed", self.what)

    async def _run(self) -> None:
        tick = max(0.05, min(1.0, self.max_age / 4))
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(tick):  # not wait_for: gateway/onvif/client.py _call
                    await self._wake.wait()
            self._wake.clear()
            if self._stopping:
                return
            if not self._due():
                continue
            try:
                await self._work()
            except Exception as e:  # keep the writer alive; the records stay in the outbox
                self._failed(e, tick)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), tick)
            else:
                self._recovered()
            self._after_work()

    @property
    def problem(self) -> str | None:
        """Why the writer cannot write now (for /readyz), None while it can."""
        if self.error is None:
            return None
        return f"{self.what} failing since {_utc(self.failing_since)}: {self.error}"

    def _failed(self, e: Exception, tick: float) -> None:
        """One WARNING when writing starts failing (a traceback only for what is not an
        I/O or storage error: a bug), then silence until it recovers."""
        self._failures += 1
        if self.error is not None:
            self.error = _describe(e)
            return
        self.error = _describe(e)
        self.failing_since = time.time()
        if isinstance(e, OSError | StorageError):
            log.warning(
                "%s failed: %s; retrying every %g s, the records wait in the outbox "
                "(/readyz: not ready)",
                self.what, self.error, tick,
            )  # fmt: skip
        else:
            log.exception("%s failed; retrying every %g s", self.what, tick)

    def _recovered(self) -> None:
        if self.error is None:
            return
        log.warning(
            "%s recovered after %d failed attempts over %.0f s (last error: %s)",
            self.what, self._failures, time.time() - (self.failing_since or time.time()),
            self.error,
        )  # fmt: skip
        self.error = None
        self.failing_since = None
        self._failures = 0

    # ---- files ----
    def _new_name(self) -> tuple[Path, Path]:
        """(temporary, final) paths for the next file."""
        self.dir.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        while True:
            self._seq += 1
            name = f"landing-{stamp}-{self._seq:06d}{self.suffix}"
            if not (self.dir / name).exists() and not (self.dir / f".{name}.tmp").exists():
                return self.dir / f".{name}.tmp", self.dir / name

    def _fsync_dir(self) -> None:
        with contextlib.suppress(OSError):
            fd = os.open(self.dir, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def wait_for_room(fn: Callable[[], None], directory: Path, what: str) -> None:
    """Run `fn` (a recovery at start, idempotent); while it fails for a full disk, wait
    for room and run it again (1 s, doubling to OPEN_RETRY_MAX, one WARNING): writing
    anything new before it ran would land its records a second time."""
    delay = 1.0
    while True:
        try:
            fn()
        except (OSError, StorageError) as e:
            free = free_bytes(directory)
            if free is None or free > FULL_BELOW:
                raise
            if delay == 1.0:
                log.warning(
                    "%s recovery at start failed: %s with %d bytes free; waiting for room",
                    what, _describe(e), free,
                )  # fmt: skip
            time.sleep(delay)  # at start: nothing is served yet
            delay = min(OPEN_RETRY_MAX, delay * 2)
            continue
        return


def _describe(e: Exception) -> str:
    if isinstance(e, OSError) and e.strerror:
        return e.strerror + (f": {e.filename}" if e.filename else "")
    return f"{type(e).__name__}: {e}" if not isinstance(e, StorageError) else str(e)


def _utc(t: float | None) -> str:
    if t is None:
        return "?"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
