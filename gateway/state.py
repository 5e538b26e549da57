"""The broker's state and its transitions: subscriptions, pull points, publisher
registrations, the Topic Set's growth, current messages and demand. Pure: no I/O, no
asyncio; it reads time only from the clock it is given.

A caller may rely on:

* the transitions are the public methods below, named after the steps of
  gateway.lifecycle (whose table says which phase each may start from); a handler calls one
  only after what it changes is durable (plan -> persist -> apply), except `grow_topics`,
  which a Notify or RegisterPublisher applies before its plan because the plan depends on
  it (growth is idempotent, and recorded again with every later Notify on the topic);
* every effect a transition has outside the state (delivery queues, pull-point long polls,
  demand-based publishing, the landing zone's device ids, the operator log) goes out as
  events to the observers added with `observe`, in order, after the state has changed: one
  seam, so a recording observer sees everything (tests/gateway/test_state.py);
* demand (which registered topics some active subscription wants) is recomputed after
  every transition that may move it, in one place (`_emit`), and each change is a
  `DemandChanged` event;
* the tables (`subscriptions`, `pullpoints`, `registrations`, `current`) are read-only
  views: change them through the transitions;
* the one thing it logs is an observer's failure (a bug; the other observers are still
  told, the change stands).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType

from gateway import lifecycle as lc
from gateway import topics
from gateway.lifecycle import Phase, Step, Why
from gateway.publishers import Registration
from gateway.subscriptions import Subscription
from gateway.topics.xpath_budget import XPathBudget
from gateway.wire import ns
from gateway.wire.xmlutil import Clock, utcnow

log = logging.getLogger("gateway.state")


@dataclass
class PullPoint:
    """A pull point (WS-BaseNotification 1.3 §5.1): its messages are rows in storage, counted
    here."""

    id: str
    created: datetime
    queued: int = 0
    dropped: int = 0
    #: its last GetMessages (None: not read since it was created or restored; an idle
    #: pull point expires, --pullpoint-idle-expiry)
    read: datetime | None = None

    def idle_since(self) -> datetime:
        return self.read if self.read is not None else self.created


# ---------------------------------------------------------------------------- events
@dataclass(frozen=True, slots=True)
class SubscriptionChanged:
    step: Step
    subscription: Subscription
    why: Why | None = None


@dataclass(frozen=True, slots=True)
class PullPointChanged:
    step: Step
    pullpoint: PullPoint
    why: Why | None = None


@dataclass(frozen=True, slots=True)
class RegistrationChanged:
    step: Step
    registration: Registration
    why: Why | None = None


@dataclass(frozen=True, slots=True)
class DemandChanged:
    """A registered topic of a Demand=true registration gained its first or lost its last
    interested active subscription."""

    registration: Registration
    topic: topics.ConcreteTopic
    demanded: bool


@dataclass(frozen=True, slots=True)
class MessagesArrived:
    """Messages were committed into these pull points."""

    pullpoints: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TopicsGrown:
    topics: tuple[topics.ConcreteTopic, ...]


Changed = SubscriptionChanged | PullPointChanged | RegistrationChanged
Event = Changed | DemandChanged | MessagesArrived | TopicsGrown
Observer = Callable[[Event], None]


@dataclass
class Restored:
    """What storage held at start, as the state's objects (gateway.upkeep builds it)."""

    current: dict[topics.ConcreteTopic, str] = field(default_factory=dict)
    pullpoints: list[PullPoint] = field(default_factory=list)
    registrations: list[Registration] = field(default_factory=list)
    subscriptions: list[Subscription] = field(default_factory=list)


class BrokerState:
    """The state of one broker (module docstring)."""

    def __init__(
        self, ts: topics.TopicSet, clock: Clock = utcnow, xpath: XPathBudget | None = None
    ) -> None:
        self.ts = ts
        self.clock: Clock = clock
        # xpath: where XPath topic expressions not proven linear are judged (topics/index.py)
        self.index: topics.SubscriptionIndex[str] = topics.SubscriptionIndex(ts, xpath)
        self._subs: dict[str, Subscription] = {}
        self._no_topic: set[str] = set()  # subscriptions without a topic filter: every topic
        self._pps: dict[str, PullPoint] = {}
        self._regs: dict[str, Registration] = {}
        #: registrations of devices by publisher address and by device id, rebuilt when
        #: the registrations change (devices_seen)
        self._devices: tuple[dict[str, list[Registration]], dict[str, list[Registration]]]
        self._devices_stale = True
        self._current: dict[topics.ConcreteTopic, str] = {}
        #: (registration id, topic) -> demanded, as last told (DemandChanged)
        self._demand: dict[tuple[str, topics.ConcreteTopic], bool] = {}
        self._observers: list[Observer] = []
        self.subscriptions: Mapping[str, Subscription] = MappingProxyType(self._subs)
        self.pullpoints: Mapping[str, PullPoint] = MappingProxyType(self._pps)
        self.registrations: Mapping[str, Registration] = MappingProxyType(self._regs)
        #: topic -> its current message (WS-BaseNotification 1.3 §4.3 GetCurrentMessage)
        self.current: Mapping[topics.ConcreteTopic, str] = MappingProxyType(self._current)

    # ------------------------------------------------------------------ the seam
    def observe(self, observer: Observer) -> None:
        """Tell `observer` every event from now on (module docstring)."""
        self._observers.append(observer)

    def _emit(self, events: list[Event]) -> None:
        if any(isinstance(e, TopicsGrown) or e.step.moves_demand for e in _changes(events)):
            events.extend(self._demand_changes())
        for e in events:
            for obs in self._observers:
                try:
                    obs(e)
                except Exception:  # one observer's bug must not undo a durable change
                    log.exception("state observer %r failed on %s", obs, type(e).__name__)

    def _demand_changes(self) -> list[Event]:
        """The DemandChanged events since the last call (demand-based publishing)."""
        out: list[Event] = []
        now = self.clock()
        for reg in self._regs.values():
            if not reg.demand:
                continue
            for t in reg.named_topics:
                d = bool(self.wanting(t, now))
                key = (reg.id, t)
                if self._demand.get(key) != d:
                    self._demand[key] = d
                    out.append(DemandChanged(reg, t, d))
        return out

    # ------------------------------------------------------------------ queries
    @staticmethod
    def phase(sub: Subscription) -> Phase:
        return Phase.PAUSED if sub.paused else Phase.ACTIVE

    def wanting(self, topic: topics.ConcreteTopic | None, now: datetime) -> list[Subscription]:
        """Who wants a notification on `topic` now: the active (not paused, not expired)
        subscriptions whose topic expressions all select it (WS-BaseNotification 1.3 §4.2,
        WS-Topics 1.3 §9), in id order; those without a topic filter want every topic.
        Message filters (content, producer properties) are the caller's to apply. `topic`
        is in the Topic Set (`grow_topics` first: an expression selects members only)."""
        cands = set(self._no_topic)
        if topic is not None:
            cands |= self.index.match(topic)
        out = []
        for sid in sorted(cands):
            s = self._subs.get(sid)
            if s is None or s.paused or s.expired(now):
                continue
            exprs = s.topic_exprs
            if (
                topic is not None
                and len(exprs) > 1
                and any(not e.matches(topic, self.ts) for e in exprs[1:])
            ):
                continue
            out.append(s)
        return out

    def has_demand(self, topic: topics.ConcreteTopic) -> bool:
        """True if an active (not paused, not expired) subscription selects `topic`."""
        return bool(self.wanting(topic, self.clock()))

    def feeding(self, pullpoint_id: str) -> list[str]:
        """The subscriptions whose consumer is pull point `pullpoint_id`."""
        return [s.id for s in self._subs.values() if s.pullpoint == pullpoint_id]

    def registrations_of(self, address: str) -> list[Registration]:
        """The registrations whose PublisherReference address is `address`."""
        return [
            r
            for r in self._regs.values()
            if r.publisher is not None and r.publisher.address == address
        ]

    def devices_seen(
        self, sources: Iterable[tuple[str | None, topics.ConcreteTopic | None]], now: datetime
    ) -> None:
        """Messages from these (producer address, topic) were accepted: each registered
        device they are attributed to was seen at `now` (Registration.last_seen, the
        per-device last-seen of /metrics). The attribution is the landing zone's
        (landing_record.RecordBuilder.device_id): the device registered with the producer's
        address, else the device whose id roots a `dev:<id>/...` topic."""
        if self._devices_stale:
            by_address: dict[str, list[Registration]] = {}
            by_device: dict[str, list[Registration]] = {}
            for r in self._regs.values():
                if r.device_id:
                    by_device.setdefault(r.device_id, []).append(r)
                    if r.publisher is not None:
                        by_address.setdefault(r.publisher.address, []).append(r)
            self._devices, self._devices_stale = (by_address, by_device), False
        by_address, by_device = self._devices
        for address, topic in set(sources):
            regs = by_address.get(address) if address is not None else None
            if not regs and topic is not None and topic.namespace == ns.DEVICES_NS and topic.path:
                regs = by_device.get(topic.path[0])
            for r in regs or ():
                r.last_seen = now

    def expired(self, now: datetime) -> tuple[list[str], list[str]]:
        """(subscriptions, registrations) whose TerminationTime is not after `now`."""
        subs = [s.id for s in self._subs.values() if s.expired(now)]
        regs = [
            r.id for r in self._regs.values() if r.termination is not None and r.termination <= now
        ]
        return subs, regs

    # ------------------------------------------------------------------ restore
    def restore_topics(
        self, grown: Iterable[topics.ConcreteTopic]
    ) -> list[tuple[topics.ConcreteTopic, topics.TopicError]]:
        """Grow again the topics grown before a restart (before `restore`: a restored
        subscription's expression is validated against them); those the Topic Set refuses
        now (it was made fixed since, say) are left out and returned with the reason."""
        refused = []
        for t in grown:
            try:
                self.ts.grow(t)
            except topics.TopicError as e:
                refused.append((t, e))
        return refused

    def restore(self, r: Restored) -> None:
        """Load what storage held at start (one transition: demand is computed once)."""
        self._current.update(r.current)
        events: list[Event] = []
        for pp in r.pullpoints:
            lc.RESTORE_PULLPOINT.check(Phase.NEW)
            self._pps[pp.id] = pp
            events.append(PullPointChanged(lc.RESTORE_PULLPOINT, pp))
        for reg in r.registrations:
            lc.RESTORE_REGISTRATION.check(Phase.NEW)
            reg.restored = True
            self._regs[reg.id] = reg
            self._devices_stale = True
            events.append(RegistrationChanged(lc.RESTORE_REGISTRATION, reg))
        for sub in r.subscriptions:
            self._add(sub)
            events.append(SubscriptionChanged(lc.RESTORE_SUBSCRIPTION, sub))
        self._emit(events)

    # ------------------------------------------------------------------ subscriptions
    def _add(self, sub: Subscription) -> None:
        if sub.id in self._subs:
            raise lc.InvalidTransition(f"subscription {sub.id} exists")
        self._subs[sub.id] = sub
        if sub.topic_exprs:
            self.index.add(sub.id, sub.topic_exprs[0])
        else:
            self._no_topic.add(sub.id)

    def _sub(self, sub_id: str, step: Step, why: Why | None = None) -> Subscription:
        sub = self._subs.get(sub_id)
        step.check(Phase.ENDED if sub is None else self.phase(sub), why)
        assert sub is not None
        return sub

    def add_subscription(self, sub: Subscription) -> None:
        """Subscribe (WS-BaseNotification 1.3 §4.2): `sub` is active (or paused, as made)."""
        lc.SUBSCRIBE.check(Phase.NEW)
        self._add(sub)
        self._emit([SubscriptionChanged(lc.SUBSCRIBE, sub)])

    def renew_subscription(self, sub_id: str, termination: datetime | None) -> None:
        """Renew (§6.1.1) or SetTerminationTime: a new TerminationTime (None: never)."""
        sub = self._sub(sub_id, lc.RENEW_SUBSCRIPTION)
        sub.termination = termination
        self._emit([SubscriptionChanged(lc.RENEW_SUBSCRIPTION, sub)])

    def pause_subscription(self, sub_id: str) -> None:
        """PauseSubscription (§6.2.1)."""
        sub = self._sub(sub_id, lc.PAUSE)
        sub.paused = True
        self._emit([SubscriptionChanged(lc.PAUSE, sub)])

    def resume_subscription(self, sub_id: str) -> None:
        """ResumeSubscription (§6.3)."""
        sub = self._sub(sub_id, lc.RESUME)
        sub.paused = False
        self._emit([SubscriptionChanged(lc.RESUME, sub)])

    def end_subscriptions(self, ids: Iterable[str], why: Why) -> None:
        """End the subscriptions `ids` that still exist, for `why` (Why.EXPIRED: expiry)."""
        step = lc.EXPIRE_SUBSCRIPTION if why is Why.EXPIRED else lc.END_SUBSCRIPTION
        self._emit(self._end_subscriptions(ids, step, why))

    def _end_subscriptions(self, ids: Iterable[str], step: Step, why: Why) -> list[Event]:
        events: list[Event] = []
        for sid in ids:
            if sid not in self._subs:
                continue  # ended meanwhile (an Unsubscribe and the sweep, say)
            sub = self._sub(sid, step, why)
            del self._subs[sid]
            if sub.topic_exprs:
                self.index.remove(sid)
            self._no_topic.discard(sid)
            events.append(SubscriptionChanged(step, sub, why))
        return events

    # ------------------------------------------------------------------ pull points
    def add_pullpoint(self, pp: PullPoint) -> None:
        """CreatePullPoint (§5.2)."""
        lc.CREATE_PULLPOINT.check(Phase.ACTIVE if pp.id in self._pps else Phase.NEW)
        self._pps[pp.id] = pp
        self._emit([PullPointChanged(lc.CREATE_PULLPOINT, pp)])

    def destroy_pullpoint(self, pullpoint_id: str, why: Why = Why.DESTROY_PULLPOINT) -> None:
        """DestroyPullPoint (§5.1.4): the pull point and the subscriptions feeding it end."""
        pp = self._pps.get(pullpoint_id)
        lc.DESTROY_PULLPOINT.check(Phase.ENDED if pp is None else Phase.ACTIVE, why)
        assert pp is not None
        events = self._end_subscriptions(
            self.feeding(pullpoint_id), lc.END_SUBSCRIPTION, Why.PULLPOINT_DESTROYED
        )
        del self._pps[pullpoint_id]
        events.append(PullPointChanged(lc.DESTROY_PULLPOINT, pp, why))
        self._emit(events)

    def messages_taken(self, pullpoint_id: str, n: int, when: datetime | None = None) -> None:
        """GetMessages (§5.1.2) removed `n` messages from the pull point (at `when`)."""
        pp = self._pps.get(pullpoint_id)
        if pp is not None:
            pp.queued = max(0, pp.queued - n)
            if when is not None:
                pp.read = when

    def idle_pullpoints(self, before: datetime) -> list[str]:
        """The pull points nobody has read since `before`."""
        return [p.id for p in self._pps.values() if p.idle_since() < before]

    # ------------------------------------------------------------------ notifications
    def grow_topics(self, grown: Sequence[topics.ConcreteTopic]) -> list[topics.ConcreteTopic]:
        """Add the topics the Topic Set lacks (WS-Topics 1.3 §9); returns those that are new.
        Raises topics.TopicError (a fixed set, a final namespace or topic) before adding the
        topic it refuses; those before it stay (module docstring)."""
        new = [t for t in grown if t not in self.ts and self.ts.grow(t)]
        if new:
            self._emit([TopicsGrown(tuple(new))])
        return new

    def notifications_accepted(
        self,
        current: Mapping[topics.ConcreteTopic, str],
        into_pullpoints: Mapping[str, int],
        dropped: Mapping[str, int],
    ) -> None:
        """Notifications were committed: `current` are the topics' new current messages,
        `into_pullpoints` how many went into each pull point and `dropped` how many of its
        oldest its bound dropped (WS-BaseNotification 1.3 §5.1.1)."""
        self._current.update(current)
        arrived = []
        for pid, n in into_pullpoints.items():
            pp = self._pps.get(pid)
            if pp is not None:
                gone = dropped.get(pid, 0)
                pp.queued += n - gone
                pp.dropped += gone
                arrived.append(pid)
        if arrived:
            self._emit([MessagesArrived(tuple(arrived))])

    # ------------------------------------------------------------------ registrations
    def add_registration(self, reg: Registration, replaces: Sequence[str] = ()) -> None:
        """RegisterPublisher (WS-BrokeredNotification 1.0 §5.4); the registrations `replaces`
        (the same publisher's earlier ones) end first (Why.REGISTERED_AGAIN)."""
        lc.REGISTER.check(Phase.ACTIVE if reg.id in self._regs else Phase.NEW)
        events = self._end_registrations(replaces, lc.END_REGISTRATION, Why.REGISTERED_AGAIN)
        self._regs[reg.id] = reg
        self._devices_stale = True
        if reg.last_seen is None:  # registering (again) is a request of the device's own
            reg.last_seen = reg.created
        events.append(RegistrationChanged(lc.REGISTER, reg))
        self._emit(events)

    def renew_registration(
        self, reg_id: str, termination: datetime | None, now: datetime | None = None
    ) -> None:
        """SetTerminationTime on a registration (WS-ResourceLifetime 1.2 §5.2), asked at
        `now` (its publisher was seen then: Registration.last_seen)."""
        reg = self._regs.get(reg_id)
        lc.RENEW_REGISTRATION.check(Phase.ACTIVE if reg is not None else Phase.ENDED)
        assert reg is not None
        reg.termination = termination
        if now is not None:
            reg.last_seen = now
        self._emit([RegistrationChanged(lc.RENEW_REGISTRATION, reg)])

    def registration_seen(self, reg_id: str, now: datetime) -> None:
        """The publisher of `reg_id` sent a Notify to its ConsumerReference (for /status)."""
        reg = self._regs.get(reg_id)
        if reg is not None:
            reg.last_seen = now

    def end_registrations(self, ids: Iterable[str], why: Why) -> None:
        """End the registrations `ids` that still exist, for `why` (Why.EXPIRED: expiry)."""
        step = lc.EXPIRE_REGISTRATION if why is Why.EXPIRED else lc.END_REGISTRATION
        self._emit(self._end_registrations(ids, step, why))

    def _end_registrations(self, ids: Iterable[str], step: Step, why: Why) -> list[Event]:
        events: list[Event] = []
        for rid in ids:
            reg = self._regs.get(rid)
            if reg is None:
                continue
            step.check(Phase.ACTIVE, why)
            del self._regs[rid]
            self._devices_stale = True
            for k in [k for k in self._demand if k[0] == rid]:
                del self._demand[k]
            events.append(RegistrationChanged(step, reg, why))
        return events


def _changes(events: list[Event]) -> list[Changed | TopicsGrown]:
    return [e for e in events if not isinstance(e, DemandChanged | MessagesArrived)]
