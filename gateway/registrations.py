"""The publisher registration role (WS-BrokeredNotification 1.3 §6): RegisterPublisher,
DestroyRegistration and SetTerminationTime on a PublisherRegistrationManager. Parsing a
registration and the device mapping are in gateway.publishers; a Notify posted to a
registration's ConsumerReference is gateway.notify's.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from lxml import etree

from gateway import publishers, subscriptions, topics, wsrf
from gateway.publishers import Registration
from gateway.resource import epoch, new_id
from gateway.storage import AcceptBatch, RegistrationRow, StorageError
from gateway.wire import faults, ns
from gateway.wire.addressing import resource_epr
from gateway.wire.faults import RECEIVER
from gateway.wire.soap import SoapRequest

if TYPE_CHECKING:
    from gateway.broker import NotificationBroker, Reply


async def register_publisher(b: NotificationBroker, req: SoapRequest) -> Reply:
    now = b.clock()
    if len(b.registrations) >= b.cfg.max_registrations:
        raise faults.br(
            "PublisherRegistrationRejectedFault",
            f"registration limit reached ({b.cfg.max_registrations})",
            RECEIVER,
        )
    r = publishers.parse_register(req.payload)
    if r.publisher is not None and r.demand:
        why = b.consumer_policy.check(r.publisher.address)
        if why:  # the broker will call this address (demand-based publishing)
            raise faults.br(
                "PublisherRegistrationRejectedFault", why.replace("consumer", "publisher")
            )
    if r.demand and r.publisher is None:
        raise faults.br(
            "PublisherRegistrationRejectedFault",
            "br:Demand=true needs a br:PublisherReference the broker can subscribe to",
        )
    term = subscriptions.resolve_termination(
        r.itt,
        now,
        b.cfg.registration_default_termination,
        b.cfg.min_termination,
        b.cfg.max_termination,
        "UnacceptableInitialTerminationTimeFault",
        "InitialTerminationTime",
    )
    reg = Registration(
        new_id(),
        r.publisher,
        r.topic_specs,
        r.demand,
        now,
        term,
        publishers.device_id_for(r.publisher),
    )
    try:
        publishers.compile_specs(reg)
        # §8.5 validation of the expressions as sent (a final device-topics namespace
        # loaded with --topic-namespace refuses topics it does not define)
        for dialect, text, nsmap in reg.topic_specs:
            topics.compile_expression(
                dialect, text, {k or None: v for k, v in nsmap.items()}
            ).validate(b.ts)
        for t in reg.named_topics:
            # device topics grow under dev:<device_id>/ (design.md) at registration
            if t not in b.ts:
                b.ts.grow(t)
    except topics.TopicError as e:
        raise faults.from_topic_error(e) from None
    try:
        await b.storage.add_registration(
            RegistrationRow(
                reg.id,
                reg.publisher.to_xml() if reg.publisher else None,
                reg.topics_json(),
                reg.demand,
                now.timestamp(),
                epoch(term),
                reg.device_id,
            )
        )
        grown = [(t.namespace, "/".join(t.path)) for t in reg.named_topics]
        if grown:
            await b.storage.accept(AcceptBatch(grown=grown))
    except StorageError as e:
        raise faults.br(
            "PublisherRegistrationFailedFault",
            f"could not store the registration: {e}",
            RECEIVER,
        ) from None
    # A publisher registering again (a device after a reboot) replaces its previous
    # registration, so stale ones do not pile up until they expire and the demand
    # logic follows the new one (design.md, demand-based publishing step 2).
    if reg.publisher is not None:
        for old in [
            o
            for o in b.registrations.values()
            if o.publisher is not None and o.publisher.address == reg.publisher.address
        ]:
            with contextlib.suppress(StorageError):
                await b._destroy_registration(old)
    b.registrations[reg.id] = reg
    b._notify_observers("registration_created", reg)
    b._recompute_demand()
    resp = etree.Element(ns.q(ns.BR, "RegisterPublisherResponse"), nsmap={"br": ns.BR})
    epr = resource_epr(b.urls("registrations", reg.id), reg.id)
    resp.append(epr.to_element(ns.q(ns.BR, "PublisherRegistrationReference")))
    resp.append(epr.to_element(ns.q(ns.BR, "ConsumerReference")))
    return ns.A_REGISTER_RESP, [resp]


async def destroy_registration(b: NotificationBroker, req: SoapRequest, reg: Registration) -> Reply:
    try:
        await b._destroy_registration(reg)
    except StorageError as e:
        raise faults.br(
            "ResourceNotDestroyedFault", f"could not destroy the registration: {e}", RECEIVER
        ) from None
    return ns.A_DESTROY_REG_RESP, [
        etree.Element(ns.q(ns.BR, "DestroyRegistrationResponse"), nsmap={"br": ns.BR})
    ]


async def set_termination(b: NotificationBroker, req: SoapRequest, reg: Registration) -> Reply:
    new, now = wsrf.set_tt_request(b, req)
    try:
        await b.storage.set_registration_termination(reg.id, epoch(new))
    except StorageError as e:
        raise faults.rl("UnableToSetTerminationTimeFault", str(e), RECEIVER) from None
    reg.termination = new
    return wsrf.set_tt_response(b, new, now)
