"""The publisher registration role (WS-BrokeredNotification 1.0 §5.4 RegisterPublisher, §6
PublisherRegistrationManager, in their 1.3 form): RegisterPublisher, DestroyRegistration and
the WS-Resource operations of a registration (SetTerminationTime for renewal, Destroy,
GetResourceProperty). Parsing a registration and the device mapping are in
gateway.publishers; a Notify posted to a registration's ConsumerReference is gateway.notify's.
"""

from __future__ import annotations

from collections.abc import Sequence

from lxml import etree

from gateway import publishers, subscriptions, topics, wsrf
from gateway.context import Context, Reply
from gateway.lifecycle import Why
from gateway.publishers import Registration
from gateway.resource import epoch, new_id
from gateway.storage import RegistrationRow, StorageError
from gateway.wire import faults, ns
from gateway.wire.faults import RECEIVER
from gateway.wire.soap import SoapRequest


async def register_publisher(ctx: Context, req: SoapRequest, _broker: None) -> Reply:
    """RegisterPublisher: plan (parse, check, compile), grow the device topics, persist the
    registration with the replaced ones' deletion in one transaction, apply."""
    cfg, state = ctx.cfg, ctx.state
    now = ctx.clock()
    if len(state.registrations) >= cfg.max_registrations:
        raise faults.br(
            "PublisherRegistrationRejectedFault",
            f"registration limit reached ({cfg.max_registrations})",
            RECEIVER,
        )
    r = publishers.parse_register(req.payload)
    if r.publisher is not None and r.demand:
        why = ctx.policy.check(r.publisher.address)
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
        cfg.registration_default_termination,
        cfg.min_termination,
        cfg.max_termination,
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
        # WS-Topics 1.3 §8.5 validation of the expressions as sent (a final device-topics
        # namespace loaded with --topic-namespace refuses topics it does not define)
        for dialect, text, nsmap in reg.topic_specs:
            topics.compile_expression(
                dialect, text, {k or None: v for k, v in nsmap.items()}
            ).validate(state.ts)
        # device topics grow under dev:<device_id>/ (design.md) at registration
        state.grow_topics(sorted(reg.named_topics, key=str))
    except topics.TopicError as e:
        raise faults.from_topic_error(e) from None
    # A publisher registering again (a device after a reboot) gets a new resource and its
    # earlier registration stays one: "A new resource is created regardless of whether the
    # same Publisher has previously registered" (WS-BrokeredNotification 1.0 §5.4; issue
    # 25 defect 1). The stale one does no harm: demand-based publishing follows the newest
    # registration of a publisher and unsubscribes the earlier one's subscriptions at the
    # device (gateway.demand, so the device never pushes twice), and the earlier one ends
    # at its termination time unless its publisher renews or destroys it.
    replaces: list[str] = []
    try:
        await ctx.storage.add_registration(
            RegistrationRow(
                reg.id,
                reg.publisher.to_xml() if reg.publisher else None,
                reg.topics_json(),
                reg.demand,
                now.timestamp(),
                epoch(term),
                reg.device_id,
            ),
            grown=[(t.namespace, "/".join(t.path)) for t in reg.named_topics],
            replaces=replaces,
        )
    except StorageError as e:
        raise faults.br(
            "PublisherRegistrationFailedFault",
            f"could not store the registration: {e}",
            RECEIVER,
        ) from None
    state.add_registration(reg, replaces)
    resp = etree.Element(ns.q(ns.BR, "RegisterPublisherResponse"), nsmap={"br": ns.BR})
    epr = ctx.render.epr("registrations", reg.id)
    resp.append(epr.to_element(ns.q(ns.BR, "PublisherRegistrationReference")))
    resp.append(epr.to_element(ns.q(ns.BR, "ConsumerReference")))
    return ns.A_REGISTER_RESP, [resp]


async def end(ctx: Context, ids: Sequence[str], why: Why) -> None:
    """Persist, then apply, the end of registrations `ids`. Raises StorageError."""
    for rid in ids:
        await ctx.storage.delete_registration(rid)
    ctx.state.end_registrations(ids, why)


async def destroy_registration(ctx: Context, req: SoapRequest, reg: Registration) -> Reply:
    """DestroyRegistration (WS-BrokeredNotification 1.0 §6)."""
    await _end(ctx, reg, Why.DESTROY_REGISTRATION)
    return ns.A_DESTROY_REG_RESP, [
        etree.Element(ns.q(ns.BR, "DestroyRegistrationResponse"), nsmap={"br": ns.BR})
    ]


async def destroy(ctx: Context, req: SoapRequest, reg: Registration) -> Reply:
    """wsrf-rl:Destroy of a registration: DestroyRegistration's work, answered as
    WS-ResourceLifetime's."""
    return await wsrf.destroyed(lambda: _end(ctx, reg, Why.DESTROY))


async def _end(ctx: Context, reg: Registration, why: Why) -> None:
    try:
        await end(ctx, [reg.id], why)
    except StorageError as e:
        raise faults.br(
            "ResourceNotDestroyedFault", f"could not destroy the registration: {e}", RECEIVER
        ) from None


async def set_termination(ctx: Context, req: SoapRequest, reg: Registration) -> Reply:
    """SetTerminationTime on a registration: how a publisher renews it."""
    new, now = wsrf.set_tt_request(ctx.cfg, req, ctx.clock())
    try:
        await ctx.storage.set_registration_termination(reg.id, epoch(new))
    except StorageError as e:
        raise faults.rl("UnableToSetTerminationTimeFault", str(e), RECEIVER) from None
    ctx.state.renew_registration(reg.id, new, now)  # the publisher was seen (/metrics)
    return wsrf.set_tt_response(new, now)


async def get_resource_property(ctx: Context, req: SoapRequest, reg: Registration) -> Reply:
    """GetResourceProperty of the PublisherRegistrationRP."""
    props = publishers.resource_properties(reg, ctx.clock())
    return wsrf.get_rp(req, props, publishers.RESOURCE_PROPERTIES)
