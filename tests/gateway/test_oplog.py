"""The lifecycle log lines (gateway.oplog, docs/gateway.md "Lifecycle events"): one line per
step of the state, under the key of gateway.lifecycle's table, with its fields; requests
refused for lack of credentials once per client address per minute."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from gwtest import call, sub_address, subscribe_body, topic_filter
from gwunit import registration, state, subscription

from gateway.lifecycle import Why
from gateway.oplog import OperatorLog, RefusalLog
from gateway.state import PullPoint


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, dict[str, Any]]]:
    return [
        (r.wsn_event, r.wsn_fields)  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "gateway.events" and hasattr(r, "wsn_event")
    ]


def test_every_step_is_one_line_with_its_fields(caplog: pytest.LogCaptureFixture) -> None:
    s, _, clock = state()
    s.observe(OperatorLog())
    reg = registration("temperature", device="esp-7", demand=False)
    sub = subscription("tns:t", sid="s1")
    with caplog.at_level(logging.INFO, logger="gateway.events"):
        s.add_registration(reg)
        s.renew_registration(reg.id, clock.now.replace(year=2031))
        s.add_subscription(sub)
        s.pause_subscription("s1")
        s.resume_subscription("s1")
        s.renew_subscription("s1", None)
        s.end_subscriptions(["s1"], Why.UNSUBSCRIBE)
        s.add_pullpoint(PullPoint("p1", clock()))
        s.add_subscription(subscription(None, sid="s2", pullpoint="p1"))
        s.destroy_pullpoint("p1")
        s.add_subscription(subscription(sid="s3"))
        s.end_subscriptions(["s3"], Why.EXPIRED)
        s.end_registrations([reg.id], Why.EXPIRED)
    got = lines(caplog)
    r = reg.id
    assert got == [
        ("registration_created", {"registration": r, "device": "esp-7",
                                  "publisher": "http://127.0.0.1:9/producer", "demand": False,
                                  "topics": ["dt:temperature"]}),
        ("registration_renewed", {"registration": r, "device": "esp-7",
                                  "termination": "2031-01-01T00:00:00Z"}),
        ("subscription_created", {"subscription": "s1", "consumer": "http://127.0.0.1:9/consumer",
                                  "dialect": "Concrete", "expression": "tns:t", "raw": False}),
        ("subscription_paused", {"subscription": "s1"}),
        ("subscription_resumed", {"subscription": "s1"}),
        ("subscription_renewed", {"subscription": "s1", "termination": None}),
        ("subscription_ended", {"subscription": "s1", "reason": "Unsubscribe"}),
        ("pullpoint_created", {"pullpoint": "p1"}),
        ("subscription_created", {"subscription": "s2", "consumer": "pullpoint p1",
                                  "dialect": "Concrete", "expression": None, "raw": False}),
        ("subscription_ended", {"subscription": "s2", "reason": "pull point destroyed"}),
        ("pullpoint_destroyed", {"pullpoint": "p1", "reason": "DestroyPullPoint"}),
        ("subscription_created", {"subscription": "s3", "consumer": "http://127.0.0.1:9/consumer",
                                  "dialect": "Concrete", "expression": "tns:t", "raw": False}),
        ("subscription_expired", {"subscription": "s3"}),
        ("registration_expired", {"registration": r, "device": "esp-7"}),
    ]  # fmt: skip


def test_refusals_are_logged_once_per_client_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    log = RefusalLog(interval=60.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="gateway.events"):
        for _ in range(3):
            log.refused("192.0.2.1", "Unsubscribe")
        log.refused("192.0.2.2", "Renew")
        now[0] = 59.9
        log.refused("192.0.2.1", "Renew")
        now[0] = 60.0
        log.refused("192.0.2.1", "Renew")
    assert lines(caplog) == [
        ("request_unauthorized", {"client": "192.0.2.1", "operation": "Unsubscribe", "refused": 1}),
        ("request_unauthorized", {"client": "192.0.2.2", "operation": "Renew", "refused": 1}),
        # the refusals since the previous line of that client, this one included
        ("request_unauthorized", {"client": "192.0.2.1", "operation": "Renew", "refused": 4}),
    ]  # fmt: skip


async def test_a_real_gateway_logs_management_refusals_once(
    make_gateway: Any, consumer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    gw = await make_gateway(auth_token="secret")
    with caplog.at_level(logging.INFO, logger="gateway.events"):
        addr = sub_address(await call(gw.url, subscribe_body(consumer.url, topic_filter("tns:t"))))
        for _ in range(5):
            r = await call(addr, "<wsnt:Unsubscribe/>")
            assert r.status == 401
        r = await call(addr, "<wsnt:Unsubscribe/>", http_headers={"Authorization": "Bearer secret"})
        assert r.status == 200, r.text
    keys = [k for k, _f in lines(caplog)]
    assert keys == ["subscription_created", "request_unauthorized", "subscription_ended"]
    (refused,) = [f for k, f in lines(caplog) if k == "request_unauthorized"]
    assert refused == {"client": "127.0.0.1", "operation": "Unsubscribe", "refused": 1}
