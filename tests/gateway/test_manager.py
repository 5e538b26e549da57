"""SubscriptionManager (WS-BaseNotification 1.3 §6): Renew, Unsubscribe, Pause/Resume,
expiry at TerminationTime, §6.4.1 resource properties, both ways of addressing."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from gwtest import (
    RL,
    RP,
    WSA,
    WSNT,
    call,
    make_config,
    publish,
    readings,
    subscribe,
    validate,
)

from tests.polling import until
from tests.wsdl_actions import action as wsdl_action


async def test_renew_duration_datetime_and_current_time(gw, consumer):
    addr, _ = await subscribe(gw.url, consumer.url)
    now = datetime.now(UTC)
    r = await call(
        addr,
        "<wsnt:Renew><wsnt:TerminationTime>PT2H</wsnt:TerminationTime></wsnt:Renew>",
        action="http://docs.oasis-open.org/wsn/bw-2/SubscriptionManager/RenewRequest",
    )
    assert r.status == 200, r.text
    validate(r.body)
    assert (
        r.header("Action")
        == "http://docs.oasis-open.org/wsn/bw-2/SubscriptionManager/RenewResponse"
    )
    tt = datetime.fromisoformat(
        (r.body.findtext(f"{{{WSNT}}}TerminationTime") or "").replace("Z", "+00:00")
    )
    assert timedelta(minutes=119) < tt - now < timedelta(minutes=121)
    assert r.body.findtext(f"{{{WSNT}}}CurrentTime")
    target = (now + timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    r = await call(
        addr, f"<wsnt:Renew><wsnt:TerminationTime>{target}</wsnt:TerminationTime></wsnt:Renew>", 11
    )
    assert r.status == 200 and r.body.findtext(f"{{{WSNT}}}TerminationTime") == target
    validate(r.body)


async def test_renew_faults_and_nil(make_gateway, consumer):
    gw = await make_gateway()
    addr, _ = await subscribe(gw.url, consumer.url)
    for bad in ("PT0S", "P10D", "2000-01-01T00:00:00Z", "soon"):
        r = await call(
            addr, f"<wsnt:Renew><wsnt:TerminationTime>{bad}</wsnt:TerminationTime></wsnt:Renew>"
        )
        assert r.fault_name == "UnacceptableTerminationTimeFault", r.text
        validate(r.fault)
        assert r.fault.find(f"{{{WSNT}}}MinimumTime") is not None
    nil = '<wsnt:Renew><wsnt:TerminationTime xsi:nil="true"/></wsnt:Renew>'
    assert (await call(addr, nil)).fault_name == "UnacceptableTerminationTimeFault"
    gw2 = await make_gateway(max_termination=None)
    addr2, _ = await subscribe(gw2.url, consumer.url)
    r = await call(addr2, nil)
    assert r.status == 200, r.text
    validate(r.body)
    el = r.body.find(f"{{{WSNT}}}TerminationTime")
    assert el is not None and el.get("{http://www.w3.org/2001/XMLSchema-instance}nil") == "true"


async def test_unsubscribe_then_resource_unknown(gw, consumer):
    addr, _ = await subscribe(gw.url, consumer.url)
    r = await call(addr, "<wsnt:Unsubscribe/>")
    assert r.status == 200, r.text
    validate(r.body)
    assert (
        r.header("Action")
        == "http://docs.oasis-open.org/wsn/bw-2/SubscriptionManager/UnsubscribeResponse"
    )
    for body in (
        "<wsnt:Unsubscribe/>",
        "<wsnt:PauseSubscription/>",
        "<wsnt:Renew><wsnt:TerminationTime>PT1M</wsnt:TerminationTime></wsnt:Renew>",
    ):
        r = await call(addr, body)
        assert r.fault_name == "ResourceUnknownFault"
        validate(r.fault)
    await publish(gw.url, *readings(1))
    await asyncio.sleep(0.2)
    assert consumer.messages() == []


async def test_reference_parameter_addressing_on_the_broker_url(gw, consumer):
    _, rid = await subscribe(gw.url, consumer.url)
    hdr = f'<edge:ResourceId wsa:IsReferenceParameter="true">{rid}</edge:ResourceId>'
    r = await call(gw.url, "<wsnt:PauseSubscription/>", headers=hdr)
    assert r.status == 200, r.text
    assert gw.state.subscriptions[rid].paused
    r = await call(gw.url, "<wsnt:Unsubscribe/>", headers=hdr)
    assert r.status == 200
    r = await call(gw.url, "<wsnt:Unsubscribe/>", headers=hdr)
    assert r.fault_name == "ResourceUnknownFault"


async def test_pause_resume_policy(gw, consumer):
    addr, _ = await subscribe(gw.url, consumer.url)
    await publish(gw.url, *readings(1))
    await consumer.wait_for(1)
    r = await call(addr, "<wsnt:PauseSubscription/>")
    assert r.status == 200, r.text
    validate(r.body)
    # bw-2.wsdl: PauseSubscription is an operation of PausableSubscriptionManager
    assert r.header("Action") == wsdl_action(
        "PausableSubscriptionManager", "PauseSubscription", "output"
    )
    # pausing twice is fine (idempotent)
    assert (await call(addr, "<wsnt:PauseSubscription/>")).status == 200
    await publish(gw.url, *readings(2))  # produced while paused: not queued for this subscription
    r = await call(addr, "<wsnt:ResumeSubscription/>")
    assert r.status == 200
    validate(r.body)
    await publish(gw.url, *readings(3))
    # a subscription's messages arrive in order: had 2 been queued, it would come before 3
    await consumer.wait_for(2)
    vals = [m.findtext(".//{urn:wsn-edge:reading}value") for m in consumer.messages()]
    assert vals == ["1", "3"]


async def test_messages_queued_before_pause_wait_for_resume(gw, make_consumer):
    # the consumer fails every attempt until the subscription is paused, so the message stays
    # queued whatever the retry timer does (no race of the Pause against the backoff)
    slow = await make_consumer(fail=10**9)
    addr, sid = await subscribe(gw.url, slow.url)
    await publish(gw.url, *readings(1))
    await until(lambda: slow.requests >= 1, "a first, failed attempt")
    assert (await call(addr, "<wsnt:PauseSubscription/>")).status == 200
    # every attempt the gateway started (before the pause) has reached the consumer and failed
    stats = gw.ctx.delivery.stats
    await until(lambda: stats(sid)["requests"] == slow.requests, "no attempt in flight")
    slow.fail = 0  # from now on the consumer would accept: only the pause holds the message
    tried = slow.requests
    await asyncio.sleep(0.5)  # > --backoff-max (0.2 s): an unheld retry would have come
    assert slow.messages() == [] and slow.requests == tried
    assert gw.ctx.delivery.backlog(sid) == 1
    assert (await call(addr, "<wsnt:ResumeSubscription/>")).status == 200
    await slow.wait_for(1)


async def test_subscription_destroyed_at_termination_time_even_when_paused(gw, consumer):
    addr, sid = await subscribe(
        gw.url,
        consumer.url,
        extra="<wsnt:InitialTerminationTime>PT1S</wsnt:InitialTerminationTime>",
    )
    assert (await call(addr, "<wsnt:PauseSubscription/>")).status == 200
    await until(lambda: sid not in gw.state.subscriptions, "expired and swept", 5)
    r = await call(addr, "<wsnt:ResumeSubscription/>")
    assert r.fault_name == "ResourceUnknownFault"
    # and it is gone from storage too
    snap = gw.ctx.storage.load()
    assert sid not in {s.id for s in snap.subscriptions}


async def test_get_resource_property_on_subscription(gw, consumer):
    addr, _ = await subscribe(gw.url, consumer.url, extra="<wsnt:SubscriptionPolicy/>")
    for qn, tag in (
        ("wsnt:ConsumerReference", f"{{{WSNT}}}ConsumerReference"),
        ("wsnt:Filter", f"{{{WSNT}}}Filter"),
        ("wsnt:SubscriptionPolicy", f"{{{WSNT}}}SubscriptionPolicy"),
        ("wsnt:CreationTime", f"{{{WSNT}}}CreationTime"),
        ("rl:TerminationTime", f"{{{RL}}}TerminationTime"),
        ("rl:CurrentTime", f"{{{RL}}}CurrentTime"),
    ):
        r = await call(
            addr,
            f"<rp:GetResourceProperty>{qn}</rp:GetResourceProperty>",
            action="http://docs.oasis-open.org/wsrf/rpw-2/GetResourceProperty/GetResourcePropertyRequest",
        )
        assert r.status == 200, r.text
        assert r.body.tag == f"{{{RP}}}GetResourcePropertyResponse"
        assert [c.tag for c in r.body] == [tag]
        validate(r.body)
    cr = r.body  # last
    assert cr is not None
    r = await call(addr, "<rp:GetResourceProperty>wsnt:ConsumerReference</rp:GetResourceProperty>")
    assert r.body.findtext(f".//{{{WSA}}}Address") == consumer.url
    r = await call(addr, "<rp:GetResourceProperty>wsnt:NoSuchThing</rp:GetResourceProperty>")
    assert r.fault_name == "InvalidResourcePropertyQNameFault"
    r = await call(addr, "<rp:GetResourceProperty>nope:X</rp:GetResourceProperty>")
    assert r.fault_name == "InvalidResourcePropertyQNameFault"


async def test_set_termination_time_on_subscription(gw, consumer):
    addr, _sid = await subscribe(gw.url, consumer.url)
    r = await call(
        addr,
        "<rl:SetTerminationTime><rl:RequestedLifetimeDuration>PT5M"
        "</rl:RequestedLifetimeDuration></rl:SetTerminationTime>",
    )
    assert r.status == 200, r.text
    assert r.body.findtext(f"{{{RL}}}NewTerminationTime")
    r = await call(
        addr,
        "<rl:SetTerminationTime><rl:RequestedTerminationTime>2000-01-01T00:00:00Z"
        "</rl:RequestedTerminationTime></rl:SetTerminationTime>",
    )
    assert r.fault_name == "TerminationTimeChangeRejectedFault"


async def test_expiry_with_an_injected_clock(tmp_path, consumer):
    from gateway import app, upkeep

    now = [datetime(2030, 1, 1, tzinfo=UTC)]
    cfg = make_config(tmp_path / "d", sweep_interval=3600)  # sweeps only when called
    gw = await app.start(cfg, clock=lambda: now[0])
    try:
        addr, sid = await subscribe(
            gw.url,
            consumer.url,
            extra="<wsnt:InitialTerminationTime>PT1H</wsnt:InitialTerminationTime>",
        )
        r = await call(addr, "<rp:GetResourceProperty>rl:TerminationTime</rp:GetResourceProperty>")
        assert r.body[0].text == "2030-01-01T01:00:00Z"
        now[0] += timedelta(minutes=59)
        await upkeep.sweep(gw.ctx)
        assert sid in gw.state.subscriptions
        now[0] += timedelta(minutes=2)
        # past TerminationTime: unknown at once, destroyed by the next sweep
        r = await call(
            addr, "<wsnt:Renew><wsnt:TerminationTime>PT1H</wsnt:TerminationTime></wsnt:Renew>"
        )
        assert r.fault_name == "ResourceUnknownFault"
        await upkeep.sweep(gw.ctx)
        assert sid not in gw.state.subscriptions
    finally:
        await gw.stop()
