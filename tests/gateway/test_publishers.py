"""Publisher registration (WS-BrokeredNotification 1.3): RegisterPublisher, Notify on the
registration address, the per-device topic namespace of design.md, RequiresRegistration,
DestroyRegistration, renewal/expiry, faults and the demand seam."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from gwtest import (
    BR,
    CONCRETE,
    DEV,
    DT,
    EDGE,
    FULL,
    RL,
    SIMPLE,
    WSA,
    WSNT,
    call,
    notify_body,
    reading,
    register,
    register_body,
    subscribe_body,
    topic_filter,
    validate,
)

from gateway.followers import Publishers
from tests.polling import until


async def test_device_topics_grow_under_the_device_hierarchy(gw, consumer, make_consumer):
    reg = await register(gw.url, topics=("dt:temperature", "dt:humidity"))
    one_topic_all_devices = await make_consumer()
    r = await call(
        gw.url,
        subscribe_body(one_topic_all_devices.url, topic_filter("dev:*/temperature", FULL, DEV)),
    )
    assert r.status == 200, r.text
    r = await call(gw.url, subscribe_body(consumer.url, topic_filter("dev:esp32-01//.", FULL, DEV)))
    assert r.status == 200, r.text
    reg2 = await register(gw.url, publisher="http://127.0.0.1:9998/wsn/producer", device_id=None)
    r = await call(
        reg, notify_body(("dt:temperature", reading(21)), ("dt:humidity", reading(40)), nsdecl=DT)
    )
    assert r.status == 202, r.text
    r = await call(reg2, notify_body(("dt:temperature", reading(22, "other")), nsdecl=DT))
    assert r.status == 202, r.text
    await one_topic_all_devices.wait_for(2)
    await consumer.wait_for(2)
    await asyncio.sleep(0.1)
    t1 = sorted(m.findtext(f"{{{WSNT}}}Topic") or "" for m in one_topic_all_devices.messages())
    assert [t.split(":", 1)[1] for t in t1] == [
        "_127.0.0.1-9998/temperature",
        "esp32-01/temperature",
    ]
    t2 = sorted(m.findtext(f"{{{WSNT}}}Topic") or "" for m in consumer.messages())
    assert [t.split(":", 1)[1] for t in t2] == ["esp32-01/humidity", "esp32-01/temperature"]
    # the producer of a message posted on a registration address is that publisher
    prod = one_topic_all_devices.messages()[0].findtext(
        f"{{{WSNT}}}ProducerReference/{{{WSA}}}Address"
    )
    assert prod and prod.startswith("http://127.0.0.1:999")
    # the broker's topic set shows the grown device topics
    r = await call(gw.url, "<rp:GetResourceProperty>wstop:TopicSet</rp:GetResourceProperty>")
    ts = r.body[0]
    dev_root = ts.find("{urn:wsn-edge:devices}esp32-01")
    assert dev_root is not None and dev_root.find("temperature") is not None


async def test_notify_outside_registered_topics_is_rejected(gw):
    reg = await register(gw.url, topics=("dt:temperature",))
    r = await call(reg, notify_body(("dt:light", reading(1)), nsdecl=DT))
    assert r.fault_name == "TopicNotSupportedFault"
    validate(r.fault)


async def test_requires_registration(make_gateway):
    gw = await make_gateway(requires_registration=True)
    r = await call(
        gw.url, "<rp:GetResourceProperty>br:RequiresRegistration</rp:GetResourceProperty>"
    )
    assert r.body[0].text == "true"
    r = await call(gw.url, notify_body(("tns:t", reading(1))))
    assert r.fault_name == "PublisherRegistrationRejectedFault"
    assert "RegisterPublisher" in r.text
    reg = await register(gw.url, topics=("dt:temperature",))
    r = await call(reg, notify_body(("dt:temperature", reading(1)), nsdecl=DT))
    assert r.status == 202
    # Notify to /wsn/broker naming a registered producer is attributed to it
    r = await call(
        gw.url,
        notify_body(
            ("dt:temperature", reading(2)), nsdecl=DT, producer="http://127.0.0.1:9999/wsn/producer"
        ),
    )
    assert r.status == 202, r.text
    r = await call(
        gw.url,
        notify_body(
            ("dt:light", reading(2)), nsdecl=DT, producer="http://127.0.0.1:9999/wsn/producer"
        ),
    )
    assert r.fault_name == "TopicNotSupportedFault"


async def test_destroy_registration(gw):
    reg = await register(gw.url)
    r = await call(
        reg,
        "<br:DestroyRegistration/>",
        action="http://docs.oasis-open.org/wsn/brw-2/PublisherRegistrationManager/DestroyRegistrationRequest",
    )
    assert r.status == 200, r.text
    assert r.body.tag == f"{{{BR}}}DestroyRegistrationResponse"
    assert r.header("Action") == (
        "http://docs.oasis-open.org/wsn/brw-2/PublisherRegistrationManager/DestroyRegistrationResponse"
    )
    for body in (
        "<br:DestroyRegistration/>",
        notify_body(("dt:temperature", reading(1)), nsdecl=DT),
    ):
        r = await call(reg, body)
        assert r.fault_name == "ResourceUnknownFault"


async def test_registration_renewal_and_expiry(make_gateway):
    # the broker's clock is the test's: the registration expires when the test moves the
    # clock past its termination time, not in a race of these requests against one second
    t0 = datetime.now(UTC)
    clock = [t0]
    gw = await make_gateway(clock=lambda: clock[0])
    soon = (t0 + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    reg = await register(gw.url, itt=soon)
    rid = reg.rsplit("/", 1)[1]
    body = (
        "<rl:SetTerminationTime><rl:RequestedTerminationTime>{}</rl:RequestedTerminationTime>"
        "</rl:SetTerminationTime>"
    )
    later = (t0 + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    r = await call(
        reg,
        body.format(later),
        action="http://docs.oasis-open.org/wsrf/rlw-2/ScheduledResourceTermination/SetTerminationTimeRequest",
    )
    assert r.status == 200, r.text
    assert r.body.findtext(f"{{{RL}}}NewTerminationTime") == later
    assert r.body.findtext(f"{{{RL}}}CurrentTime")
    clock[0] = t0 + timedelta(seconds=1.3)  # past the initial termination time
    swept = gw.ctx.counts.sweeps
    await until(lambda: gw.ctx.counts.sweeps >= swept + 2, "two sweeps at that time")
    assert rid in gw.state.registrations  # renewed: still there
    r = await call(
        reg,
        "<rl:SetTerminationTime><rl:RequestedLifetimeDuration>PT0.5S"
        "</rl:RequestedLifetimeDuration></rl:SetTerminationTime>",
    )
    assert r.status == 200, r.text
    clock[0] = t0 + timedelta(seconds=2)  # the 0.5 s have passed: the sweeper ends it
    await until(lambda: rid not in gw.state.registrations, "the registration expired", 10)
    r = await call(reg, body.format(later))
    assert r.fault_name == "ResourceUnknownFault"  # the device registers again on this


async def test_registration_resource_properties(gw):
    reg = await register(gw.url, demand=True)
    r = await call(reg, "<rp:GetResourceProperty>br:Demand</rp:GetResourceProperty>")
    assert r.body[0].text == "true"
    r = await call(reg, "<rp:GetResourceProperty>br:Topic</rp:GetResourceProperty>")
    assert r.body[0].text == "dt:temperature" and r.body[0].get("Dialect") == SIMPLE
    r = await call(reg, "<rp:GetResourceProperty>br:PublisherReference</rp:GetResourceProperty>")
    assert r.body[0].findtext(f"{{{WSA}}}Address") == "http://127.0.0.1:9999/wsn/producer"
    r = await call(reg, "<rp:GetResourceProperty>br:CreationTime</rp:GetResourceProperty>")
    assert r.body[0].text
    r = await call(reg, "<rp:GetResourceProperty>br:Nope</rp:GetResourceProperty>")
    assert r.fault_name == "InvalidResourcePropertyQNameFault"


async def test_register_publisher_faults(make_gateway, tmp_path):
    ns = tmp_path / "ns.xml"
    ns.write_bytes(
        b'<wstop:TopicNamespace xmlns:wstop="http://docs.oasis-open.org/wsn/t-1" '
        b'name="D" targetNamespace="urn:wsn-edge:device-topics" final="true">'
        b'<wstop:Topic name="temperature"/></wstop:TopicNamespace>'
    )
    gw = await make_gateway(max_registrations=2, topic_namespace_files=[ns])
    cases = [
        (register_body(itt="2001-01-01T00:00:00Z"), "UnacceptableInitialTerminationTimeFault"),
        (register_body(dialect="urn:nope"), "TopicExpressionDialectUnknownFault"),
        (register_body(topics=("dt:a/b",)), "InvalidTopicExpressionFault"),
        (register_body(topics=("dt:unknown",), dialect=CONCRETE), "TopicNotSupportedFault"),
        (register_body(publisher=None, demand=True), "PublisherRegistrationRejectedFault"),
        (
            register_body(publisher="http://203.0.113.5/p", demand=True),
            "PublisherRegistrationRejectedFault",
        ),
    ]
    for body, name in cases:
        r = await call(gw.url, body)
        assert r.fault_name == name, (body, r.text)
        if r.fault.tag.startswith(f"{{{WSNT}}}"):
            validate(r.fault)
    await register(gw.url, publisher="http://127.0.0.1:1/a")
    await register(gw.url, publisher="http://127.0.0.1:1/b")
    r = await call(gw.url, register_body())
    assert r.fault_name == "PublisherRegistrationRejectedFault"
    assert "limit" in r.text


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, object, object]] = []

    def registration_created(self, reg) -> None:  # type: ignore[no-untyped-def]
        self.events.append(("created", reg.id, None))

    def registration_destroyed(self, reg) -> None:  # type: ignore[no-untyped-def]
        self.events.append(("destroyed", reg.id, None))

    def demand_changed(self, reg, topic, demanded) -> None:  # type: ignore[no-untyped-def]
        self.events.append(("demand", str(topic), demanded))


async def test_demand_seam(gw, consumer):
    rec = Recorder()
    gw.state.observe(Publishers(rec))
    reg = await register(gw.url, demand=True)
    rid = reg.rsplit("/", 1)[1]
    topic = "{urn:wsn-edge:devices}esp32-01/temperature"
    assert rec.events == [("created", rid, None), ("demand", topic, False)]
    assert gw.state.registrations[rid].demand is True
    r = await call(
        gw.url, subscribe_body(consumer.url, topic_filter("dev:*/temperature", FULL, DEV))
    )
    sub = r.body.findtext(f"{{{WSNT}}}SubscriptionReference/{{{WSA}}}Address")
    assert rec.events[-1] == ("demand", topic, True)
    await call(sub, "<wsnt:PauseSubscription/>")
    assert rec.events[-1] == ("demand", topic, False)
    await call(sub, "<wsnt:ResumeSubscription/>")
    assert rec.events[-1] == ("demand", topic, True)
    await call(sub, "<wsnt:Unsubscribe/>")
    assert rec.events[-1] == ("demand", topic, False)
    await call(reg, "<br:DestroyRegistration/>")
    assert rec.events[-1] == ("destroyed", rid, None)
    assert EDGE


async def test_registering_again_creates_a_resource_and_keeps_the_earlier(gw):
    """WS-BrokeredNotification 1.0 §5.4: "A new resource is created regardless of whether
    the same Publisher has previously registered" (issue 25 defect 1): the earlier
    registration stays a resource (demand follows the newest: test_demand)."""
    rec = Recorder()
    gw.state.observe(Publishers(rec))
    first = await register(gw.url)
    second = await register(gw.url)  # same PublisherReference: a device after a reboot
    assert first != second
    assert set(gw.state.registrations) == {u.rsplit("/", 1)[1] for u in (first, second)}
    r = await call(first, notify_body(("dt:temperature", reading(1)), nsdecl=DT))
    assert r.status == 202, r.text
    assert [e[0] for e in rec.events] == ["created", "created"]
