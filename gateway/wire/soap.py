"""SOAP 1.1 and 1.2 envelopes: parsing a request (with the hardened parser) and building
responses and faults in the version the request used."""

from __future__ import annotations

from dataclasses import dataclass

from lxml import etree

from gateway.wire import ns
from gateway.wire.addressing import Addressing, parse_headers, response_headers
from gateway.wire.faults import RECEIVER, SENDER, WsnFault
from gateway.wire.xmlutil import Element, XmlRejected, child, elements, parse_xml

CT_SOAP11 = "text/xml; charset=utf-8"
CT_SOAP12 = "application/soap+xml; charset=utf-8"


class NotSoap(ValueError):
    """Not a SOAP message at all: the HTTP binding answers 400 with str(e)."""


class SoapFault(Exception):
    """A SOAP-level fault (VersionMismatch, MustUnderstand, malformed body...)."""

    def __init__(
        self, code: str, reason: str, version: str = ns.SOAP11, subcode: str | None = None
    ):
        super().__init__(reason)
        self.code = code  # "Sender" | "Receiver" | "VersionMismatch" | "MustUnderstand"
        self.reason = reason
        self.version = version
        self.subcode = subcode


@dataclass
class SoapRequest:
    version: str  # ns.SOAP11 or ns.SOAP12
    envelope: Element
    header: Element | None
    body: Element
    payload: Element  # first element child of Body: dispatch key
    wsa: Addressing
    #: the client's address (the transport sets it; "" when unknown): for its quotas
    client: str = ""


def parse_request(data: bytes, version_hint: str = ns.SOAP11) -> SoapRequest:
    """`version_hint`: the SOAP version the Content-Type names, for faults about a body
    whose envelope cannot be read."""
    try:
        root = parse_xml(data)
    except XmlRejected as e:
        if e.well_formed:
            # A well-formed envelope breaking a rule (a DTD smuggled in): answer as SOAP;
            # the envelope may start after a DTD of any length, so look at the whole body
            if ns.SOAP12.encode() in data:
                version = ns.SOAP12
            elif ns.SOAP11.encode() in data:
                version = ns.SOAP11
            else:
                version = version_hint
            raise SoapFault(SENDER, str(e), version) from None
        raise NotSoap(f"request body is not XML: {e}") from None
    qn = etree.QName(root)
    if qn.localname != "Envelope":
        raise NotSoap(
            f"not a SOAP envelope: root element is {{{qn.namespace}}}{qn.localname}; "
            "send a SOAP 1.1 or 1.2 Envelope"
        )
    if qn.namespace not in (ns.SOAP11, ns.SOAP12):
        raise SoapFault("VersionMismatch", f"unknown SOAP envelope namespace {qn.namespace!r}")
    version = qn.namespace
    header = child(root, ns.q(version, "Header"))
    body = child(root, ns.q(version, "Body"))
    if body is None:
        raise SoapFault(SENDER, "SOAP envelope has no Body", version)
    kids = elements(body)
    if not kids:
        raise SoapFault(SENDER, "SOAP Body is empty: nothing to do", version)
    wsa = parse_headers(header)
    _check_must_understand(header, version)
    return SoapRequest(version, root, header, body, kids[0], wsa)


_UNDERSTOOD = {ns.WSA, ns.WSA2004, ns.EDGE}


def _check_must_understand(header: Element | None, version: str) -> None:
    if header is None:
        return
    mu_attr = ns.q(version, "mustUnderstand")
    for h in elements(header):
        if h.get(mu_attr) in ("1", "true") and etree.QName(h).namespace not in _UNDERSTOOD:
            if h.get(ns.q(ns.WSA, "IsReferenceParameter")) in ("true", "1"):
                continue
            raise SoapFault(
                "MustUnderstand",
                f"header {h.tag} is marked mustUnderstand but this broker does not process it",
                version,
            )


def envelope(version: str, headers: list[Element], body_children: list[Element]) -> bytes:
    env = etree.Element(ns.q(version, "Envelope"), nsmap={"s": version, "wsa": ns.WSA})
    if headers:
        h = etree.SubElement(env, ns.q(version, "Header"))
        for x in headers:
            h.append(x)
    b = etree.SubElement(env, ns.q(version, "Body"))
    for x in body_children:
        b.append(x)
    return bytes(etree.tostring(env, xml_declaration=True, encoding="utf-8"))


_BODY_MARK = etree.QName(ns.EDGE, "BodyPlaceholder").text


def envelope_with_body(version: str, headers: list[Element], body_xml: str) -> bytes:
    """`envelope` whose Body holds `body_xml`, serialized elements (each with the namespace
    declarations it needs), spliced in as text: messages the broker stored serialized are
    sent without parsing them again."""
    mark = etree.Element(_BODY_MARK, nsmap={"edge": ns.EDGE})
    mark_xml = etree.tostring(mark)  # before it is in the tree (then it would list s, wsa)
    data = envelope(version, headers, [mark])
    # the placeholder is the document's last element: the last occurrence is it, whatever
    # the headers (reference parameters chosen by a subscriber) contain
    head, sep, tail = data.rpartition(mark_xml)
    assert sep, "placeholder not found in the serialized envelope"
    return head + body_xml.encode("utf-8") + tail


def content_type(version: str, action: str | None = None) -> str:
    if version == ns.SOAP12:
        return CT_SOAP12 + (f'; action="{action}"' if action else "")
    return CT_SOAP11


def response(req: SoapRequest, action: str, body_children: list[Element]) -> bytes:
    return envelope(req.version, response_headers(req.wsa, action), body_children)


def fault_envelope(
    version: str,
    wsa: Addressing | None,
    code: str,
    reason: str,
    action: str,
    detail: Element | None = None,
    subcode: str | None = None,
) -> bytes:
    """A SOAP Fault. SOAP 1.2 codes: Sender/Receiver/VersionMismatch/MustUnderstand;
    SOAP 1.1 maps Sender->Client and Receiver->Server."""
    if version == ns.SOAP12:
        f = etree.Element(ns.q(version, "Fault"))
        c = etree.SubElement(f, ns.q(version, "Code"))
        etree.SubElement(c, ns.q(version, "Value")).text = f"s:{code}"
        if subcode:
            sc = etree.SubElement(c, ns.q(version, "Subcode"))
            sq = etree.QName(subcode)
            # the QName's prefix is declared on the element that carries it; wsa is declared
            # on the Envelope already (lxml would drop a second declaration of it)
            if sq.namespace == ns.WSA:
                v = etree.SubElement(sc, ns.q(version, "Value"))
                v.text = f"wsa:{sq.localname}"
            else:
                v = etree.SubElement(sc, ns.q(version, "Value"), nsmap={"sub": sq.namespace})
                v.text = f"sub:{sq.localname}"
        r = etree.SubElement(f, ns.q(version, "Reason"))
        t = etree.SubElement(r, ns.q(version, "Text"))
        t.set(ns.q(ns.XML_NS, "lang"), "en")
        t.text = reason
        if detail is not None:
            etree.SubElement(f, ns.q(version, "Detail")).append(detail)
    else:
        f = etree.Element(ns.q(version, "Fault"))
        code11 = "s:" + {SENDER: "Client", RECEIVER: "Server"}.get(code, code)
        headers = response_headers(wsa, action)
        if subcode and etree.QName(subcode).namespace == ns.WSA:
            # WS-Addressing 1.0 SOAP Binding §6 (SOAP 1.1): the subcode is the faultcode and
            # the detail travels in a wsa:FaultDetail header (it is not about the Body)
            code11 = "wsa:" + etree.QName(subcode).localname
            if detail is not None:
                fd = etree.Element(ns.q(ns.WSA, "FaultDetail"), nsmap={"wsa": ns.WSA})
                fd.append(detail)
                headers.append(fd)
                detail = None
        etree.SubElement(f, "faultcode").text = code11
        etree.SubElement(f, "faultstring").text = reason
        if detail is not None:
            etree.SubElement(f, "detail").append(detail)
        return envelope(version, headers, [f])
    return envelope(version, response_headers(wsa, action), [f])


def wsn_fault(version: str, wsa: Addressing | None, fault: WsnFault) -> bytes:
    return fault_envelope(
        version,
        wsa,
        fault.code,
        fault.description,
        fault.action,
        fault.detail_element(),
        fault.qname,
    )


def http_status_for(version: str, code: str) -> int:
    # SOAP 1.2 part 2 §7.5.1.2: env:Sender -> 400, others 500; SOAP 1.1 faults are 500.
    if version == ns.SOAP12 and code in (SENDER, "VersionMismatch", "MustUnderstand"):
        return 400 if code == SENDER else 500
    return 500
