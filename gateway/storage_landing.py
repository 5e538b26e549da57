"""The landing zone's durable outboxes (gateway.landing, gateway.landing_parquet): the
JSON-lines outbox and the Parquet outbox with its record of complete temporary files.
The rows are written with each accepted Notify (gateway.storage_accept); this is how the
landing writers read, count and delete them.

Part of the storage (a mixin of gateway.storage.Storage, whose writer thread runs it).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

T = TypeVar("T")


class LandingTables:
    """Storage's methods for the landing outboxes (see the module docstring)."""

    if TYPE_CHECKING:

        async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

        async def _grouped(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

        def _sync(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

    # ---- JSON-lines landing outbox (gateway.landing) ----
    async def landing_lag(self) -> tuple[int, str | None]:
        """(rows in the JSON-lines landing outbox, the oldest row's line or None)."""

        def fn(c: sqlite3.Connection) -> tuple[int, str | None]:
            n = int(c.execute("SELECT count(*) FROM landing_outbox").fetchone()[0])
            row = c.execute("SELECT line FROM landing_outbox ORDER BY seq LIMIT 1").fetchone()
            return n, (str(row[0]) if row else None)

        return await self._run(fn)

    async def landing_pending(self, limit: int) -> list[tuple[int, str, str]]:
        def fn(c: sqlite3.Connection) -> list[tuple[int, str, str]]:
            return [
                (r[0], r[1], r[2])
                for r in c.execute(
                    "SELECT seq, msg_id, line FROM landing_outbox ORDER BY seq LIMIT ?", (limit,)
                )
            ]

        return await self._run(fn)

    async def landing_done(self, up_to_seq: int) -> None:
        """Delete the outbox rows up to `up_to_seq` (written to a landing file). Joins the
        group commit (`_grouped`): the landing writer runs about once per group of
        Notify, and a transaction of its own would cost a second fsync each time."""

        def fn(c: sqlite3.Connection) -> None:
            c.execute("DELETE FROM landing_outbox WHERE seq<=?", (up_to_seq,))

        await self._grouped(fn)

    async def landing_forget_ids(self, ids: Sequence[str]) -> None:
        def fn(c: sqlite3.Connection) -> None:
            c.executemany("DELETE FROM landing_outbox WHERE msg_id=?", [(i,) for i in ids])

        await self._run(fn)

    def landing_forget_ids_sync(self, ids: Sequence[str]) -> None:
        def fn(c: sqlite3.Connection) -> None:
            c.executemany("DELETE FROM landing_outbox WHERE msg_id=?", [(i,) for i in ids])

        self._sync(fn)

    # ---- Parquet landing outbox (gateway.landing_parquet) ----
    async def parquet_outbox_stats(self) -> tuple[int, int, int]:
        """(rows, bytes of their JSON lines, highest seq or 0) waiting in the outbox."""

        def fn(c: sqlite3.Connection) -> tuple[int, int, int]:
            r = c.execute(
                "SELECT count(*), coalesce(sum(length(line)), 0), coalesce(max(seq), 0)"
                " FROM landing_outbox_parquet"
            ).fetchone()
            return int(r[0]), int(r[1]), int(r[2])

        return await self._run(fn)

    async def parquet_pending(
        self, after_seq: int, up_to_seq: int, limit: int
    ) -> list[tuple[int, str, str]]:
        def fn(c: sqlite3.Connection) -> list[tuple[int, str, str]]:
            return [
                (r[0], r[1], r[2])
                for r in c.execute(
                    "SELECT seq, msg_id, line FROM landing_outbox_parquet"
                    " WHERE seq>? AND seq<=? ORDER BY seq LIMIT ?",
                    (after_seq, up_to_seq, limit),
                )
            ]

        return await self._run(fn)

    async def parquet_file_written(self, tmp_name: str, up_to_seq: int) -> None:
        """One transaction: the complete temporary file `tmp_name` now owns the outbox rows
        up to `up_to_seq` (they are deleted; recovery publishes the file)."""

        def fn(c: sqlite3.Connection) -> None:
            c.execute("DELETE FROM landing_outbox_parquet WHERE seq<=?", (up_to_seq,))
            c.execute("INSERT OR REPLACE INTO landing_parquet_files VALUES (?)", (tmp_name,))

        await self._run(fn)

    async def parquet_file_published(self, tmp_name: str) -> None:
        await self._run(
            lambda c: c.execute("DELETE FROM landing_parquet_files WHERE name=?", (tmp_name,))
        )

    def parquet_files_sync(self) -> list[str]:
        """Temporary Parquet files recorded complete but maybe not renamed yet (recovery)."""

        def fn(c: sqlite3.Connection) -> list[str]:
            return [r[0] for r in c.execute("SELECT name FROM landing_parquet_files")]

        return self._sync(fn)

    def parquet_file_published_sync(self, tmp_name: str) -> None:
        def fn(c: sqlite3.Connection) -> None:
            c.execute("DELETE FROM landing_parquet_files WHERE name=?", (tmp_name,))

        self._sync(fn)
