"""Options and the run summary of `wsn-ingest stream` (spark_ingest.stream), and the duration
strings they are written in."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

Progress = Callable[[str], None]


@dataclass
class StreamOptions:
    window: str = "1 minute"
    watermark: str = "5 minutes"
    trigger: str = "available-now"  # or a processing-time interval, "10 seconds"
    gap_factor: float = 3.0
    max_files_per_trigger: int | None = None
    timeout: float | None = None  # stop an interval trigger after this many seconds
    devices_every: float = 60.0  # refresh <out>/devices this often with an interval trigger
    #: "received" or "event": the time windows, lateness and gaps use (landing.identity);
    #: keep it for the life of a checkpoint
    time: str = "received"


@dataclass
class StreamSummary:
    landing: str
    out: str
    checkpoint: str
    window: str
    watermark_delay: str
    trigger: str
    split_batches: int = 0
    aggregate_batches: int = 0
    files: int = 0
    lines: int = 0
    messages: int = 0
    quarantined: dict[str, int] = field(default_factory=dict)
    late: int = 0
    duplicates: int = 0
    windows_written: int = 0
    dropped_by_watermark: int = 0
    open_groups: int = 0
    watermark: str | None = None
    producers: int = 0
    seconds: float = 0.0
    totals: dict[str, Any] = field(default_factory=dict)

    @property
    def quarantined_total(self) -> int:
        return sum(self.quarantined.values())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["quarantined_total"] = self.quarantined_total
        return d

    def render(self) -> str:
        q = ", ".join(f"{k}: {v}" for k, v in sorted(self.quarantined.items()))
        t = self.totals
        lines = [
            f"wsn-ingest stream: {self.landing} -> {self.out}",
            f"  checkpoint        {self.checkpoint}  (trigger {self.trigger}, window "
            f"{self.window}, watermark delay {self.watermark_delay})",
            f"  this run          {self.split_batches} split + {self.aggregate_batches} "
            f"aggregate micro-batches in {self.seconds:.1f} s",
            f"  files / lines     {self.files} / {self.lines}",
            f"  messages          {self.messages}",
            f"  quarantined       {self.quarantined_total}" + (f"  ({q})" if q else ""),
            f"  late              {self.late}  -> {self.out}/late/ (window already closed)",
            f"  duplicates        {self.duplicates}  (id already read, e.g. --landing-format "
            "both: counted once)",
            f"  windows written   {self.windows_written}  -> {self.out}/aggregates/",
            f"  watermark         {self.watermark or '-'}; {self.open_groups} groups open "
            "(written when newer data moves the watermark past their window)",
            f"  dropped by Spark  {self.dropped_by_watermark}  (numRowsDroppedByWatermark; "
            "0 expected: late rows are split off first)",
            f"  devices           {self.producers}  -> {self.out}/devices/",
        ]
        if t:
            lines.append(
                f"  since the start   {t.get('lines', 0)} lines, {t.get('messages', 0)} "
                f"messages, {t.get('duplicates', 0)} duplicates, {t.get('quarantined', 0)} "
                f"quarantined, {t.get('late', 0)} late"
            )
        return "\n".join(lines)


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


def interval_us(text: str) -> int:
    """`"5 minutes"`, `"1 hour 30 minutes"`, `"10 seconds"` -> microseconds, for the same
    strings that withWatermark and window accept (fixed units only: no months)."""
    t = text.strip().lower()
    t = t[len("interval") :].strip() if t.startswith("interval") else t
    total, pos = 0.0, 0
    for m in _INTERVAL.finditer(t):
        if t[pos : m.start()].strip() or m.group(2) not in _UNITS_US:
            break
        total += float(m.group(1)) * _UNITS_US[m.group(2)]
        pos = m.end()
    else:
        if pos and not t[pos:].strip() and total > 0:
            return int(total)
    raise ValueError(f'not a duration: {text!r} (e.g. "1 minute", "30 seconds")')
