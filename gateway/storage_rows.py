"""The rows the storage hands out and takes in (gateway.storage): a subscription, a
registration, a pending message, and the snapshot of everything loaded at start; and the
one error every storage operation raises. Plain data: no SQL, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class Pending(NamedTuple):
    """A stored message not yet delivered or taken (gateway/storage_schema.py)."""

    seq: int
    owner: str  # the subscription (deliveries) or pull point (pp_messages)
    sub_id: str | None  # the subscription it was rendered for (None: a Notify to a pull point)
    xml: str
    #: `xml` is what follows the subscription's wsnt:SubscriptionReference in its
    #: NotificationMessage (notify.wrapped_message makes the whole); else the whole message
    after_subref: bool


class StorageError(Exception):
    """A storage operation failed (disk full, database locked...); str(e) says why."""


@dataclass
class SubscriptionRow:
    id: str
    consumer: str
    filter: str | None
    policy: str | None
    raw: bool
    created: float
    termination: float | None
    paused: bool
    pullpoint: str | None
    dialect: str | None
    soap: str | None = None


@dataclass
class RegistrationRow:
    id: str
    publisher: str | None
    topics: str  # JSON
    demand: bool
    created: float
    termination: float | None
    device_id: str | None


@dataclass
class Snapshot:
    subscriptions: list[SubscriptionRow]
    deliveries: list[Pending]  # seq order
    pullpoints: list[tuple[str, float, int]]  # (id, created, queued count)
    registrations: list[RegistrationRow]
    current: list[tuple[str, str, str]]
    grown: list[tuple[str, str]]
