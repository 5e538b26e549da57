"""Quotas with names over HTTP (issue 22 point 3): subscriptions, pull points and topic
growth bounded per client address and in all, each refusal the spec's fault with a reason
naming the flag, counted in /metrics and logged once per client per interval; pull points
bounded in bytes; GetMessages without MaximumNumber answers a bounded batch; a pull point
nobody reads expires. On a1410b0 none of these bounds existed (only --max-subscriptions and
--max-pullpoints in all, without the flag's name): every test here fails there.

Two client addresses are two loopback addresses (127.0.0.1 and 127.0.0.2)."""

from __future__ import annotations

import asyncio
import logging
import re

import aiohttp
import pytest
from gwtest import (
    WSA,
    WSNT,
    Reply,
    call,
    call_from,
    notify_body,
    reading,
    subscribe_body,
    topic_filter,
)

from tests.wsdl_actions import action

A_CREATE_PP = action("CreatePullPoint", "CreatePullPoint")


async def _metric(url: str, name: str, **labels: str) -> float:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        text = await r.text()
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    m = re.search(rf"^{name}{{{want}}} (\S+)$", text, re.M)
    assert m, f"{name}{{{want}}} not in /metrics"
    return float(m.group(1))


async def _refusals(url: str, quota: str, scope: str) -> float:
    return await _metric(url, "wsn_quota_refusals_total", quota=quota, scope=scope)


def _metrics_url(gw) -> str:  # type: ignore[no-untyped-def]
    return gw.url.replace("/wsn/broker", "/metrics")


async def test_subscriptions_bounded_per_client_and_in_all(make_gateway, consumer, caplog):
    gw = await make_gateway(max_client_subscriptions=2, max_subscriptions=3)
    body = subscribe_body(consumer.url, topic_filter("tns:t"))
    refs = []
    for _ in range(2):
        r = await call_from("127.0.0.1", gw.url, body)
        assert r.status == 200, r.text
        refs.append(r.body.findtext(f".//{{{WSNT}}}SubscriptionReference/{{{WSA}}}Address"))
    with caplog.at_level(logging.WARNING, logger="gateway.quotas"):
        for _ in range(4):  # refused each time, logged once
            r = await call_from("127.0.0.1", gw.url, body)
            assert r.fault_name == "SubscribeCreationFailedFault", r.text
            assert "--max-client-subscriptions 2 reached for 127.0.0.1" in r.text
    lines = [rec for rec in caplog.records if rec.name == "gateway.quotas"]
    assert len(lines) == 1, [rec.getMessage() for rec in lines]
    assert "--max-client-subscriptions" in lines[0].getMessage()
    # another client has its own bound, then meets the one in all
    r = await call_from("127.0.0.2", gw.url, body)
    assert r.status == 200, r.text
    r = await call_from("127.0.0.2", gw.url, body)
    assert r.fault_name == "SubscribeCreationFailedFault"
    assert "--max-subscriptions 3 reached" in r.text
    assert len(gw.state.subscriptions) == 3  # nothing made by a refused Subscribe
    url = _metrics_url(gw)
    assert await _refusals(url, "subscriptions", "client") == 4
    assert await _refusals(url, "subscriptions", "total") == 1
    # an ended subscription gives its place back
    r = await call(refs[0], "<wsnt:Unsubscribe/>")
    assert r.status == 200, r.text
    r = await call_from("127.0.0.1", gw.url, body)
    assert r.status == 200, r.text


async def test_pullpoints_bounded_per_client_and_in_all(make_gateway):
    gw = await make_gateway(max_client_pullpoints=1, max_pullpoints=2)
    body = "<wsnt:CreatePullPoint/>"
    r = await call_from("127.0.0.1", gw.url, body, A_CREATE_PP)
    assert r.status == 200, r.text
    pp = r.body.findtext(f"{{{WSNT}}}PullPoint/{{{WSA}}}Address")
    r = await call_from("127.0.0.1", gw.url, body, A_CREATE_PP)
    assert r.fault_name == "UnableToCreatePullPointFault", r.text
    assert "--max-client-pullpoints 1 reached for 127.0.0.1" in r.text
    assert (await call_from("127.0.0.2", gw.url, body, A_CREATE_PP)).status == 200
    r = await call_from("127.0.0.3", gw.url, body, A_CREATE_PP)
    assert r.fault_name == "UnableToCreatePullPointFault"
    assert "--max-pullpoints 2 reached" in r.text
    url = _metrics_url(gw)
    assert await _refusals(url, "pull points", "client") == 1
    assert await _refusals(url, "pull points", "total") == 1
    assert (await call(pp, "<wsnt:DestroyPullPoint/>")).status == 200
    assert (await call_from("127.0.0.1", gw.url, body, A_CREATE_PP)).status == 200


async def test_topic_growth_bounded_per_client_and_in_all(make_gateway):
    gw = await make_gateway(max_client_topics=3, max_topics=5)

    def topics(*names: str) -> str:
        return notify_body(*[(f"tns:{n}", reading(1)) for n in names])

    r = await call_from("127.0.0.1", gw.url, topics("a", "b", "c", "d"))
    assert r.fault_name == "TopicNotSupportedFault", r.text
    assert "--max-client-topics 3 reached for 127.0.0.1" in r.text
    assert (await call_from("127.0.0.1", gw.url, topics("a", "b", "c"))).status == 202
    # topics that exist are not growth: published as before
    assert (await call_from("127.0.0.1", gw.url, topics("a", "b", "c"))).status == 202
    r = await call_from("127.0.0.1", gw.url, topics("e"))
    assert "--max-client-topics 3" in r.text
    assert (await call_from("127.0.0.2", gw.url, topics("e", "f"))).status == 202
    r = await call_from("127.0.0.2", gw.url, topics("g"))
    assert r.fault_name == "TopicNotSupportedFault"
    assert "--max-topics 5 reached" in r.text
    assert len([t for t in gw.state.ts.topics() if t.namespace == "urn:test"]) == 5
    url = _metrics_url(gw)
    assert await _refusals(url, "topics", "client") == 2
    assert await _refusals(url, "topics", "total") == 1


def _values(r: Reply) -> list[str]:
    return [
        m.findtext(".//{urn:wsn-edge:reading}value") or ""
        for m in r.body.findall(f"{{{WSNT}}}NotificationMessage")
    ]


async def _pullpoint_fed(gw) -> str:  # type: ignore[no-untyped-def]
    r = await call(gw.url, "<wsnt:CreatePullPoint/>", action=A_CREATE_PP)
    pp = r.body.findtext(f"{{{WSNT}}}PullPoint/{{{WSA}}}Address")
    assert (await call(gw.url, subscribe_body(pp, topic_filter("tns:t")))).status == 200
    return str(pp)


async def test_pullpoint_bytes_and_getmessages_bounded(make_gateway):
    pad = "x" * 2000  # each stored message is about 2.5 KB
    gw = await make_gateway(
        pullpoint_max_bytes=20_000, max_getmessages=3, max_getmessages_bytes=6_000
    )
    pp = await _pullpoint_fed(gw)
    for v in range(30):
        payload = reading(v).replace("</", f"<pad>{pad}</pad></", 1)
        assert (await call(gw.url, notify_body(("tns:t", payload)))).status == 202
    got: list[list[str]] = []
    while True:
        r = await call(pp, "<wsnt:GetMessages/>")  # no MaximumNumber
        assert r.status == 200, r.text
        if not (vals := _values(r)):
            break
        got.append(vals)
    flat = [v for batch in got for v in batch]
    # at most 20,000 bytes were kept: the newest, in order, the oldest dropped
    assert 5 <= len(flat) <= 8, flat
    assert flat == [str(v) for v in range(30 - len(flat), 30)]
    # each answer: at most 3 messages and 6,000 bytes past its first
    assert all(1 <= len(b) <= 2 for b in got), got
    # an explicit MaximumNumber is bounded too
    for v in range(4):
        await call(gw.url, notify_body(("tns:t", reading(v))))
    r = await call(
        pp, "<wsnt:GetMessages><wsnt:MaximumNumber>100</wsnt:MaximumNumber></wsnt:GetMessages>"
    )
    assert _values(r) == ["0", "1", "2"]


async def test_a_pullpoint_nobody_reads_expires(make_gateway, caplog):
    gw = await make_gateway(pullpoint_idle_expiry=0.6)
    idle = await _pullpoint_fed(gw)
    read = await _pullpoint_fed(gw)
    idle_id = idle.rsplit("/", 1)[1]
    (sub_idle,) = [s.id for s in gw.state.subscriptions.values() if s.pullpoint == idle_id]
    with caplog.at_level(logging.INFO, logger="gateway.events"):
        for _ in range(8):
            await asyncio.sleep(0.2)
            assert (await call(read, "<wsnt:GetMessages/>")).status == 200
    r = await call(idle, "<wsnt:GetMessages/>")
    assert r.fault_name == "ResourceUnknownFault", r.text
    assert sub_idle not in gw.state.subscriptions  # its subscription ended with it
    assert len(gw.state.pullpoints) == 1
    ended = [
        getattr(rec, "wsn_fields", {})
        for rec in caplog.records
        if getattr(rec, "wsn_event", None) == "pullpoint_destroyed"
    ]
    assert ended == [{"pullpoint": idle_id, "reason": "idle"}], ended


@pytest.mark.parametrize("flag", ["--max-client-subscriptions", "--pullpoint-idle-expiry"])
def test_the_flags_exist(flag: str) -> None:
    from gateway.cli import build_parser

    assert flag in build_parser().format_help()
