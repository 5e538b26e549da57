"""Clients long-polling a pull point (GetMessages with `edge:Wait`, docs/gateway.md): they
wait until a message arrives, the pull point goes, the broker stops or their wait ends.

`LongPolls` follows the broker's state (an observer of gateway.state): a commit into a pull
point (`MessagesArrived`) or its destruction wakes its waiters.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections import Counter

from gateway import lifecycle
from gateway.state import Event, MessagesArrived, PullPointChanged

#: seconds the current request spent waiting in `LongPolls.wait` (a request is one task:
#: gateway.http reads it to keep long-poll waits out of the request latency it reports)
WAITED: contextvars.ContextVar[float] = contextvars.ContextVar("wsn_waited", default=0.0)


class LongPolls:
    def __init__(self) -> None:
        self._arrived: dict[str, asyncio.Event] = {}
        self._waiting: Counter[str] = Counter()
        self.closed = False  # the broker stops: nobody waits any more

    def total(self) -> int:
        """How many clients wait now, on all pull points."""
        return sum(self._waiting.values())

    def waiting(self, pullpoint_id: str) -> int:
        """How many clients wait on the pull point now (gateway.status)."""
        return self._waiting[pullpoint_id]

    async def wait(self, pullpoint_id: str, timeout: float) -> None:
        """Wait up to `timeout` seconds for a message to arrive in the pull point (or for
        it to go, or the broker to stop)."""
        if self.closed:
            return
        ev = self._arrived.get(pullpoint_id)
        if ev is None:
            ev = self._arrived[pullpoint_id] = asyncio.Event()
        ev.clear()
        self._waiting[pullpoint_id] += 1
        t0 = time.monotonic()
        try:
            async with asyncio.timeout(timeout):  # not wait_for: see gateway/onvif/client.py _call
                await ev.wait()
        except TimeoutError:
            pass
        finally:
            WAITED.set(WAITED.get() + time.monotonic() - t0)
            self._waiting[pullpoint_id] -= 1
            if self._waiting[pullpoint_id] <= 0:
                del self._waiting[pullpoint_id]
                if self._arrived.get(pullpoint_id) is ev:
                    del self._arrived[pullpoint_id]

    def wake(self, pullpoint_id: str) -> None:
        ev = self._arrived.get(pullpoint_id)
        if ev is not None:
            ev.set()

    def wake_all(self) -> None:
        """Every waiter returns now, and later ones at once (the broker stops)."""
        self.closed = True
        for ev in self._arrived.values():
            ev.set()

    def __call__(self, event: Event) -> None:
        if isinstance(event, MessagesArrived):
            for pid in event.pullpoints:
                self.wake(pid)
        elif isinstance(event, PullPointChanged) and event.step is lifecycle.DESTROY_PULLPOINT:
            self.wake(event.pullpoint.id)
