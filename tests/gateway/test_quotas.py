"""The quota accounting of gateway/quotas.py: named bounds per client and in all, the reason
naming the flag, refusals counted and logged once per client per interval."""

from __future__ import annotations

import logging

import pytest

from gateway.quotas import Quota, Quotas

SUBS = Quota("subscriptions", 5, "--max-subscriptions", 2, "--max-client-subscriptions")
BYTES = Quota("pullpoint bytes", 1000, "--max-pullpoint-bytes", None, "", "bytes")


def test_bounds_per_client_and_in_all(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    q = Quotas([SUBS, BYTES], log_interval=60, clock=lambda: now[0])
    for i in range(2):
        assert q.refuse("subscriptions", "10.0.0.1") is None
        q.hold("subscriptions", "10.0.0.1", f"a{i}")
    with caplog.at_level(logging.WARNING, logger="gateway.quotas"):
        for _ in range(3):
            why = q.refuse("subscriptions", "10.0.0.1")
            assert why == "--max-client-subscriptions 2 reached for 10.0.0.1"
        now[0] = 61
        assert q.refuse("subscriptions", "10.0.0.1") is not None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "(+2 more since the last line)" in lines[1], lines
    assert q.refusals[("subscriptions", "client")] == 4
    for i in range(3):  # others fill the total
        q.hold("subscriptions", f"10.0.0.{i + 2}", f"b{i}")
    assert q.refuse("subscriptions", "10.0.0.9") == "--max-subscriptions 5 reached"
    q.release("subscriptions", "a0")
    assert q.refuse("subscriptions", "10.0.0.1") is None
    assert q.held("subscriptions") == 4 and q.held("subscriptions", "10.0.0.1") == 1


def test_amounts_held_change() -> None:
    q = Quotas([BYTES])
    q.hold("pullpoint bytes", "c", "pp1", 600)
    assert q.refuse("pullpoint bytes", "c", 500) == "--max-pullpoint-bytes 1000 bytes reached"
    q.adjust("pullpoint bytes", "pp1", -300)
    assert q.refuse("pullpoint bytes", "c", 500) is None
    q.adjust("pullpoint bytes", "pp1", -10_000)  # never below nothing
    assert q.held("pullpoint bytes") == 0
    q.release("pullpoint bytes", "pp1")
    q.release("pullpoint bytes", "pp1")  # twice: nothing
    assert q.held("pullpoint bytes", "c") == 0
