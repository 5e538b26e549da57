"""What follows the broker's state from outside it (observers of gateway.state, added by
gateway.app): the delivery queues, and the publisher observers of demand-based publishing
and of the landing zone's device ids (gateway.publishers.PublisherObserver)."""

from __future__ import annotations

from gateway import lifecycle as lc
from gateway import quotas
from gateway.delivery import DeliveryManager, Target
from gateway.lifecycle import Phase
from gateway.metrics import Counts
from gateway.publishers import PublisherObserver
from gateway.quotas import Quotas
from gateway.state import (
    BrokerState,
    DemandChanged,
    Event,
    PullPointChanged,
    RegistrationChanged,
    SubscriptionChanged,
)
from gateway.storage_rows import Snapshot


class DeliveryQueues:
    """Keeps one delivery queue per push subscription (not for those whose consumer is a
    pull point): made when it is created or restored, paused and resumed with it, removed
    with its pending messages when it ends."""

    def __init__(self, delivery: DeliveryManager) -> None:
        self.delivery = delivery

    def __call__(self, event: Event) -> None:
        if not isinstance(event, SubscriptionChanged) or event.subscription.pullpoint:
            return
        sub, step = event.subscription, event.step
        if step.target is Phase.ENDED:
            self.delivery.remove(sub.id)
        elif step is lc.SUBSCRIBE or step is lc.RESTORE_SUBSCRIPTION:
            self.delivery.add(Target(sub.id, sub.consumer, sub.raw, sub.soap), paused=sub.paused)
        elif step is lc.PAUSE or step is lc.RESUME:
            self.delivery.set_paused(sub.id, sub.paused)


class Publishers:
    """Tells a PublisherObserver of registrations created or restored, ended (for any
    reason, expiry included) and of demand changes."""

    def __init__(self, observer: PublisherObserver) -> None:
        self.observer = observer

    def __call__(self, event: Event) -> None:
        if isinstance(event, DemandChanged):
            self.observer.demand_changed(event.registration, event.topic, event.demanded)
        elif isinstance(event, RegistrationChanged):
            if event.step.target is Phase.ENDED:
                self.observer.registration_destroyed(event.registration)
            elif event.step is lc.REGISTER or event.step is lc.RESTORE_REGISTRATION:
                self.observer.registration_created(event.registration)

    def __repr__(self) -> str:
        return f"Publishers({type(self.observer).__name__})"


class QuotaAccount:
    """Gives a subscription's or pull point's quota (and its pull-point bytes) back when it
    ends, for any reason (expiry included). The handlers hold what they create;
    `restore_account` holds what is restored at start."""

    def __init__(self, quotas: Quotas) -> None:
        self.quotas = quotas

    def __call__(self, event: Event) -> None:
        if isinstance(event, SubscriptionChanged) and event.step.target is Phase.ENDED:
            self.quotas.release(quotas.SUBSCRIPTIONS, event.subscription.id)
        elif isinstance(event, PullPointChanged) and event.step.target is Phase.ENDED:
            self.quotas.release(quotas.PULLPOINTS, event.pullpoint.id)
            self.quotas.release(quotas.PULLPOINT_BYTES, event.pullpoint.id)


def restore_account(q: Quotas, snap: Snapshot, state: BrokerState) -> None:
    """Hold, under the client address stored with each, the subscriptions, pull points (and
    their messages' bytes) and Notify-grown topics restored at start: a client's quota does
    not start again at a restart. Rows of an older gateway are held under "" (no client,
    gateway/storage_schema.py); a topic grown by a registration (client NULL) under none."""
    for row in snap.subscriptions:
        if row.id in state.subscriptions:
            q.hold(quotas.SUBSCRIPTIONS, row.client, row.id)
    for pp_id, (client, held) in snap.pullpoint_owners.items():
        if pp_id in state.pullpoints:
            q.hold(quotas.PULLPOINTS, client, pp_id)
            q.hold(quotas.PULLPOINT_BYTES, client, pp_id, held)
    for (tns, path), grower in snap.grown_by.items():
        if grower is not None:
            q.hold(quotas.TOPICS, grower, quotas.topic_key(tns, path))


class PullCounts:
    """Forgets what a subscription delivered into its pull point (Counts.into_pullpoints,
    for gateway.status) when it ends."""

    def __init__(self, counts: Counts) -> None:
        self.counts = counts

    def __call__(self, event: Event) -> None:
        if (
            isinstance(event, SubscriptionChanged)
            and event.subscription.pullpoint
            and event.step.target is Phase.ENDED
        ):
            self.counts.into_pullpoints.pop(event.subscription.id, None)
            self.counts.into_pullpoints_last.pop(event.subscription.id, None)
