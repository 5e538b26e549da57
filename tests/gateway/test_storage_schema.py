"""The durable outbox's schema (gateway/storage_schema.py): each notification stored once
per distinct rendering and referenced per subscription, the rendering deleted with its last
reference, and a file of schema version 0 (every row holding its whole text) opened, its
pending rows delivered exactly once and in order.

`data/outbox_v0.sql` is the dump (sqlite3 `iterdump`) of a real database the gateway wrote
at schema version 0 (commit 2a0809b): a wrapped and a raw subscription to consumers that
were down (127.0.0.1:9), a pull point fed by a third subscription, three single-message
Notify on tns:t (readings 1, 2, 3), one Notify posted to the pull point itself ("direct"),
then kill -9. The test points the two consumer addresses at its live consumers and moves
the terminations into the future; every outbox row is as that code wrote it."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest
from gwtest import (
    RD,
    WSA,
    WSNT,
    call,
    notify_body,
    reading,
    subscribe_body,
    topic_filter,
)

from gateway.delivery import DeliveryManager
from gateway.storage import AcceptBatch, Storage
from gateway.storage_schema import SCHEMA_VERSION, WHOLE, SchemaError

V0_DUMP = Path(__file__).parent / "data" / "outbox_v0.sql"
WRAPPED_SUB = "33ef4c0e7a4246baa2ce9f77930bf6f6"
RAW_SUB = "b918ed4b1aca418fa5e2d41a2c36d634"
PP_SUB = "c81ac0e281474269b3cd7e3f742e2132"
PP_ID = "bacc4c5c5b184bbf8c2d780cbcac1fe2"


def _db(data_dir: Path) -> sqlite3.Connection:
    return sqlite3.connect(data_dir / "broker.sqlite3")


def _count(data_dir: Path, table: str) -> int:
    with _db(data_dir) as c:
        return int(c.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def _v0_file(data_dir: Path, wrapped_url: str, raw_url: str) -> None:
    data_dir.mkdir(parents=True)
    c = _db(data_dir)
    c.executescript(V0_DUMP.read_text())
    for sid, url in ((WRAPPED_SUB, wrapped_url), (RAW_SUB, raw_url)):
        c.execute(
            "UPDATE subscriptions SET consumer=replace(consumer, ?, ?) WHERE id=?",
            (f"http://127.0.0.1:9/consumer-{'raw' if sid == RAW_SUB else 'wrapped'}", url, sid),
        )
    c.execute("UPDATE subscriptions SET termination=?", (time.time() + 3600,))
    c.commit()
    assert c.execute("PRAGMA user_version").fetchone()[0] == 0
    assert c.execute("SELECT count(*) FROM deliveries").fetchone()[0] == 6
    c.close()


def _values(msgs) -> list[str]:  # type: ignore[no-untyped-def]
    return [m.findtext(f".//{RD}value") or "" for m in msgs]


async def test_a_schema_0_file_delivers_its_pending_rows_once_in_order(
    make_gateway, make_consumer, tmp_path
):
    wrapped, raw = await make_consumer(), await make_consumer()
    data_dir = tmp_path / "v0"
    _v0_file(data_dir, wrapped.url, raw.url)
    gw = await make_gateway(data_dir=data_dir)
    await wrapped.wait_for(3)
    await raw.wait_for(3, wrapped=False)
    assert _values(wrapped.messages()) == ["1", "2", "3"]
    for m in wrapped.messages():  # the stored whole message, its SubscriptionReference too
        ref = m.find(f"{{{WSNT}}}SubscriptionReference/{{{WSA}}}Address")
        assert ref is not None and ref.text and ref.text.endswith(f"/{WRAPPED_SUB}")
    assert [b.findtext(f"{RD}value") for b in raw.bodies()] == ["1", "2", "3"]
    # new messages come after the migrated ones, each subscription in its order
    r = await call(gw.url, notify_body(("tns:t", reading(4))))
    assert r.status == 202, r.text
    await wrapped.wait_for(4)
    await raw.wait_for(4, wrapped=False)
    assert _values(wrapped.messages()) == ["1", "2", "3", "4"]
    assert [b.findtext(f"{RD}value") for b in raw.bodies()] == ["1", "2", "3", "4"]
    pp = gw.url.rsplit("/wsn/", 1)[0] + f"/wsn/pullpoints/{PP_ID}"
    r = await call(pp, "<wsnt:GetMessages/>")
    assert r.status == 200, r.text
    msgs = r.body.findall(f"{{{WSNT}}}NotificationMessage")
    assert _values(msgs) == ["1", "2", "3", "direct", "4"]
    refs = [m.findtext(f"{{{WSNT}}}SubscriptionReference/{{{WSA}}}Address") for m in msgs]
    assert [bool(a and a.endswith(f"/{PP_SUB}")) for a in refs] == [True] * 3 + [False, True]
    await asyncio.sleep(0.2)  # the acknowledged rows' deletion commits
    await gw.stop()
    with _db(data_dir) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        # the numbering went on after the migrated rows (order across a migration)
        seq = dict(c.execute("SELECT name, seq FROM sqlite_sequence").fetchall())
        assert seq["deliveries"] == 8 and seq["pp_messages"] == 5
        # the v0 file's indexes are gone, the schema's own is on the new table
        q = "SELECT name, tbl_name FROM sqlite_master WHERE type='index' AND sql IS NOT NULL"
        assert c.execute(q).fetchall() == [("pp_messages_pp", "pp_messages")]
    for table in ("deliveries", "pp_messages", "renderings"):
        assert _count(data_dir, table) == 0, table  # nothing left behind: the file shrinks
    # exactly once: started again, nothing is sent again
    await make_gateway(data_dir=data_dir)
    await asyncio.sleep(0.5)
    assert len(wrapped.messages()) == 4 and len(raw.received) == 4


async def test_a_notification_is_stored_once_for_all_its_subscribers(make_gateway, tmp_path):
    data_dir = tmp_path / "gw"
    gw = await make_gateway(data_dir=data_dir)
    dead = "http://127.0.0.1:9/dead"
    raw = "<wsnt:SubscriptionPolicy><wsnt:UseRaw/></wsnt:SubscriptionPolicy>"
    subs = []
    for extra in ["", "", "", "", raw]:
        r = await call(gw.url, subscribe_body(dead, topic_filter("tns:t"), extra))
        assert r.status == 200, r.text
        subs.append(r.body.findtext(f"{{{WSNT}}}SubscriptionReference/{{{WSA}}}Address"))
    for v in range(3):
        r = await call(gw.url, notify_body(("tns:t", reading(v))))
        assert r.status == 202, r.text
    assert _count(data_dir, "deliveries") == 15
    # per message: one wrapped rendering (one dialect) and the raw payload
    assert _count(data_dir, "renderings") == 6
    for i, addr in enumerate(subs):
        r = await call(addr, "<wsnt:Unsubscribe/>")
        assert r.status == 200, r.text
        if i < 3:  # the wrapped renderings are still referenced by the fifth
            assert _count(data_dir, "renderings") == 6
    assert _count(data_dir, "deliveries") == 0
    assert _count(data_dir, "renderings") == 0  # deleted with their last reference


def test_a_file_of_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "broker.sqlite3"
    with sqlite3.connect(path) as c:
        c.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    st = Storage(path)
    with pytest.raises(SchemaError, match="newer gateway"):
        st.open()
    st.close()
    with sqlite3.connect(path) as c:  # untouched
        assert c.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
        assert c.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0


async def test_rows_of_a_subscription_that_is_gone_are_deleted_at_start(make_gateway, tmp_path):
    """A Notify committed just after its subscription ended leaves rows no queue holds; the
    gateway deletes them at run time, and at start those a crash left behind."""
    data_dir = tmp_path / "gw"
    gw = await make_gateway(data_dir=data_dir)
    r = await call(gw.url, subscribe_body("http://127.0.0.1:9/dead", topic_filter("tns:t")))
    assert r.status == 200, r.text
    for v in range(2):
        assert (await call(gw.url, notify_body(("tns:t", reading(v))))).status == 202
    await gw.stop()
    with _db(data_dir) as c:  # as if the subscription's end had committed before them
        c.execute("DELETE FROM subscriptions")
        indexes = [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='index'")]
    assert "deliveries_sub" not in indexes  # rows are deleted by seq (storage_schema)
    assert _count(data_dir, "deliveries") == 2 and _count(data_dir, "renderings") == 2
    gw = await make_gateway(data_dir=data_dir)
    await gw.stop()
    assert _count(data_dir, "deliveries") == 0 and _count(data_dir, "renderings") == 0


async def test_rows_committed_for_a_subscription_that_just_ended_are_deleted(tmp_path):
    """The run-time half: the delivery queues skip a committed row whose subscription has
    no queue any more, and delete it (and its rendering) instead of leaving it."""
    st = Storage(tmp_path / "broker.sqlite3")
    st.open()
    dm = DeliveryManager(st)
    await dm.start()
    try:
        res = await st.accept(
            AcceptBatch(renderings=[(WHOLE, "<m/>")], deliveries=[("ended", 0), ("ended", 0)])
        )
        assert _count(tmp_path, "deliveries") == 2
        dm.enqueue_many([("ended", seq, "<m/>") for seq in res.delivery_seqs])
        for _ in range(50):
            if _count(tmp_path, "deliveries") == 0:
                break
            await asyncio.sleep(0.02)
        assert _count(tmp_path, "deliveries") == 0 and _count(tmp_path, "renderings") == 0
    finally:
        await dm.stop()
        st.close()
