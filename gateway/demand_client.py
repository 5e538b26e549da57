"""The broker as a SOAP client of a demand-based publisher (gateway.demand): one request
to an endpoint reference, SOAP 1.2 first and SOAP 1.1 for a node that only speaks that, the
answer's body or its fault as an exception."""

from __future__ import annotations

import contextlib
import logging
from urllib.parse import urlsplit

import aiohttp
from lxml import etree

from gateway.wire import ns, soap
from gateway.wire.addressing import Epr, request_headers
from gateway.wire.xmlutil import Element, XmlRejected, child, elements, parse_xml, text_of

log = logging.getLogger("gateway.demand")


class RemoteFault(Exception):
    """The publisher answered with a SOAP fault (or an HTTP error without one)."""

    def __init__(self, name: str, reason: str, status: int) -> None:
        super().__init__(f"{name}: {reason} (HTTP {status})" if reason else f"{name} ({status})")
        self.name = name
        self.reason = reason
        self.status = status

    @property
    def resource_unknown(self) -> bool:
        # WS-ResourceFramework r-2 ResourceUnknownFault: the publisher no longer knows the
        # subscription (rebooted, expired, unsubscribed). A bare 404 at a manager address
        # means the same for publishers that answer without SOAP.
        return self.name == "ResourceUnknownFault" or self.status == 404


class Unreachable(Exception):
    """No usable answer: connection refused, timeout, not SOAP."""


def _fault_of(root: Element) -> tuple[str, str] | None:
    """(name, reason) of a SOAP 1.1/1.2 Fault envelope, else None. The name is the
    WS-BaseFaults detail element's local name, else the SOAP 1.2 subcode or the code."""
    body = child(root, ns.q(ns.SOAP12, "Body"))
    if body is None:
        body = child(root, ns.q(ns.SOAP11, "Body"))
    if body is None:
        return None
    kids = elements(body)
    if not kids or etree.QName(kids[0]).localname != "Fault":
        return None
    f = kids[0]
    detail = child(f, ns.q(ns.SOAP12, "Detail"))
    if detail is None:
        detail = child(f, "detail")
    name = ""
    if detail is not None and elements(detail):
        name = etree.QName(elements(detail)[0]).localname
    if not name:
        for path in (
            f"{{{ns.SOAP12}}}Code/{{{ns.SOAP12}}}Subcode/{{{ns.SOAP12}}}Value",
            f"{{{ns.SOAP12}}}Code/{{{ns.SOAP12}}}Value",
            "faultcode",
        ):
            v = f.find(path)
            if v is not None and text_of(v):
                name = text_of(v).rpartition(":")[2]
                break
    reason = text_of(f.find(f"{{{ns.SOAP12}}}Reason")) or text_of(f.find("faultstring"))
    return name or "Fault", reason


class PublisherClient:
    """The client half of DemandManager: its session, timeout, answer size cap and the
    publishers known to speak only SOAP 1.1 (set by DemandManager)."""

    _session: aiohttp.ClientSession | None
    _soap11: set[str]
    timeout: float
    max_response_bytes: int

    async def _call(self, epr: Epr, action: str, body: Element) -> Element:
        """Send one SOAP request to `epr` (reference parameters as headers, WS-Addressing
        1.0 SOAP binding §2.3) and return the response body's first element; raise
        RemoteFault for a fault, Unreachable when there is no usable answer.

        SOAP 1.2 first; a node that answers VersionMismatch (SOAP 1.1 §4.4.1: a 1.1-only
        node faced with the 1.2 envelope namespace) or HTTP 415 gets SOAP 1.1 from then on
        (remembered per host:port until the broker restarts)."""
        key = urlsplit(epr.address).netloc
        if key not in self._soap11:
            try:
                return await self._call_once(epr, action, body, ns.SOAP12)
            except RemoteFault as f:
                if f.name != "VersionMismatch" and f.status != 415:
                    raise
                log.info("%s does not speak SOAP 1.2 (%s): using SOAP 1.1", key, f)
                self._soap11.add(key)
        return await self._call_once(epr, action, body, ns.SOAP11)

    async def _call_once(self, epr: Epr, action: str, body: Element, version: str) -> Element:
        if self._session is None:
            raise Unreachable("demand manager not started")
        data = soap.envelope(version, request_headers(epr, action), [body])
        headers = {"Content-Type": soap.content_type(version, action)}
        if version == ns.SOAP11:
            headers["SOAPAction"] = f'"{action}"'
        try:
            async with self._session.post(
                epr.address,
                data=data,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                allow_redirects=False,
            ) as resp:
                status = resp.status
                raw = bytearray()
                async for chunk in resp.content.iter_chunked(16384):
                    raw += chunk
                    if len(raw) > self.max_response_bytes:
                        raise Unreachable(
                            f"answer from {epr.address} exceeds {self.max_response_bytes} bytes"
                        )
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as e:
            raise Unreachable(f"{epr.address}: {type(e).__name__}: {e}") from None
        root: Element | None = None
        if raw.strip():
            with contextlib.suppress(XmlRejected, ValueError):
                root = parse_xml(bytes(raw))
        if root is None or etree.QName(root).localname != "Envelope":
            if 200 <= status < 300 and not raw.strip():
                return etree.Element(ns.q(ns.WSNT, "Empty"))
            if status >= 400 and status != 404 and status < 500:
                raise RemoteFault(
                    f"HTTP {status}", bytes(raw[:200]).decode(errors="replace"), status
                )
            if status == 404:
                raise RemoteFault("HTTP 404", "not found", 404)
            raise Unreachable(f"{epr.address}: HTTP {status} without a SOAP envelope")
        fault = _fault_of(root)
        if fault is not None:
            raise RemoteFault(fault[0], fault[1], status)
        if not 200 <= status < 300:
            raise RemoteFault(f"HTTP {status}", "", status)
        b = child(root, ns.q(etree.QName(root).namespace or "", "Body"))
        kids = elements(b) if b is not None else []
        if not kids:
            return etree.Element(ns.q(ns.WSNT, "Empty"))
        return kids[0]
