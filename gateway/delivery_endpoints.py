"""What push delivery (gateway.delivery) keeps per subscription and per consumer
endpoint: the Target a subscription delivers to, its Queue of pending messages with its
counters, and the Endpoint one worker serves (its backoff state and the queues that share
one Notify request, WS-BaseNotification 1.3 §3.2). Plain data; DeliveryManager changes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from dataclasses import dataclass, field

from lxml import etree

from gateway.wire import ns
from gateway.wire.addressing import Epr


@dataclass
class Target:
    """Where and how one subscription's messages go."""

    sub_id: str
    consumer: Epr
    raw: bool
    soap_version: str = ns.SOAP12

    def endpoint_key(self) -> Hashable:
        """Equal for subscriptions whose messages may share one Notify request."""
        if self.raw:
            return ("raw", self.sub_id)
        # exclusive c14n: namespace declarations the parameter does not use (they differ with
        # the envelope a client happened to send) do not split one consumer in two
        rps = tuple(
            etree.tostring(rp, method="c14n", exclusive=True).decode()
            for rp in self.consumer.reference_parameters
        )
        return ("wrapped", self.consumer.address, self.soap_version, rps)


@dataclass
class Queue:
    """One subscription's pending messages (seq order) and counters."""

    target: Target
    endpoint: Endpoint
    items: list[tuple[int, str]] = field(default_factory=list)  # (seq, xml) sorted by seq
    paused: bool = False
    dead: bool = False  # reported to on_dead; never sent again
    delivered: int = 0
    dropped: int = 0
    #: monotonic time each seq was queued (for wsn_delivery_latency_seconds); seqs reloaded
    #: after a restart have none and are not observed
    queued_at: dict[int, float] = field(default_factory=dict)
    last_delivery: float | None = None  # wall-clock epoch seconds of the last 2xx answer
    drop_logged_at: float | None = None  # monotonic time of the last "backlog full" line
    drops_unlogged: int = 0  # dropped since that line

    @property
    def sendable(self) -> bool:
        return bool(self.items) and not self.paused and not self.dead


@dataclass
class Endpoint:
    """One consumer endpoint: the worker, its backoff state and its subscriptions."""

    key: Hashable
    target: Target  # address, SOAP version, reference parameters (any member's)
    queues: dict[str, Queue] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    failing_since: float | None = None
    attempts: int = 0
    requests: int = 0
    failures: int = 0  # failed requests so far (attempts: the current streak)
    peer: str | None = None  # the broker id it answered with (gateway/loops.py)
    started: float | None = None  # monotonic time the last request started
    sending: bool = False  # a request is in flight (Delivery.stop lets it finish)
    window: int = -1  # the pacing window in which it last started one
    last_error: str | None = None  # why the last failed request failed
    last_error_at: float | None = None  # wall-clock epoch seconds of it
