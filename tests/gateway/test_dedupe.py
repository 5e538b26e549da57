"""A Notify sent again is published once (gateway/dedupe.py, docs/gateway.md "Exactly once
when an answer is lost"): a publisher that lost the answer to a Notify sends the same
envelope again, with the same wsa:MessageID; the broker answers it as before and does not
deliver, land or keep it twice. Keyed per publisher; durable across kill -9; bounded."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

from gwtest import (
    A_NOTIFY,
    DT,
    RD,
    SIMPLE,
    WSA,
    WSNT,
    Consumer,
    call,
    envelope,
    notify_body,
    post,
    reading,
    register,
    start_gateway,
    stop_gateway,
    subscribe_body,
)

from gateway import storage
from tests.polling import until


def mid() -> str:
    return f"urn:uuid:{uuid.uuid4()}"


def notify_env(*vals: int, message_id: str | None, producer: str | None = None,
               topic: str = "tns:t", nsdecl: str = 'xmlns:tns="urn:test"',
               dialect: str | None = None) -> bytes:  # fmt: skip
    kw = {"dialect": dialect} if dialect else {}
    body = notify_body(*[(topic, reading(v)) for v in vals], nsdecl=nsdecl, producer=producer, **kw)
    return envelope(body, action=A_NOTIFY, message_id=message_id)


def landed(data_dir: Path) -> list[str]:
    """The readings' values in the landing zone, in order."""
    out = []
    for f in sorted((data_dir / "landing").glob("landing-*.jsonl")):
        out.extend(json.loads(x)["fields"]["value"] for x in f.read_text().splitlines())
    return out


def values(consumer: Consumer) -> list[str | None]:
    return [m.findtext(f".//{RD}value") for m in consumer.messages()]


async def notify(url: str, data: bytes) -> None:
    r = await post(url, data)
    assert r.status == 202 and r.text == "", (r.status, r.text)


MARK = "last"


def seen_set(gw: Any, query: str) -> Any:
    """The one value `query` reads from the gateway's database (a connection of its own:
    in WAL mode a reader never waits for the gateway)."""
    c = sqlite3.connect(gw.ctx.storage.path)
    try:
        return c.execute(query).fetchone()[0]
    finally:
        c.close()


async def published(url: str, consumer: Consumer) -> list[str | None]:
    """The values `consumer` got, once everything published before now has arrived: a last
    Notify (without a MessageID: always published) arrives after them (a subscription's
    messages are delivered in order), so the test waits for it instead of for nothing more
    to arrive."""
    await notify(url, notify_env(MARK, message_id=None))  # type: ignore[arg-type]
    await until(lambda: MARK in values(consumer), "the last Notify delivered")
    got = values(consumer)
    assert got[-1] == MARK, got
    return got[:-1]


async def test_a_notify_sent_again_is_answered_and_not_published_again(make_gateway, consumer,
                                                                       tmp_path):  # fmt: skip
    gw = await make_gateway(data_dir=tmp_path / "d")
    assert (await call(gw.url, subscribe_body(consumer.url))).status == 200
    first = notify_env(1, 2, message_id=mid())
    await notify(gw.url, first)
    await notify(gw.url, first)  # its answer was lost: the same bytes again
    await notify(gw.url, notify_env(3, message_id=mid()))
    await notify(gw.url, first)
    # without a MessageID every Notify is published, as before
    bare = notify_env(4, message_id=None)
    await notify(gw.url, bare)
    await notify(gw.url, bare)
    assert gw.ctx.counts.accepted == 5 and gw.ctx.counts.duplicates == 2
    assert await published(gw.url, consumer) == ["1", "2", "3", "4", "4"]
    # the landing zone, in the order accepted: the last line is the last Notify's
    await until(lambda: landed(tmp_path / "d")[-1:] == [MARK], "the last landing line")
    assert landed(tmp_path / "d") == ["1", "2", "3", "4", "4", MARK]
    m = await until(lambda: _metrics(gw.url), "/metrics")
    assert "wsn_notify_duplicates_total 2.0" in m, m


async def _metrics(url: str) -> str:
    import aiohttp

    async with aiohttp.ClientSession() as s, s.get(url.replace("/wsn/broker", "/metrics")) as r:
        return await r.text()


async def test_copies_sent_at_once_are_published_once(make_gateway, consumer):
    gw = await make_gateway()
    assert (await call(gw.url, subscribe_body(consumer.url))).status == 200
    data = notify_env(1, 2, 3, message_id=mid())
    await asyncio.gather(*[notify(gw.url, data) for _ in range(8)])
    await notify(gw.url, notify_env(4, message_id=mid()))
    assert await published(gw.url, consumer) == ["1", "2", "3", "4"]
    assert gw.ctx.counts.duplicates == 7


async def test_the_same_message_id_from_two_publishers_is_published_for_each(
    make_gateway, consumer
):
    """The key is the publisher and the MessageID: a device's registration (by its device
    id), else the ProducerReference address; one publisher cannot suppress another's."""
    gw = await make_gateway()
    assert (await call(gw.url, subscribe_body(consumer.url))).status == 200
    reg_a, reg_b = [
        await register(gw.url, publisher=f"http://127.0.0.1:9/{d}/wsn/producer", device_id=d)
        for d in ("dev-a", "dev-b")
    ]
    same = mid()
    dev = {"topic": "dt:temperature", "nsdecl": DT, "dialect": SIMPLE}
    for url, v in ((reg_a, 1), (reg_b, 2), (reg_a, 1), (reg_b, 2)):
        await notify(url, notify_env(v, message_id=same, **dev))  # type: ignore[arg-type]
    # posted to the broker: the ProducerReference names the publisher
    for prod, v in (("http://127.0.0.1:9/p", 3), ("http://127.0.0.1:9/q", 4),
                    ("http://127.0.0.1:9/p", 3)):  # fmt: skip
        await notify(gw.url, notify_env(v, message_id=same, producer=prod))
    assert await published(gw.url, consumer) == ["1", "2", "3", "4"]
    assert gw.ctx.counts.duplicates == 3


async def test_the_seen_set_survives_kill_9(tmp_path):
    data = tmp_path / "state"
    g = start_gateway(data, "--landing-max-age", "0.2")
    try:
        r = await call(g.url, "<wsnt:CreatePullPoint/>")
        pp = r.body.findtext(f"{{{WSNT}}}PullPoint/{{{WSA}}}Address") or ""
        assert (await call(g.url, subscribe_body(pp))).status == 200
        sent = notify_env(1, 2, message_id=mid())
        await notify(g.url, sent)
    finally:  # killed after the commit: the publisher never saw an answer, say
        os.kill(g.proc.pid, signal.SIGKILL)
        g.proc.wait(10)
    g = start_gateway(data, "--landing-max-age", "0.2")
    try:
        await notify(g.url, sent)  # the publisher's retry, at the restarted gateway
        await notify(g.url, notify_env(3, message_id=mid()))
        pp = g.url.removesuffix("/wsn/broker") + "/wsn/pullpoints/" + pp.rsplit("/", 1)[1]
        r = await call(pp, "<wsnt:GetMessages/>")
        assert [m.findtext(f".//{RD}value") for m in r.body] == ["1", "2", "3"]
    finally:
        assert stop_gateway(g) == 0
    assert landed(data) == ["1", "2", "3"]


async def test_the_seen_set_is_bounded_by_count(make_gateway, consumer):
    gw = await make_gateway(notify_dedupe_ids=2)
    assert (await call(gw.url, subscribe_body(consumer.url))).status == 200
    ids = [mid() for _ in range(3)]
    for i, m in enumerate(ids):
        await notify(gw.url, notify_env(i, message_id=m))
    await notify(gw.url, notify_env(2, message_id=ids[2]))  # remembered: not again
    await notify(gw.url, notify_env(0, message_id=ids[0]))  # forgotten (the oldest of 3)
    assert await published(gw.url, consumer) == ["0", "1", "2", "0"]


def test_the_seen_set_is_bounded_by_age(tmp_path):
    from gateway.storage_seen import SEEN_SCHEMA, record_seen

    c = sqlite3.connect(tmp_path / "db", isolation_level=None)
    c.execute(SEEN_SCHEMA)
    record_seen(c, [("p", "a"), ("p", "b")], 1000.0, 100, 60.0)
    record_seen(c, [("p", "c")], 1030.0, 100, 60.0)
    record_seen(c, [("p", "d"), ("p", "a")], 1070.0, 100, 60.0)  # a, b are 70 s old
    rows = [r[0] for r in c.execute("SELECT message_id FROM notify_seen ORDER BY seq")]
    assert rows == ["c", "d", "a"]
    record_seen(c, [("q", "e")], 1071.0, 2, 60.0)  # and at most 2
    assert [r[0] for r in c.execute("SELECT message_id FROM notify_seen ORDER BY seq")] == [
        "a",
        "e",
    ]


class _StorageTime:
    """gateway.storage's `time` module, its wall clock moved on by `ahead` seconds."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def time(self) -> float:
        return time.time() + self.ahead

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


async def test_a_pair_past_the_age_bound_stops_counting_before_it_is_pruned(
    make_gateway, consumer, monkeypatch
):
    # no other Notify in between: no group commit has pruned the pair when the resend comes.
    # The bound's clock is moved on rather than slept past: a loaded machine could also
    # take longer than a short bound between the first two
    clock = _StorageTime()
    monkeypatch.setattr(storage, "time", clock)
    gw = await make_gateway(notify_dedupe_age=60)
    assert (await call(gw.url, subscribe_body(consumer.url))).status == 200
    data = notify_env(1, message_id=mid())
    await notify(gw.url, data)
    await notify(gw.url, data)  # within the bound: a duplicate
    clock.ahead = 61
    await notify(gw.url, data)  # past it: published again, as the docs promise
    await consumer.wait_for(2)
    assert values(consumer) == ["1", "1"] and gw.ctx.counts.duplicates == 1


async def test_a_huge_message_id_or_producer_is_kept_as_its_digest(make_gateway, consumer):
    """A MessageID or ProducerReference near the request size limit must not make a row of
    the seen-set that large (100,000 such rows would fill a disk), and must still dedupe."""
    gw = await make_gateway()
    assert (await call(gw.url, subscribe_body(consumer.url))).status == 200
    huge = "urn:x:" + "a" * 200_000
    producer = "http://127.0.0.1:9/" + "p" * 200_000
    first = notify_env(1, message_id=huge + "1", producer=producer)
    await notify(gw.url, first)
    await notify(gw.url, first)  # the same: a duplicate
    await notify(gw.url, notify_env(2, message_id=huge + "2", producer=producer))  # not the same
    assert await published(gw.url, consumer) == ["1", "2"]
    assert gw.ctx.counts.duplicates == 1
    sizes = seen_set(gw, "SELECT max(length(publisher) + length(message_id)) FROM notify_seen")
    assert sizes <= 600, sizes


async def test_a_database_without_the_seen_set_opens_and_dedupes(make_gateway, consumer,
                                                                 tmp_path):  # fmt: skip
    gw = await make_gateway(data_dir=tmp_path / "d")
    await gw.stop()
    c = sqlite3.connect(tmp_path / "d" / "broker.sqlite3")
    c.execute("DROP TABLE notify_seen")  # the schema of a gateway before the seen-set
    c.commit()
    c.close()
    gw = await make_gateway(data_dir=tmp_path / "d")
    assert (await call(gw.url, subscribe_body(consumer.url))).status == 200
    data = notify_env(1, message_id=mid())
    await notify(gw.url, data)
    await notify(gw.url, data)
    assert await published(gw.url, consumer) == ["1"]


async def test_the_seen_set_can_be_turned_off(make_gateway, consumer):
    """--notify-dedupe-ids 0: every Notify is published, as before the seen-set."""
    gw = await make_gateway(notify_dedupe_ids=0)
    assert (await call(gw.url, subscribe_body(consumer.url))).status == 200
    data = notify_env(1, message_id=mid())
    await notify(gw.url, data)
    await notify(gw.url, data)
    await consumer.wait_for(2)
    assert values(consumer) == ["1", "1"] and gw.ctx.counts.duplicates == 0
    assert seen_set(gw, "SELECT count(*) FROM notify_seen") == 0


async def test_a_notify_to_a_pull_point_sent_again_is_stored_once(make_gateway):
    """A Notify posted to a pull point's own address (WS-BaseNotification 1.3 §5.1.1: the
    pull point as NotificationConsumer) is deduplicated like one posted to the broker, by
    its publisher and wsa:MessageID within that pull point (gateway.dedupe `pullpoint_key`):
    a consumer-side retry after a lost answer does not put the message in twice. Another
    pull point, or the broker, with the same MessageID are other keys."""
    gw = await make_gateway()

    async def create() -> str:
        r = await call(gw.url, "<wsnt:CreatePullPoint/>")
        return r.body.findtext(f"{{{WSNT}}}PullPoint/{{{WSA}}}Address") or ""

    async def taken(pp: str) -> list[str | None]:
        r = await call(pp, "<wsnt:GetMessages/>")
        return [m.findtext(f".//{RD}value") for m in r.body]

    pp_a, pp_b = await create(), await create()
    assert (await call(gw.url, subscribe_body(pp_b))).status == 200  # b gets the broker's
    same, other = mid(), mid()
    await notify(pp_a, notify_env(1, message_id=same))
    await notify(pp_a, notify_env(1, message_id=same))  # its answer was lost: again
    await notify(pp_a, notify_env(2, message_id=other))  # a different MessageID
    await notify(pp_a, notify_env(3, message_id=None))  # without a MessageID: every time
    await notify(pp_a, notify_env(3, message_id=None))
    assert await taken(pp_a) == ["1", "2", "3", "3"]
    assert gw.ctx.counts.duplicates == 1
    await notify(pp_b, notify_env(1, message_id=same))  # another pull point
    await notify(gw.url, notify_env(1, message_id=same))  # the broker (delivered to b)
    await until(lambda: gw.state.pullpoints[pp_b.rsplit("/", 1)[1]].queued >= 2, "b's two")
    assert await taken(pp_b) == ["1", "1"]
    assert gw.ctx.counts.duplicates == 1
    # known by its ProducerReference, as at the broker: two publishers never collide
    await notify(pp_a, notify_env(4, message_id=same, producer="http://127.0.0.1:9/p"))
    await notify(pp_a, notify_env(5, message_id=same, producer="http://127.0.0.1:9/q"))
    await notify(pp_a, notify_env(4, message_id=same, producer="http://127.0.0.1:9/p"))
    assert await taken(pp_a) == ["4", "5"]
    assert gw.ctx.counts.duplicates == 2
