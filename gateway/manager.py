"""The SubscriptionManager role (WS-BaseNotification 1.3 §6): Renew (§6.1.1), Unsubscribe
(§6.1.2), PauseSubscription (§6.2.1) and ResumeSubscription (§6.3) of the
PausableSubscriptionManager, and the WS-Resource operations of a subscription (§6.4):
SetTerminationTime, Destroy and GetResourceProperty (shared parts in gateway.wsrf). Also
the ends a subscription meets without a request: its consumer dead (`consumer_dead`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from lxml import etree

from gateway import subscriptions, wsrf
from gateway.context import Context, Reply
from gateway.lifecycle import Why
from gateway.resource import epoch
from gateway.storage import StorageError
from gateway.subscriptions import Subscription
from gateway.wire import faults, ns
from gateway.wire.addressing import reply_action
from gateway.wire.faults import RECEIVER, WsnFault
from gateway.wire.soap import SoapRequest
from gateway.wire.xmlutil import child

log = logging.getLogger("gateway.manager")


async def end(ctx: Context, ids: Sequence[str], why: Why) -> None:
    """Persist, then apply, the end of subscriptions `ids` (their pending deliveries go in
    the same transaction). Raises StorageError (nothing changed then)."""
    # the rows queued now go in the same transaction; any committed after it are deleted
    # when the queue is removed (DeliveryManager.remove) or skipped (enqueue)
    seqs = [seq for i in ids for seq in ctx.delivery.pending_seqs(i)]
    await ctx.storage.delete_subscriptions(ids, seqs)
    ctx.state.end_subscriptions(ids, why)


async def renew(ctx: Context, req: SoapRequest, sub: Subscription) -> Reply:
    """Renew (§6.1.1): a new TerminationTime, a duration or a dateTime."""
    now = ctx.clock()
    cfg = ctx.cfg
    tt = child(req.payload, ns.q(ns.WSNT, "TerminationTime"))
    if tt is None:
        raise faults.unacceptable_tt(
            "Renew has no wsnt:TerminationTime",
            now + cfg.min_termination,
            now + cfg.max_termination if cfg.max_termination else None,
        )
    new = subscriptions.resolve_termination(
        tt,
        now,
        None,
        cfg.min_termination,
        cfg.max_termination,
        "UnacceptableTerminationTimeFault",
        "TerminationTime",
    )
    try:
        await ctx.storage.update_subscription(sub.id, termination=epoch(new))
    except StorageError as e:
        raise WsnFault(ns.BF, "BaseFault", f"could not renew: {e}", RECEIVER) from None
    ctx.state.renew_subscription(sub.id, new)
    resp = etree.Element(ns.q(ns.WSNT, "RenewResponse"), nsmap={"wsnt": ns.WSNT})
    resp.append(subscriptions.termination_element(ns.WSNT, "TerminationTime", new))
    resp.append(subscriptions.time_element(ns.WSNT, "CurrentTime", now))
    return reply_action(req.wsa.action, ns.A_RENEW_RESP), [resp]


async def unsubscribe(ctx: Context, req: SoapRequest, sub: Subscription) -> Reply:
    """Unsubscribe (§6.1.2)."""
    await _end(ctx, sub, Why.UNSUBSCRIBE)
    return reply_action(req.wsa.action, ns.A_UNSUBSCRIBE_RESP), [
        etree.Element(ns.q(ns.WSNT, "UnsubscribeResponse"), nsmap={"wsnt": ns.WSNT})
    ]


async def destroy(ctx: Context, req: SoapRequest, sub: Subscription) -> Reply:
    """wsrf-rl:Destroy of a subscription (§6.4): the work of Unsubscribe, answered as
    WS-ResourceLifetime's."""
    return await wsrf.destroyed(lambda: _end(ctx, sub, Why.DESTROY))


async def _end(ctx: Context, sub: Subscription, why: Why) -> None:
    try:
        await end(ctx, [sub.id], why)
    except StorageError as e:
        raise faults.wsnt(
            "UnableToDestroySubscriptionFault", f"could not destroy: {e}", RECEIVER
        ) from None


async def pause(ctx: Context, req: SoapRequest, sub: Subscription) -> Reply:
    """PauseSubscription (§6.2.1). Policy: while paused, new notifications are NOT queued
    for the subscription (pausing is the consumer's flow control and the demand signal of
    demand-based publishing; a backlog released on resume would defeat both). Messages
    queued before the pause are held and sent after ResumeSubscription. Pausing a paused
    subscription changes nothing."""
    if not sub.paused:
        await _set_paused(ctx, sub, True)
        ctx.state.pause_subscription(sub.id)
    return reply_action(req.wsa.action, ns.A_PAUSE_RESP), [
        etree.Element(ns.q(ns.WSNT, "PauseSubscriptionResponse"), nsmap={"wsnt": ns.WSNT})
    ]


async def resume(ctx: Context, req: SoapRequest, sub: Subscription) -> Reply:
    """ResumeSubscription (§6.3); resuming an active subscription changes nothing."""
    if sub.paused:
        await _set_paused(ctx, sub, False)
        ctx.state.resume_subscription(sub.id)
    return reply_action(req.wsa.action, ns.A_RESUME_RESP), [
        etree.Element(ns.q(ns.WSNT, "ResumeSubscriptionResponse"), nsmap={"wsnt": ns.WSNT})
    ]


async def _set_paused(ctx: Context, sub: Subscription, paused: bool) -> None:
    try:
        await ctx.storage.update_subscription(sub.id, paused=paused)
    except StorageError as e:
        name = "PauseFailedFault" if paused else "ResumeFailedFault"
        what = "pause" if paused else "resume"
        raise faults.wsnt(name, f"could not {what}: {e}", RECEIVER) from None


async def set_termination(ctx: Context, req: SoapRequest, sub: Subscription) -> Reply:
    """WS-ResourceLifetime SetTerminationTime on a subscription (§6.4)."""
    new, now = wsrf.set_tt_request(ctx.cfg, req, ctx.clock())
    try:
        await ctx.storage.update_subscription(sub.id, termination=epoch(new))
    except StorageError as e:
        raise faults.rl("UnableToSetTerminationTimeFault", str(e), RECEIVER) from None
    ctx.state.renew_subscription(sub.id, new)
    return wsrf.set_tt_response(new, now)


async def get_resource_property(ctx: Context, req: SoapRequest, sub: Subscription) -> Reply:
    """WS-ResourceProperties GetResourceProperty of the SubscriptionManagerRP (§6.4.1)."""
    props = subscriptions.resource_properties(sub, ctx.clock())
    return wsrf.get_rp(req, props, subscriptions.RESOURCE_PROPERTIES)


async def consumer_dead(ctx: Context, sub_id: str) -> None:
    """The delivery manager gave up on the subscription's consumer (--consumer-dead-after):
    the subscription ends (its log line says why)."""
    try:
        await end(ctx, [sub_id], Why.CONSUMER_DEAD)
    except StorageError as e:
        log.warning("subscription %s: consumer dead, but could not end it: %s", sub_id, e)
