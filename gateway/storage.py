"""Durable state of the broker in one SQLite database (WAL) under --data-dir.

Everything the broker must not forget lives here: subscriptions, pending deliveries,
pull points and their messages, publisher registrations, current messages, grown topics
and the landing-zone outbox. Protocol modules never touch SQL; they call these methods.

Threading: one connection, used only by one dedicated writer thread. Every public
coroutine runs one small transaction on that thread, so the event loop never blocks on
SQLite and writes are serialized without lock contention inside the process.

One gateway per data directory: `open` takes an exclusive lock on `<data-dir>/gateway.lock`
(fcntl, released by the kernel when the process ends, kill -9 included) and writes its pid
there; a second gateway on the same directory gets a StorageError naming the holder. (Two
processes on one directory would each believe they own the landing files and the outbox.)

Durability: journal_mode=WAL with synchronous=FULL (default): a COMMIT returns only after
the WAL is fsynced, so anything the broker acknowledged survives kill -9 and power loss.
`synchronous="NORMAL"` is offered as an option: with WAL it survives a process crash
(kill -9: the WAL is in the OS page cache) but may lose the last commits on power loss.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from gateway.storage_accept import Accept, accept_shared
from gateway.storage_accept import AcceptBatch as AcceptBatch  # re-exported: callers build it
from gateway.storage_accept import AcceptResult as AcceptResult
from gateway.storage_demand import DemandTables
from gateway.storage_landing import LandingTables
from gateway.storage_rows import Pending as Pending  # re-exported: callers name the rows here
from gateway.storage_rows import RegistrationRow as RegistrationRow
from gateway.storage_rows import Snapshot as Snapshot
from gateway.storage_rows import StorageError as StorageError
from gateway.storage_rows import SubscriptionRow as SubscriptionRow
from gateway.storage_schema import AFTER_SUBREF, prepare
from gateway.storage_seen import SEEN_SCHEMA, SeenKey, is_seen, record_seen

T = TypeVar("T")
#: the data directory's lock file (module docstring)
LOCK_NAME = "gateway.lock"
#: a directory with less free than this is full (for `open`'s wait), and its longest pause
FULL_BELOW = 1024 * 1024
OPEN_RETRY_MAX = 30.0
log = logging.getLogger("gateway.storage")


def free_bytes(d: Path) -> int | None:
    """The bytes free for this process in the file system of `d` (None if unknown)."""
    try:
        st = os.statvfs(d)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


class Storage(DemandTables, LandingTables):
    def __init__(
        self,
        path: Path,
        synchronous: str = "FULL",
        busy_timeout_ms: int = 5000,
        seen_keep: int = 100_000,
        seen_max_age: float = 86_400.0,
    ):
        self.path = path
        self.synchronous = synchronous.upper()
        if self.synchronous not in ("FULL", "NORMAL", "EXTRA"):
            raise ValueError("synchronous must be FULL, NORMAL or EXTRA")
        self.busy_timeout_ms = busy_timeout_ms
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wsn-sqlite")
        self._conn: sqlite3.Connection | None = None
        #: a second connection, only for `seen` (a read in WAL mode never waits for the writer)
        self._reader: sqlite3.Connection | None = None
        #: bounds of the Notify seen-set (gateway.storage_seen): rows, seconds
        self.seen_keep = seen_keep
        self.seen_max_age = seen_max_age
        self._lock = threading.Lock()
        #: pull point -> an upper bound of the bytes of its messages (storage_accept; used
        #: and changed on the writer thread only)
        self._pp_held: dict[str, int] = {}
        #: cumulative seconds spent inside SQLite (for benchmarks)
        self.busy_seconds = 0.0
        self.transactions = 0
        self.groups = 0
        #: called from the writer thread with each transaction's duration (gateway.metrics)
        self.on_commit: Callable[[float], None] | None = None
        self._pending: list[tuple[Callable[[sqlite3.Connection], Any], asyncio.Future[Any]]] = []
        self._lock_fd: int | None = None  # <data-dir>/gateway.lock, held while open
        self._group_task: asyncio.Future[None] | None = None

    # ---- lifecycle ----
    def open(self) -> None:
        """Lock the data directory and open the database. On a full disk (SQLite cannot
        even recover its WAL after a crash) it waits for room, trying again after 1 s,
        doubling to OPEN_RETRY_MAX, with one WARNING line; any other failure raises."""
        self._lock_data_dir()
        delay = 1.0
        try:
            while True:
                try:
                    self._executor.submit(self._open).result()
                    break
                except sqlite3.OperationalError as e:
                    free = free_bytes(self.path.parent)
                    if free is None or free > FULL_BELOW:
                        raise
                    if delay == 1.0:
                        log.warning(
                            "cannot open %s (%s) with %d bytes free in its directory: waiting "
                            "for room, trying again every %g s at most",
                            self.path, e, free, OPEN_RETRY_MAX,
                        )  # fmt: skip
                    time.sleep(delay)  # at start: nothing is served yet
                    delay = min(OPEN_RETRY_MAX, delay * 2)
            if delay > 1.0:
                log.warning("opened %s: the disk has room again", self.path)
        except BaseException:
            self._unlock_data_dir()
            raise
        reader = sqlite3.connect(
            str(self.path), isolation_level=None, check_same_thread=False, timeout=0
        )
        # queried on the event loop (seen), so it never waits: busy timeout 0 (connect's
        # timeout=0 set it; stated again). In WAL no other process's lock makes a read busy,
        # only WAL recovery after a crash (docs/gateway.md "Never a stall"); then that Notify
        # is a Receiver fault its publisher retries, not the loop stalled up to 5 s
        reader.execute("PRAGMA busy_timeout=0")
        self._reader = reader

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            str(self.path), isolation_level=None, check_same_thread=False, timeout=0
        )
        try:
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_ms)}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute("PRAGMA foreign_keys=OFF")
            prepare(conn)  # the schema, migrating an older file (storage_schema)
            conn.execute(SEEN_SCHEMA)  # versionless: created if missing (storage_seen)
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def _lock_data_dir(self) -> None:
        """Take the data directory's lock (module docstring), or StorageError naming the
        process that holds it."""
        if self._lock_fd is not None:
            return
        d = self.path.parent
        d.mkdir(parents=True, exist_ok=True)
        lock = d / LOCK_NAME
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise StorageError(
                f"data directory {d} is in use by another gateway (pid {holder}, {lock}): "
                "stop it, or give this one another --data-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def _unlock_data_dir(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the lock
            self._lock_fd = None

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

        def _close() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        self._executor.submit(_close).result()
        self._executor.shutdown(wait=True)
        self._unlock_data_dir()

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._tx, fn)

    def _sync(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` in one transaction on the writer thread and wait (start and recovery
        only: it blocks the caller)."""
        return self._executor.submit(self._tx, fn).result()

    def _tx(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._conn
        if conn is None:
            raise StorageError("storage is closed")
        t0 = time.perf_counter()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                out = fn(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as e:
            raise StorageError(f"storage failure: {e}") from e
        finally:
            dt = time.perf_counter() - t0
            self.busy_seconds += dt
            self.transactions += 1
            if self.on_commit is not None:
                self.on_commit(dt)
        return out

    # ---- operator views (gateway.status, /readyz) ----
    @property
    def is_open(self) -> bool:
        return self._conn is not None

    async def ping(self) -> None:
        """Raise StorageError unless a transaction can run now."""
        await self._run(lambda c: c.execute("SELECT 1").fetchone())

    # ---- load everything at start ----
    def load(self) -> Snapshot:
        return self._sync(self._load)

    @staticmethod
    def _load(c: sqlite3.Connection) -> Snapshot:
        subs = [
            SubscriptionRow.of(r)
            for r in c.execute(
                "SELECT id, consumer, filter, policy, raw, created, termination, paused,"
                " pullpoint, dialect, soap, client FROM subscriptions ORDER BY created"
            )
        ]
        dels = [
            Pending(r[0], r[1], r[1], r[2], r[3] == AFTER_SUBREF)
            for r in c.execute(
                "SELECT d.seq, d.sub_id, r.xml, r.kind FROM deliveries d"
                " JOIN renderings r ON r.id = d.ref ORDER BY d.seq"
            )
        ]
        pps = [
            (r[0], r[1], r[2])
            for r in c.execute(
                "SELECT p.id, p.created, (SELECT count(*) FROM pp_messages m WHERE m.pp_id=p.id)"
                " FROM pullpoints p"
            )
        ]
        regs = [
            RegistrationRow(r[0], r[1], r[2], bool(r[3]), r[4], r[5], r[6], r[7])
            for r in c.execute(
                "SELECT id, publisher, topics, demand, created, termination, device_id,"
                " last_seen FROM registrations ORDER BY created"
            )
        ]
        cur = [(r[0], r[1], r[2]) for r in c.execute("SELECT * FROM current_messages")]
        grown_rows = c.execute(
            "SELECT topic_ns, topic_path, client FROM grown_topics ORDER BY rowid"
        ).fetchall()
        grown = [(r[0], r[1]) for r in grown_rows]
        owners = {
            r[0]: (r[1] or "", int(r[2]))
            for r in c.execute(
                "SELECT p.id, p.client, (SELECT COALESCE(SUM(length(CAST(r.xml AS BLOB))), 0)"
                " FROM pp_messages m JOIN renderings r ON r.id = m.ref WHERE m.pp_id=p.id)"
                " FROM pullpoints p"
            )
        }
        by = {(r[0], r[1]): r[2] for r in grown_rows}
        return Snapshot(subs, dels, pps, regs, cur, grown, owners, by)

    # ---- subscriptions ----
    async def add_subscription(self, s: SubscriptionRow) -> None:
        def fn(c: sqlite3.Connection) -> None:
            c.execute(
                "INSERT INTO subscriptions(id, consumer, filter, policy, raw, created,"
                " termination, paused, pullpoint, dialect, soap, client)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    s.id,
                    s.consumer,
                    s.filter,
                    s.policy,
                    int(s.raw),
                    s.created,
                    s.termination,
                    int(s.paused),
                    s.pullpoint,
                    s.dialect,
                    s.soap,
                    s.client,
                ),
            )

        await self._run(fn)

    async def delete_subscriptions(self, ids: Sequence[str], seqs: Sequence[int] = ()) -> None:
        """Delete subscriptions and their pending deliveries `seqs` (the delivery queues
        know them; `deliveries` has no index by subscription, storage_schema)."""

        def fn(c: sqlite3.Connection) -> None:
            for i in ids:
                c.execute("DELETE FROM subscriptions WHERE id=?", (i,))
            c.executemany("DELETE FROM deliveries WHERE seq=?", [(s,) for s in seqs])

        await self._run(fn)

    async def update_subscription(self, sub_id: str, **cols: Any) -> None:
        allowed = {"termination", "paused"}
        if not cols or set(cols) - allowed:
            raise ValueError(f"can only update {allowed}")
        assigns = ", ".join(f"{k}=?" for k in cols)
        vals = [int(v) if isinstance(v, bool) else v for v in cols.values()]

        def fn(c: sqlite3.Connection) -> None:
            c.execute(f"UPDATE subscriptions SET {assigns} WHERE id=?", (*vals, sub_id))

        await self._run(fn)

    # ---- Notify ----
    async def accept(self, b: AcceptBatch) -> AcceptResult:
        """Commit one accepted Notify (see _grouped: returns once it is committed)."""
        b.pp_held = self._pp_held  # the pull points' bytes bound (storage_accept)
        return await self._grouped(Accept(b))

    async def _grouped(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Group commit: small writes (Notify acceptance, delivered-row deletion) arriving
        while a commit is in flight are committed together in the next transaction, one
        fsync for all of them; each caller still returns only after its own write is
        committed (or gets the StorageError that failed the group)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._pending.append((fn, fut))
        if self._group_task is None or self._group_task.done():
            self._group_task = asyncio.ensure_future(self._group_commit())
        result: T = await fut
        return result

    async def _group_commit(self) -> None:
        while self._pending:
            group, self._pending = self._pending, []

            def run_all(c: sqlite3.Connection, group: list[Any] = group) -> list[Any]:
                accepts = [f.batch for f, _ in group if isinstance(f, Accept)]
                if accepts:  # the rows a group's Notify share, once (storage_accept)
                    accept_shared(c, accepts)
                    seen = [a.seen for a in accepts if a.seen is not None]
                    if seen:  # in the same transaction as their messages (storage_seen)
                        record_seen(c, seen, time.time(), self.seen_keep, self.seen_max_age)
                return [f(c) for f, _ in group]

            try:
                results = await self._run(run_all)
            except Exception as e:
                for _, fut in group:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            self.groups += 1
            for (_, fut), r in zip(group, results, strict=True):
                if not fut.done():
                    fut.set_result(r)

    def seen(self, key: SeenKey) -> bool:
        """Whether a Notify with this (publisher, wsa:MessageID) was accepted (committed)
        and is still within the seen-set's bounds. Synchronous, on the caller's thread: a
        primary-key read on the reader connection, which in WAL mode does not wait for the
        writer's transaction and never waits for a lock (busy timeout 0: StorageError at
        once); a hop to a thread would cost more than the read."""
        r = self._reader
        if r is None:
            raise StorageError("storage is closed")
        try:
            return is_seen(r, key, time.time() - self.seen_max_age)
        except sqlite3.Error as e:
            raise StorageError(f"storage failure: {e}") from e

    async def delete_deliveries(self, seqs: Sequence[int]) -> None:
        def fn(c: sqlite3.Connection) -> None:
            c.executemany("DELETE FROM deliveries WHERE seq=?", [(s,) for s in seqs])

        await self._grouped(fn)

    # ---- pull points ----
    async def add_pullpoint(self, pp_id: str, created: float, client: str = "") -> None:
        """Store a pull point made by `client` (its address, for its quota after a restart)."""
        await self._run(
            lambda c: c.execute(
                "INSERT INTO pullpoints(id, created, client) VALUES (?,?,?)",
                (pp_id, created, client),
            )
        )

    async def delete_pullpoint(self, pp_id: str, sub_ids: Sequence[str]) -> None:
        def fn(c: sqlite3.Connection) -> None:
            c.execute("DELETE FROM pullpoints WHERE id=?", (pp_id,))
            c.execute("DELETE FROM pp_messages WHERE pp_id=?", (pp_id,))
            self._pp_held.pop(pp_id, None)
            for i in sub_ids:  # they fed the pull point: no rows in deliveries
                c.execute("DELETE FROM subscriptions WHERE id=?", (i,))

        await self._run(fn)

    async def take_pp_messages(
        self, pp_id: str, limit: int | None, max_bytes: int = 0
    ) -> list[Pending]:
        """Remove and return the oldest messages (all when limit is None), and no more
        than `max_bytes` of text past the first (0: any)."""

        def fn(c: sqlite3.Connection) -> list[Pending]:
            q = (
                "SELECT m.seq, m.sub_id, r.xml, r.kind FROM pp_messages m"
                " JOIN renderings r ON r.id = m.ref WHERE m.pp_id=? ORDER BY m.seq"
            )
            args: tuple[Any, ...] = (pp_id,)
            if limit is not None:
                q += " LIMIT ?"
                args = (pp_id, limit)
            rows: list[Any] = []
            held = 0
            for r in c.execute(q, args):  # read one by one: the bytes bound stops early
                held += len(r[2])
                if rows and max_bytes and held > max_bytes:
                    break
                rows.append(r)
            if rows:
                c.execute("DELETE FROM pp_messages WHERE pp_id=? AND seq<=?", (pp_id, rows[-1][0]))
            return [Pending(r[0], pp_id, r[1], r[2], r[3] == AFTER_SUBREF) for r in rows]

        return await self._run(fn)

    # ---- registrations ----
    async def add_registration(
        self,
        r: RegistrationRow,
        grown: Sequence[tuple[str, str]] = (),
        replaces: Sequence[str] = (),
    ) -> None:
        """Add a registration, record the topics it grew and delete the registrations it
        replaces, in one transaction."""

        def fn(c: sqlite3.Connection) -> None:
            c.execute(
                "INSERT INTO registrations(id, publisher, topics, demand, created, termination,"
                " device_id, last_seen) VALUES (?,?,?,?,?,?,?,?)",
                (
                    r.id,
                    r.publisher,
                    r.topics,
                    int(r.demand),
                    r.created,
                    r.termination,
                    r.device_id,
                    r.last_seen,
                ),
            )
            c.executemany(  # client NULL: a registration's topics count in no topic quota
                "INSERT OR IGNORE INTO grown_topics(topic_ns, topic_path, client)"
                " VALUES (?,?,NULL)",
                list(grown),
            )
            c.executemany("DELETE FROM registrations WHERE id=?", [(i,) for i in replaces])

        await self._run(fn)

    async def delete_registration(self, reg_id: str) -> None:
        await self._run(lambda c: c.execute("DELETE FROM registrations WHERE id=?", (reg_id,)))

    async def set_last_seen(self, seen: Sequence[tuple[str, float]]) -> None:
        """(registration id, when its device was last seen) for each: one transaction."""
        await self._run(
            lambda c: c.executemany(
                "UPDATE registrations SET last_seen=? WHERE id=?", [(t, i) for i, t in seen]
            )
        )

    async def set_registration_termination(self, reg_id: str, termination: float | None) -> None:
        await self._run(
            lambda c: c.execute(
                "UPDATE registrations SET termination=? WHERE id=?", (termination, reg_id)
            )
        )
