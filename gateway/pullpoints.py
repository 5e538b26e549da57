"""PullPoint (WS-BaseNotification 1.3 §5): a broker-hosted NotificationConsumer that
stores NotificationMessages until a client takes them with GetMessages.

Overflow policy: a pull point holds at most --pullpoint-max-messages and
--pullpoint-max-bytes, and the pull points of one client address and of all clients at most
--max-client-pullpoint-bytes and --max-pullpoint-bytes (gateway.pullpoint_bytes); beyond
that the OLDEST messages of the pull point added to are dropped (and counted), so a
forgotten pull point cannot exhaust the disk and a client that comes back gets the newest
data. Messages live in SQLite, so they survive a restart; GetMessages removes what it
returns in the same transaction.

The handlers: CreatePullPoint (§5.2), GetMessages (§5.1.2, with the edge:Wait long poll of
gateway.longpoll), DestroyPullPoint (§5.1.4) and a Notify posted to the pull point
(accumulated as received, §5.1.1). The pull point itself is gateway.state's `PullPoint`.
"""

from __future__ import annotations

from lxml import etree

from gateway import notify, pullpoint_bytes, quotas, wsrf
from gateway.context import Context, Reply
from gateway.resource import new_id
from gateway.state import PullPoint
from gateway.storage import AcceptBatch, Pending, StorageError
from gateway.storage_schema import WHOLE
from gateway.storage_seen import SeenKey
from gateway.wire import faults, ns
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


async def create_pullpoint(ctx: Context, req: SoapRequest, _broker: None) -> Reply:
    """CreatePullPoint (§5.2)."""
    refused = ctx.quotas.refuse(quotas.PULLPOINTS, req.client)
    if refused is not None:  # counted and logged by the quotas
        raise faults.wsnt(
            "UnableToCreatePullPointFault",
            f"pull point limit reached: {refused}; destroy unused ones",
            RECEIVER,
        )
    pp = PullPoint(new_id(), ctx.clock())
    # given back when it ends; its bytes follow its messages (gateway.pullpoint_bytes)
    ctx.quotas.hold(quotas.PULLPOINTS, req.client, pp.id)
    ctx.quotas.hold(quotas.PULLPOINT_BYTES, req.client, pp.id, 0)
    try:
        await ctx.storage.add_pullpoint(pp.id, pp.created.timestamp(), req.client)
    except StorageError as e:
        ctx.quotas.release(quotas.PULLPOINTS, pp.id)
        ctx.quotas.release(quotas.PULLPOINT_BYTES, pp.id)
        raise faults.wsnt(
            "UnableToCreatePullPointFault", f"could not store the pull point: {e}", RECEIVER
        ) from None
    ctx.state.add_pullpoint(pp)
    resp = etree.Element(ns.q(ns.WSNT, "CreatePullPointResponse"), nsmap={"wsnt": ns.WSNT})
    resp.append(ctx.render.epr("pullpoints", pp.id).to_element(ns.q(ns.WSNT, "PullPoint")))
    return ns.A_CREATE_PP_RESP, [resp]


async def get_messages(ctx: Context, req: SoapRequest, pp: PullPoint) -> Reply:
    """GetMessages (§5.1.2): the oldest messages, at most MaximumNumber, removed in the
    same transaction; with edge:Wait, waits that long for one when there is none."""
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
        await ctx.polls.wait(pp.id, max(0.0, min(wait, ctx.cfg.max_wait)))
        if pp.id not in ctx.state.pullpoints:
            raise faults.resource_unknown(f"pull point {pp.id} was destroyed while waiting")
    msgs: list[Pending] = []
    # bounded, MaximumNumber or not (§5.1.2 lets the pull point answer fewer): the rest stay
    cap = ctx.cfg.max_getmessages
    limit = cap if limit is None else min(limit, cap)
    if limit != 0:
        try:
            msgs = await ctx.storage.take_pp_messages(pp.id, limit, ctx.cfg.max_getmessages_bytes)
        except StorageError as e:
            raise faults.wsnt(
                "UnableToGetMessagesFault", f"could not read messages: {e}", RECEIVER
            ) from None
    pullpoint_bytes.taken(ctx, pp.id, msgs)
    ctx.state.messages_taken(pp.id, len(msgs), ctx.clock())
    resp = etree.Element(ns.q(ns.WSNT, "GetMessagesResponse"), nsmap={"wsnt": ns.WSNT})
    for m in msgs:
        resp.append(parse_xml(ctx.render.stored(m).encode()))
    return ns.A_GET_MESSAGES_RESP, [resp]


async def destroy_pullpoint(ctx: Context, req: SoapRequest, pp: PullPoint) -> Reply:
    """DestroyPullPoint (§5.1.4). Subscriptions whose consumer is this pull point are
    destroyed with it (they could never deliver again)."""
    await _destroy(ctx, pp)
    return ns.A_DESTROY_PP_RESP, [
        etree.Element(ns.q(ns.WSNT, "DestroyPullPointResponse"), nsmap={"wsnt": ns.WSNT})
    ]


async def destroy(ctx: Context, req: SoapRequest, pp: PullPoint) -> Reply:
    """wsrf-rl:Destroy of a pull point: its EPR presents it as a WS-Resource (§5.1, issue
    25 defect 3), so WS-ResourceLifetime 1.2 §4.1 immediate termination is DestroyPullPoint's
    work, answered as WS-ResourceLifetime's."""
    return await wsrf.destroyed(lambda: _destroy(ctx, pp))


async def _destroy(ctx: Context, pp: PullPoint) -> None:
    try:
        await ctx.storage.delete_pullpoint(pp.id, ctx.state.feeding(pp.id))
    except StorageError as e:
        raise faults.wsnt(
            "UnableToDestroyPullPointFault", f"could not destroy: {e}", RECEIVER
        ) from None
    ctx.state.destroy_pullpoint(pp.id)


async def notify_pullpoint(ctx: Context, req: SoapRequest, pp: PullPoint) -> Reply:
    """A Notify posted to a pull point's own address: its NotificationMessages are
    accumulated exactly as received (§5.1.1), once per wsa:MessageID of its publisher
    (gateway.dedupe `pullpoint_key`: a copy sent again after a lost answer is answered
    and not stored twice)."""
    msgs = children(req.payload, ns.q(ns.WSNT, "NotificationMessage"))
    if not msgs:
        raise WsnFault(ns.BF, "BaseFault", "Notify has no wsnt:NotificationMessage", SENDER)
    key = ctx.dedupe.pullpoint_key(req, pp.id, msgs[0])
    await ctx.dedupe.accept_once(key, lambda: _accept(ctx, pp, msgs, key))
    return None, []


async def _accept(ctx: Context, pp: PullPoint, msgs: list[Element], seen: SeenKey | None) -> None:
    """Commit `msgs` into `pp` (with the seen-set key, in the same transaction), then
    count them in the state."""
    # --pullpoint-max-bytes and the bytes quotas: notify.persist (gateway.pullpoint_bytes)
    batch = AcceptBatch(pp_limit=ctx.cfg.pullpoint_max_messages, seen=seen)
    for i, nm in enumerate(msgs):  # kept whole, as received
        batch.renderings.append((WHOLE, serialize(nm)))  # only the namespaces it uses
        batch.pp_messages.append((pp.id, None, i))
    res = await notify.persist(ctx, batch)
    ctx.state.notifications_accepted({}, {pp.id: len(msgs)}, res.pp_dropped)
