"""The log lines of consumer endpoints changing state (gateway.delivery): a consumer that
starts failing (`consumer_failing`) and one that recovers (`consumer_recovered`), rate
limited so that many consumers failing at once do not flood the log."""

from __future__ import annotations

import asyncio
import logging
import time

from gateway import oplog

#: consumer_failing / consumer_recovered lines logged in a row before one per second
STATE_LOG_BURST = 20


class StateLog:
    """consumer_failing / consumer_recovered lines (WARNING), STATE_LOG_BURST in a row, then
    at most one per second; what is left out is summed up in one line a second later
    (`consumer_lines_left_out`): 1,200 consumers that fail at once are not 1,200 lines."""

    def __init__(self) -> None:
        self._tokens = float(STATE_LOG_BURST)
        self._at = time.monotonic()
        self._left_out: dict[str, int] = {}
        self._summary: asyncio.TimerHandle | None = None

    def line(self, name: str, message: str, **fields: object) -> None:
        now = time.monotonic()
        self._tokens = min(float(STATE_LOG_BURST), self._tokens + (now - self._at))
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            oplog.event(name, message, level=logging.WARNING, **fields)
            return
        self._left_out[name] = self._left_out.get(name, 0) + 1
        if self._summary is None:
            self._summary = asyncio.get_running_loop().call_later(1.0, self._summarize)

    def _summarize(self) -> None:
        self._summary = None
        counts, self._left_out = self._left_out, {}
        if counts:
            oplog.event(
                "consumer_lines_left_out",
                "more consumer endpoints changed state than are logged one by one (/status)",
                level=logging.WARNING,
                **counts,
            )
