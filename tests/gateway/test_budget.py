"""Issue 22 "a budget for all work a client can cause", against a real gateway process: while
each hostile client of the issue runs, /healthz and a legitimate Notify are not held behind
its work (AIM: the aim of 1 s is the bench's);
XPath topic subscriptions are not evaluated again over the whole Topic Set per new topic;
payloads are stored and delivered with only the namespaces they use. And issue 25 defect 5:
valid XPath expressions the cost guard refused are accepted and select what XPath says."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from gwtest import (
    WSNT,
    XPATH,
    GatewayProcess,
    Reply,
    call,
    cpu_seconds,
    envelope,
    notify_body,
    post,
    reading,
    start_gateway,
    stop_gateway,
    subscribe_body,
    topic_filter,
)

from gateway.topics import TopicSet
from gateway.topics.xpath import XPathExpression
from tests.wsdl_actions import action

A_NOTIFY = action("NotificationConsumer", "Notify")
A_SUBSCRIBE = action("NotificationProducer", "Subscribe")
A_CREATE_PP = action("CreatePullPoint", "CreatePullPoint")
WSTOP_DECL = 'xmlns:tns="urn:test" xmlns:wstop="http://docs.oasis-open.org/wsn/t-1"'
# seconds of the gateway's CPU while /healthz or a legitimate Notify under attack waited for
# its answer. Issue 22's aim is 1 s, a speed, measured by tests/bench/hostile_bench.py
# (docs/performance.md); the test bounds what it proves, that the event loop is not held
# (the defect held it 50 s, computing). A request held behind work on the loop waits at
# least that work's CPU time; the wall clock also counts the waits for a core of a loaded
# machine (5.15 s for one /healthz at load 21-26, 1.06 s at load 13), which prove nothing.
AIM = 5.0


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    gw = start_gateway(tmp_path / "data", "--filter-timeout", "0.25")
    yield gw
    stop_gateway(gw)


def _base(gw: GatewayProcess) -> str:
    return gw.url.rsplit("/wsn/", 1)[0]


async def _under_attack(
    gw: GatewayProcess, attack: Callable[[], Awaitable[Reply]]
) -> tuple[Reply, float, float]:
    """Run `attack` and, until it is answered, probe /healthz and publish a legitimate
    Notify (another topic, no filter) in turn: (its answer, the most CPU the gateway spent
    while a /healthz waited, the same for a legitimate Notify; see AIM). The slowest wall
    times are printed beside them."""
    task = asyncio.ensure_future(attack())
    pid = gw.proc.pid
    health: list[tuple[float, float]] = []  # (gateway CPU s, wall s) per probe
    legit: list[tuple[float, float]] = []
    async with aiohttp.ClientSession() as s:
        await asyncio.sleep(0.05)  # the hostile request first
        while not task.done() or not legit:
            t0, c0 = time.monotonic(), cpu_seconds(pid)
            async with s.get(_base(gw) + "/healthz") as r:
                assert r.status == 200
            health.append((cpu_seconds(pid) - c0, time.monotonic() - t0))
            t0, c0 = time.monotonic(), cpu_seconds(pid)
            body = notify_body(("tns:legit", reading(21.5)))
            r2 = await post(gw.url, envelope(body, action=A_NOTIFY), session=s)
            assert r2.status == 202, r2.text
            legit.append((cpu_seconds(pid) - c0, time.monotonic() - t0))
            await asyncio.sleep(0.02)
    print(
        f"under attack: slowest /healthz {max(w for _c, w in health):.2f} s, legitimate "
        f"Notify {max(w for _c, w in legit):.2f} s (wall)"
    )
    return task.result(), max(c for c, _w in health), max(c for c, _w in legit)


async def _subscribe(url: str, consumer: str, filt: str) -> Reply:
    r = await call(url, subscribe_body(consumer, filt), action=A_SUBSCRIBE)
    assert r.status == 200, r.text
    return r


def _nested(depth: int, leaves: int) -> str:
    """Issue 22's payload: `depth` nested elements around `leaves` empty ones."""
    return "<p:a xmlns:p='urn:x'>" + "<n>" * depth + "<l/>" * leaves + "</n>" * depth + "</p:a>"


async def test_a_quadratic_message_content_filter_stalls_nothing(gateway: GatewayProcess) -> None:
    # //*//* passed the old guard; with 240 levels and 6,000 leaves libxml2 needs seconds
    mc = f'<wsnt:MessageContent Dialect="{XPATH}">//*//*</wsnt:MessageContent>'
    await _subscribe(gateway.url, "http://127.0.0.1:9/x", topic_filter("tns:t") + mc)
    hostile = envelope(notify_body(("tns:t", _nested(240, 6000))), action=A_NOTIFY)
    reply, health, legit = await _under_attack(gateway, lambda: post(gateway.url, hostile))
    assert reply.status == 202  # accepted: the filter's verdict is "no match", not a fault
    assert health < AIM and legit < AIM, (health, legit)
    # logged once, naming the expression and the limit
    await asyncio.sleep(0.3)
    log = gateway.stderr.read_text()
    assert log.count("'//*//*' ran longer than --filter-timeout 0.25 s") == 1, log
    assert "Traceback" not in log


async def test_the_namespace_axis_stalls_nothing(gateway: GatewayProcess) -> None:
    mc = f'<wsnt:MessageContent Dialect="{XPATH}">boolean(//*/namespace::*)</wsnt:MessageContent>'
    await _subscribe(gateway.url, "http://127.0.0.1:9/x", topic_filter("tns:t") + mc)
    decls = " ".join(f'xmlns:p{i}="urn:{i}"' for i in range(240))
    payload = f"<a {decls}>" + "<b/>" * 20_000 + "</a>"
    hostile = envelope(notify_body(("tns:t", payload)), action=A_NOTIFY)
    reply, health, legit = await _under_attack(gateway, lambda: post(gateway.url, hostile))
    assert reply.status == 202
    assert health < AIM and legit < AIM, (health, legit)


def _with_prefixes(body: str, n: int) -> bytes:
    decls = " ".join(f'xmlns:p{i}="urn:{i}"' for i in range(n))
    env = envelope(body, action=A_NOTIFY)
    return env.replace(b"<s:Envelope ", f"<s:Envelope {decls} ".encode(), 1)


async def test_thousands_of_namespace_declarations_are_refused_at_once(
    gateway: GatewayProcess,
) -> None:
    # issue 22: 5,000 prefixes on the Envelope and 500 empty messages blocked /healthz 50 s
    hostile = _with_prefixes(notify_body(*[("tns:t", "<x/>")] * 500), 5000)
    reply, health, legit = await _under_attack(gateway, lambda: post(gateway.url, hostile))
    assert reply.status == 400 and reply.is_fault
    assert "more than 256 namespace declarations are in scope" in reply.text
    assert health < AIM and legit < AIM, (health, legit)


def _dir_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


async def test_payloads_are_stored_with_only_the_namespaces_they_use(
    gateway: GatewayProcess, tmp_path: Path
) -> None:
    # issue 22: with one pull-point subscriber, a 184 KB request wrote 191 MB; below the
    # limit of declarations in scope, each of 2,000 payloads inherited 240 of them
    r = await call(gateway.url, "<wsnt:CreatePullPoint/>", action=A_CREATE_PP)
    pp = r.body.findtext(f".//{{{WSNT}}}PullPoint/{{http://www.w3.org/2005/08/addressing}}Address")
    assert pp
    await _subscribe(gateway.url, pp, topic_filter("tns:t"))
    data = tmp_path / "data"
    before = _dir_bytes(data)
    hostile = _with_prefixes(notify_body(*[("tns:t", "<x/>")] * 2000), 240)
    reply, health, legit = await _under_attack(gateway, lambda: post(gateway.url, hostile))
    assert reply.status == 202
    assert health < AIM and legit < AIM, (health, legit)
    grown = _dir_bytes(data) - before
    # each message is its NotificationMessage's few hundred bytes; the declarations
    # in scope (about 6 KB each) would be 12 MB, twice with the WAL
    assert grown < 6_000_000, grown
    gm = "<wsnt:GetMessages><wsnt:MaximumNumber>1</wsnt:MaximumNumber></wsnt:GetMessages>"
    got = await call(pp, gm, action=action("PullPoint", "GetMessages"))
    msg = got.body.find(f".//{{{WSNT}}}Message")
    assert msg is not None
    assert len(msg[0].nsmap) < 20, msg[0].nsmap  # the response's own, not 240 more


async def test_xpath_topic_subscriptions_are_not_evaluated_again_per_new_topic(
    make_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 22: with 20 XPath-dialect topic subscriptions every Notify on a new topic took
    # about 2 s: each evaluated over the whole TopicSet document, rebuilt per new topic
    gw = await make_gateway()
    for i in range(20):
        expr = f"//*[@wstop:topic='true' and contains(local-name(), 'q{i}')]"
        await _subscribe(gw.url, "http://127.0.0.1:9/x", topic_filter(expr, XPATH, WSTOP_DECL))
    bulk = notify_body(*[(f"tns:w{j}", "<x/>") for j in range(500)])
    await post(gw.url, envelope(bulk, action=A_NOTIFY))
    counts = {"document": 0, "evaluate": 0}
    document, evaluate = TopicSet.document, XPathExpression.evaluate

    def counted_document(self: TopicSet) -> Any:
        counts["document"] += 1
        return document(self)

    def counted_evaluate(self: XPathExpression, ts: TopicSet) -> Any:
        counts["evaluate"] += 1
        return evaluate(self, ts)

    monkeypatch.setattr(TopicSet, "document", counted_document)
    monkeypatch.setattr(XPathExpression, "evaluate", counted_evaluate)
    for k in range(10):
        r = await post(gw.url, envelope(notify_body((f"tns:new{k}q3", "<x/>")), action=A_NOTIFY))
        assert r.status == 202
    assert counts == {"document": 0, "evaluate": 0}
    # and the selections are right: q3's subscription selects each new topic, q4's none
    idx = gw.state.index
    subs = {s.topic_exprs[0].text: sid for sid, s in gw.state.subscriptions.items()}
    q3 = subs["//*[@wstop:topic='true' and contains(local-name(), 'q3')]"]
    q4 = subs["//*[@wstop:topic='true' and contains(local-name(), 'q4')]"]
    from gateway.topics import ConcreteTopic

    for k in range(10):
        got = idx.match(ConcreteTopic("urn:test", (f"new{k}q3",)))
        assert q3 in got and q4 not in got


async def test_valid_xpath_the_guard_refused_selects_what_xpath_says(
    make_gateway: Any, make_consumer: Any
) -> None:
    # issue 25 defect 5: both were InvalidTopicExpressionFault
    gw = await make_gateway()
    sib, below = await make_consumer(), await make_consumer()
    for consumer, text in ((sib, "tns:t1/following-sibling::*"), (below, "//*[.//t3]")):
        await _subscribe(gw.url, consumer.url, topic_filter(text, XPATH, WSTOP_DECL))
    order = ["t0", "t1", "a", "a/b", "t2", "c", "c/d", "c/d/t3", "a/t3", "a", "c/d", "c", "t0"]
    for topic in order:
        body = notify_body((f"tns:{topic}", f"<v>{topic}</v>"))
        r = await post(gw.url, envelope(body, action=A_NOTIFY))
        assert r.status == 202
    # following siblings of t1 when each was published: a, t2, c (the topics' elements in
    # the order they appeared); ancestors of a t3 once it is there: a, c, c/d
    await sib.wait_for(5)
    await below.wait_for(3)
    await asyncio.sleep(0.2)
    assert sorted(m.findtext(".//v") for m in sib.messages()) == ["a", "a", "c", "c", "t2"]
    assert sorted(m.findtext(".//v") for m in below.messages()) == ["a", "c", "c/d"]
