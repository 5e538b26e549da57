"""Time with cameras: how long a subscription was granted, when to renew it, what to ask
for, and how long to wait after a failure. Pure (clocks are passed in).

Cameras' clocks are often wrong (no NTP, reset by a reboot), so nothing here compares the
camera's times with ours. A grant is the difference of two of the camera's own times
(TerminationTime - CurrentTime of the same answer, WS-BaseNotification 1.3 §4.2, §6.1.1),
laid onto our monotonic clock at the moment the answer arrived. A request is relative
(``PT60S``, immune to skew) unless the camera shows it mistreats durations (it grants far
less than asked, a known firmware bug); then it is absolute, in the camera's own time
(its CurrentTime plus what has passed since, plus the lifetime).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from gateway.wire.xmlutil import format_datetime


@dataclass(frozen=True)
class Lease:
    """A granted subscription lifetime on our monotonic clock."""

    #: monotonic time the answer arrived
    at: float
    #: seconds granted (camera's TerminationTime - its CurrentTime)
    granted: float
    #: the camera's CurrentTime in that answer (for absolute requests), if it gave one
    camera_now: datetime | None

    @property
    def expires(self) -> float:
        return self.at + self.granted

    def renew_at(self, fraction: float, minimum: float = 1.0) -> float:
        """When to renew: after `fraction` of the grant, at least `minimum` s after it."""
        return self.at + max(minimum, self.granted * fraction)

    def camera_time(self, mono_now: float) -> datetime | None:
        """The camera's clock now, estimated from its last answer."""
        if self.camera_now is None:
            return None
        return self.camera_now + timedelta(seconds=mono_now - self.at)


def lease_of(
    mono_at: float,
    current: datetime | None,
    termination: datetime | None,
    asked: float,
    skew: timedelta | None = None,
    local_now: datetime | None = None,
) -> Lease:
    """The lease an answer grants. With both of the camera's times, their difference;
    with only TerminationTime, against our clock corrected by `skew` (the camera's clock
    minus ours, if known); with none, what was `asked` (a camera that says nothing is
    taken at its word)."""
    if current is not None and termination is not None:
        return Lease(mono_at, (termination - current).total_seconds(), current)
    if termination is not None and local_now is not None:
        cam_now = local_now + (skew or timedelta())
        return Lease(mono_at, (termination - cam_now).total_seconds(), cam_now)
    return Lease(mono_at, asked, current)


def relative_is_broken(lease: Lease, asked: float) -> bool:
    """The camera granted under half of the duration asked (or nothing): it does not read
    xsd:duration right, and must be sent absolute times."""
    return lease.granted < asked / 2


def request_time(lifetime: float, absolute_from: datetime | None) -> str:
    """InitialTerminationTime / TerminationTime to send: an xsd:duration, or with
    `absolute_from` (the camera's estimated clock) the xsd:dateTime `lifetime` later."""
    if absolute_from is None:
        return f"PT{max(1, round(lifetime))}S"
    return format_datetime((absolute_from + timedelta(seconds=lifetime)).replace(microsecond=0))


@dataclass
class Backoff:
    """Exponential backoff with full jitter between `initial` and `maximum` seconds: a
    fleet of cameras that fail together (a switch reboots) does not retry in step."""

    initial: float
    maximum: float
    failures: int = 0

    def next(self, rand: float | None = None) -> float:
        """The wait before the next attempt after one more failure."""
        self.failures += 1
        ceiling = min(self.maximum, self.initial * (2 ** min(self.failures - 1, 30)))
        r = random.random() if rand is None else rand
        return float(max(self.initial, ceiling * (0.5 + r / 2)))

    def reset(self) -> None:
        self.failures = 0
