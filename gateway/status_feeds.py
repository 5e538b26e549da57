"""What the status page keeps between requests (gateway/status.py): the recent WARNING and
ERROR lines, and per-second rates of counters over about the last minute; both bounded.

A caller may rely on: `RecentErrors.lines` holds at most `keep` entries (time, level,
logger, `event` key, message cut at 300 characters) while attached; `Rates.rates` returns
`window_s` and `<counter>_per_s` for each counter it is given; `iso` renders a time as
RFC 3339 UTC with seconds (`...Z`), None as None.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from datetime import UTC, datetime
from typing import Any


def iso(t: datetime | float | None) -> str | None:
    if t is None:
        return None
    if isinstance(t, float | int):
        t = datetime.fromtimestamp(t, UTC)
    return t.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class RecentErrors(logging.Handler):
    """The last `keep` WARNING and ERROR lines of the gateway's and aiohttp's loggers, for
    /status (a bounded deque; attached while the application runs)."""

    LOGGERS = ("gateway", "aiohttp")

    def __init__(self, keep: int = 20) -> None:
        super().__init__(logging.WARNING)
        self.lines: deque[dict[str, Any]] = deque(maxlen=keep)

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # a log handler never raises
            msg = record.getMessage()
            self.lines.append(
                {
                    "time": iso(record.created),
                    "level": record.levelname,
                    "logger": record.name,
                    "event": getattr(record, "wsn_event", None),
                    "message": msg if len(msg) <= 300 else msg[:300] + "...",
                }
            )

    def attach(self) -> None:
        for name in self.LOGGERS:
            logging.getLogger(name).addHandler(self)

    def detach(self) -> None:
        for name in self.LOGGERS:
            logging.getLogger(name).removeHandler(self)


class Rates:
    """Per-second rates of counters over about the last minute, from the samples taken at
    each status or metrics request (since the start until a sample is old enough)."""

    WINDOW = 60.0

    def __init__(self) -> None:
        self._samples: deque[tuple[float, dict[str, float]]] = deque(maxlen=256)

    def rates(self, now: float, values: dict[str, float]) -> dict[str, float]:
        self._samples.append((now, values))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.WINDOW:
            self._samples.popleft()
        t0, v0 = self._samples[0]
        dt = now - t0
        out: dict[str, float] = {"window_s": round(dt, 1)}
        for k, v in values.items():
            out[f"{k}_per_s"] = round((v - v0.get(k, 0.0)) / dt, 2) if dt > 0 else 0.0
        return out
