"""The NotificationProducer role of the broker (WS-BaseNotification 1.3 §4): Subscribe
(§4.2), GetCurrentMessage (§4.3) and the producer's resource properties (§4.1,
NotificationProducerRP, with WS-BrokeredNotification's br:RequiresRegistration).

Handlers take the broker (its state) and the parsed request and return a Reply; a fault
is raised as WsnFault. No HTTP here (gateway.http is the binding).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lxml import etree

from gateway import consumer_policy, oplog, subscriptions, topics
from gateway.resource import RES_PATH, epoch, new_id
from gateway.storage import StorageError, SubscriptionRow
from gateway.subscriptions import Subscription
from gateway.wire import faults, ns
from gateway.wire.addressing import resource_epr
from gateway.wire.faults import RECEIVER
from gateway.wire.soap import SoapRequest
from gateway.wire.xmlutil import (
    Element,
    child,
    parse_xml,
    text_of,
)

if TYPE_CHECKING:
    from gateway.broker import NotificationBroker, Reply

ALL_DIALECTS = (topics.SIMPLE, topics.CONCRETE, topics.FULL, topics.XPATH)

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


async def own_pullpoint(b: NotificationBroker, address: str) -> str | None:
    """The id of our pull point that `address` names in any spelling (delivered
    in-process), if any."""
    t = consumer_policy.ConsumerAddress.parse(address)
    if isinstance(t, str):
        return None
    m = RES_PATH.match(t.path)
    if not m or m.group(1) != "pullpoints" or m.group(2) not in b.pullpoints:
        return None
    return m.group(2) if await b.consumer_policy.refers_to_self(t) else None


async def loops_back(b: NotificationBroker, address: str) -> str | None:
    """Refuse consumers that are this broker (other than its pull points) in any
    spelling: scheme, resolved host and port compared, userinfo never part of it.
    A subscription delivering to /wsn/broker would publish its own notifications
    again, forever (consumer_policy.py)."""
    t = consumer_policy.ConsumerAddress.parse(address)
    if not isinstance(t, str) and await b.consumer_policy.refers_to_self(t):
        return (
            f"consumer address {address!r} is this broker itself: delivering there would "
            "loop; use a pull point (CreatePullPoint) to consume in the broker"
        )
    return None


async def subscribe(b: NotificationBroker, req: SoapRequest) -> Reply:
    now = b.clock()
    if len(b.subs) >= b.cfg.max_subscriptions:
        raise faults.wsnt(
            "SubscribeCreationFailedFault",
            f"subscription limit reached ({b.cfg.max_subscriptions}); unsubscribe first",
            RECEIVER,
        )
    cons_el = child(req.payload, ns.q(ns.WSNT, "ConsumerReference"))
    pp_id = None
    if cons_el is not None:
        addr = text_of(child(cons_el, ns.q(ns.WSA, "Address")))
        why = b.consumer_policy.check(addr) if addr else None
        pp_id = await own_pullpoint(b, addr) if not why else None
        if pp_id is None and addr:
            why = why or await loops_back(b, addr)
            if why:
                raise faults.wsnt("SubscribeCreationFailedFault", why)
    parsed = subscriptions.parse_subscribe(req.payload, b.ts, b.cfg, now, pp_id is not None)
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
        dialect=parsed.filter.topic_exprs[0].dialect
        if parsed.filter.topic_exprs
        else topics.CONCRETE,
        soap=req.version,
    )
    try:
        await b.storage.add_subscription(
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
            )
        )
    except StorageError as e:
        raise faults.wsnt(
            "SubscribeCreationFailedFault", f"could not store the subscription: {e}", RECEIVER
        ) from None
    b._activate(sub)
    oplog.event(
        "subscription_created",
        "subscription created",
        subscription=sub.id,
        consumer=f"pullpoint {pp_id}" if pp_id else sub.consumer.address,
        dialect=sub.dialect.rsplit("/", 1)[-1],
        expression=sub.topic_exprs[0].text if sub.topic_exprs else None,
        raw=sub.raw,
    )
    b._recompute_demand()
    resp = etree.Element(ns.q(ns.WSNT, "SubscribeResponse"), nsmap={"wsnt": ns.WSNT})
    resp.append(
        resource_epr(b.urls("subscriptions", sub.id), sub.id).to_element(
            ns.q(ns.WSNT, "SubscriptionReference")
        )
    )
    resp.append(subscriptions.time_element(ns.WSNT, "CurrentTime", now))
    resp.append(subscriptions.termination_element(ns.WSNT, "TerminationTime", sub.termination))
    return ns.A_SUBSCRIBE_RESP, [resp]


def producer_properties(b: NotificationBroker) -> list[Element]:
    """§4.1 NotificationProducerRP + br:RequiresRegistration (rebuilt on topic growth)."""
    out: list[Element] = []
    for t in sorted(b.ts.topics(), key=str):
        dialect, text, nsmap = topics.render_topic(t, topics.CONCRETE)
        el = etree.Element(
            ns.q(ns.WSNT, "TopicExpression"),
            nsmap={k: v for k, v in nsmap.items() if k} or None,
        )
        el.set("Dialect", dialect)
        el.text = text
        out.append(el)
    fx = etree.Element(ns.q(ns.WSNT, "FixedTopicSet"))
    fx.text = "true" if b.ts.fixed else "false"
    out.append(fx)
    for d in ALL_DIALECTS:
        de = etree.Element(ns.q(ns.WSNT, "TopicExpressionDialect"))
        de.text = d
        out.append(de)
    out.append(b.ts.to_element())
    rr = etree.Element(ns.q(ns.BR, "RequiresRegistration"), nsmap={"br": ns.BR})
    rr.text = "true" if b.cfg.requires_registration else "false"
    out.append(rr)
    return out


def producer_rp_document(b: NotificationBroker) -> Element:
    if b._rp_cache is None or b._rp_cache[0] != b.ts.version:
        doc = etree.Element(ns.q(ns.WSNT, "NotificationProducerRP"), nsmap={"wsnt": ns.WSNT})
        for el in producer_properties(b):
            doc.append(el)
        root = etree.fromstring(etree.tostring(doc))
        b._rp_cache = (b.ts.version, root)
    return b._rp_cache[1]


async def get_current_message(b: NotificationBroker, req: SoapRequest) -> Reply:
    tel = child(req.payload, ns.q(ns.WSNT, "Topic"))
    if tel is None:
        raise faults.wsnt("InvalidTopicExpressionFault", "GetCurrentMessage has no wsnt:Topic")
    try:
        expr = topics.parse_topic_expression_element(tel)
        expr.validate(b.ts)  # §8.5: a final namespace or fixed set may forbid it
        # one concrete topic after AliasRef resolution (WS-Topics 2004 §8); wildcards
        # -> MultipleTopicsSpecified, an alias resolving to nothing -> TopicNotSupported
        one = topics.require_single_topic(expr, b.ts)
    except topics.TopicError as e:
        raise faults.from_topic_error(e) from None
    xml = b.current.get(one)
    if xml is None:
        raise faults.wsnt(
            "NoCurrentMessageOnTopicFault", f"no message has been published on {one} yet"
        )
    resp = etree.Element(ns.q(ns.WSNT, "GetCurrentMessageResponse"), nsmap={"wsnt": ns.WSNT})
    resp.append(parse_xml(xml.encode()))
    return ns.A_GCM_RESP, [resp]
