"""Loops between brokers: a notification is never republished to where it came from.

Two gateways subscribed to each other (or a longer ring) would otherwise pass one
Notify around forever. WS-BaseNotification 1.3 has no loop control, so the broker adds
its own, in the `urn:wsn-edge` namespace and without mustUnderstand (a consumer that does
not know it ignores it, SOAP 1.2 part 1 §5.2.3 / SOAP 1.1 §4.2.3):

- `edge:Via` SOAP header on every Notify the broker sends: the space-separated ids of the
  brokers the notifications in it went through (their union, for a batch), this one last.
- A Notify whose `edge:Via` names this broker, or which went through MAX_HOPS brokers, is
  answered as accepted (it was, by this broker, before) but not published again.
- Every answer carries the HTTP header `WSN-Edge-Gateway: <id>`; the delivery manager
  remembers which broker a consumer endpoint is, and the broker does not deliver a
  notification to a consumer that is a broker in its `edge:Via` (so the message does not
  even travel back once a broker has answered once).

The id (not --gateway-id, which names the gateway in landing lines) is a fresh urn:uuid
per process: after a restart a message may go round once more.
"""

from __future__ import annotations

import uuid

from lxml import etree

from gateway.wire import ns
from gateway.wire.xmlutil import Element

VIA = ns.q(ns.EDGE, "Via")
HTTP_HEADER = "WSN-Edge-Gateway"
MAX_HOPS = 8
_MAX_ID_LEN = 128


def new_loop_id() -> str:
    return f"urn:uuid:{uuid.uuid4()}"


def via_of(header: Element | None) -> tuple[str, ...]:
    """The broker ids of the request's edge:Via headers (bounded, first MAX_HOPS*2)."""
    if header is None:
        return ()
    out: list[str] = []
    for h in header:
        if h.tag == VIA:
            out.extend(t for t in (h.text or "").split() if len(t) <= _MAX_ID_LEN)
    return tuple(out[: 2 * MAX_HOPS])


def looped(via: tuple[str, ...], own_id: str) -> str | None:
    """Why a Notify with this edge:Via must not be published again, or None."""
    if own_id in via:
        return "it went through this broker before (edge:Via)"
    if len(set(via)) >= MAX_HOPS:
        return f"it went through {MAX_HOPS} brokers (edge:Via hop limit)"
    return None


def via_header(ids: list[str]) -> Element:
    el = etree.Element(VIA, nsmap={"edge": ns.EDGE})
    el.text = " ".join(dict.fromkeys(ids))  # ordered, without repeats
    return el
