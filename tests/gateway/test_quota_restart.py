"""Per-client quotas survive a restart (issue 22 point 3): the client address is stored with
each subscription, pull point and grown topic in SQLite, so a client at its bound is still
at it after the gateway restarts; a database of schema version 1 is upgraded in place, its
rows held under client "". On ca8bf7e restored resources were held under client "" and the
client got its whole quota again: these tests fail there."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from pathlib import Path

import aiohttp
from gwtest import (
    WSA,
    WSNT,
    call_from,
    notify_body,
    reading,
    start_gateway,
    stop_gateway,
    subscribe_body,
    topic_filter,
)

from gateway import quotas
from gateway.storage_schema import SCHEMA_VERSION
from tests.wsdl_actions import action

A_CREATE_PP = action("CreatePullPoint", "CreatePullPoint")


def _topics(*names: str) -> str:
    return notify_body(*[(f"tns:{n}", reading(1)) for n in names])


async def _fill(url: str, consumer: str) -> None:
    """From 127.0.0.1: 2 subscriptions, 1 pull point, 2 topics: its whole quota."""
    for _ in range(2):
        r = await call_from("127.0.0.1", url, subscribe_body(consumer, topic_filter("tns:t")))
        assert r.status == 200, r.text
    r = await call_from("127.0.0.1", url, "<wsnt:CreatePullPoint/>", A_CREATE_PP)
    assert r.status == 200, r.text
    assert r.body.findtext(f"{{{WSNT}}}PullPoint/{{{WSA}}}Address")
    assert (await call_from("127.0.0.1", url, _topics("a", "b"))).status == 202


async def _refused_then_other_client(url: str, consumer: str) -> None:
    sub = subscribe_body(consumer, topic_filter("tns:t"))
    r = await call_from("127.0.0.1", url, sub)
    assert r.fault_name == "SubscribeCreationFailedFault", r.text
    assert "--max-client-subscriptions 2 reached for 127.0.0.1" in r.text
    r = await call_from("127.0.0.1", url, "<wsnt:CreatePullPoint/>", A_CREATE_PP)
    assert r.fault_name == "UnableToCreatePullPointFault", r.text
    assert "--max-client-pullpoints 1 reached for 127.0.0.1" in r.text
    r = await call_from("127.0.0.1", url, _topics("c"))
    assert r.fault_name == "TopicNotSupportedFault", r.text
    assert "--max-client-topics 2 reached for 127.0.0.1" in r.text
    # another client is not
    assert (await call_from("127.0.0.2", url, sub)).status == 200
    assert (await call_from("127.0.0.2", url, "<wsnt:CreatePullPoint/>", A_CREATE_PP)).status == 200
    assert (await call_from("127.0.0.2", url, _topics("c"))).status == 202


async def _metrics(url: str) -> dict[str, float]:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        text = await r.text()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("wsn_quota_")
    }


FLAGS = (
    "--max-client-subscriptions", "2",
    "--max-client-pullpoints", "1",
    "--max-client-topics", "2",
)  # fmt: skip


async def test_a_full_client_is_still_full_after_a_restart(tmp_path: Path, consumer) -> None:  # type: ignore[no-untyped-def]
    data = tmp_path / "gw"
    gw = start_gateway(data, *FLAGS)
    try:
        await _fill(gw.url, consumer.url)
    finally:
        assert stop_gateway(gw) == 0
    gw = start_gateway(data, *FLAGS)  # a new process on the same SQLite file
    try:
        # the account is read back: /metrics shows what the fullest client holds
        metrics = await _metrics(gw.url.replace("/wsn/broker", "/metrics"))
        assert metrics['wsn_quota_client_held_max{quota="subscriptions"}'] == 2
        assert metrics['wsn_quota_client_held_max{quota="pull points"}'] == 1
        assert metrics['wsn_quota_client_held_max{quota="topics"}'] == 2
        assert metrics['wsn_quota_bound{quota="subscriptions",scope="client"}'] == 2
        await _refused_then_other_client(gw.url, consumer.url)
    finally:
        assert stop_gateway(gw) == 0
    db = sqlite3.connect(data / "broker.sqlite3")
    try:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        clients = sorted(r[0] for r in db.execute("SELECT client FROM subscriptions"))
        assert clients == ["127.0.0.1", "127.0.0.1", "127.0.0.2"]
        assert sorted(r[0] for r in db.execute("SELECT client FROM pullpoints")) == [
            "127.0.0.1",
            "127.0.0.2",
        ]
        grown = dict(db.execute("SELECT topic_path, client FROM grown_topics"))
        assert grown == {"a": "127.0.0.1", "b": "127.0.0.1", "c": "127.0.0.2"}
    finally:
        db.close()


#: the tables of schema version 1 whose rows gained a client (as ca8bf7e wrote them)
V1 = """
CREATE TABLE subscriptions(
  id TEXT PRIMARY KEY, consumer TEXT NOT NULL, filter TEXT, policy TEXT,
  raw INTEGER NOT NULL, created REAL NOT NULL, termination REAL, paused INTEGER NOT NULL,
  pullpoint TEXT, dialect TEXT, soap TEXT);
CREATE TABLE pullpoints(id TEXT PRIMARY KEY, created REAL NOT NULL);
CREATE TABLE grown_topics(
  topic_ns TEXT NOT NULL, topic_path TEXT NOT NULL, PRIMARY KEY(topic_ns, topic_path));
INSERT INTO pullpoints VALUES ('old-pp', 1.0e9);
INSERT INTO grown_topics VALUES ('urn:test', 'old');
PRAGMA user_version = 1;
"""


async def test_a_version_1_database_is_upgraded_in_place(make_gateway, tmp_path, caplog):  # type: ignore[no-untyped-def]
    data = tmp_path / "gw"
    data.mkdir()
    db = sqlite3.connect(data / "broker.sqlite3")
    db.executescript(V1)
    db.close()
    with caplog.at_level(logging.WARNING, logger="gateway.storage"):
        gw = await make_gateway(data_dir=data, pullpoint_idle_expiry=0)
    (line,) = [r.getMessage() for r in caplog.records if "schema version 2" in r.getMessage()]
    assert "1 pull points" in line and "1 topics" in line and '("")' in line, line
    q = gw.ctx.quotas
    assert "old-pp" in gw.state.pullpoints
    assert q.client_of(quotas.PULLPOINTS, "old-pp") == ""
    assert q.held(quotas.PULLPOINTS, "") == 1 and q.held(quotas.TOPICS, "") == 1
    # new rows get their client
    r = await call_from("127.0.0.1", gw.url, "<wsnt:CreatePullPoint/>", A_CREATE_PP)
    assert r.status == 200, r.text
    await asyncio.sleep(0)
    db = sqlite3.connect(data / "broker.sqlite3")
    try:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        rows = dict(db.execute("SELECT id, client FROM pullpoints"))
    finally:
        db.close()
    assert rows.pop("old-pp") == "" and list(rows.values()) == ["127.0.0.1"]


async def test_a_topic_grown_by_a_failed_notify_stays_its_growers(tmp_path: Path) -> None:
    """A Notify whose commit fails has grown the Topic Set in memory and counts against its
    client's topic quota; the topic is stored by the next Notify on it. When that Notify
    comes from another client, the topic is still stored as the first client's, so the
    first client's quota holds it after a restart too (on 498b8eb it was stored under no
    client: after a restart the first client could grow one topic more than its bound)."""
    data = tmp_path / "gw"
    flags = ("--max-client-topics", "2", "--sqlite-busy-timeout-ms", "50")
    gw = start_gateway(data, *flags)
    try:
        lock = sqlite3.connect(data / "broker.sqlite3", isolation_level=None, timeout=1)
        lock.execute("BEGIN EXCLUSIVE")
        try:
            r = await call_from("127.0.0.1", gw.url, _topics("a"))
            assert r.status == 500 and r.fault_name is not None, r.text
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        # 127.0.0.1 holds "a" (in memory); 127.0.0.2 publishes on it, growing nothing
        assert (await call_from("127.0.0.2", gw.url, _topics("a"))).status == 202
    finally:
        assert stop_gateway(gw) == 0
    db = sqlite3.connect(data / "broker.sqlite3")
    try:
        assert dict(db.execute("SELECT topic_path, client FROM grown_topics")) == {"a": "127.0.0.1"}
    finally:
        db.close()
    gw = start_gateway(data, *flags)
    try:  # "a" and one more is 127.0.0.1's bound of 2
        assert (await call_from("127.0.0.1", gw.url, _topics("b"))).status == 202
        r = await call_from("127.0.0.1", gw.url, _topics("c"))
        assert r.fault_name == "TopicNotSupportedFault", r.text
        assert "--max-client-topics 2 reached for 127.0.0.1" in r.text
    finally:
        assert stop_gateway(gw) == 0
