"""The durable table of demand-based publishing (gateway.demand): the broker's own
subscriptions AT publishers registered with Demand=true, so they survive a restart (no
duplicate Subscribe, Pause/Resume/Renew keep addressing the same remote subscription).

Part of the storage (a mixin of gateway.storage.Storage, whose writer thread runs it);
self-contained: the table is created on first use, nothing else reads it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

T = TypeVar("T")


DEMAND_SCHEMA = """CREATE TABLE IF NOT EXISTS demand_subscriptions(
  reg_id TEXT NOT NULL, topic_ns TEXT NOT NULL, topic_path TEXT NOT NULL,
  epr TEXT NOT NULL, termination REAL, paused INTEGER NOT NULL,
  PRIMARY KEY(reg_id, topic_ns, topic_path))"""


@dataclass
class DemandRow:
    """A subscription the broker holds at a demand-based publisher (gateway.demand):
    registration id, broker-side topic, the SubscriptionReference EPR (XML), its
    termination as broker-clock epoch seconds (None: none), paused at the publisher."""

    reg_id: str
    topic_ns: str
    topic_path: str
    epr: str
    termination: float | None
    paused: bool


class DemandTables:
    """Storage's methods for the demand table (see the module docstring)."""

    if TYPE_CHECKING:

        async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

    # ---- demand-based publishing (gateway.demand) --------------------------------------
    # Owned by gateway/demand.py: the broker's own subscriptions AT publishers registered
    # with Demand=true, so they survive a restart (no duplicate Subscribe, Pause/Resume/Renew
    # keep addressing the same remote subscription). Self-contained: the table is created on
    # first use, nothing else in this module reads it.
    async def demand_load(self) -> list[DemandRow]:
        def fn(c: sqlite3.Connection) -> list[DemandRow]:
            c.execute(DEMAND_SCHEMA)
            return [
                DemandRow(r[0], r[1], r[2], r[3], r[4], bool(r[5]))
                for r in c.execute(
                    "SELECT reg_id, topic_ns, topic_path, epr, termination, paused"
                    " FROM demand_subscriptions ORDER BY rowid"
                )
            ]

        return await self._run(fn)

    async def demand_put(self, *rows: DemandRow) -> None:
        """Insert or replace rows (one transaction)."""

        def fn(c: sqlite3.Connection) -> None:
            c.execute(DEMAND_SCHEMA)
            c.executemany(
                "INSERT OR REPLACE INTO demand_subscriptions VALUES (?,?,?,?,?,?)",
                [
                    (r.reg_id, r.topic_ns, r.topic_path, r.epr, r.termination, int(r.paused))
                    for r in rows
                ],
            )

        await self._run(fn)

    async def demand_delete(self, reg_id: str, topic: tuple[str, str] | None = None) -> None:
        """Forget one remote subscription of a registration, or all of them (topic None)."""

        def fn(c: sqlite3.Connection) -> None:
            c.execute(DEMAND_SCHEMA)
            if topic is None:
                c.execute("DELETE FROM demand_subscriptions WHERE reg_id=?", (reg_id,))
            else:
                c.execute(
                    "DELETE FROM demand_subscriptions WHERE reg_id=? AND topic_ns=?"
                    " AND topic_path=?",
                    (reg_id, *topic),
                )

        await self._run(fn)
