"""NotificationBroker: the broker's state and its transitions (WS-BaseNotification 1.3
producer and consumer, PullPoint factory, WS-BrokeredNotification publisher registry).

It holds the subscriptions, pull points, registrations, Topic Set and current messages,
restores them at start, activates and ends resources, sweeps expired ones, answers "who
wants topic T now" (`wanting`) and tells publisher observers about demand. `resolve`
finds the resource a request addresses and its operation in `gateway.dispatch.TABLE`;
the operations are the role modules' (producer, manager, notify, pullpoints,
registrations, wsrf). The parts it works with (storage, delivery, landing writers) are
built by gateway.app. No HTTP here: the binding (gateway.http) hands over parsed SOAP
requests and gets body elements back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from lxml import etree

from gateway import (
    consumer_policy,
    dedupe,
    dispatch,
    notify,
    oplog,
    publishers,
    subscriptions,
    topics,
)
from gateway.config import Config
from gateway.consumer_policy import ConsumerPolicy
from gateway.delivery import Target
from gateway.publishers import PublisherObserver, Registration
from gateway.pullpoints import PullPoint
from gateway.resource import RES_PATH, from_epoch
from gateway.storage import (
    StorageError,
    SubscriptionRow,
)
from gateway.subscriptions import Subscription
from gateway.wire import faults, ns
from gateway.wire.addressing import Epr
from gateway.wire.faults import WsnFault
from gateway.wire.soap import SoapRequest
from gateway.wire.xmlutil import (
    Clock,
    Element,
    parse_xml,
    utcnow,
)

if TYPE_CHECKING:
    from gateway.app import Parts

log = logging.getLogger("gateway.broker")

#: what a handler returns: (response action, body children); action None = one-way (202)
Reply = tuple[str | None, list[Element]]
Handler = Callable[[SoapRequest], Awaitable[Reply]]


@dataclass
class Op:
    """A resolved operation: the handler and whether it needs management credentials."""

    name: str
    handler: Handler
    manage: bool


class NotificationBroker:
    def __init__(self, cfg: Config, parts: Parts, clock: Clock = utcnow) -> None:
        """`parts` are built by gateway.app.build_parts, the one place that wires them."""
        self.cfg = cfg
        self.clock: Clock = clock
        self.base_url = (cfg.public_url or f"http://{cfg.host}:{cfg.port}").rstrip("/")
        self.consumer_policy: ConsumerPolicy = parts.consumer_policy
        self.loop_id = parts.loop_id  # per process, edge:Via (loops.py)
        self.ts = topics.TopicSet(fixed=cfg.fixed_topic_set)
        for f in cfg.topic_namespace_files:
            self.ts.add_namespace(topics.load_topic_namespace(f.read_bytes()))
        self.xpath = parts.xpath_budget  # XPath not proven linear: off the event loop
        self.index: topics.SubscriptionIndex[str] = topics.SubscriptionIndex(self.ts, self.xpath)
        self.subs: dict[str, Subscription] = {}
        self.no_topic_subs: set[str] = set()
        self.pullpoints: dict[str, PullPoint] = {}
        self.registrations: dict[str, Registration] = {}
        self.current: dict[topics.ConcreteTopic, str] = {}
        self.observers: list[PublisherObserver] = []
        self._demand: dict[tuple[str, topics.ConcreteTopic], bool] = {}
        self._rp_cache: tuple[int, Element] | None = None
        self._subref_xml: dict[str, str] = {}
        self.storage = parts.storage
        self.metrics = parts.metrics
        self.delivery = parts.delivery
        self.delivery.on_dead = self._consumer_dead
        self.landing = parts.landing
        self.landing_parquet = parts.landing_parquet
        self.records = parts.records
        self.add_observer(self.records)  # it keeps the device ids of the registrations
        self._sweeper: asyncio.Task[None] | None = None
        self._stopped = False
        self.accepted = 0
        #: notifications dropped because their topic does not admit them (WS-Topics §6)
        self.inadmissible: Counter[str] = Counter()
        self._logged_topics: set[tuple[topics.ConcreteTopic | None, str]] = set()
        self.looped = 0  # Notify requests not published again (loops.py)
        #: Notify requests answered but not published: accepted before (gateway.dedupe)
        self.duplicates = 0
        #: seen-set keys of the Notify being accepted now -> its accept (gateway.dedupe)
        self.notify_inflight: dict[tuple[str, str], asyncio.Task[None]] = {}

    # ------------------------------------------------------------------ lifecycle
    def set_listening(self, host: str, port: int) -> None:
        """Called by the HTTP binding once bound: fixes the URLs of EPRs."""
        if not self.cfg.public_url:
            h = f"[{host}]" if ":" in host else host
            self.base_url = f"http://{h}:{port}"
        pub = consumer_policy.Target.parse(self.base_url)
        names = [(host, port), ("localhost", port)]
        if not isinstance(pub, str):
            names.append((pub.host, pub.port))
        self.consumer_policy.set_self(port, names)

    async def start(self) -> None:
        self._stopped = False
        self.storage.open()
        snap = self.storage.load()
        for tns, path in snap.grown:
            with contextlib.suppress(topics.TopicError):
                self.ts.grow(topics.ConcreteTopic(tns, tuple(path.split("/"))))
        for tns, path, xml in snap.current:
            self.current[topics.ConcreteTopic(tns, tuple(path.split("/")) if path else ())] = xml
        for pid, created, count in snap.pullpoints:
            self.pullpoints[pid] = PullPoint(pid, from_epoch(created) or self.clock(), queued=count)
        for rr in snap.registrations:
            try:
                reg = Registration(
                    rr.id,
                    Epr.from_xml(rr.publisher) if rr.publisher else None,
                    [(d, t, m) for d, t, m in json.loads(rr.topics)],
                    rr.demand,
                    from_epoch(rr.created) or self.clock(),
                    from_epoch(rr.termination),
                    rr.device_id,
                    restored=True,
                )
                publishers.compile_specs(reg)
                self.registrations[reg.id] = reg
            except Exception:
                log.exception("dropping unreadable registration %s", rr.id)
        await self.delivery.start()
        by_sub: dict[str, list[tuple[int, str]]] = {}
        for m in snap.deliveries:
            by_sub.setdefault(m.owner, []).append((m.seq, notify.stored_message(self, m)))
        unusable: list[str] = []
        for row in snap.subscriptions:
            try:
                sub = self._restore_subscription(row)
            except Exception as e:  # e.g. the topic set was made fixed since
                log.warning("dropping subscription %s that no longer compiles: %s", row.id, e)
                unusable.append(row.id)
                continue
            self._activate(sub)
            for seq, xml in by_sub.get(sub.id, []):
                self.delivery.enqueue(sub.id, seq, xml)
        if unusable:
            seqs = [seq for sid in unusable for seq, _x in by_sub.get(sid, [])]
            await self.storage.delete_subscriptions(unusable, seqs)
        if self.landing is not None:
            self.landing.recover()
            self.landing.start()
        if self.landing_parquet is not None:
            self.landing_parquet.recover()
            await self.landing_parquet.start()
        self._sweeper = asyncio.create_task(self._sweep_loop(), name="expiry-sweeper")
        for reg in self.registrations.values():
            self._notify_observers("registration_created", reg)
        self._recompute_demand()

    async def stop(self) -> None:
        """Stop sweeping, delivery and the landing writers, then close storage. Safe to call
        again: a second call (a test's own stop, then its fixture's) does nothing."""
        if self._stopped:
            return
        self._stopped = True
        # first: an accept whose handler was cancelled (the server's shutdown) still
        # commits or fails, and updates the queues and landing writers, before they stop
        await dedupe.settle(self)
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for pp in self.pullpoints.values():
            pp.signal()
        await self.delivery.stop()
        if self.landing is not None:
            await self.landing.stop()
        if self.landing_parquet is not None:
            await self.landing_parquet.stop()
        self.records.close()
        self.storage.close()

    def _restore_subscription(self, row: SubscriptionRow) -> Subscription:
        pf = subscriptions.parse_filter(
            parse_xml(row.filter.encode()) if row.filter else None, self.ts
        )
        return Subscription(
            id=row.id,
            consumer=Epr.from_xml(row.consumer),
            raw=row.raw,
            created=from_epoch(row.created) or self.clock(),
            termination=from_epoch(row.termination),
            paused=row.paused,
            pullpoint=row.pullpoint,
            filter_xml=row.filter,
            policy_xml=row.policy,
            topic_exprs=pf.topic_exprs,
            content=pf.content,
            producer=pf.producer,
            dialect=row.dialect or topics.CONCRETE,
            soap=row.soap or ns.SOAP12,
        )

    def _activate(self, sub: Subscription) -> None:
        self.subs[sub.id] = sub
        if sub.topic_exprs:
            self.index.add(sub.id, sub.topic_exprs[0])
        else:
            self.no_topic_subs.add(sub.id)
        if sub.pullpoint is None:
            self.delivery.add(Target(sub.id, sub.consumer, sub.raw, sub.soap), paused=sub.paused)

    def _deactivate(self, sub_id: str) -> Subscription | None:
        sub = self.subs.pop(sub_id, None)
        if sub is None:
            return None
        if sub.topic_exprs:
            self.index.remove(sub_id)
        self.no_topic_subs.discard(sub_id)
        self.delivery.remove(sub_id)
        return sub

    async def _destroy_subscriptions(self, ids: list[str]) -> None:
        # the rows queued now go in the same transaction; any committed after it are
        # deleted when the queue is removed (DeliveryManager.remove) or skipped (enqueue)
        seqs = [seq for i in ids for seq in self.delivery.pending_seqs(i)]
        await self.storage.delete_subscriptions(ids, seqs)
        for i in ids:
            self._deactivate(i)
        self._recompute_demand()

    async def _consumer_dead(self, sub_id: str) -> None:
        with contextlib.suppress(StorageError):
            await self._destroy_subscriptions([sub_id])
            oplog.event("subscription_ended", "subscription ended", subscription=sub_id,
                        reason="consumer dead")  # fmt: skip

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.sweep_interval)
            try:
                await self.sweep()
            except Exception:
                log.exception("expiry sweep failed; retrying")

    async def sweep(self) -> None:
        """Destroy subscriptions and registrations whose TerminationTime has passed
        (WS-BaseNotification 1.3 §6.1: a paused subscription is destroyed too)."""
        now = self.clock()
        dead = [s.id for s in self.subs.values() if s.expired(now)]
        if dead:
            await self._destroy_subscriptions(dead)
            for sid in dead:
                oplog.event("subscription_expired", "subscription expired", subscription=sid)
        for reg in [
            r for r in self.registrations.values() if r.termination and r.termination <= now
        ]:
            await self._destroy_registration(reg)

    # ------------------------------------------------------------------ dispatch
    def urls(self, kind: str, rid: str) -> str:
        return f"{self.base_url}/wsn/{kind}/{rid}"

    def resolve(self, path: str, req: SoapRequest) -> Op:
        """Find the operation for (path, body element); raise a fault if there is none."""
        tag = req.payload.tag
        kind, rid = "broker", ""
        m = RES_PATH.match(path)
        if m:
            kind, rid = m.group(1), m.group(2)
        elif req.wsa.resource_id():
            # design.md: a request to /wsn/broker carrying a resource EPR's edge:ResourceId
            # header is that resource's request (the broker's own EPR has no ResourceId)
            rid = req.wsa.resource_id() or ""
            kind = (
                "subscriptions"
                if rid in self.subs
                else "pullpoints"
                if rid in self.pullpoints
                else "registrations"
                if rid in self.registrations
                else "unknown"
            )
            if kind == "unknown":
                raise faults.resource_unknown(f"no resource with edge:ResourceId {rid!r}")
        resource: object = None
        if kind == "broker":
            where = "the NotificationBroker (/wsn/broker)"
        elif kind == "subscriptions":
            sub = self.subs.get(rid)
            if sub is None or sub.expired(self.clock()):
                raise faults.resource_unknown(f"subscription {rid} does not exist (or expired)")
            resource, where = sub, f"subscription {sub.id}"
        elif kind == "pullpoints":
            pp = self.pullpoints.get(rid)
            if pp is None:
                raise faults.resource_unknown(f"pull point {rid} does not exist")
            resource, where = pp, f"pull point {pp.id}"
        else:
            reg = self.registrations.get(rid)
            if reg is None or (reg.termination is not None and reg.termination <= self.clock()):
                raise faults.resource_unknown(
                    f"publisher registration {rid} does not exist (or expired)"
                )
            resource, where = reg, f"publisher registration {reg.id}"
        spec = dispatch.TABLE.get((kind, tag))
        if spec is None:
            raise self._unknown_op(req, where, on_broker=kind == "broker")
        return Op(spec.name, lambda r: spec.handler(self, r, resource), spec.manage)

    def _unknown_op(self, req: SoapRequest, where: str, on_broker: bool = False) -> WsnFault:
        qn = etree.QName(req.payload)
        if on_broker and qn.namespace in (
            ns.WSNT,
            ns.BR,
            ns.WSRF_RL,
        ):
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

    # ------------------------------------------------------------------ Subscribe §4.2
    # ------------------------------------------------------------------ SubscriptionManager §6
    # ------------------------------------------------------------------ GetResourceProperty
    # ------------------------------------------------------------------ GetCurrentMessage §4.3
    # ------------------------------------------------------------------ PullPoint §5
    # ------------------------------------------------------------------ RegisterPublisher (br)
    async def _destroy_registration(self, reg: Registration) -> None:
        await self.storage.delete_registration(reg.id)
        self.registrations.pop(reg.id, None)
        for k in [k for k in self._demand if k[0] == reg.id]:
            del self._demand[k]
        self._notify_observers("registration_destroyed", reg)

    # ------------------------------------------------------------------ demand seam
    def add_observer(self, obs: PublisherObserver) -> None:
        self.observers.append(obs)

    def _notify_observers(self, what: str, *args: object) -> None:
        for o in self.observers:
            try:
                getattr(o, what)(*args)
            except Exception:
                log.exception("publisher observer %s.%s failed", type(o).__name__, what)

    def wanting(self, topic: topics.ConcreteTopic | None, now: datetime) -> list[Subscription]:
        """Who wants a notification on `topic` now: the active (not paused, not expired)
        subscriptions whose topic expressions all select it (WS-BaseNotification 1.3 §4.2,
        WS-Topics 1.3 §9), in id order; those without a topic filter want every topic.
        Message filters (content, producer properties) are the caller's to apply."""
        cands = set(self.no_topic_subs)
        if topic is not None:
            cands |= self.index.match(topic)
        out = []
        for sid in sorted(cands):
            s = self.subs.get(sid)
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

    def _recompute_demand(self) -> None:
        """Fire demand_changed for Demand=true registrations whose topics gained or lost
        their last interested subscriber."""
        for reg in list(self.registrations.values()):
            if not reg.demand:
                continue
            for t in reg.named_topics:
                d = self.has_demand(t)
                key = (reg.id, t)
                if self._demand.get(key) != d:
                    self._demand[key] = d
                    self._notify_observers("demand_changed", reg, t, d)
