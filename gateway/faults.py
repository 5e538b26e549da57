"""WS-BaseFaults (bf-2) for every fault WS-BaseNotification 1.3 §4-6, WS-BrokeredNotification
1.3, WS-Resource and WS-ResourceProperties define, and the mapping of topic-engine errors.

A `WsnFault` carries everything the SOAP layer needs: the fault element's QName, the SOAP
fault code (Sender = the request is wrong, Receiver = the broker could not do it), a
human-readable Description and the type-specific detail elements the schemas define
(UnknownFilter, MinimumTime/MaximumTime, UnrecognizedPolicy/UnsupportedPolicy, ...).
"""

from __future__ import annotations

from datetime import datetime

from lxml import etree

from gateway import ns
from gateway.xmlutil import Element, format_datetime, utcnow

SENDER = "Sender"
RECEIVER = "Receiver"

WSRF_FAULT_ACTION = "http://docs.oasis-open.org/wsrf/fault"


class WsnFault(Exception):
    """A fault the broker answers with; str(e) is the Description."""

    def __init__(
        self,
        namespace: str,
        name: str,
        description: str,
        code: str = SENDER,
        extra: list[Element] | None = None,
        action: str | None = None,
    ) -> None:
        super().__init__(description)
        self.namespace = namespace
        self.name = name
        self.description = description
        self.code = code
        self.extra = extra or []
        if action is None:
            action = (
                WSRF_FAULT_ACTION
                if namespace in (ns.WSRF_R, ns.WSRF_RP, ns.WSRF_RL)
                else ns.WSN_FAULT_ACTION
            )
        self.action = action
        self.timestamp = utcnow()

    @property
    def qname(self) -> str:
        return ns.q(self.namespace, self.name)

    def detail_element(self) -> Element:
        """The bf-2 BaseFaultType-derived element (Timestamp, Description, then the
        extension elements), valid against b-2.xsd / r-2.xsd."""
        el = etree.Element(
            self.qname, nsmap={"wsrf-bf": ns.BF, _prefix(self.namespace): self.namespace}
        )
        etree.SubElement(el, ns.q(ns.BF, "Timestamp")).text = format_datetime(self.timestamp)
        d = etree.SubElement(el, ns.q(ns.BF, "Description"))
        d.set(ns.q(ns.XML_NS, "lang"), "en")
        d.text = self.description
        for x in self.extra:
            el.append(x)
        return el


def _prefix(namespace: str) -> str:
    for p, u in ns.NSMAP.items():
        if u == namespace:
            return p
    return "f"


def _qname_el(parent_ns: str, local: str, value_ns: str, value_local: str) -> Element:
    el = etree.Element(ns.q(parent_ns, local), nsmap={"v": value_ns} if value_ns else None)
    el.text = f"v:{value_local}" if value_ns else value_local
    return el


def _time_el(local: str, t: datetime) -> Element:
    el = etree.Element(ns.q(ns.WSNT, local))
    el.text = format_datetime(t)
    return el


# ---- WS-BaseNotification 1.3 faults ----


def wsnt(name: str, description: str, code: str = SENDER) -> WsnFault:
    return WsnFault(ns.WSNT, name, description, code)


def resource_unknown(description: str) -> WsnFault:
    # WS-Resource 1.2 §5: ResourceUnknownFault
    return WsnFault(ns.WSRF_R, "ResourceUnknownFault", description, SENDER)


def invalid_filter(description: str, unknown: list[tuple[str, str]]) -> WsnFault:
    # §4.2: "The fault MUST include the filter QNames for the filters it did not understand."
    extra = [_qname_el(ns.WSNT, "UnknownFilter", u, n) for u, n in unknown]
    return WsnFault(ns.WSNT, "InvalidFilterFault", description, SENDER, extra)


def unacceptable_itt(description: str, minimum: datetime, maximum: datetime | None) -> WsnFault:
    extra = [_time_el("MinimumTime", minimum)]
    if maximum is not None:
        extra.append(_time_el("MaximumTime", maximum))
    return WsnFault(ns.WSNT, "UnacceptableInitialTerminationTimeFault", description, SENDER, extra)


def unacceptable_tt(description: str, minimum: datetime, maximum: datetime | None) -> WsnFault:
    extra = [_time_el("MinimumTime", minimum)]
    if maximum is not None:
        extra.append(_time_el("MaximumTime", maximum))
    return WsnFault(ns.WSNT, "UnacceptableTerminationTimeFault", description, SENDER, extra)


def unrecognized_policy(description: str, policies: list[tuple[str, str]]) -> WsnFault:
    extra = [_qname_el(ns.WSNT, "UnrecognizedPolicy", u, n) for u, n in policies]
    return WsnFault(ns.WSNT, "UnrecognizedPolicyRequestFault", description, SENDER, extra)


def unsupported_policy(description: str, policies: list[tuple[str, str]]) -> WsnFault:
    extra = [_qname_el(ns.WSNT, "UnsupportedPolicy", u, n) for u, n in policies]
    return WsnFault(ns.WSNT, "UnsupportedPolicyRequestFault", description, SENDER, extra)


def br(name: str, description: str, code: str = SENDER) -> WsnFault:
    return WsnFault(ns.BR, name, description, code)


def invalid_rp_qname(description: str) -> WsnFault:
    # WS-ResourceProperties 1.2 §5.2
    return WsnFault(ns.WSRF_RP, "InvalidResourcePropertyQNameFault", description, SENDER)


def rl(name: str, description: str, code: str = SENDER) -> WsnFault:
    return WsnFault(ns.WSRF_RL, name, description, code)


def from_topic_error(err: Exception) -> WsnFault:
    """Map a gateway.topics error 1:1 onto its WS-BaseNotification fault (topics-api.md)."""
    from gateway import topics

    if isinstance(err, topics.TopicExpressionDialectUnknown):
        name = "TopicExpressionDialectUnknownFault"
    elif isinstance(err, topics.InvalidTopicExpression):
        name = "InvalidTopicExpressionFault"
    elif isinstance(err, topics.TopicNotSupported):
        name = "TopicNotSupportedFault"
    elif isinstance(err, topics.MultipleTopicsSpecified):
        name = "MultipleTopicsSpecifiedFault"
    else:
        name = "InvalidTopicExpressionFault"
    return WsnFault(ns.WSNT, name, str(err) or name, SENDER)
