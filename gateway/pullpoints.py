"""PullPoint (WS-BaseNotification 1.3 §5): a broker-hosted NotificationConsumer that
stores NotificationMessages until a client takes them with GetMessages.

Overflow policy: a pull point holds at most --pullpoint-max-messages; beyond that the
OLDEST messages are dropped (and counted), so a forgotten pull point cannot exhaust the
disk and a client that comes back gets the newest data. Messages live in SQLite, so they
survive a restart; GetMessages removes what it returns in the same transaction.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime


@dataclass
class PullPoint:
    id: str
    created: datetime
    queued: int = 0
    dropped: int = 0
    waiters: int = 0
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def signal(self) -> None:
        self.arrived.set()

    async def wait(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for a message to arrive (edge:Wait long poll)."""
        self.arrived.clear()
        self.waiters += 1
        try:
            await asyncio.wait_for(self.arrived.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            self.waiters -= 1
