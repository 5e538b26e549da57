"""The durable seen-set of Notify message ids (gateway.dedupe): which (publisher, wsa:MessageID)
pairs the broker has accepted, so a Notify sent again after its answer was lost is
acknowledged and not published twice (docs/gateway.md "Exactly once when an answer is lost").

Written in the group commit's transaction together with the accepted messages
(`record_seen`, called by storage.Storage._group_commit), so a kill -9 between the commit
and the answer still finds the id at the retry. Bounded by count and by age: each group
that records ids also deletes the oldest beyond `keep` rows and those older than `max_age`
seconds (`seq` grows with time, so both are a range at the low end: a cost in proportion
to what is deleted). A new table, created if missing: a database of an older gateway opens
unchanged.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

SEEN_SCHEMA = """CREATE TABLE IF NOT EXISTS notify_seen(
  seq INTEGER PRIMARY KEY, publisher TEXT NOT NULL, message_id TEXT NOT NULL,
  seen REAL NOT NULL, UNIQUE(publisher, message_id))"""

#: (publisher key, wsa:MessageID) as gateway.dedupe makes it
SeenKey = tuple[str, str]


def record_seen(
    c: sqlite3.Connection, keys: Sequence[SeenKey], now: float, keep: int, max_age: float
) -> None:
    """Drop the ids older than `max_age`, add `keys` (seen at `now`, epoch seconds), then
    drop the oldest beyond `keep`."""
    # the first row young enough to keep, walking from the oldest: stops after the expired
    row = c.execute(
        "SELECT seq FROM notify_seen WHERE seen>=? ORDER BY seq LIMIT 1", (now - max_age,)
    ).fetchone()
    if row is None:
        c.execute("DELETE FROM notify_seen")
    else:
        c.execute("DELETE FROM notify_seen WHERE seq<?", (row[0],))
    c.executemany(
        "INSERT OR IGNORE INTO notify_seen(publisher, message_id, seen) VALUES (?,?,?)",
        [(p, m, now) for p, m in keys],
    )
    # rows leave only from the low end and INSERT OR IGNORE uses no seq for a duplicate:
    # the seqs are contiguous, so max(seq) - keep is the last one beyond the count bound
    top = c.execute("SELECT max(seq) FROM notify_seen").fetchone()[0]
    if top is not None and top > keep:
        c.execute("DELETE FROM notify_seen WHERE seq<=?", (top - keep,))


def is_seen(c: sqlite3.Connection, key: SeenKey, since: float) -> bool:
    """Whether `key` was recorded at `since` (epoch seconds) or later: a pair past the age
    bound no longer counts even while no group commit has pruned it yet."""
    sql = "SELECT 1 FROM notify_seen WHERE publisher=? AND message_id=? AND seen>=?"
    return c.execute(sql, (key[0], key[1], since)).fetchone() is not None
