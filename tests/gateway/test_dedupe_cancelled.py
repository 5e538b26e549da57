"""A Notify whose handler is cancelled while its commit is pending is still published once
(gateway/dedupe.py `accept_once`, docs/gateway.md "Exactly once when an answer is lost"):
its copy, sent again by a publisher that got no answer, is answered as a duplicate; and
the gateway's shutdown lets that commit finish before it closes its storage.

Each test runs a real gateway over HTTP on 127.0.0.1 with a real SQLite file. The commit
is held by another connection that holds SQLite's write lock (as another process could,
e.g. an operator's `sqlite3` shell), so "while its commit is pending" is a state the test
makes and ends, not a race it hopes to win. The handler is cancelled the two ways aiohttp
cancels one: on a client disconnect when `handler_cancellation` is on (off in the gateway's
configuration, aiohttp's default: the test turns it on, as an operator embedding the app or
a later aiohttp default could), and at shutdown once its shutdown timeout has passed (made
short here). What the gateway does in its own configuration on a disconnect (the handler
goes on) is the third test.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from gwtest import (
    A_NOTIFY,
    RD,
    WSA,
    WSNT,
    call,
    envelope,
    notify_body,
    post,
    reading,
    subscribe_body,
)

from gateway import dedupe, http_limits
from tests.polling import until

BUSY_MS = 10_000  # the gateway waits this long for the lock: longer than any hold here


@pytest.fixture
def runner_options(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Extra aiohttp AppRunner options for the gateways the test starts."""
    extra: dict[str, Any] = {}
    made = http_limits.runner_kwargs
    monkeypatch.setattr(http_limits, "runner_kwargs", lambda limits: {**made(limits), **extra})
    return extra


@pytest.fixture
def entered(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The keys of the Notify that reached `Dedupe.accept_once`, in order. A copy that
    entered is already waiting for the first copy's accept: accept_once does not yield
    between its entry and that wait."""
    keys: list[object] = []
    real = dedupe.Dedupe.accept_once

    async def spy(self: dedupe.Dedupe, key: Any, accept: Any) -> None:
        keys.append(key)
        await real(self, key, accept)

    monkeypatch.setattr(dedupe.Dedupe, "accept_once", spy)
    return keys


@contextlib.contextmanager
def write_lock(db: Path) -> Iterator[sqlite3.Connection]:
    """Hold SQLite's write lock on `db` until the block ends or the connection rolls back:
    the gateway's next transaction waits for it (its busy timeout)."""
    c = sqlite3.connect(db, isolation_level=None)
    c.execute("BEGIN IMMEDIATE")
    try:
        yield c
    finally:
        if c.in_transaction:
            c.execute("ROLLBACK")
        c.close()


def notify_env(v: int, message_id: str) -> bytes:
    body = notify_body(("tns:t", reading(v)), producer="http://127.0.0.1:9/p")
    return envelope(body, action=A_NOTIFY, message_id=message_id)


async def subscribed_pullpoint(url: str) -> str:
    r = await call(url, "<wsnt:CreatePullPoint/>")
    pp = r.body.findtext(f"{{{WSNT}}}PullPoint/{{{WSA}}}Address") or ""
    assert (await call(url, subscribe_body(pp))).status == 200
    return pp


async def taken(pp: str) -> list[str | None]:
    r = await call(pp, "<wsnt:GetMessages/>")
    return [m.findtext(f".//{RD}value") for m in r.body]


async def first_copy_pending(gw: Any, data: bytes) -> asyncio.Task[Any]:
    """POST `data` (the write lock held) and return once its accept waits for the commit."""
    first = asyncio.create_task(post(gw.url, data))
    await until(lambda: gw.ctx.dedupe.running(), "the first copy being accepted")
    # its rows reach the group commit, which waits for the lock
    s = gw.ctx.storage
    await until(lambda: s._group_task is not None and not s._group_task.done(), "the commit")
    await asyncio.sleep(0.2)
    return first


async def test_a_copy_of_a_notify_whose_handler_was_cancelled_is_a_duplicate(
    make_gateway, runner_options, entered, tmp_path
):
    """The first copy's client hangs up while its commit is held, and aiohttp (with
    handler_cancellation on) cancels its handler; the publisher sends the copy. Before the
    fix the cancelled handler marked its accept failed while the group commit went on with
    its rows: the copy found nothing in flight and nothing seen yet, and was published a
    second time."""
    runner_options["handler_cancellation"] = True
    gw = await make_gateway(data_dir=tmp_path / "d", sqlite_busy_timeout_ms=BUSY_MS)
    pp = await subscribed_pullpoint(gw.url)
    data = notify_env(1, f"urn:uuid:{uuid.uuid4()}")
    with write_lock(tmp_path / "d" / "broker.sqlite3") as lock:
        first = await first_copy_pending(gw, data)
        first.cancel()  # the client hangs up: its connection closes
        with contextlib.suppress(asyncio.CancelledError):
            await first
        # aiohttp cancels the handler, then forgets the connection
        await until(lambda: not gw.runner.server.connections, "the handler cancelled")
        copy = asyncio.create_task(post(gw.url, data))  # the publisher's retry
        await until(lambda: len(entered) == 2, "the copy waiting for the first")
        lock.execute("ROLLBACK")
        r = await copy
    assert r.status == 202 and r.text == "", (r.status, r.text)
    assert await taken(pp) == ["1"]
    assert gw.ctx.counts.accepted == 1 and gw.ctx.counts.duplicates == 1


@pytest.mark.parametrize("landing", [True, False], ids=["landing", "no-landing"])
async def test_shutdown_lets_a_cancelled_handler_s_commit_finish_before_storage_closes(
    make_gateway, runner_options, tmp_path, landing
):
    """At shutdown aiohttp waits its shutdown timeout for a handler, then cancels it: its
    client sees the connection close without an answer and will send the Notify again. The
    accept goes on, and the broker's stop waits for it (gateway.dedupe `settle`) before it
    stops delivery and the landing writers and closes Storage, so it is committed with its
    seen-set row and the copy sent to the restarted gateway is a duplicate. Without that
    wait, Storage's close (on the event loop) would wait for the held commit until the busy
    timeout failed it, and the Notify would be lost (with the landing zone on, the landing
    writer's last write at its stop queues behind the held commit and happens to hide
    that: hence both). The old code, whose in-flight marker the cancellation resolved at
    once, fails the first check."""
    runner_options["shutdown_timeout"] = 0.3
    gw = await make_gateway(
        data_dir=tmp_path / "d", sqlite_busy_timeout_ms=BUSY_MS, landing_enabled=landing
    )
    pp = await subscribed_pullpoint(gw.url)
    data = notify_env(1, f"urn:uuid:{uuid.uuid4()}")
    with write_lock(tmp_path / "d" / "broker.sqlite3") as lock:
        first = await first_copy_pending(gw, data)
        (accept,) = gw.ctx.dedupe.running()
        stopping = asyncio.create_task(gw.stop())
        with pytest.raises(aiohttp.ServerDisconnectedError):  # what the client sees
            await first
        await asyncio.sleep(0.5)  # time for stop to reach Storage, were it not waiting
        assert not stopping.done() and not accept.done()  # stop waits for the accept
        lock.execute("ROLLBACK")
        await stopping
    assert accept.done() and accept.exception() is None
    assert not gw.ctx.storage.is_open
    gw = await make_gateway(data_dir=tmp_path / "d")
    r = await post(gw.url, data)  # the publisher's retry, at the restarted gateway
    assert r.status == 202 and r.text == "", (r.status, r.text)
    pp = gw.url.removesuffix("/wsn/broker") + "/wsn/pullpoints/" + pp.rsplit("/", 1)[1]
    assert await taken(pp) == ["1"]
    assert gw.ctx.counts.duplicates == 1


async def test_in_the_gateway_s_configuration_a_client_hanging_up_cancels_nothing(
    make_gateway, entered, tmp_path
):
    """handler_cancellation is off (aiohttp's default, which gateway.http_limits keeps): a
    client that hangs up while its Notify is being committed gets no answer, but the
    handler goes on, the Notify is committed, and the copy is a duplicate."""
    gw = await make_gateway(data_dir=tmp_path / "d", sqlite_busy_timeout_ms=BUSY_MS)
    assert gw.runner.server is not None and not gw.runner.server.handler_cancellation
    pp = await subscribed_pullpoint(gw.url)
    data = notify_env(1, f"urn:uuid:{uuid.uuid4()}")
    with write_lock(tmp_path / "d" / "broker.sqlite3") as lock:
        first = await first_copy_pending(gw, data)
        (accept,) = gw.ctx.dedupe.running()
        first.cancel()  # the client hangs up
        with contextlib.suppress(asyncio.CancelledError):
            await first
        await asyncio.sleep(0.2)
        assert not accept.done()  # still waiting for the commit, not cancelled
        copy = asyncio.create_task(post(gw.url, data))
        await until(lambda: len(entered) == 2, "the copy waiting for the first")
        lock.execute("ROLLBACK")
        r = await copy
    assert r.status == 202 and r.text == "", (r.status, r.text)
    assert await taken(pp) == ["1"]
    assert gw.ctx.counts.accepted == 1 and gw.ctx.counts.duplicates == 1
