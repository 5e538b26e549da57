"""What the camera side hands over, and to whom: the events, the topic set and the status of
one camera, and the narrow `EventSink` the rest of the gateway implements. Plain data; no
I/O, no ONVIF library.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from gateway import topics
from gateway.wire.xmlutil import Element


@dataclass(frozen=True)
class CameraEvent:
    """One notification of a camera (ONVIF Core "Notification" = a WS-BaseNotification 1.3
    §3.2 NotificationMessage).

    `topic` is the concrete topic the camera named (e.g. the ONVIF topic namespace's
    RuleEngine/CellMotionDetector/Motion); `prefixes` is the prefix the camera wrote per
    namespace of it (``{ONVIF_TOPICS: "tns1"}``), so a rendering can give the camera's own
    text back (`topic_text`); `message` is the payload, the element inside wsnt:Message
    (a ``tt:Message``), detached from the camera's envelope with the namespace declarations
    it needs; `producer` is the ProducerReference address the camera gave, else its event
    service's address, and `producer_epr` that whole EPR element when the camera sent one.
    """

    camera_id: str
    topic: topics.ConcreteTopic
    prefixes: Mapping[str, str]
    message: Element
    producer: str
    producer_epr: Element | None = None

    @property
    def topic_text(self) -> str:
        return topics.topic_text(self.topic, self.prefixes)


@dataclass(frozen=True)
class CameraTopic:
    """A topic of the camera's topic set (GetEventProperties' wstop:TopicSet): the topic,
    the camera's prefixes for it, and its ``tt:MessageDescription`` (what its messages
    carry: Source, Key and Data items), when the camera described it."""

    topic: topics.ConcreteTopic
    prefixes: Mapping[str, str]
    description: Element | None = None
    #: tt:MessageDescription/@IsProperty: the topic carries a state (Initialized,
    #: Changed, Deleted), not a one-off event
    is_property: bool = False


class EventSink(Protocol):
    """Where a camera's topics and events go (the broker, or a test's recorder).

    `camera_topics` is called once per (re)connection, before the camera's first event of
    that connection, with the topic set the camera declared (possibly empty: a camera may
    answer GetEventProperties with nothing useful). `camera_events` is awaited for each
    batch the camera delivered, in order; no further batch of the same camera is taken
    from it until it returns, so a slow sink slows the camera's pull, never drops. An
    exception from it is counted as the camera's error and the batch is not retried (the
    camera has already forgotten it)."""

    def camera_topics(self, camera_id: str, topics: Sequence[CameraTopic]) -> None: ...

    async def camera_events(self, camera_id: str, events: Sequence[CameraEvent]) -> None: ...


#: the states of a camera source, in the order a healthy one goes through them
CONNECTING = "connecting"  # asking the device service (GetServices/GetCapabilities)
SUBSCRIBING = "subscribing"  # GetEventProperties, then a pull point or Subscribe
SUBSCRIBED = "subscribed"  # events flow (pulling, or waiting for Notify)
BACKOFF = "backoff"  # the last attempt failed; waiting before the next one
STOPPED = "stopped"


@dataclass
class CameraStatus:
    """What an operator sees of one camera (/status, /metrics, `wsn ls`)."""

    camera_id: str
    address: str
    mode: str  # configured: auto | pullpoint | notify
    state: str = CONNECTING
    #: the mode in use for the current subscription (pullpoint | notify), if any
    using: str | None = None
    subscription: str | None = None  # the camera's SubscriptionReference address
    #: when the current subscription ends unless renewed, by this gateway's clock
    expires: datetime | None = None
    last_event: datetime | None = None
    events: int = 0
    #: subscriptions made (the first and each one after a loss)
    subscriptions: int = 0
    renewals: int = 0
    errors: int = 0
    last_error: str | None = None
    last_error_at: datetime | None = None
    #: the camera's clock minus ours, seconds (from GetSystemDateAndTime), when known
    clock_skew: float | None = None
    #: the camera's reference times are broken for xsd:duration: absolute times are sent
    absolute_times: bool = False
    topics: int = 0
    #: when the next attempt is made, while in BACKOFF
    retry_at: datetime | None = None

    @property
    def connected(self) -> bool:
        return self.state == SUBSCRIBED

    def as_dict(self) -> dict[str, object]:
        """JSON-ready (status.json): times as ISO 8601 strings."""

        def iso(t: datetime | None) -> str | None:
            return t.isoformat().replace("+00:00", "Z") if t is not None else None

        return {
            "id": self.camera_id,
            "address": self.address,
            "mode": self.mode,
            "state": self.state,
            "connected": self.connected,
            "using": self.using,
            "subscription": self.subscription,
            "expires": iso(self.expires),
            "last_event": iso(self.last_event),
            "events": self.events,
            "subscriptions": self.subscriptions,
            "renewals": self.renewals,
            "errors": self.errors,
            "last_error": self.last_error,
            "last_error_at": iso(self.last_error_at),
            "clock_skew": self.clock_skew,
            "absolute_times": self.absolute_times,
            "topics": self.topics,
            "retry_at": iso(self.retry_at),
        }
