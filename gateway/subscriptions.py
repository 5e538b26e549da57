"""Subscribe (WS-BaseNotification 1.3 §4.2) and the Subscription resource managed by the
SubscriptionManager (§6): parsing, validation, filter evaluation, resource properties."""

from __future__ import annotations

from copy import deepcopy
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from lxml import etree

from gateway import topics
from gateway.filters import XPathFilter, compile_message_content, compile_producer_properties
from gateway.wire import faults, ns
from gateway.wire.addressing import Epr, EprError, parse_epr
from gateway.wire.xmlutil import (
    Element,
    child,
    elements,
    format_datetime,
    is_nil,
    parse_time_spec,
    text_of,
)

if TYPE_CHECKING:
    from gateway.config import Config


@dataclass
class Subscription:
    id: str
    consumer: Epr
    raw: bool
    created: datetime
    termination: datetime | None
    paused: bool = False
    pullpoint: str | None = None
    filter_xml: str | None = None
    policy_xml: str | None = None
    topic_exprs: list[topics.TopicExpression] = field(default_factory=list)
    content: list[XPathFilter] = field(default_factory=list)
    producer: list[XPathFilter] = field(default_factory=list)
    dialect: str = topics.CONCRETE
    soap: str = ns.SOAP12

    def expired(self, now: datetime) -> bool:
        return self.termination is not None and self.termination <= now


@dataclass
class ParsedFilter:
    topic_exprs: list[topics.TopicExpression] = field(default_factory=list)
    content: list[XPathFilter] = field(default_factory=list)
    producer: list[XPathFilter] = field(default_factory=list)
    #: the first TopicExpression's dialect URI as the subscriber wrote it: the Topic of
    #: each notification it gets is in this spelling (WS-BaseNotification 1.3 §3.1)
    dialect: str | None = None


def parse_filter(filter_el: Element | None, ts: topics.TopicSet) -> ParsedFilter:
    """Compile every filter expression once; raise the §4.2 fault of the first bad one."""
    pf = ParsedFilter()
    if filter_el is None:
        return pf
    unknown: list[tuple[str, str]] = []
    for f in elements(filter_el):
        qn = etree.QName(f)
        if f.tag == ns.q(ns.WSNT, "TopicExpression"):
            try:
                expr = topics.parse_topic_expression_element(f)
                expr.validate(ts)
            except topics.TopicError as e:
                raise faults.from_topic_error(e) from None
            if not pf.topic_exprs:
                pf.dialect = (f.get("Dialect") or f.get("dialect") or "").strip()
            pf.topic_exprs.append(expr)
        elif f.tag == ns.q(ns.WSNT, "MessageContent"):
            pf.content.append(compile_message_content(f))
        elif f.tag == ns.q(ns.WSNT, "ProducerProperties"):
            pf.producer.append(compile_producer_properties(f))
        else:
            unknown.append((qn.namespace or "", qn.localname))
    if unknown:
        names = ", ".join(f"{{{u}}}{n}" for u, n in unknown)
        raise faults.invalid_filter(
            f"filter(s) not understood: {names}; this broker supports wsnt:TopicExpression, "
            "wsnt:MessageContent and wsnt:ProducerProperties",
            unknown,
        )
    return pf


def resolve_termination(
    el: Element | None,
    now: datetime,
    default: timedelta | None,
    minimum: timedelta,
    maximum: timedelta | None,
    fault_name: str,
    what: str,
) -> datetime | None:
    """The absolute termination time asked by `el` (dateTime | duration | xsi:nil), or the
    default when absent. Raises Unacceptable[Initial]TerminationTimeFault with MinimumTime
    and MaximumTime hints (WS-BaseNotification 1.3 §4.2, §6.1.1)."""
    lo = now + minimum
    hi = now + maximum if maximum is not None else None

    def bad(reason: str) -> faults.WsnFault:
        hint = f"acceptable: from {format_datetime(lo)}"
        hint += f" to {format_datetime(hi)}" if hi else " (no upper bound)"
        if fault_name == "UnacceptableInitialTerminationTimeFault":
            return faults.unacceptable_itt(f"{what} {reason}; {hint}", lo, hi)
        return faults.unacceptable_tt(f"{what} {reason}; {hint}", lo, hi)

    if el is None:
        return now + default if default is not None else None
    if is_nil(el):
        if hi is not None:
            raise bad("is nil (infinite) but this broker limits lifetimes")
        return None
    txt = text_of(el)
    try:
        t = parse_time_spec(txt, now)
    except ValueError as e:
        raise bad(f"{txt!r} is neither xsd:dateTime nor xsd:duration ({e})") from None
    if t <= now:
        raise bad(f"{txt!r} is not in the future")
    if t < lo:
        raise bad(f"{txt!r} is too close")
    if hi is not None and t > hi:
        raise bad(f"{txt!r} is beyond the maximum lifetime")
    return t


@dataclass
class SubscribeRequest:
    consumer: Epr
    filter: ParsedFilter
    filter_xml: str | None
    raw: bool
    policy_xml: str | None
    termination: datetime | None


def parse_subscribe(
    el: Element, ts: topics.TopicSet, cfg: Config, now: datetime, consumer_is_pullpoint: bool
) -> SubscribeRequest:
    cons_el = child(el, ns.q(ns.WSNT, "ConsumerReference"))
    if cons_el is None:
        raise faults.wsnt("SubscribeCreationFailedFault", "Subscribe has no wsnt:ConsumerReference")
    try:
        consumer = parse_epr(cons_el)
    except EprError as e:
        raise faults.wsnt("SubscribeCreationFailedFault", f"ConsumerReference: {e}") from None
    filter_el = child(el, ns.q(ns.WSNT, "Filter"))
    pf = parse_filter(filter_el, ts)

    raw = False
    policy_el = child(el, ns.q(ns.WSNT, "SubscriptionPolicy"))
    if policy_el is not None:
        unrecognized: list[tuple[str, str]] = []
        for p in elements(policy_el):
            if p.tag == ns.q(ns.WSNT, "UseRaw"):
                raw = True
            else:
                qn = etree.QName(p)
                unrecognized.append((qn.namespace or "", qn.localname))
        if unrecognized:
            names = ", ".join(f"{{{u}}}{n}" for u, n in unrecognized)
            raise faults.unrecognized_policy(
                f"subscription policy not recognized: {names}; only wsnt:UseRaw is", unrecognized
            )
    if raw and consumer_is_pullpoint:
        # A PullPoint stores wsnt:NotificationMessage elements (§5.1): raw has no place there.
        raise faults.unsupported_policy(
            "wsnt:UseRaw cannot be honoured for a consumer that is one of this broker's pull "
            "points (pull points hold wrapped NotificationMessages)",
            [(ns.WSNT, "UseRaw")],
        )
    if raw and not cfg.raw_delivery:
        raise faults.unsupported_policy(
            "raw delivery (wsnt:UseRaw) is disabled on this broker (--no-raw-delivery)",
            [(ns.WSNT, "UseRaw")],
        )
    if not raw and not cfg.wrapped_delivery:
        raise faults.wsnt(
            "NotifyMessageNotSupportedFault",
            "this broker is configured for raw delivery only (--no-wrapped-delivery): "
            "add <wsnt:UseRaw/> to the SubscriptionPolicy",
        )
    itt = child(el, ns.q(ns.WSNT, "InitialTerminationTime"))
    term = resolve_termination(
        itt,
        now,
        cfg.default_termination,
        cfg.min_termination,
        cfg.max_termination,
        "UnacceptableInitialTerminationTimeFault",
        "InitialTerminationTime",
    )
    return SubscribeRequest(
        consumer,
        pf,
        etree.tostring(filter_el, encoding="unicode") if filter_el is not None else None,
        raw,
        etree.tostring(policy_el, encoding="unicode") if policy_el is not None else None,
        term,
    )


def termination_element(local_ns: str, local: str, t: datetime | None) -> Element:
    el = etree.Element(ns.q(local_ns, local), nsmap={"xsi": ns.XSI})
    if t is None:
        el.set(ns.q(ns.XSI, "nil"), "true")
    else:
        el.text = format_datetime(t)
    return el


def time_element(local_ns: str, local: str, t: datetime) -> Element:
    el = etree.Element(ns.q(local_ns, local))
    el.text = format_datetime(t)
    return el


#: b-2.xsd SubscriptionManagerRP (ConsumerReference; Filter, SubscriptionPolicy and
#: CreationTime minOccurs=0) + WS-ResourceLifetime CurrentTime/TerminationTime (§6.4.1)
RESOURCE_PROPERTIES = frozenset(
    {
        ns.q(ns.WSNT, "ConsumerReference"),
        ns.q(ns.WSNT, "Filter"),
        ns.q(ns.WSNT, "SubscriptionPolicy"),
        ns.q(ns.WSNT, "CreationTime"),
        ns.q(ns.WSRF_RL, "CurrentTime"),
        ns.q(ns.WSRF_RL, "TerminationTime"),
    }
)


def resource_properties(sub: Subscription, now: datetime) -> list[Element]:
    """§6.4.1 SubscriptionManagerRP (+ WS-ResourceLifetime CurrentTime/TerminationTime)."""
    from gateway.wire.xmlutil import parse_xml

    out: list[Element] = [sub.consumer.to_element(ns.q(ns.WSNT, "ConsumerReference"))]
    if sub.filter_xml:
        out.append(deepcopy(parse_xml(sub.filter_xml.encode())))
    if sub.policy_xml:
        out.append(deepcopy(parse_xml(sub.policy_xml.encode())))
    out.append(time_element(ns.WSNT, "CreationTime", sub.created))
    out.append(time_element(ns.WSRF_RL, "CurrentTime", now))
    out.append(termination_element(ns.WSRF_RL, "TerminationTime", sub.termination))
    return out
