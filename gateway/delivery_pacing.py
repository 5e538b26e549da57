"""Pacing of delivery requests (adaptive batching), used by gateway/delivery.py.

One request per consumer endpoint is in flight at a time, so what arrives meanwhile goes
in the next one. While many endpoints are active (they started a request within the last
ACTIVE_WINDOW or the one before), two requests to one endpoint also start at least
`active endpoints * REQUEST_COST / REQUEST_SHARE` apart, at most `linger_max`
(--delivery-linger-max). The aiohttp client's cost per request then takes at most about
REQUEST_SHARE of a core, and what a consumer would have got in more, smaller requests
waits that long for one larger one: with 1 active endpoint 0.4 ms, with 10 3.8 ms, with
100 38 ms (the default cap is 50 ms). An endpoint whose request hangs or that backs off
starts no request and stops counting after a window.
"""

from __future__ import annotations

import time

#: CPU seconds the aiohttp client spends per request, measured on the development machine
#: (aiohttp 3.14, 10 keep-alive consumers: 184-197 us); the pacing's unit
REQUEST_COST = 190e-6
#: the share of a core delivery requests may take before batches grow instead
REQUEST_SHARE = 0.5
#: an endpoint that started a request this long ago (or less) counts as active
ACTIVE_WINDOW = 0.1


class Pacer:
    """Counts active endpoints per window; says how long an endpoint's next request waits."""

    def __init__(self, linger_max: float) -> None:
        self.linger_max = linger_max
        self._window, self._window_start = 0, 0.0
        self._active, self._active_before = 0, 0

    def started(self, window: int) -> tuple[int, float]:
        """An endpoint whose last request started in `window` starts one now: (its new
        window, now)."""
        now = time.monotonic()
        if now - self._window_start >= ACTIVE_WINDOW:
            recent = now - self._window_start < 2 * ACTIVE_WINDOW
            self._active_before = self._active if recent else 0
            self._active = 0
            self._window += 1
            self._window_start = now
        if window != self._window:
            self._active += 1
        return self._window, now

    def wait(self, last_start: float | None) -> float:
        """Seconds to wait before the next not-full request of an endpoint whose previous
        one started at `last_start` (monotonic), 0 if none."""
        if last_start is None or self.linger_max <= 0:
            return 0.0
        active = max(self._active, self._active_before)
        pace = min(self.linger_max, active * REQUEST_COST / REQUEST_SHARE)
        return max(0.0, last_start + pace - time.monotonic())
