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

from gateway.wire import ns
from gateway.wire.xmlutil import Element, format_datetime, utcnow

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
        qnames: list[tuple[str, str, str]] | None = None,
    ) -> None:
        super().__init__(description)
        self.namespace = namespace
        self.name = name
        self.description = description
        self.code = code
        self.extra = extra or []
        #: QName-valued detail elements (element local name, value namespace, value local)
        self.qnames = qnames or []
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
        nsmap = {"wsrf-bf": ns.BF, _prefix(self.namespace): self.namespace}
        # QName values need their prefix declared where no serializer will drop it: on
        # the fault element itself (WS-BaseNotification 1.3 UnknownFilter, *Policy).
        for _l, vns, _v in self.qnames:
            if vns and vns not in nsmap.values():
                nsmap[f"q{len(nsmap)}"] = vns
        el = etree.Element(self.qname, nsmap=nsmap)
        etree.SubElement(el, ns.q(ns.BF, "Timestamp")).text = format_datetime(self.timestamp)
        d = etree.SubElement(el, ns.q(ns.BF, "Description"))
        d.set(ns.q(ns.XML_NS, "lang"), "en")
        d.text = self.description
        for x in self.extra:
            el.append(x)
        rev = {v: k for k, v in nsmap.items()}
        for local, vns, value in self.qnames:
            q = etree.SubElement(el, ns.q(self.namespace, local))
            q.text = f"{rev[vns]}:{value}" if vns else value
        return el


def _prefix(namespace: str) -> str:
    for p, u in ns.NSMAP.items():
        if u == namespace:
            return p
    return "f"


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
    q = [("UnknownFilter", u, n) for u, n in unknown]
    return WsnFault(ns.WSNT, "InvalidFilterFault", description, SENDER, qnames=q)


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
    q = [("UnrecognizedPolicy", u, n) for u, n in policies]
    return WsnFault(ns.WSNT, "UnrecognizedPolicyRequestFault", description, SENDER, qnames=q)


def unsupported_policy(description: str, policies: list[tuple[str, str]]) -> WsnFault:
    q = [("UnsupportedPolicy", u, n) for u, n in policies]
    return WsnFault(ns.WSNT, "UnsupportedPolicyRequestFault", description, SENDER, qnames=q)


def br(name: str, description: str, code: str = SENDER) -> WsnFault:
    return WsnFault(ns.BR, name, description, code)


def invalid_rp_qname(description: str) -> WsnFault:
    # WS-ResourceProperties 1.2 §5.2
    return WsnFault(ns.WSRF_RP, "InvalidResourcePropertyQNameFault", description, SENDER)


def rl(name: str, description: str, code: str = SENDER) -> WsnFault:
    return WsnFault(ns.WSRF_RL, name, description, code)


class ActionNotSupported(WsnFault):
    """WS-Addressing 1.0 SOAP Binding §6.4.1 wsa:ActionNotSupported: the endpoint exists but
    does not support this operation. Code Sender, Subcode wsa:ActionNotSupported, fault
    action .../addressing/fault; the detail is wsa:ProblemAction (ws-addr.xsd), not a bf-2
    BaseFault."""

    def __init__(self, description: str, problem_action: str | None) -> None:
        super().__init__(
            ns.WSA, "ActionNotSupported", description, SENDER, action=ns.WSA_FAULT_ACTION
        )
        self.problem_action = problem_action

    def detail_element(self) -> Element:
        el = etree.Element(ns.q(ns.WSA, "ProblemAction"), nsmap={"wsa": ns.WSA})
        if self.problem_action:
            etree.SubElement(el, ns.q(ns.WSA, "Action")).text = self.problem_action
        return el


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
