"""SOAP 1.2 + WS-Addressing 1.0 requests to WS-Notification endpoints, EPRs, and faults
turned into one-line errors a person can act on.

Actions are those of the OASIS WSDLs (bw-2.wsdl, rpw-2.wsdl); a request to an EPR carries
the EPR's reference parameters as SOAP headers (WS-Addressing 1.0 SOAP Binding §2.3), so
brokers that route by reference parameter rather than by URL work too.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field

import aiohttp
from lxml import etree

SOAP12 = "http://www.w3.org/2003/05/soap-envelope"
SOAP11 = "http://schemas.xmlsoap.org/soap/envelope/"
WSA = "http://www.w3.org/2005/08/addressing"
WSNT = "http://docs.oasis-open.org/wsn/b-2"
WSNTW = "http://docs.oasis-open.org/wsn/bw-2"
WSTOP = "http://docs.oasis-open.org/wsn/t-1"
WSRF_RP = "http://docs.oasis-open.org/wsrf/rp-2"
BF = "http://docs.oasis-open.org/wsrf/bf-2"
EDGE = "urn:wsn-edge"  # edge:Wait, the long-poll extension of wsn-edge's GetMessages
ANONYMOUS = WSA + "/anonymous"

A_NOTIFY = WSNTW + "/NotificationConsumer/Notify"
A_SUBSCRIBE = WSNTW + "/NotificationProducer/SubscribeRequest"
A_CREATE_PP = WSNTW + "/CreatePullPoint/CreatePullPointRequest"
A_GET_MESSAGES = WSNTW + "/PullPoint/GetMessagesRequest"
A_DESTROY_PP = WSNTW + "/PullPoint/DestroyPullPointRequest"
A_RENEW = WSNTW + "/SubscriptionManager/RenewRequest"
A_UNSUBSCRIBE = WSNTW + "/SubscriptionManager/UnsubscribeRequest"
A_PAUSE = WSNTW + "/PausableSubscriptionManager/PauseSubscriptionRequest"
A_RESUME = WSNTW + "/PausableSubscriptionManager/ResumeSubscriptionRequest"
A_GET_RP = "http://docs.oasis-open.org/wsrf/rpw-2/GetResourceProperty/GetResourcePropertyRequest"
A_DESTROY_REG = (
    "http://docs.oasis-open.org/wsn/brw-2/PublisherRegistrationManager/DestroyRegistrationRequest"
)
A_DESTROY = "http://docs.oasis-open.org/wsrf/rlw-2/ImmediateResourceTermination/DestroyRequest"
BR = "http://docs.oasis-open.org/wsn/br-2"
WSRF_RL = "http://docs.oasis-open.org/wsrf/rl-2"

#: the WS-Topics 1.3 dialect URIs by their `--dialect` names
DIALECTS = {
    "simple": "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Simple",
    "concrete": "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Concrete",
    "full": "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Full",
    "xpath": "http://www.w3.org/TR/1999/REC-xpath-19991116",
}
XPATH_DIALECT = DIALECTS["xpath"]

Element = etree._Element


class WsnError(Exception):
    """A failure the user can act on; str() is the one line `wsn` prints. `transient`: the
    endpoint could not be reached or answered 502/503/504 (a restart, a network outage):
    worth trying again; `fault`: the local name of the SOAP fault's detail, if one."""

    def __init__(self, line: str, transient: bool = False, fault: str | None = None) -> None:
        super().__init__(line)
        self.transient = transient
        self.fault = fault


def q(ns: str, local: str) -> str:
    return f"{{{ns}}}{local}"


@dataclass
class Epr:
    """A wsa:EndpointReference: the address and the reference parameters to echo."""

    address: str
    reference_parameters: list[Element] = field(default_factory=list)

    @classmethod
    def parse(cls, el: Element) -> Epr:
        addr = (el.findtext(q(WSA, "Address")) or "").strip()
        if not addr:
            raise WsnError("the answer has an EndpointReference without wsa:Address")
        rp = el.find(q(WSA, "ReferenceParameters"))
        params = [c for c in rp if isinstance(c.tag, str)] if rp is not None else []
        return cls(addr, params)

    def to_element(self, tag: str) -> Element:
        el = etree.Element(tag, nsmap={"wsa": WSA})
        etree.SubElement(el, q(WSA, "Address")).text = self.address
        if self.reference_parameters:
            rp = etree.SubElement(el, q(WSA, "ReferenceParameters"))
            for p in self.reference_parameters:
                rp.append(etree.fromstring(etree.tostring(p)))
        return el


@dataclass
class Client:
    """One HTTP session; `authorization` is sent with every request (the gateway asks
    for it on management operations only, other brokers may ask for more)."""

    session: aiohttp.ClientSession
    authorization: str | None = None
    timeout: float = 30.0

    async def call(
        self, target: Epr | str, action: str, body: Element, extra_wait: float = 0.0
    ) -> Element | None:
        """Send `body`; -> the first child of the answer's Body, or None for an empty
        2xx answer (one-way operations). Raises WsnError for faults and HTTP errors."""
        epr = target if isinstance(target, Epr) else Epr(target)
        env = etree.Element(q(SOAP12, "Envelope"), nsmap={"s": SOAP12, "wsa": WSA})
        hdr = etree.SubElement(env, q(SOAP12, "Header"))
        etree.SubElement(hdr, q(WSA, "Action")).text = action
        etree.SubElement(hdr, q(WSA, "MessageID")).text = f"urn:uuid:{uuid.uuid4()}"
        etree.SubElement(hdr, q(WSA, "To")).text = epr.address
        reply_to = etree.SubElement(hdr, q(WSA, "ReplyTo"))
        etree.SubElement(reply_to, q(WSA, "Address")).text = ANONYMOUS
        for p in epr.reference_parameters:
            h = etree.fromstring(etree.tostring(p))
            h.set(q(WSA, "IsReferenceParameter"), "true")
            hdr.append(h)
        etree.SubElement(env, q(SOAP12, "Body")).append(body)
        data = etree.tostring(env, xml_declaration=True, encoding="utf-8")
        headers = {"Content-Type": f'application/soap+xml; charset=utf-8; action="{action}"'}
        if self.authorization:
            headers["Authorization"] = self.authorization
        op = etree.QName(body).localname
        try:
            async with self.session.post(
                epr.address,
                data=data,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.timeout + extra_wait),
                allow_redirects=False,
            ) as r:
                raw = await r.read()
                status, ctype = r.status, r.content_type
        except aiohttp.InvalidURL:
            raise WsnError(
                f"{epr.address!r} is not a URL (expected http://host:port/path)"
            ) from None
        except aiohttp.ClientConnectorError as e:
            raise WsnError(
                f"cannot connect to {epr.address}: {connect_error(e)} "
                "(is it running? is the host:port right?)",
                transient=True,
            ) from None
        except TimeoutError:
            raise WsnError(
                f"{op} to {epr.address}: no answer within {self.timeout + extra_wait:g} s "
                "(--timeout)",
                transient=True,
            ) from None
        except aiohttp.ClientError as e:  # disconnected, reset mid-answer
            raise WsnError(f"{op} to {epr.address} failed: {e}", transient=True) from None
        return _answer(op, epr.address, status, ctype, raw)


def connect_error(e: aiohttp.ClientConnectorError) -> str:
    err = e.os_error.errno
    return os.strerror(err).lower() if err else str(e.os_error or e)


def _answer(op: str, url: str, status: int, ctype: str, raw: bytes) -> Element | None:
    root: Element | None = None
    if raw.strip() and ("xml" in ctype or raw.lstrip().startswith(b"<")):
        try:
            root = etree.fromstring(
                raw, etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
            )
        except etree.XMLSyntaxError:
            root = None
    body = None
    if root is not None:
        b = root.find(q(SOAP12, "Body"))
        if b is None:
            b = root.find(q(SOAP11, "Body"))
        kids = [c for c in b if isinstance(c.tag, str)] if b is not None else []
        body = kids[0] if kids else None
    if body is not None and etree.QName(body).localname == "Fault":
        line = fault_line(body)
        raise WsnError(f"{op} refused by {url}: {line}", fault=line.split(":", 1)[0])
    if status == 401:
        raise WsnError(
            f"{op} at {url} needs credentials (HTTP 401): pass --token TOKEN (or set "
            "WSN_TOKEN) or --user USER --password PASSWORD"
        )
    if not 200 <= status < 300:
        text = raw.decode("utf-8", "replace").strip().splitlines()
        hint = f": {text[0][:200]}" if text else ""
        if status == 404:
            hint += " (wrong path? a broker's address usually ends in /wsn/broker)"
        raise WsnError(f"{op} to {url}: HTTP {status}{hint}", transient=status in (502, 503, 504))
    return body


def fault_line(fault: Element) -> str:
    """`FaultName: reason` of a SOAP 1.2 or 1.1 fault (the WS-BaseFaults detail names the
    fault; the Reason or bf:Description says why)."""
    name = ""
    detail = fault.find(q(SOAP12, "Detail"))
    if detail is None:
        detail = fault.find("detail")
    if detail is not None:
        kids = [c for c in detail if isinstance(c.tag, str)]
        if kids:
            name = etree.QName(kids[0]).localname
            desc = kids[0].findtext(q(BF, "Description"))
            if desc:
                return f"{name}: {' '.join(desc.split())}"
    reason = fault.findtext(f"{q(SOAP12, 'Reason')}/{q(SOAP12, 'Text')}") or fault.findtext(
        "faultstring"
    )
    if not name:
        sub = fault.findtext(f".//{q(SOAP12, 'Subcode')}/{q(SOAP12, 'Value')}")
        name = (sub or fault.findtext(f".//{q(SOAP12, 'Value')}") or "Fault").strip()
    return f"{name}: {' '.join((reason or '').split())}".rstrip(": ")


def expression(tag: str, dialect: str, text: str, nsmap: dict[str, str]) -> Element:
    """`<tag Dialect=...>text</tag>` with the --ns prefixes declared on it."""
    el = etree.Element(tag, nsmap={"wsnt": WSNT, **nsmap})
    el.set("Dialect", dialect)
    el.text = text
    return el


def wsnt(local: str, nsmap: dict[str, str] | None = None) -> Element:
    return etree.Element(q(WSNT, local), nsmap={"wsnt": WSNT, **(nsmap or {})})
