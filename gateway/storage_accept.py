"""The rows one accepted Notify writes (`AcceptBatch`), and how a group commit writes them:
what all Notify of a group share once for the group (`accept_shared`), then each Notify's
own rows (`accept_rest`). Runs on storage.Storage's writer thread, inside its transaction."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class AcceptBatch:
    """Everything one accepted Notify changes, committed in one transaction."""

    grown: list[tuple[str, str]] = field(default_factory=list)
    current: list[tuple[str, str, str]] = field(default_factory=list)
    #: the texts the rows below reference, each stored once: (kind, xml), kinds in
    #: gateway/storage_schema.py; every one is referenced by at least one row
    renderings: list[tuple[int, str]] = field(default_factory=list)
    #: (sub_id, index in `renderings`)
    deliveries: list[tuple[str, int]] = field(default_factory=list)
    drop_deliveries: list[int] = field(default_factory=list)
    #: (pp_id, the subscription it was rendered for or None, index in `renderings`)
    pp_messages: list[tuple[str, str | None, int]] = field(default_factory=list)
    pp_limit: int = 0  # keep at most this many per pull point touched (drop oldest)
    pp_max_bytes: int = 0  # and at most this many bytes of messages (drop oldest), 0: any
    #: the storage's upper bound of the bytes each pull point holds (storage.Storage.accept
    #: sets it): the bound is checked against the rows only when it may be passed
    pp_held: dict[str, int] | None = None
    #: pull point -> a lower bytes bound than pp_max_bytes for this Notify (what its
    #: client's and the total pull-point bytes quota leave it: gateway.pullpoint_bytes)
    pp_bytes_limits: dict[str, int] = field(default_factory=dict)
    #: index in `renderings` -> its UTF-8 length, for those pull points reference (filled
    #: by gateway.pullpoint_bytes; what is missing is measured here)
    pp_sizes: dict[int, int] = field(default_factory=dict)
    #: (namespace, path) of `grown` -> the client address whose topic quota holds it,
    #: stored with it (gateway.quotas; not there: NULL, counted in no topic quota)
    grown_clients: dict[tuple[str, str], str] = field(default_factory=dict)
    landing: list[tuple[str, str]] = field(default_factory=list)  # (msg_id, json line)
    # the same records for the Parquet landing writer (gateway.landing_parquet)
    landing_parquet: list[tuple[str, str]] = field(default_factory=list)
    #: (publisher, wsa:MessageID) to add to the seen-set (gateway.dedupe), or None
    seen: tuple[str, str] | None = None


@dataclass
class AcceptResult:
    delivery_seqs: list[int]
    pp_dropped: dict[str, int]
    #: pull point -> how many bytes its messages grew by (added less dropped; exact: the
    #: UTF-8 length of each text, as --pullpoint-max-bytes counts them)
    pp_bytes: dict[str, int] = field(default_factory=dict)


def accept_shared(c: sqlite3.Connection, batches: Sequence[AcceptBatch]) -> None:
    """The rows of a group's accepted Notify that need no per-Notify answer, one
    statement per table for the whole group: grown topics and current messages once
    per topic (the last Notify's message wins, as row by row it would), landing rows
    in the order of the Notify (the outbox's seq order is the landing order)."""
    grown: dict[tuple[str, str], str | None] = {}
    for b in batches:
        for g in b.grown:
            if grown.get(g) is None:
                grown[g] = b.grown_clients.get(g)
    current: dict[tuple[str, str], str] = {}
    for b in batches:
        for topic_ns, topic_path, xml in b.current:
            current[topic_ns, topic_path] = xml
    if grown:
        c.executemany(
            "INSERT OR IGNORE INTO grown_topics(topic_ns, topic_path, client) VALUES (?,?,?)",
            [(tns, path, client) for (tns, path), client in grown.items()],
        )
    if current:
        c.executemany(
            "INSERT OR REPLACE INTO current_messages VALUES (?,?,?)",
            [(k[0], k[1], x) for k, x in current.items()],
        )
    landing = [r for b in batches for r in b.landing]
    if landing:
        c.executemany("INSERT INTO landing_outbox(msg_id, line) VALUES (?,?)", landing)
    parquet = [r for b in batches for r in b.landing_parquet]
    if parquet:
        c.executemany("INSERT INTO landing_outbox_parquet(msg_id, line) VALUES (?,?)", parquet)


def accept_rest(c: sqlite3.Connection, b: AcceptBatch) -> AcceptResult:
    """The rows of one accepted Notify whose outcome is its own: deliveries (their
    seqs), backlog overflow, pull-point messages and what their bound dropped."""
    now = time.time()
    seqs: list[int] = []
    ids: list[int] = []
    if b.renderings:
        # each text once, with the count of rows that will reference it (the triggers of
        # storage_schema count down and delete it with its last row); one statement numbers
        # its rows consecutively (this connection is the only writer and holds the lock)
        refs = [0] * len(b.renderings)
        for _sub, i in b.deliveries:
            refs[i] += 1
        for _pp, _ppsub, i in b.pp_messages:
            refs[i] += 1
        c.executemany(
            "INSERT INTO renderings(kind, xml, refs) VALUES (?,?,?)",
            [(kind, xml, n) for (kind, xml), n in zip(b.renderings, refs, strict=True)],
        )
        last = int(c.execute("SELECT last_insert_rowid()").fetchone()[0])
        ids = list(range(last - len(b.renderings) + 1, last + 1))
    if b.deliveries:
        # one statement for all rows; AUTOINCREMENT numbers them consecutively as well
        c.executemany(
            "INSERT INTO deliveries(sub_id, ref, created) VALUES (?,?,?)",
            [(sub_id, ids[i], now) for sub_id, i in b.deliveries],
        )
        last = int(c.execute("SELECT last_insert_rowid()").fetchone()[0])
        seqs = list(range(last - len(b.deliveries) + 1, last + 1))
    if b.drop_deliveries:
        c.executemany("DELETE FROM deliveries WHERE seq=?", [(s,) for s in b.drop_deliveries])
    dropped: dict[str, int] = {}
    grew: dict[str, int] = {}
    if b.pp_messages:
        sizes = b.pp_sizes
        for pp, _s, i in b.pp_messages:
            n = sizes.get(i)
            if n is None:
                n = sizes[i] = len(b.renderings[i][1].encode())
            grew[pp] = grew.get(pp, 0) + n
        c.executemany(
            "INSERT INTO pp_messages(pp_id, sub_id, ref) VALUES (?,?,?)",
            [(pp_id, sub_id, ids[i]) for pp_id, sub_id, i in b.pp_messages],
        )
        if b.pp_limit > 0:
            for pp in {p for p, _s, _i in b.pp_messages}:
                # the oldest message to keep, then drop everything before it
                row = c.execute(
                    "SELECT seq FROM pp_messages WHERE pp_id=? ORDER BY seq DESC LIMIT 1 OFFSET ?",
                    (pp, b.pp_limit - 1),
                ).fetchone()
                if row is not None:
                    grew[pp] -= _bytes_before(c, pp, row[0])
                    cur = c.execute("DELETE FROM pp_messages WHERE pp_id=? AND seq<?", (pp, row[0]))
                    if cur.rowcount:
                        dropped[pp] = cur.rowcount
        if b.pp_max_bytes > 0 or b.pp_bytes_limits:
            _bytes_bound(c, b, dropped, grew)
    return AcceptResult(seqs, dropped, grew)


def _bytes_before(c: sqlite3.Connection, pp: str, seq: int) -> int:
    """The bytes of the messages of `pp` older than `seq` (those about to be dropped)."""
    return int(
        c.execute(
            "SELECT COALESCE(SUM(length(CAST(r.xml AS BLOB))), 0) FROM pp_messages m"
            " JOIN renderings r ON r.id = m.ref WHERE m.pp_id=? AND m.seq<?",
            (pp, seq),
        ).fetchone()[0]
    )


def _bytes_bound(
    c: sqlite3.Connection, b: AcceptBatch, dropped: dict[str, int], grew: dict[str, int]
) -> None:
    """--pullpoint-max-bytes (or the lower `b.pp_bytes_limits`) for the pull points `b`
    adds to; what is dropped is taken off `grew`. `b.pp_held` keeps an upper
    bound of what each holds (grown by what is added, never lowered by what is taken: a
    rolled-back transaction leaves it too high, never too low); the rows are read only
    when the bound may be passed, and then it is set to what they hold."""
    held = b.pp_held if b.pp_held is not None else {}
    added: dict[str, int] = {}
    for pp, _s, i in b.pp_messages:
        text = b.renderings[i][1]
        # bytes in UTF-8: at most 4 per character, 1 for ASCII (isascii is one C pass)
        added[pp] = added.get(pp, 0) + (len(text) if text.isascii() else 4 * len(text))
    for pp, n in added.items():
        limit = b.pp_bytes_limits.get(pp, b.pp_max_bytes)
        if b.pp_max_bytes > 0:
            limit = min(limit, b.pp_max_bytes)
        if limit <= 0:
            continue
        bound = held.get(pp)
        if bound is not None and bound + n <= limit:
            held[pp] = bound + n
            continue
        gone, gone_bytes, held[pp] = _drop_over_bytes(c, pp, limit)
        if gone:
            dropped[pp] = dropped.get(pp, 0) + gone
            grew[pp] = grew.get(pp, 0) - gone_bytes


def _drop_over_bytes(c: sqlite3.Connection, pp: str, max_bytes: int) -> tuple[int, int, int]:
    """Drop the oldest messages of `pp` until the rest hold at most `max_bytes` bytes of
    text (the newest is always kept); -> (how many were dropped, their bytes, the bytes
    left)."""
    total = c.execute(
        "SELECT COALESCE(SUM(length(CAST(r.xml AS BLOB))), 0) FROM pp_messages m"
        " JOIN renderings r ON r.id = m.ref WHERE m.pp_id=?",
        (pp,),
    ).fetchone()[0]
    if total <= max_bytes:
        return 0, 0, int(total)
    # the newest message past the bound, counting from the newest (a window over the pull
    # point's own rows: its index is (pp_id, seq))
    row = c.execute(
        "SELECT seq FROM (SELECT m.seq AS seq, SUM(length(CAST(r.xml AS BLOB)))"
        " OVER (ORDER BY m.seq DESC) AS held FROM pp_messages m"
        " JOIN renderings r ON r.id = m.ref WHERE m.pp_id=?)"
        " WHERE held > ? ORDER BY seq DESC LIMIT 1",
        (pp, max_bytes),
    ).fetchone()
    if row is None:
        return 0, 0, int(total)
    newest = c.execute("SELECT MAX(seq) FROM pp_messages WHERE pp_id=?", (pp,)).fetchone()[0]
    cut = min(row[0], newest - 1)
    gone_bytes = c.execute(
        "SELECT COALESCE(SUM(length(CAST(r.xml AS BLOB))), 0) FROM pp_messages m"
        " JOIN renderings r ON r.id = m.ref WHERE m.pp_id=? AND m.seq<=?",
        (pp, cut),
    ).fetchone()[0]
    cur = c.execute("DELETE FROM pp_messages WHERE pp_id=? AND seq<=?", (pp, cut))
    return cur.rowcount, int(gone_bytes), int(total - gone_bytes)


class Accept:
    """A group-commit step for one accepted Notify: `storage.Storage._group_commit` writes the
    rows all Notify of a group share (`accept_shared`) once for the group, then calls
    each step for its own rows (`accept_rest`)."""

    __slots__ = ("batch",)

    def __init__(self, batch: AcceptBatch) -> None:
        self.batch = batch

    def __call__(self, c: sqlite3.Connection) -> AcceptResult:
        return accept_rest(c, self.batch)
