"""When SQLite cannot write (here: another process holds the database's write lock), every
operation answers its own specified "failed" fault as a Receiver fault, and the accepted
state stays intact."""

from __future__ import annotations

import sqlite3

from gwtest import (
    BR,
    SOAP12,
    WSA,
    WSNT,
    call,
    notify_body,
    reading,
    subscribe_body,
    validate,
)


async def test_every_failed_fault_when_the_database_is_locked(make_gateway, consumer):
    gw = await make_gateway(sqlite_busy_timeout_ms=50)
    r = await call(gw.url, subscribe_body(consumer.url))
    sub = r.body.findtext(f"{{{WSNT}}}SubscriptionReference/{{{WSA}}}Address")
    r = await call(gw.url, subscribe_body(consumer.url))
    paused = r.body.findtext(f"{{{WSNT}}}SubscriptionReference/{{{WSA}}}Address")
    assert (await call(paused, "<wsnt:PauseSubscription/>")).status == 200
    r = await call(gw.url, "<wsnt:CreatePullPoint/>")
    pp = r.body.findtext(f"{{{WSNT}}}PullPoint/{{{WSA}}}Address")
    r = await call(gw.url, "<br:RegisterPublisher/>")
    reg = r.body.findtext(f"{{{BR}}}PublisherRegistrationReference/{{{WSA}}}Address")
    assert sub and paused and pp and reg

    lock = sqlite3.connect(gw.ctx.storage.path, isolation_level=None, timeout=1)
    lock.execute("BEGIN EXCLUSIVE")
    try:
        cases = [
            (gw.url, subscribe_body(consumer.url), "SubscribeCreationFailedFault"),
            (sub, "<wsnt:Unsubscribe/>", "UnableToDestroySubscriptionFault"),
            (sub, "<wsnt:PauseSubscription/>", "PauseFailedFault"),
            (paused, "<wsnt:ResumeSubscription/>", "ResumeFailedFault"),
            (gw.url, "<wsnt:CreatePullPoint/>", "UnableToCreatePullPointFault"),
            (pp, "<wsnt:GetMessages/>", "UnableToGetMessagesFault"),
            (pp, "<wsnt:DestroyPullPoint/>", "UnableToDestroyPullPointFault"),
            (gw.url, "<br:RegisterPublisher/>", "PublisherRegistrationFailedFault"),
            (reg, "<br:DestroyRegistration/>", "ResourceNotDestroyedFault"),
            (gw.url, notify_body(("tns:t", reading(1))), "BaseFault"),
        ]
        for url, body, name in cases:
            r = await call(url, body)
            assert r.fault_name == name, (body, r.text)
            assert r.status == 500  # SOAP 1.2 Receiver
            code = r.body.find(f"{{{SOAP12}}}Code/{{{SOAP12}}}Value")
            assert code is not None and (code.text or "").endswith("Receiver")
            assert "locked" in r.text
            if r.fault.tag.startswith(f"{{{WSNT}}}"):
                validate(r.fault)
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    # nothing was half-done: the same resources exist and work again
    assert len(gw.state.subscriptions) == 2 and len(gw.state.pullpoints) == 1
    assert len(gw.state.registrations) == 1
    assert (await call(sub, "<wsnt:Unsubscribe/>")).status == 200
    assert (await call(paused, "<wsnt:ResumeSubscription/>")).status == 200
    assert (await call(gw.url, notify_body(("tns:t", reading(1))))).status == 202
    await consumer.wait_for(1)
