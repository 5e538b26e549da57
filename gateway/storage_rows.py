"""The rows the storage hands out and takes in (gateway.storage): a subscription, a
registration, a pending message, and the snapshot of everything loaded at start; and the
one error every storage operation raises. Plain data: no SQL, no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple


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
    #: the client address that made it ("" when not known: stored by an older gateway)
    client: str = ""

    @classmethod
    def of(cls, r: Sequence[Any]) -> SubscriptionRow:
        """From a row of the `subscriptions` columns, in the order of this class's fields."""
        return cls(
            r[0], r[1], r[2], r[3], bool(r[4]), r[5], r[6], bool(r[7]), r[8], r[9], r[10],
            r[11] or "",
        )  # fmt: skip


@dataclass
class RegistrationRow:
    id: str
    publisher: str | None
    topics: str  # JSON
    demand: bool
    created: float
    termination: float | None
    device_id: str | None
    last_seen: float | None = None  # None: not seen since it was made


@dataclass
class Snapshot:
    subscriptions: list[SubscriptionRow]
    deliveries: list[Pending]  # seq order
    pullpoints: list[tuple[str, float, int]]  # (id, created, queued count)
    registrations: list[RegistrationRow]
    current: list[tuple[str, str, str]]
    grown: list[tuple[str, str]]
    #: pull point -> (the client address that made it, the bytes of its messages: the
    #: UTF-8 length of each message's stored text, as --pullpoint-max-bytes counts them)
    pullpoint_owners: dict[str, tuple[str, int]] = field(default_factory=dict)
    #: grown topic (namespace, path) -> the client address whose Notify grew it (None: a
    #: publisher registration or the gateway's own configuration grew it)
    grown_by: dict[tuple[str, str], str | None] = field(default_factory=dict)
