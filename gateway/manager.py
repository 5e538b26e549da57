"""The SubscriptionManager role (WS-BaseNotification 1.3 §6): Renew (§6.1), Unsubscribe
(§6.2), PauseSubscription/ResumeSubscription (§6.3, PausableSubscriptionManager) and
SetTerminationTime on a subscription (WS-ResourceLifetime). Destroy and
GetResourceProperty are answered through gateway.wsrf.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lxml import etree

from gateway import oplog, subscriptions, wsrf
from gateway.resource import epoch
from gateway.storage import StorageError
from gateway.subscriptions import Subscription
from gateway.wire import faults, ns
from gateway.wire.addressing import reply_action
from gateway.wire.faults import RECEIVER, WsnFault
from gateway.wire.soap import SoapRequest
from gateway.wire.xmlutil import (
    child,
)

if TYPE_CHECKING:
    from gateway.broker import NotificationBroker, Reply


async def renew(b: NotificationBroker, req: SoapRequest, sub: Subscription) -> Reply:
    now = b.clock()
    tt = child(req.payload, ns.q(ns.WSNT, "TerminationTime"))
    if tt is None:
        raise faults.unacceptable_tt(
            "Renew has no wsnt:TerminationTime",
            now + b.cfg.min_termination,
            now + b.cfg.max_termination if b.cfg.max_termination else None,
        )
    new = subscriptions.resolve_termination(
        tt,
        now,
        None,
        b.cfg.min_termination,
        b.cfg.max_termination,
        "UnacceptableTerminationTimeFault",
        "TerminationTime",
    )
    try:
        await b.storage.update_subscription(sub.id, termination=epoch(new))
    except StorageError as e:
        raise WsnFault(ns.BF, "BaseFault", f"could not renew: {e}", RECEIVER) from None
    sub.termination = new
    resp = etree.Element(ns.q(ns.WSNT, "RenewResponse"), nsmap={"wsnt": ns.WSNT})
    resp.append(subscriptions.termination_element(ns.WSNT, "TerminationTime", new))
    resp.append(subscriptions.time_element(ns.WSNT, "CurrentTime", now))
    return reply_action(req.wsa.action, ns.A_RENEW_RESP), [resp]


async def unsubscribe(
    b: NotificationBroker, req: SoapRequest, sub: Subscription, reason: str = "Unsubscribe"
) -> Reply:
    """WS-BaseNotification 1.3 §6.1.2 Unsubscribe; also the work of wsrf-rl:Destroy
    (gateway.wsrf), which passes `reason` "Destroy" for the subscription_ended log line."""
    try:
        await b._destroy_subscriptions([sub.id])
    except StorageError as e:
        raise faults.wsnt(
            "UnableToDestroySubscriptionFault", f"could not destroy: {e}", RECEIVER
        ) from None
    oplog.event("subscription_ended", "subscription ended", subscription=sub.id,
                reason=reason)  # fmt: skip
    return reply_action(req.wsa.action, ns.A_UNSUBSCRIBE_RESP), [
        etree.Element(ns.q(ns.WSNT, "UnsubscribeResponse"), nsmap={"wsnt": ns.WSNT})
    ]


async def pause(b: NotificationBroker, req: SoapRequest, sub: Subscription, paused: bool) -> Reply:
    """§6.2. Policy: while paused, new notifications are NOT queued for the
    subscription (pausing is the consumer's flow control and the demand signal of
    demand-based publishing; a backlog released on resume would defeat both).
    Messages queued before the pause are held and sent after ResumeSubscription."""
    name = "PauseFailedFault" if paused else "ResumeFailedFault"
    if sub.paused != paused:
        try:
            await b.storage.update_subscription(sub.id, paused=paused)
        except StorageError as e:
            raise faults.wsnt(
                name, f"could not {'pause' if paused else 'resume'}: {e}", RECEIVER
            ) from None
        sub.paused = paused
        b.delivery.set_paused(sub.id, paused)
        b._recompute_demand()
    if paused:
        return ns.A_PAUSE_RESP, [
            etree.Element(ns.q(ns.WSNT, "PauseSubscriptionResponse"), nsmap={"wsnt": ns.WSNT})
        ]
    return ns.A_RESUME_RESP, [
        etree.Element(ns.q(ns.WSNT, "ResumeSubscriptionResponse"), nsmap={"wsnt": ns.WSNT})
    ]


async def set_termination(b: NotificationBroker, req: SoapRequest, sub: Subscription) -> Reply:
    new, now = wsrf.set_tt_request(b, req)
    try:
        await b.storage.update_subscription(sub.id, termination=epoch(new))
    except StorageError as e:
        raise faults.rl("UnableToSetTerminationTimeFault", str(e), RECEIVER) from None
    sub.termination = new
    return wsrf.set_tt_response(b, new, now)
