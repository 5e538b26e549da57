"""Dispatch as data: (resource kind, body element) -> operation, one table built at import,
and `resolve`, which finds the resource a request addresses and its operation.

The kinds are the broker itself and its three WS-Resource kinds (docs/design.md "Gateway
URL space"). Each operation names the spec's operation, says whether it needs management
credentials (docs/gateway.md "Security") and is the role's handler itself: every handler
has the signature of gateway.context, `handler(ctx, req, resource)`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lxml import etree

from gateway import manager, notify, producer, pullpoints, registrations
from gateway.context import Context, Reply
from gateway.resource import RES_PATH
from gateway.state import BrokerState
from gateway.wire import faults, ns
from gateway.wire.faults import WsnFault
from gateway.wire.soap import SoapRequest

#: a role's handler: (context, request, the resource or None for the broker) -> reply
Handler = Callable[[Context, SoapRequest, Any], Awaitable[Reply]]

BROKER = "broker"
SUBSCRIPTION = "subscriptions"
PULLPOINT = "pullpoints"
REGISTRATION = "registrations"


@dataclass(frozen=True)
class Operation:
    name: str
    handler: Handler
    manage: bool  # needs management credentials


def _q(namespace: str, local: str) -> str:
    return ns.q(namespace, local)


WSNT, BR, RL, RP = ns.WSNT, ns.BR, ns.WSRF_RL, ns.WSRF_RP
_GET_RP = "GetResourceProperty"

# fmt: off
TABLE: dict[tuple[str, str], Operation] = {
    # NotificationBroker: producer (WS-BaseNotification 1.3 §4), consumer (§3), the
    # PullPoint factory (§5.2) and the publisher registry (WS-BrokeredNotification 1.0 §5.4)
    (BROKER, _q(WSNT, "Notify")): Operation("Notify", notify.notify_broker, False),
    (BROKER, _q(WSNT, "Subscribe")): Operation("Subscribe", producer.subscribe, False),
    (BROKER, _q(WSNT, "GetCurrentMessage")):
        Operation("GetCurrentMessage", producer.get_current_message, False),
    (BROKER, _q(WSNT, "CreatePullPoint")):
        Operation("CreatePullPoint", pullpoints.create_pullpoint, False),
    (BROKER, _q(BR, "RegisterPublisher")):
        Operation("RegisterPublisher", registrations.register_publisher, True),
    (BROKER, _q(RP, _GET_RP)): Operation(_GET_RP, producer.get_resource_property, False),
    # SubscriptionManager (WS-BaseNotification 1.3 §6) and its WS-Resource operations (§6.4)
    (SUBSCRIPTION, _q(WSNT, "Renew")): Operation("Renew", manager.renew, True),
    (SUBSCRIPTION, _q(WSNT, "Unsubscribe")): Operation("Unsubscribe", manager.unsubscribe, True),
    (SUBSCRIPTION, _q(WSNT, "PauseSubscription")):
        Operation("PauseSubscription", manager.pause, True),
    (SUBSCRIPTION, _q(WSNT, "ResumeSubscription")):
        Operation("ResumeSubscription", manager.resume, True),
    (SUBSCRIPTION, _q(RL, "SetTerminationTime")):
        Operation("SetTerminationTime", manager.set_termination, True),
    (SUBSCRIPTION, _q(RL, "Destroy")): Operation("Destroy", manager.destroy, True),
    (SUBSCRIPTION, _q(RP, _GET_RP)): Operation(_GET_RP, manager.get_resource_property, False),
    # PullPoint (WS-BaseNotification 1.3 §5.1)
    (PULLPOINT, _q(WSNT, "GetMessages")): Operation("GetMessages", pullpoints.get_messages, False),
    (PULLPOINT, _q(WSNT, "DestroyPullPoint")):
        Operation("DestroyPullPoint", pullpoints.destroy_pullpoint, True),
    (PULLPOINT, _q(WSNT, "Notify")): Operation("Notify", pullpoints.notify_pullpoint, False),
    (PULLPOINT, _q(RL, "Destroy")): Operation("Destroy", pullpoints.destroy, True),
    # PublisherRegistrationManager (WS-BrokeredNotification 1.0 §6) and its ConsumerReference
    (REGISTRATION, _q(WSNT, "Notify")): Operation("Notify", notify.notify_registration, False),
    (REGISTRATION, _q(BR, "DestroyRegistration")):
        Operation("DestroyRegistration", registrations.destroy_registration, True),
    (REGISTRATION, _q(RL, "SetTerminationTime")):
        Operation("SetTerminationTime", registrations.set_termination, True),
    (REGISTRATION, _q(RL, "Destroy")): Operation("Destroy", registrations.destroy, True),
    (REGISTRATION, _q(RP, _GET_RP)):
        Operation(_GET_RP, registrations.get_resource_property, False),
}
# fmt: on


def resolve(
    state: BrokerState, now: datetime, path: str, req: SoapRequest
) -> tuple[Operation, Any]:
    """The operation for (path, body element) and the resource it addresses (None for the
    broker); raises the fault when there is none: ResourceUnknown for a resource that does
    not exist (or expired), on the broker for a resource's operation; otherwise
    wsa:ActionNotSupported."""
    kind, rid = BROKER, ""
    m = RES_PATH.match(path)
    if m:
        kind, rid = m.group(1), m.group(2)
    elif header_rid := req.wsa.resource_id():
        # design.md: a request to /wsn/broker carrying a resource EPR's edge:ResourceId
        # header is that resource's request (the broker's own EPR has no ResourceId)
        rid = header_rid
        if rid in state.subscriptions:
            kind = SUBSCRIPTION
        elif rid in state.pullpoints:
            kind = PULLPOINT
        elif rid in state.registrations:
            kind = REGISTRATION
        else:
            raise faults.resource_unknown(f"no resource with edge:ResourceId {rid!r}")
    resource: Any = None
    if kind == BROKER:
        where = "the NotificationBroker (/wsn/broker)"
    elif kind == SUBSCRIPTION:
        sub = state.subscriptions.get(rid)
        if sub is None or sub.expired(now):
            raise faults.resource_unknown(f"subscription {rid} does not exist (or expired)")
        resource, where = sub, f"subscription {sub.id}"
    elif kind == PULLPOINT:
        pp = state.pullpoints.get(rid)
        if pp is None:
            raise faults.resource_unknown(f"pull point {rid} does not exist")
        resource, where = pp, f"pull point {pp.id}"
    else:
        reg = state.registrations.get(rid)
        if reg is None or (reg.termination is not None and reg.termination <= now):
            raise faults.resource_unknown(
                f"publisher registration {rid} does not exist (or expired)"
            )
        resource, where = reg, f"publisher registration {reg.id}"
    op = TABLE.get((kind, req.payload.tag))
    if op is None:
        raise _unknown_op(req, where, on_broker=kind == BROKER)
    return op, resource


def _unknown_op(req: SoapRequest, where: str, on_broker: bool) -> WsnFault:
    qn = etree.QName(req.payload)
    if on_broker and qn.namespace in (ns.WSNT, ns.BR, ns.WSRF_RL):
        # a resource's operation sent to the broker without naming the resource: the
        # resource it meant is unknown here (WS-Resource 1.2 §5)
        return faults.resource_unknown(
            f"{qn.localname} is not an operation of {where}; send it to the address of "
            "the resource's EPR (or include its edge:ResourceId header)"
        )
    # the endpoint exists but has no such operation (WS-Addressing 1.0 SOAP Binding §6.4.1)
    return faults.ActionNotSupported(
        f"{where} does not support {{{qn.namespace}}}{qn.localname}"
        + (f" (wsa:Action {req.wsa.action})" if req.wsa.action else ""),
        req.wsa.action,
    )
