"""Dispatch as data: (resource kind, body element) -> operation, one table built at import.

The kinds are the broker itself and its three WS-Resource kinds (docs/design.md "Gateway
URL space"). Each operation names the spec's operation, says whether it needs management
credentials (docs/gateway.md "Security") and calls its role's handler with the broker, the
request and the resource (the Subscription, PullPoint or Registration; None for the
broker). An element with no entry is answered by `NotificationBroker.resolve`
(ResourceUnknown on the broker for a resource's operation, wsa:ActionNotSupported
otherwise).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway import (
    manager,
    notify,
    producer,
    publishers,
    pullpoints,
    registrations,
    subscriptions,
    wsrf,
)
from gateway.wire import ns
from gateway.wire.soap import SoapRequest

if TYPE_CHECKING:
    from gateway.broker import NotificationBroker, Reply

Handler = Callable[["NotificationBroker", SoapRequest, Any], Awaitable["Reply"]]

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

TABLE: dict[tuple[str, str], Operation] = {
    # NotificationBroker: producer (WS-BaseNotification 1.3 §4), consumer (§3), the
    # PullPoint factory (§5.1) and the publisher registry (WS-BrokeredNotification §6)
    (BROKER, _q(WSNT, "Notify")): Operation(
        "Notify", lambda b, r, _: notify.notify_broker(b, r), False
    ),
    (BROKER, _q(WSNT, "Subscribe")): Operation(
        "Subscribe", lambda b, r, _: producer.subscribe(b, r), False
    ),
    (BROKER, _q(WSNT, "GetCurrentMessage")): Operation(
        "GetCurrentMessage", lambda b, r, _: producer.get_current_message(b, r), False
    ),
    (BROKER, _q(WSNT, "CreatePullPoint")): Operation(
        "CreatePullPoint", lambda b, r, _: pullpoints.create_pullpoint(b, r), False
    ),
    (BROKER, _q(BR, "RegisterPublisher")): Operation(
        "RegisterPublisher", lambda b, r, _: registrations.register_publisher(b, r), True
    ),
    (BROKER, _q(RP, "GetResourceProperty")): Operation(
        "GetResourceProperty",
        lambda b, r, _: wsrf.get_rp(b, r, producer.producer_properties(b), producer.PRODUCER_RP),
        False,
    ),
    # SubscriptionManager (§6) and its WS-Resource operations
    (SUBSCRIPTION, _q(WSNT, "Renew")): Operation(
        "Renew", lambda b, r, s: manager.renew(b, r, s), True
    ),
    (SUBSCRIPTION, _q(WSNT, "Unsubscribe")): Operation(
        "Unsubscribe", lambda b, r, s: manager.unsubscribe(b, r, s), True
    ),
    (SUBSCRIPTION, _q(WSNT, "PauseSubscription")): Operation(
        "PauseSubscription", lambda b, r, s: manager.pause(b, r, s, True), True
    ),
    (SUBSCRIPTION, _q(WSNT, "ResumeSubscription")): Operation(
        "ResumeSubscription", lambda b, r, s: manager.pause(b, r, s, False), True
    ),
    (SUBSCRIPTION, _q(RL, "SetTerminationTime")): Operation(
        "SetTerminationTime", lambda b, r, s: manager.set_termination(b, r, s), True
    ),
    (SUBSCRIPTION, _q(RL, "Destroy")): Operation(
        "Destroy",
        lambda b, r, s: wsrf.destroy(b, lambda: manager.unsubscribe(b, r, s, "Destroy")),
        True,
    ),
    (SUBSCRIPTION, _q(RP, "GetResourceProperty")): Operation(
        "GetResourceProperty",
        lambda b, r, s: wsrf.get_rp(
            b,
            r,
            subscriptions.resource_properties(s, b.clock()),
            subscriptions.RESOURCE_PROPERTIES,
        ),
        False,
    ),
    # PullPoint (§5)
    (PULLPOINT, _q(WSNT, "GetMessages")): Operation(
        "GetMessages", lambda b, r, p: pullpoints.get_messages(b, r, p), False
    ),
    (PULLPOINT, _q(WSNT, "DestroyPullPoint")): Operation(
        "DestroyPullPoint", lambda b, r, p: pullpoints.destroy_pullpoint(b, r, p), True
    ),
    (PULLPOINT, _q(WSNT, "Notify")): Operation(
        "Notify", lambda b, r, p: pullpoints.notify_pullpoint(b, r, p), False
    ),
    # PublisherRegistrationManager (WS-BrokeredNotification §6) and its ConsumerReference
    (REGISTRATION, _q(WSNT, "Notify")): Operation(
        "Notify", lambda b, r, g: notify.notify_registration(b, r, g), False
    ),
    (REGISTRATION, _q(BR, "DestroyRegistration")): Operation(
        "DestroyRegistration", lambda b, r, g: registrations.destroy_registration(b, r, g), True
    ),
    (REGISTRATION, _q(RL, "SetTerminationTime")): Operation(
        "SetTerminationTime", lambda b, r, g: registrations.set_termination(b, r, g), True
    ),
    (REGISTRATION, _q(RL, "Destroy")): Operation(
        "Destroy",
        lambda b, r, g: wsrf.destroy(b, lambda: registrations.destroy_registration(b, r, g)),
        True,
    ),
    (REGISTRATION, _q(RP, "GetResourceProperty")): Operation(
        "GetResourceProperty",
        lambda b, r, g: wsrf.get_rp(
            b,
            r,
            publishers.resource_properties(g, b.clock()),
            publishers.RESOURCE_PROPERTIES,
        ),
        False,
    ),
}
