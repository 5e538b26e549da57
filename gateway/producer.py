"""The NotificationProducer role of the broker (WS-BaseNotification 1.3 §4): Subscribe
(§4.2), GetCurrentMessage (§4.3) and the producer's resource properties (§4.1,
NotificationProducerRP, with WS-BrokeredNotification's br:RequiresRegistration).

Handlers take the context (gateway.context), the parsed request and (for the broker
itself) no resource, and return a Reply; a fault is raised as WsnFault. No HTTP here
(gateway.http is the binding).
"""

from __future__ import annotations

from lxml import etree

from gateway import quotas, subscriptions, topics, wsrf
from gateway.consumer_policy import ConsumerAddress, ConsumerPolicy
from gateway.context import Context, Reply
from gateway.resource import RES_PATH, epoch, new_id
from gateway.state import BrokerState
from gateway.storage import StorageError, SubscriptionRow
from gateway.subscriptions import Subscription
from gateway.topics.prefixes import choose as choose_prefixes
from gateway.wire import faults, ns
from gateway.wire.faults import RECEIVER
from gateway.wire.soap import SoapRequest
from gateway.wire.xmlutil import child, parse_xml, text_of

#: b-2.xsd NotificationProducerRP (every one minOccurs=0) + br:RequiresRegistration
PRODUCER_RP = frozenset(
    {
        ns.q(ns.WSNT, "TopicExpression"),
        ns.q(ns.WSNT, "FixedTopicSet"),
        ns.q(ns.WSNT, "TopicExpressionDialect"),
        ns.q(ns.WSTOP, "TopicSet"),
        ns.q(ns.BR, "RequiresRegistration"),
    }
)


async def own_pullpoint(state: BrokerState, policy: ConsumerPolicy, address: str) -> str | None:
    """The id of our pull point that `address` names in any spelling (delivered
    in-process), if any."""
    t = ConsumerAddress.parse(address)
    if isinstance(t, str):
        return None
    m = RES_PATH.match(t.path)
    if not m or m.group(1) != "pullpoints" or m.group(2) not in state.pullpoints:
        return None
    return m.group(2) if await policy.refers_to_self(t) else None


async def loops_back(policy: ConsumerPolicy, address: str) -> str | None:
    """Refuse consumers that are this broker (other than its pull points) in any
    spelling: scheme, resolved host and port compared, userinfo never part of it.
    A subscription delivering to /wsn/broker would publish its own notifications
    again, forever (consumer_policy.py)."""
    t = ConsumerAddress.parse(address)
    if not isinstance(t, str) and await policy.refers_to_self(t):
        return (
            f"consumer address {address!r} is this broker itself: delivering there would "
            "loop; use a pull point (CreatePullPoint) to consume in the broker"
        )
    return None


async def subscribe(ctx: Context, req: SoapRequest, _broker: None) -> Reply:
    """Subscribe (WS-BaseNotification 1.3 §4.2)."""
    now = ctx.clock()
    cfg, state = ctx.cfg, ctx.state
    refused = ctx.quotas.refuse(quotas.SUBSCRIPTIONS, req.client)
    if refused is not None:  # counted and logged by the quotas
        raise faults.wsnt(
            "SubscribeCreationFailedFault",
            f"subscription limit reached: {refused}; unsubscribe first",
            RECEIVER,
        )
    cons_el = child(req.payload, ns.q(ns.WSNT, "ConsumerReference"))
    pp_id = None
    if cons_el is not None:
        addr = text_of(child(cons_el, ns.q(ns.WSA, "Address")))
        why = ctx.policy.check(addr) if addr else None
        pp_id = await own_pullpoint(state, ctx.policy, addr) if not why else None
        if pp_id is None and addr:
            why = why or await loops_back(ctx.policy, addr)
            if why:
                raise faults.wsnt("SubscribeCreationFailedFault", why)
    parsed = subscriptions.parse_subscribe(req.payload, state.ts, cfg, now, pp_id is not None)
    sub = Subscription(
        id=new_id(),
        consumer=parsed.consumer,
        raw=parsed.raw,
        created=now,
        termination=parsed.termination,
        pullpoint=pp_id,
        filter_xml=parsed.filter_xml,
        policy_xml=parsed.policy_xml,
        topic_exprs=parsed.filter.topic_exprs,
        content=parsed.filter.content,
        producer=parsed.filter.producer,
        dialect=parsed.filter.dialect or topics.CONCRETE,
        soap=req.version,
    )
    ctx.quotas.hold(quotas.SUBSCRIPTIONS, req.client, sub.id)  # given back when it ends
    try:
        await ctx.storage.add_subscription(
            SubscriptionRow(
                sub.id,
                sub.consumer.to_xml(),
                sub.filter_xml,
                sub.policy_xml,
                sub.raw,
                now.timestamp(),
                epoch(sub.termination),
                False,
                pp_id,
                sub.dialect,
                sub.soap,
                req.client,  # its quota is held again after a restart
            )
        )
    except StorageError as e:
        ctx.quotas.release(quotas.SUBSCRIPTIONS, sub.id)
        raise faults.wsnt(
            "SubscribeCreationFailedFault", f"could not store the subscription: {e}", RECEIVER
        ) from None
    state.add_subscription(sub)
    resp = etree.Element(ns.q(ns.WSNT, "SubscribeResponse"), nsmap={"wsnt": ns.WSNT})
    resp.append(
        ctx.render.epr("subscriptions", sub.id).to_element(ns.q(ns.WSNT, "SubscriptionReference"))
    )
    resp.append(subscriptions.time_element(ns.WSNT, "CurrentTime", now))
    resp.append(subscriptions.termination_element(ns.WSNT, "TerminationTime", sub.termination))
    return ns.A_SUBSCRIBE_RESP, [resp]


async def get_resource_property(ctx: Context, req: SoapRequest, _broker: None) -> Reply:
    """GetResourceProperty of the NotificationProducerRP (WS-BaseNotification 1.3 §4.1)
    + br:RequiresRegistration (rebuilt on topic growth)."""
    return wsrf.get_rp(req, ctx.render.producer_properties(ctx.state.ts), PRODUCER_RP)


async def get_current_message(ctx: Context, req: SoapRequest, _broker: None) -> Reply:
    """GetCurrentMessage (WS-BaseNotification 1.3 §4.3)."""
    ts = ctx.state.ts
    tel = child(req.payload, ns.q(ns.WSNT, "Topic"))
    if tel is None:
        raise faults.wsnt("InvalidTopicExpressionFault", "GetCurrentMessage has no wsnt:Topic")
    try:
        expr = topics.parse_topic_expression_element(tel)
        expr.validate(ts)  # WS-Topics 1.3 §8.5: a final namespace or fixed set may forbid it
        # one concrete topic after AliasRef resolution (WS-Topics 2004 §8); wildcards
        # -> MultipleTopicsSpecified, an alias resolving to nothing -> TopicNotSupported
        one = topics.require_single_topic(expr, ts)
    except topics.TopicError as e:
        raise faults.from_topic_error(e) from None
    xml = ctx.state.current.get(one)
    if xml is None:
        # the topic as the requester wrote its prefixes (gateway/topics/prefixes.py)
        text = topics.topic_text(one, choose_prefixes(one, None, expr.prefixes_used()))
        raise faults.wsnt(
            "NoCurrentMessageOnTopicFault", f"no message has been published on {text} yet"
        )
    resp = etree.Element(ns.q(ns.WSNT, "GetCurrentMessageResponse"), nsmap={"wsnt": ns.WSNT})
    resp.append(parse_xml(xml.encode()))
    return ns.A_GCM_RESP, [resp]
