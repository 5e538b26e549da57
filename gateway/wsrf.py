"""WS-Resource operations shared by the broker's resources: WS-ResourceLifetime 1.2
SetTerminationTime (§5.2) request and response, Destroy (§4.1, immediate termination) and
WS-ResourceProperties 1.2 GetResourceProperty (§5.2). The operations themselves are the
roles' (gateway.manager, gateway.registrations, gateway.producer); no state here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime

from lxml import etree

from gateway import subscriptions
from gateway.config import Config
from gateway.context import Reply
from gateway.wire import faults, ns
from gateway.wire.faults import WsnFault
from gateway.wire.soap import SoapRequest
from gateway.wire.xmlutil import (
    Element,
    child,
    format_datetime,
    parse_datetime,
    parse_duration,
    text_of,
)


def set_tt_request(
    cfg: Config, req: SoapRequest, now: datetime
) -> tuple[datetime | None, datetime]:
    """WS-ResourceLifetime 1.2 §5.2 SetTerminationTime: RequestedTerminationTime
    (dateTime | nil) or RequestedLifetimeDuration. -> (the new termination, `now`)."""
    rt = child(req.payload, ns.q(ns.WSRF_RL, "RequestedTerminationTime"))
    rd = child(req.payload, ns.q(ns.WSRF_RL, "RequestedLifetimeDuration"))
    hi = now + cfg.max_termination if cfg.max_termination else None
    try:
        if rt is not None:
            if rt.get(ns.q(ns.XSI, "nil")) in ("true", "1"):
                if hi is not None:
                    raise ValueError("infinite lifetime is not allowed on this broker")
                return None, now
            t = parse_datetime(text_of(rt))
        elif rd is not None:
            t = now + parse_duration(text_of(rd))
        else:
            raise ValueError("neither RequestedTerminationTime nor RequestedLifetimeDuration given")
    except ValueError as e:
        raise faults.rl("UnableToSetTerminationTimeFault", str(e)) from None
    if t <= now or (hi is not None and t > hi):
        raise faults.rl(
            "TerminationTimeChangeRejectedFault",
            f"termination time {format_datetime(t)} rejected: must be in the future"
            + (f" and not after {format_datetime(hi)}" if hi else ""),
        )
    return t, now


def set_tt_response(new: datetime | None, now: datetime) -> Reply:
    resp = etree.Element(
        ns.q(ns.WSRF_RL, "SetTerminationTimeResponse"), nsmap={"wsrf-rl": ns.WSRF_RL}
    )
    resp.append(subscriptions.termination_element(ns.WSRF_RL, "NewTerminationTime", new))
    resp.append(subscriptions.time_element(ns.WSRF_RL, "CurrentTime", now))
    return ns.A_SET_TT_RESP, [resp]


async def destroyed(op: Callable[[], Awaitable[object]]) -> Reply:
    """WS-ResourceLifetime 1.2 §4.1 Destroy, which WS-BaseNotification 1.3 §6.4 and
    WS-BrokeredNotification 1.0 §6 require of a subscription or registration exposed as a
    WS-Resource: the resource's own destroy operation (`op`), answered as
    wsrf-rl:DestroyResponse; a failure is wsrf-rl:ResourceNotDestroyedFault."""
    try:
        await op()
    except WsnFault as f:
        raise faults.rl("ResourceNotDestroyedFault", f.description, f.code) from None
    resp = etree.Element(ns.q(ns.WSRF_RL, "DestroyResponse"), nsmap={"wsrf-rl": ns.WSRF_RL})
    return ns.A_DESTROY_RESP, [resp]


def get_rp(req: SoapRequest, props: list[Element], declared: frozenset[str]) -> Reply:
    """WS-ResourceProperties 1.2 §5.2: body text is the property's QName. `declared` are
    the properties the resource's RP document declares: one declared with minOccurs=0
    and absent now (a subscription without Filter, an empty topic set) exists and is
    answered with an empty response; only an undeclared QName is
    InvalidResourcePropertyQNameFault."""
    txt = text_of(req.payload)
    prefix, _, local = txt.rpartition(":")
    nsuri = req.payload.nsmap.get(prefix or None)
    if not local or (prefix and nsuri is None):
        raise faults.invalid_rp_qname(f"{txt!r} is not a QName with a declared prefix")
    want = ns.q(nsuri, local) if nsuri else local
    found = [p for p in props if p.tag == want]
    if not found and want not in declared:
        known = sorted(
            {etree.QName(p).localname for p in props} | {etree.QName(d).localname for d in declared}
        )
        raise faults.invalid_rp_qname(
            f"{txt} is not a resource property of this resource (known: {', '.join(known)})"
        )
    resp = etree.Element(
        ns.q(ns.WSRF_RP, "GetResourcePropertyResponse"), nsmap={"wsrf-rp": ns.WSRF_RP}
    )
    for p in found:
        resp.append(p)
    return ns.A_GET_RP_RESP, [resp]
