"""The messages of demand-based publishing (gateway.demand), without I/O: which topics of a
registration the broker subscribes to, the Subscribe and Renew requests it sends to the
publisher, and what it reads from the answers (WS-BaseNotification 1.3 §4.2, §6.1.1;
WS-BrokeredNotification 1.0 §4, §6.1 `Demand`)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import UTC, datetime

from lxml import etree

from gateway import publishers, topics
from gateway.demand_client import RemoteFault
from gateway.publishers import Registration
from gateway.wire import ns
from gateway.wire.addressing import Epr, EprError, parse_epr
from gateway.wire.xmlutil import Element, child, is_nil, parse_datetime, text_of

log = logging.getLogger("gateway.demand")


@dataclass
class DemandTopic:
    """One registered topic: its broker-side name and the filter sent to the publisher."""

    broker_topic: topics.ConcreteTopic
    dialect: str
    text: str
    nsmap: dict[str, str]


@dataclass
class Remote:
    """Our subscription at the publisher for one topic."""

    epr: Epr
    termination: float | None  # broker-clock epoch seconds; None = none scheduled
    paused: bool
    renew_at: float | None = None  # broker-clock epoch seconds


def topics_of(reg: Registration) -> list[DemandTopic]:
    """The registered single topics of `reg` (Simple/Concrete expressions), each with the
    filter to send to the publisher. Wildcard expressions name no topic to subscribe to:
    such a publisher must push on its own (logged)."""
    out: list[DemandTopic] = []
    seen: set[topics.ConcreteTopic] = set()
    for dialect, text, nsmap in reg.topic_specs:
        try:
            e = topics.compile_expression(dialect, text, {k or None: v for k, v in nsmap.items()})
        except topics.TopicError:
            continue
        one = e.single_topic()
        if one is None or not one.path:
            log.info(
                "registration %s: %r is not one topic; no demand-based subscription for it",
                reg.id,
                text,
            )
            continue
        mapped = publishers.map_device_topic(one, reg.device_id, reg.device_ns)
        if mapped in seen:
            continue
        seen.add(mapped)
        d, t, m = topics.render_topic(one, topics.SIMPLE)
        out.append(DemandTopic(mapped, d, t, {k: v for k, v in m.items() if k}))
    return out


def same_publisher(a: Registration, b: Registration) -> bool:
    """Same PublisherReference address, or the same declared edge:DeviceId: a device that
    rebooted with a new DHCP address is still itself. A device id derived from host and
    port is no identity: two publishers at http://H:P/a and http://H:P/b are two (issue 25
    defect 2), and a device with a new address has a new derived id anyway."""
    da = publishers.declared_device_id(a.publisher)
    if da is not None and da == publishers.declared_device_id(b.publisher):
        return True
    return (
        a.publisher is not None
        and b.publisher is not None
        and (a.publisher.address == b.publisher.address)
    )


def duration(seconds: float) -> str:
    return f"PT{max(1, math.ceil(seconds))}S"


def subscribe_request(consumer: Epr, t: DemandTopic, lifetime_s: float) -> Element:
    """WS-BaseNotification 1.3 §4.2 Subscribe: wrapped (no UseRaw policy), one topic in the
    publisher's own namespace, a lifetime as a duration (immune to clock skew)."""
    sub = etree.Element(ns.q(ns.WSNT, "Subscribe"), nsmap={"wsnt": ns.WSNT, "wsa": ns.WSA})
    sub.append(consumer.to_element(ns.q(ns.WSNT, "ConsumerReference")))
    f = etree.SubElement(sub, ns.q(ns.WSNT, "Filter"))
    te = etree.SubElement(f, ns.q(ns.WSNT, "TopicExpression"), nsmap=t.nsmap or None)
    te.set("Dialect", t.dialect)
    te.text = t.text
    etree.SubElement(sub, ns.q(ns.WSNT, "InitialTerminationTime")).text = duration(lifetime_s)
    return sub


def renew_request(lifetime_s: float) -> Element:
    """WS-BaseNotification 1.3 §6.1.1 Renew, the lifetime as a duration."""
    body = etree.Element(ns.q(ns.WSNT, "Renew"), nsmap={"wsnt": ns.WSNT})
    etree.SubElement(body, ns.q(ns.WSNT, "TerminationTime")).text = duration(lifetime_s)
    return body


def subscription_reference(resp: Element) -> Epr:
    """The SubscriptionReference of a SubscribeResponse; RemoteFault("BadResponse") when the
    answer has none or an unreadable one."""
    ref = child(resp, ns.q(ns.WSNT, "SubscriptionReference"))
    if resp.tag != ns.q(ns.WSNT, "SubscribeResponse") or ref is None:
        raise RemoteFault("BadResponse", "no wsnt:SubscriptionReference in the answer", 200)
    try:
        return parse_epr(ref)
    except EprError as e:
        raise RemoteFault("BadResponse", str(e), 200) from None


def termination(
    resp: Element, sent_at: float, renew_fraction: float
) -> tuple[float | None, float | None]:
    """(termination, renew_at) in broker-clock seconds from a SubscribeResponse or
    RenewResponse: TerminationTime is read relative to the answer's CurrentTime
    (WS-BaseNotification 1.3 §4.2, §6.1.1) so the publisher's clock may be off."""
    tt = child(resp, ns.q(ns.WSNT, "TerminationTime"))
    if tt is None or is_nil(tt) or not text_of(tt):
        return None, None
    try:
        remote_tt = parse_datetime(text_of(tt))
        ct = child(resp, ns.q(ns.WSNT, "CurrentTime"))
        remote_now = (
            parse_datetime(text_of(ct))
            if ct is not None and text_of(ct)
            else datetime.fromtimestamp(sent_at, UTC)
        )
    except ValueError as e:
        raise RemoteFault("BadResponse", f"unreadable TerminationTime: {e}", 200) from None
    left = (remote_tt - remote_now).total_seconds()
    term = sent_at + left
    return term, sent_at + left * (1 - renew_fraction)
