"""PullPoint (WS-BaseNotification 1.3 §5): a broker-hosted NotificationConsumer that
stores NotificationMessages until a client takes them with GetMessages.

Overflow policy: a pull point holds at most --pullpoint-max-messages; beyond that the
OLDEST messages are dropped (and counted), so a forgotten pull point cannot exhaust the
disk and a client that comes back gets the newest data. Messages live in SQLite, so they
survive a restart; GetMessages removes what it returns in the same transaction.

The handlers: CreatePullPoint (§5.1), GetMessages (§5.1.3, with the edge:Wait long poll),
DestroyPullPoint (§5.1.4) and a Notify posted to the pull point (§5.1.2).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from lxml import etree

from gateway import dedupe, notify, oplog
from gateway.resource import new_id
from gateway.storage import AcceptBatch, Pending, StorageError
from gateway.storage_schema import WHOLE
from gateway.storage_seen import SeenKey
from gateway.wire import faults, ns
from gateway.wire.addressing import resource_epr
from gateway.wire.faults import RECEIVER, SENDER, WsnFault
from gateway.wire.soap import SoapRequest
from gateway.wire.xmlutil import (
    Element,
    child,
    children,
    parse_duration,
    parse_xml,
    serialize,
    text_of,
)

if TYPE_CHECKING:
    from gateway.broker import NotificationBroker, Reply


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


async def create_pullpoint(b: NotificationBroker, req: SoapRequest) -> Reply:
    if len(b.pullpoints) >= b.cfg.max_pullpoints:
        raise faults.wsnt(
            "UnableToCreatePullPointFault",
            f"pull point limit reached ({b.cfg.max_pullpoints}); destroy unused ones",
            RECEIVER,
        )
    pid = new_id()
    now = b.clock()
    try:
        await b.storage.add_pullpoint(pid, now.timestamp())
    except StorageError as e:
        raise faults.wsnt(
            "UnableToCreatePullPointFault", f"could not store the pull point: {e}", RECEIVER
        ) from None
    b.pullpoints[pid] = PullPoint(pid, now)
    resp = etree.Element(ns.q(ns.WSNT, "CreatePullPointResponse"), nsmap={"wsnt": ns.WSNT})
    resp.append(resource_epr(b.urls("pullpoints", pid), pid).to_element(ns.q(ns.WSNT, "PullPoint")))
    return ns.A_CREATE_PP_RESP, [resp]


async def get_messages(b: NotificationBroker, req: SoapRequest, pp: PullPoint) -> Reply:
    limit: int | None = None
    mn = child(req.payload, ns.q(ns.WSNT, "MaximumNumber"))
    if mn is not None:
        try:
            limit = int(text_of(mn))
            if limit < 0:
                raise ValueError
        except ValueError:
            raise faults.wsnt(
                "UnableToGetMessagesFault",
                f"MaximumNumber {text_of(mn)!r} is not a non-negative integer",
            ) from None
    wait_el = child(req.payload, ns.q(ns.EDGE, "Wait"))
    if wait_el is not None and pp.queued <= 0 and limit != 0:
        try:
            wait = parse_duration(text_of(wait_el)).total_seconds()
        except ValueError:
            raise faults.wsnt(
                "UnableToGetMessagesFault",
                f"edge:Wait {text_of(wait_el)!r} is not an xsd:duration",
            ) from None
        await pp.wait(max(0.0, min(wait, b.cfg.max_wait)))
        if pp.id not in b.pullpoints:
            raise faults.resource_unknown(f"pull point {pp.id} was destroyed while waiting")
    msgs: list[Pending] = []
    if limit != 0:
        try:
            msgs = await b.storage.take_pp_messages(pp.id, limit)
        except StorageError as e:
            raise faults.wsnt(
                "UnableToGetMessagesFault", f"could not read messages: {e}", RECEIVER
            ) from None
    pp.queued = max(0, pp.queued - len(msgs))
    resp = etree.Element(ns.q(ns.WSNT, "GetMessagesResponse"), nsmap={"wsnt": ns.WSNT})
    for m in msgs:
        resp.append(parse_xml(notify.stored_message(b, m).encode()))
    return ns.A_GET_MESSAGES_RESP, [resp]


async def destroy_pullpoint(b: NotificationBroker, req: SoapRequest, pp: PullPoint) -> Reply:
    """§5.1.4. Subscriptions whose consumer is this pull point are destroyed with it
    (they could never deliver again)."""
    feeding = [s.id for s in b.subs.values() if s.pullpoint == pp.id]
    try:
        await b.storage.delete_pullpoint(pp.id, feeding)
    except StorageError as e:
        raise faults.wsnt(
            "UnableToDestroyPullPointFault", f"could not destroy: {e}", RECEIVER
        ) from None
    b.pullpoints.pop(pp.id, None)
    for s in feeding:
        b._deactivate(s)
        oplog.event("subscription_ended", "subscription ended", subscription=s,
                    reason="pull point destroyed")  # fmt: skip
    pp.signal()
    b._recompute_demand()
    return ns.A_DESTROY_PP_RESP, [
        etree.Element(ns.q(ns.WSNT, "DestroyPullPointResponse"), nsmap={"wsnt": ns.WSNT})
    ]


async def notify_pullpoint(b: NotificationBroker, req: SoapRequest, pp: PullPoint) -> Reply:
    """A Notify posted to a pull point's own address: its NotificationMessages are
    accumulated exactly as received (§5.1.2), once per wsa:MessageID of its publisher
    (gateway.dedupe `pullpoint_key`: a copy sent again after a lost answer is answered
    and not stored twice)."""
    msgs = children(req.payload, ns.q(ns.WSNT, "NotificationMessage"))
    if not msgs:
        raise WsnFault(ns.BF, "BaseFault", "Notify has no wsnt:NotificationMessage", SENDER)
    key = dedupe.pullpoint_key(b, req, pp.id, msgs[0])
    await dedupe.accept_once(b, key, lambda: _accept(b, pp, msgs, key))
    return None, []


async def _accept(
    b: NotificationBroker, pp: PullPoint, msgs: list[Element], seen: SeenKey | None
) -> None:
    """Commit `msgs` into `pp` (with the seen-set key, in the same transaction), then
    count them in memory."""
    batch = AcceptBatch(pp_limit=b.cfg.pullpoint_max_messages, seen=seen)
    for i, nm in enumerate(msgs):  # kept whole, as received
        batch.renderings.append((WHOLE, serialize(nm)))  # only the namespaces it uses
        batch.pp_messages.append((pp.id, None, i))
    try:
        res = await b.storage.accept(batch)
    except StorageError as e:
        raise WsnFault(ns.BF, "BaseFault", f"notification not accepted: {e}", RECEIVER) from None
    pp.queued += len(msgs) - res.pp_dropped.get(pp.id, 0)
    pp.dropped += res.pp_dropped.get(pp.id, 0)
    pp.signal()
