"""gateway.delivery_pacing: how long a not-full batch waits, from the active endpoints."""

from __future__ import annotations

import pytest

from gateway import delivery_pacing
from gateway.delivery_pacing import ACTIVE_WINDOW, REQUEST_COST, REQUEST_SHARE, Pacer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(delivery_pacing.time, "monotonic", c)
    return c


def start_all(p: Pacer, windows: list[int]) -> float:
    last = 0.0
    for i, w in enumerate(windows):
        windows[i], last = p.started(w)
    return last


def test_the_wait_grows_with_active_endpoints_up_to_the_cap(clock: Clock) -> None:
    unit = REQUEST_COST / REQUEST_SHARE
    p = Pacer(linger_max=0.05)
    assert p.wait(None) == 0.0  # an endpoint's first request never waits
    one = [-1]
    last = start_all(p, one)
    assert p.wait(last) == pytest.approx(unit)
    ten = [-1] * 10
    last = start_all(p, ten)
    assert p.wait(last) == pytest.approx(11 * unit)  # 11 endpoints active in this window
    clock.now += 0.001
    assert p.wait(last) == pytest.approx(11 * unit - 0.001)
    many = [-1] * 500
    last = start_all(p, many)
    assert p.wait(last) == pytest.approx(0.05)  # the cap


def test_an_endpoint_counts_once_per_window_and_stops_counting_when_idle(clock: Clock) -> None:
    unit = REQUEST_COST / REQUEST_SHARE
    p = Pacer(linger_max=1.0)
    ten = [-1] * 10
    for _ in range(5):  # the same ten endpoints again and again: still ten
        last = start_all(p, ten)
    assert p.wait(last) == pytest.approx(10 * unit)
    clock.now += ACTIVE_WINDOW  # a new window: the last one's count still holds
    one = [-1]
    last = start_all(p, one)
    assert p.wait(last) == pytest.approx(10 * unit)
    clock.now += 2.5 * ACTIVE_WINDOW  # the nine others started nothing since
    last = start_all(p, one)
    assert p.wait(last) == pytest.approx(unit)


def test_no_pacing_with_linger_max_zero(clock: Clock) -> None:
    p = Pacer(linger_max=0)
    _w, last = p.started(-1)
    assert p.wait(last) == 0.0
