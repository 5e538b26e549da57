"""Publisher registration (WS-BrokeredNotification 1.3 RegisterPublisher) and the
PublisherRegistration resource, with the device-namespace mapping of design.md and the
seam for demand-based publishing.

Demand-based publishing (implemented elsewhere, on top of this module): a registration
with `demand=True` is a producer the broker should subscribe to only while some broker
subscriber wants one of its topics. The broker tells every registered `PublisherObserver`
when a registration appears or goes away and when demand for one of its topics changes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Protocol
from urllib.parse import urlsplit

from lxml import etree

from gateway import topics
from gateway.wire import faults, ns
from gateway.wire.addressing import Epr, EprError, parse_epr
from gateway.wire.xmlutil import Element, child, children, format_datetime, text_of


@dataclass
class Registration:
    id: str
    publisher: Epr | None
    #: the registered expressions as sent: (dialect, text, {prefix: ns})
    topic_specs: list[tuple[str, str, dict[str, str]]]
    demand: bool
    created: datetime
    termination: datetime | None
    device_id: str | None
    #: compiled, in the broker's namespace (device topics already mapped)
    exprs: list[topics.TopicExpression] = field(default_factory=list)
    #: concrete broker topics named by single-topic expressions (device topics mapped)
    named_topics: set[topics.ConcreteTopic] = field(default_factory=set)
    #: when it last sent a Notify to its registration address (gateway.status); not stored
    last_seen: datetime | None = None
    #: reloaded from storage at start (observers are told of it again; gateway.oplog logs
    #: it as registration_restored, not as a new registration); not stored
    restored: bool = False

    @cached_property
    def device_ns(self) -> str:
        """The namespace of the device's own topics (device_namespace)."""
        return device_namespace(self.publisher)

    def topics_json(self) -> str:
        return json.dumps(self.topic_specs)

    def allows(self, topic: topics.ConcreteTopic | None, ts: topics.TopicSet) -> bool:
        """May this publisher publish on `topic`? No registered topics = any topic."""
        if not self.topic_specs:
            return True
        if topic is None:
            return False
        if topic in self.named_topics:
            return True
        return any(e.single_topic() is None and e.matches(topic, ts) for e in self.exprs)


class PublisherObserver(Protocol):
    """Seam for demand-based publishing (see module docstring). Calls happen on the event
    loop after the change is durable; implementations must not block."""

    def registration_created(self, reg: Registration) -> None: ...

    def registration_destroyed(self, reg: Registration) -> None: ...

    def demand_changed(
        self, reg: Registration, topic: topics.ConcreteTopic, demanded: bool
    ) -> None: ...


_NCNAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def as_topic_name(raw: str) -> str:
    """A device id usable as a topic name: topic names are NCNames (WS-Topics 1.3 §6), so
    `127.0.0.1-8080` becomes `_127.0.0.1-8080` and characters outside [A-Za-z0-9_.-] `-`."""
    if _NCNAME.match(raw):
        return raw
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", raw)
    return cleaned if _NCNAME.match(cleaned) else "_" + cleaned


def declared_device_id(publisher: Epr | None) -> str | None:
    """The edge:DeviceId in the PublisherReference's wsa:Metadata (as a topic name), if
    any: the one device id that names a device wherever it is reachable."""
    if publisher is not None and publisher.metadata is not None:
        for el in publisher.metadata.iter(ns.q(ns.EDGE, "DeviceId")):
            v = text_of(el)
            if v:
                return as_topic_name(v)
    return None


def device_id_for(publisher: Epr | None) -> str | None:
    """design.md: edge:DeviceId in the PublisherReference's wsa:Metadata, else host-port
    (both made NCNames by as_topic_name)."""
    if publisher is None:
        return None
    declared = declared_device_id(publisher)
    if declared is not None:
        return declared
    try:
        parts = urlsplit(publisher.address)
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    return as_topic_name(f"{parts.hostname}-{port or (443 if parts.scheme == 'https' else 80)}")


def device_namespace(publisher: Epr | None) -> str:
    """design.md: a device's own topic namespace, edge:TopicNamespace in the PublisherReference's
    wsa:Metadata (a device with a topics file in a namespace of its own), else
    urn:wsn-edge:device-topics."""
    if publisher is not None and publisher.metadata is not None:
        for el in publisher.metadata.iter(ns.q(ns.EDGE, "TopicNamespace")):
            v = text_of(el)
            if v and v != ns.DEVICES_NS:
                return v
    return ns.DEVICE_TOPICS_NS


def map_device_topic(
    topic: topics.ConcreteTopic, device_id: str | None, device_ns: str = ns.DEVICE_TOPICS_NS
) -> topics.ConcreteTopic:
    """design.md: a topic of the device's namespace (dt:<t>, urn:wsn-edge:device-topics unless
    the device names its own: Registration.device_ns) becomes dev:<device_id>/<t>
    (urn:wsn-edge:devices)."""
    if device_id and topic.namespace == device_ns:
        return topics.ConcreteTopic(ns.DEVICES_NS, (device_id, *topic.path))
    return topic


def compile_specs(reg: Registration) -> None:
    """(Re)build reg.exprs/reg.named_topics from reg.topic_specs; raises topics.TopicError."""
    reg.exprs = []
    reg.named_topics = set()
    for dialect, text, nsmap in reg.topic_specs:
        e = topics.compile_expression(dialect, text, {k or None: v for k, v in nsmap.items()})
        one = e.single_topic()
        if one is not None:
            mapped = map_device_topic(one, reg.device_id, reg.device_ns)
            reg.named_topics.add(mapped)
            if mapped != one:
                continue  # device topics are known by their mapped name only
        reg.exprs.append(e)


def _xsd_boolean(text: str) -> bool:
    """br:Demand is an xsd:boolean (XML Schema Part 2 §3.2.2: true, false, 1, 0 after
    whitespace collapse); anything else is refused rather than read as false."""
    v = text.strip()
    if v in ("true", "1"):
        return True
    if v in ("false", "0"):
        return False
    raise faults.br(
        "PublisherRegistrationRejectedFault",
        f"br:Demand {v!r} is not an xsd:boolean: send true, false, 1 or 0",
    )


@dataclass
class RegisterRequest:
    publisher: Epr | None
    topic_specs: list[tuple[str, str, dict[str, str]]]
    demand: bool
    itt: Element | None


def parse_register(el: Element) -> RegisterRequest:
    pub_el = child(el, ns.q(ns.BR, "PublisherReference"))
    publisher = None
    if pub_el is not None:
        try:
            publisher = parse_epr(pub_el)
        except EprError as e:
            raise faults.br(
                "PublisherRegistrationRejectedFault", f"PublisherReference: {e}"
            ) from None
    specs: list[tuple[str, str, dict[str, str]]] = []
    for t in children(el, ns.q(ns.BR, "Topic")):
        # the 2004 drafts spell it @dialect: accepted as on wsnt:TopicExpression (compile.py)
        dialect = t.get("Dialect") or t.get("dialect") or ""
        text = text_of(t)
        nsmap = {k or "": v for k, v in t.nsmap.items()}
        try:
            topics.parse_topic_expression_element(t)  # precise dialect/syntax faults now
        except topics.TopicError as e:
            raise faults.from_topic_error(e) from None
        specs.append((dialect, text, nsmap))
    demand_el = child(el, ns.q(ns.BR, "Demand"))
    demand = _xsd_boolean(text_of(demand_el)) if demand_el is not None else False
    itt = child(el, ns.q(ns.BR, "InitialTerminationTime"))
    return RegisterRequest(publisher, specs, demand, itt)


#: WS-BrokeredNotification PublisherRegistrationRP (PublisherReference and Topic are
#: optional) + WS-ResourceLifetime CurrentTime/TerminationTime
RESOURCE_PROPERTIES = frozenset(
    {
        ns.q(ns.BR, "PublisherReference"),
        ns.q(ns.BR, "Topic"),
        ns.q(ns.BR, "Demand"),
        ns.q(ns.BR, "CreationTime"),
        ns.q(ns.WSRF_RL, "CurrentTime"),
        ns.q(ns.WSRF_RL, "TerminationTime"),
    }
)


def resource_properties(reg: Registration, now: datetime) -> list[Element]:
    """br PublisherRegistrationRP (+ WS-ResourceLifetime CurrentTime/TerminationTime)."""
    from gateway.subscriptions import termination_element, time_element

    out: list[Element] = []
    if reg.publisher is not None:
        out.append(reg.publisher.to_element(ns.q(ns.BR, "PublisherReference")))
    for dialect, text, nsmap in reg.topic_specs:
        t = etree.Element(ns.q(ns.BR, "Topic"), nsmap={k: v for k, v in nsmap.items() if k} or None)
        t.set("Dialect", dialect)
        t.text = text
        out.append(t)
    d = etree.Element(ns.q(ns.BR, "Demand"))
    d.text = "true" if reg.demand else "false"
    out.append(d)
    out.append(time_element(ns.BR, "CreationTime", reg.created))
    out.append(time_element(ns.WSRF_RL, "CurrentTime", now))
    out.append(termination_element(ns.WSRF_RL, "TerminationTime", reg.termination))
    return out


def describe(reg: Registration) -> str:
    who = reg.publisher.address if reg.publisher else "anonymous publisher"
    until = format_datetime(reg.termination) if reg.termination else "no expiry"
    return f"registration {reg.id} of {who} ({until})"
