"""The options of a run (batch or stream), and the duration strings they are written in."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

Progress = Callable[[str], None]


@dataclass
class Options:
    """How a run reads the landing zone and what it writes (docs/spark_ingest.md)."""

    #: catalog database of the tables
    database: str = "wsn"
    #: tumbling window of the time-keyed tables
    window: str = "1 minute"
    #: "received" or "event": the time windows and gaps use (landing.identity)
    time: str = "received"
    #: a gap is a step longer than this x the period around it (quality.py)
    gap_factor: float = 3.0
    #: steps shorter than this are a burst, not an interval (quality.py)
    burst: str = "1 second"
    #: a site's windows close this long after its newest message, or when it has sent no
    #: file for this long (sites.closed_until)
    watermark: str = "5 minutes"
    #: a camera's state counts at most this long after the event that set it (camera.py)
    state_horizon: str = "1 hour"
    #: replaced partition versions are kept this long for readers still reading them
    retain: str = "10 minutes"
    #: rebuild every table from every landing file
    full: bool = False
    #: at most this many new files per run (a stream's --max-files-per-trigger)
    max_files: int | None = None


def iso_us(us: int | None) -> str | None:
    if us is None:
        return None
    return datetime.fromtimestamp(us / 1e6, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_UNITS_US = {
    "microsecond": 1,
    "millisecond": 1_000,
    "second": 1_000_000,
    "minute": 60_000_000,
    "hour": 3_600_000_000,
    "day": 86_400_000_000,
    "week": 604_800_000_000,
}
_INTERVAL = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+?)s?\b")


def interval_us(text: str, zero_ok: bool = False) -> int:
    """`"5 minutes"`, `"1 hour 30 minutes"`, `"10 seconds"` -> microseconds, for the same
    strings that withWatermark and window accept (fixed units only: no months). A zero
    duration only where `zero_ok` (`--retain 0 seconds`)."""
    t = text.strip().lower()
    t = t[len("interval") :].strip() if t.startswith("interval") else t
    total, pos = 0.0, 0
    for m in _INTERVAL.finditer(t):
        if t[pos : m.start()].strip() or m.group(2) not in _UNITS_US:
            break
        total += float(m.group(1)) * _UNITS_US[m.group(2)]
        pos = m.end()
    else:
        if pos and not t[pos:].strip() and (total > 0 or zero_ok):
            return int(total)
    raise ValueError(f'not a duration: {text!r} (e.g. "1 minute", "30 seconds")')
