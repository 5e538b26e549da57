"""The SQLite schema of storage.Storage, its version, and the migration of older files.

The durable outbox stores each notification once per distinct rendering, not once per
subscription (at a fan-out of 100, a single-message Notify wrote 100 rows of ~700 B of the
same XML): `renderings` holds the text, `deliveries` (push) and `pp_messages` (pull points)
hold one small row per subscription that references it. A rendering is one of:

* `WHOLE`: the text is the whole message for the subscription (a raw payload, a
  NotificationMessage as a Notify to a pull point carried it, or a row migrated from a
  file of schema version 0);
* `AFTER_SUBREF`: the part of a wrapped wsnt:NotificationMessage after its
  wsnt:SubscriptionReference (gateway/notify.py `render_rest`); the subscription's own
  start tag and SubscriptionReference are put before it when it is loaded or taken
  (`notify.wrapped_message`), so one text serves every subscriber of one dialect.

`renderings.refs` counts the rows referencing a rendering; a trigger on each referencing
table decrements it when a row is deleted (delivered, dropped by the backlog bound, taken
by GetMessages, its subscription or pull point destroyed) and deletes the rendering with
its last reference, in the same transaction, so the file does not grow.

The version is SQLite's `PRAGMA user_version`: 0 (the files written before it: the text in
every `deliveries` / `pp_messages` row), 1 (renderings), 2 (`client`, the
client address that made each subscription and pull point, and whose topic quota holds each
grown topic, so each client's quota (gateway.quotas) is held again after a restart; NULL
for a topic no client's quota holds: grown by a publisher registration, or named by a
Notify that did not grow it), 3 (this schema: `registrations.last_seen`, when the device
of each registration was last seen, so /status and /metrics keep it across a restart; written
by the expiry sweeps and at shutdown, gateway.upkeep). `prepare` migrates older files in
place, in one transaction, keeping every pending row's seq (so its order and its
exactly-once delivery): version 0 to 1 as below, 1 to 2 by adding the `client` columns,
whose old rows get "" (held under no client address: logged once, with how many), 2 to 3 by
adding `last_seen` (NULL: the registration's creation time is used, as before); it refuses a
file of a newer version than it knows.
"""

from __future__ import annotations

import logging
import sqlite3

log = logging.getLogger("gateway.storage")

SCHEMA_VERSION = 3

#: rendering kinds (renderings.kind)
WHOLE = 0
AFTER_SUBREF = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS subscriptions(
  id TEXT PRIMARY KEY, consumer TEXT NOT NULL, filter TEXT, policy TEXT,
  raw INTEGER NOT NULL, created REAL NOT NULL, termination REAL, paused INTEGER NOT NULL,
  pullpoint TEXT, dialect TEXT, soap TEXT, client TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS renderings(
  id INTEGER PRIMARY KEY, kind INTEGER NOT NULL, xml TEXT NOT NULL, refs INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS deliveries(
  seq INTEGER PRIMARY KEY AUTOINCREMENT, sub_id TEXT NOT NULL, ref INTEGER NOT NULL,
  created REAL NOT NULL);
CREATE TRIGGER IF NOT EXISTS deliveries_unref AFTER DELETE ON deliveries BEGIN
  UPDATE renderings SET refs = refs - 1 WHERE id = OLD.ref;
  DELETE FROM renderings WHERE id = OLD.ref AND refs <= 0;
END;
CREATE TABLE IF NOT EXISTS pullpoints(
  id TEXT PRIMARY KEY, created REAL NOT NULL, client TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS pp_messages(
  seq INTEGER PRIMARY KEY AUTOINCREMENT, pp_id TEXT NOT NULL, sub_id TEXT,
  ref INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS pp_messages_pp ON pp_messages(pp_id, seq);
CREATE TRIGGER IF NOT EXISTS pp_messages_unref AFTER DELETE ON pp_messages BEGIN
  UPDATE renderings SET refs = refs - 1 WHERE id = OLD.ref;
  DELETE FROM renderings WHERE id = OLD.ref AND refs <= 0;
END;
CREATE TABLE IF NOT EXISTS registrations(
  id TEXT PRIMARY KEY, publisher TEXT, topics TEXT NOT NULL, demand INTEGER NOT NULL,
  created REAL NOT NULL, termination REAL, device_id TEXT, last_seen REAL);
CREATE TABLE IF NOT EXISTS current_messages(
  topic_ns TEXT NOT NULL, topic_path TEXT NOT NULL, xml TEXT NOT NULL,
  PRIMARY KEY(topic_ns, topic_path));
CREATE TABLE IF NOT EXISTS grown_topics(
  topic_ns TEXT NOT NULL, topic_path TEXT NOT NULL, client TEXT DEFAULT '',
  PRIMARY KEY(topic_ns, topic_path));
CREATE TABLE IF NOT EXISTS landing_outbox(
  seq INTEGER PRIMARY KEY AUTOINCREMENT, msg_id TEXT NOT NULL, line TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS landing_outbox_parquet(
  seq INTEGER PRIMARY KEY AUTOINCREMENT, msg_id TEXT NOT NULL, line TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS landing_parquet_files(name TEXT PRIMARY KEY);
"""


class SchemaError(Exception):
    """The file's schema is not one this code can open; str(e) says why."""


def prepare(c: sqlite3.Connection) -> None:
    """Bring the database on `c` (autocommit mode) to SCHEMA_VERSION, in one transaction."""
    c.execute("BEGIN IMMEDIATE")
    try:
        version = int(c.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise SchemaError(
                f"the database was written by a newer gateway (schema version {version}, this"
                f" one knows up to {SCHEMA_VERSION}): start that version, or a fresh --data-dir"
            )
        if version == 0 and "xml" in _columns(c, "deliveries"):
            _migrate_v0(c)  # it makes this schema's tables itself
        else:  # a new file, or tables a file of version 1 does not have yet
            for stmt in _statements(SCHEMA):
                c.execute(stmt)
        if version < 2:
            _migrate_v1(c)
        if "last_seen" not in _columns(c, "registrations"):  # version 2 to 3
            c.execute("ALTER TABLE registrations ADD COLUMN last_seen REAL")
        # no index on deliveries(sub_id): kept per row, it doubled the work of writing and
        # deleting a row; a subscription's rows are deleted by seq (storage.Storage
        # .delete_subscriptions, gateway.delivery); the first files of version 1 had it
        # (a version 0 file's goes with its old table in _migrate_v0)
        c.execute("DROP INDEX IF EXISTS deliveries_sub")
        # rows whose subscription or pull point is gone (a Notify committed just after it
        # ended; deleted at run time too, this catches a crash in between): a scan, at start
        c.execute("DELETE FROM deliveries WHERE sub_id NOT IN (SELECT id FROM subscriptions)")
        c.execute("DELETE FROM pp_messages WHERE pp_id NOT IN (SELECT id FROM pullpoints)")
        c.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        c.execute("COMMIT")
    except BaseException:
        if c.in_transaction:
            c.execute("ROLLBACK")
        raise


def _columns(c: sqlite3.Connection, table: str) -> list[str]:
    return [str(r[1]) for r in c.execute(f"PRAGMA table_info({table})")]


def _statements(script: str) -> list[str]:
    """The statements of `script` (triggers hold `;` inside BEGIN ... END)."""
    out: list[str] = []
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    return out


#: the tables whose rows name the client address that made them (schema version 2)
CLIENT_TABLES = ("subscriptions", "pullpoints", "grown_topics")
_NAMES = {"subscriptions": "subscriptions", "pullpoints": "pull points", "grown_topics": "topics"}


def _migrate_v1(c: sqlite3.Connection) -> None:
    """Schema 1 -> 2: a `client` column on CLIENT_TABLES (tables made just now by SCHEMA have
    it already); the rows already there get "" (their client is not known), said once."""
    old: dict[str, int] = {}
    for table in CLIENT_TABLES:
        if "client" not in _columns(c, table):
            c.execute(f"ALTER TABLE {table} ADD COLUMN client TEXT DEFAULT ''")
            old[table] = int(c.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    if any(old.values()):
        log.warning(
            "database upgraded to schema version 2: %s stored before client addresses were "
            'kept are held under no client address ("") by the per-client quotas',
            ", ".join(f"{n} {_NAMES[t]}" for t, n in old.items()),
        )


def _migrate_v0(c: sqlite3.Connection) -> None:
    """Schema 0 -> 1: every pending row's text becomes a WHOLE rendering of its own, and the
    row keeps its seq (delivery order, and the AUTOINCREMENT counter goes on from it)."""
    old_pp = "xml" in _columns(c, "pp_messages")
    # an index goes with its renamed table and is dropped with it (deliveries_sub)
    c.execute("ALTER TABLE deliveries RENAME TO deliveries_v0")
    if old_pp:
        # but index names are global: the old pp_messages_pp would make the schema's
        # CREATE INDEX IF NOT EXISTS skip the new table's, so it goes first
        c.execute("DROP INDEX IF EXISTS pp_messages_pp")
        c.execute("ALTER TABLE pp_messages RENAME TO pp_messages_v0")
    for stmt in _statements(SCHEMA):
        c.execute(stmt)
    # rendering ids: a delivery's is its seq, a pull-point message's its seq after those
    off = int(c.execute("SELECT coalesce(max(seq), 0) FROM deliveries_v0").fetchone()[0])
    c.execute(
        "INSERT INTO renderings(id, kind, xml, refs) SELECT seq, ?, xml, 1 FROM deliveries_v0",
        (WHOLE,),
    )
    c.execute(
        "INSERT INTO deliveries(seq, sub_id, ref, created)"
        " SELECT seq, sub_id, seq, created FROM deliveries_v0"
    )
    if old_pp:
        c.execute(
            "INSERT INTO renderings(id, kind, xml, refs)"
            " SELECT seq + ?, ?, xml, 1 FROM pp_messages_v0",
            (off, WHOLE),
        )
        c.execute(
            "INSERT INTO pp_messages(seq, pp_id, sub_id, ref)"
            " SELECT seq, pp_id, NULL, seq + ? FROM pp_messages_v0",
            (off,),
        )
    # the numbering goes on where the old tables' left off (also when they were empty)
    for new, old in (("deliveries", "deliveries_v0"), ("pp_messages", "pp_messages_v0")):
        row = c.execute("SELECT seq FROM sqlite_sequence WHERE name=?", (old,)).fetchone()
        if row is not None:
            c.execute("DELETE FROM sqlite_sequence WHERE name=?", (new,))
            c.execute("INSERT INTO sqlite_sequence(name, seq) VALUES (?,?)", (new, row[0]))
    c.execute("DROP TABLE deliveries_v0")
    if old_pp:
        c.execute("DROP TABLE pp_messages_v0")
