"""WS-Addressing 1.0: message addressing properties of a request and endpoint references.

Real clients omit headers (no wsa:To, no MessageID) or repeat them; the broker tolerates
both: it dispatches on the SOAP body, takes the first occurrence of a repeated header and
answers on the HTTP back channel.
"""

from __future__ import annotations

import contextlib
import uuid
from copy import deepcopy
from dataclasses import dataclass, field

from lxml import etree

from gateway.wire import ns
from gateway.wire.xmlutil import Element, child, text_of

_RP_ATTR = ns.q(ns.WSA, "IsReferenceParameter")


@dataclass
class Epr:
    """An endpoint reference (wsa:EndpointReferenceType)."""

    address: str
    reference_parameters: list[Element] = field(default_factory=list)
    metadata: Element | None = None

    def resource_id(self) -> str | None:
        for rp in self.reference_parameters:
            if rp.tag == ns.q(ns.EDGE, "ResourceId"):
                return text_of(rp)
        return None

    def to_element(self, tag: str) -> Element:
        el = etree.Element(tag, nsmap={"wsa": ns.WSA})
        etree.SubElement(el, ns.q(ns.WSA, "Address")).text = self.address
        if self.reference_parameters:
            rps = etree.SubElement(el, ns.q(ns.WSA, "ReferenceParameters"))
            for rp in self.reference_parameters:
                rps.append(deepcopy(rp))
        if self.metadata is not None:
            el.append(deepcopy(self.metadata))
        return el

    def to_xml(self) -> str:
        return etree.tostring(
            self.to_element(ns.q(ns.WSA, "EndpointReference")), encoding="unicode"
        )

    @classmethod
    def from_xml(cls, text: str) -> Epr:
        from gateway.wire.xmlutil import parse_xml

        return parse_epr(parse_xml(text.encode()))


def resource_epr(address: str, resource_id: str) -> Epr:
    """The EPR of a broker-created resource: its own URL plus `edge:ResourceId`."""
    rp = etree.Element(ns.q(ns.EDGE, "ResourceId"), nsmap={"edge": ns.EDGE})
    rp.text = resource_id
    return Epr(address, [rp])


class EprError(ValueError):
    pass


def parse_epr(el: Element) -> Epr:
    """Parse any element of wsa:EndpointReferenceType; raise EprError without an Address."""
    addr_el = child(el, ns.q(ns.WSA, "Address"))
    address = text_of(addr_el)
    if addr_el is None or not address:
        raise EprError(f"{etree.QName(el).localname} has no wsa:Address")
    rps_el = child(el, ns.q(ns.WSA, "ReferenceParameters"))
    rps = [deepcopy(c) for c in rps_el if isinstance(c.tag, str)] if rps_el is not None else []
    md = child(el, ns.q(ns.WSA, "Metadata"))
    return Epr(address, rps, deepcopy(md) if md is not None else None)


@dataclass
class Addressing:
    """The message addressing properties of one request."""

    action: str | None = None
    to: str | None = None
    message_id: str | None = None
    relates_to: str | None = None
    reply_to: Epr | None = None
    fault_to: Epr | None = None
    #: header elements that are (or look like) reference parameters, e.g. edge:ResourceId
    reference_parameters: list[Element] = field(default_factory=list)

    def resource_id(self) -> str | None:
        for rp in self.reference_parameters:
            if rp.tag == ns.q(ns.EDGE, "ResourceId"):
                return text_of(rp)
        return None

    @property
    def present(self) -> bool:
        return bool(self.action or self.message_id or self.to)


#: the text-valued message addressing properties (WS-Addressing 1.0 SOAP Binding §2.1),
#: by header tag, in both the 1.0 and the 2004/08 namespace (older stacks: same meaning)
_TEXT_PROPS = {
    ns.q(wsa, local): attr
    for wsa in (ns.WSA, ns.WSA2004)
    for local, attr in (
        ("Action", "action"),
        ("To", "to"),
        ("MessageID", "message_id"),
        ("RelatesTo", "relates_to"),
    )
}
_EPR_PROPS = {
    ns.q(wsa, local): attr
    for wsa in (ns.WSA, ns.WSA2004)
    for local, attr in (("ReplyTo", "reply_to"), ("FaultTo", "fault_to"))
}
_RESOURCE_ID = ns.q(ns.EDGE, "ResourceId")


def parse_headers(header: Element | None) -> Addressing:
    """The addressing properties of a SOAP Header; the first of a repeated one counts.
    Runs once per request: tags are looked up in tables made once, not compared one by
    one against names formatted per header."""
    a = Addressing()
    if header is None:
        return a
    for h in header:
        tag = h.tag
        if not isinstance(tag, str):
            continue
        attr = _TEXT_PROPS.get(tag)
        if attr is not None:
            if not getattr(a, attr):
                setattr(a, attr, text_of(h))
            continue
        attr = _EPR_PROPS.get(tag)
        if attr is not None:
            if getattr(a, attr) is None:
                with contextlib.suppress(EprError):
                    setattr(a, attr, parse_epr(h))
            continue
        if tag == _RESOURCE_ID or h.get(_RP_ATTR) in ("true", "1"):
            a.reference_parameters.append(h)
    return a


#: bw-2.wsdl declares Renew and Unsubscribe in both SubscriptionManager and
#: PausableSubscriptionManager; their default actions differ only in the portType segment.
_BASE_SM = ns.WSNTW + "/SubscriptionManager/"
_PAUSABLE_SM = ns.WSNTW + "/PausableSubscriptionManager/"


def reply_action(request_action: str | None, reply: str) -> str:
    """The wsa:Action of the reply to a request whose handler answered `reply`.

    `reply` is returned unchanged, except for an operation bw-2.wsdl declares in both
    SubscriptionManager and PausableSubscriptionManager (Renew, Unsubscribe): a request that
    used the PausableSubscriptionManager input action gets that portType's output action
    (WS-Addressing 1.0 Metadata §4.4.4), any other request the SubscriptionManager one.
    And the reverse for PauseSubscription and ResumeSubscription, which bw-2.wsdl has only
    in PausableSubscriptionManager while the normative text of WS-BaseNotification 1.3
    §6.2.1 and §6.2.2 gives `.../SubscriptionManager/PauseSubscriptionRequest` (its §1.2:
    the text takes precedence): a request in that form is answered in that form.
    """
    req = str(request_action).strip() if request_action else ""
    if req.startswith(_PAUSABLE_SM) and reply.startswith(_BASE_SM):
        return _PAUSABLE_SM + reply[len(_BASE_SM) :]
    if req.startswith(_BASE_SM) and reply.startswith(_PAUSABLE_SM):
        return _BASE_SM + reply[len(_PAUSABLE_SM) :]
    return reply


def new_message_id() -> str:
    return f"urn:uuid:{uuid.uuid4()}"


def response_headers(req: Addressing | None, action: str) -> list[Element]:
    """wsa:Action, wsa:MessageID, wsa:RelatesTo (and wsa:To anonymous) for a reply."""
    out: list[Element] = []
    act = etree.Element(ns.q(ns.WSA, "Action"), nsmap={"wsa": ns.WSA})
    act.text = action
    out.append(act)
    mid = etree.Element(ns.q(ns.WSA, "MessageID"), nsmap={"wsa": ns.WSA})
    mid.text = new_message_id()
    out.append(mid)
    if req is not None and req.message_id:
        rel = etree.Element(ns.q(ns.WSA, "RelatesTo"), nsmap={"wsa": ns.WSA})
        rel.text = req.message_id
        out.append(rel)
    to = etree.Element(ns.q(ns.WSA, "To"), nsmap={"wsa": ns.WSA})
    to.text = ns.WSA_ANONYMOUS
    out.append(to)
    return out


def request_headers(epr: Epr, action: str) -> list[Element]:
    """Headers for a message the broker sends to `epr` (WS-Addressing 1.0 SOAP binding §2.3:
    each reference parameter becomes a header with wsa:IsReferenceParameter='true')."""
    out: list[Element] = []
    act = etree.Element(ns.q(ns.WSA, "Action"), nsmap={"wsa": ns.WSA})
    act.text = action
    out.append(act)
    to = etree.Element(ns.q(ns.WSA, "To"), nsmap={"wsa": ns.WSA})
    to.text = epr.address
    out.append(to)
    mid = etree.Element(ns.q(ns.WSA, "MessageID"), nsmap={"wsa": ns.WSA})
    mid.text = new_message_id()
    out.append(mid)
    for rp in epr.reference_parameters:
        h = deepcopy(rp)
        h.set(_RP_ATTR, "true")
        out.append(h)
    return out
