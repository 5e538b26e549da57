"""NotificationBroker: ties the roles together (WS-BaseNotification 1.3 producer and
consumer, PullPoint factory, WS-BrokeredNotification publisher registry). No HTTP here:
the binding (gateway.http) hands over parsed SOAP requests and gets body elements back.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import re
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from lxml import etree

from gateway import (
    consumer_policy,
    faults,
    landing,
    loops,
    notify,
    ns,
    oplog,
    publishers,
    subscriptions,
    topics,
)
from gateway.addressing import Epr, reply_action, resource_epr
from gateway.config import Config
from gateway.consumer_policy import ConsumerPolicy
from gateway.delivery import DeliveryManager, Target
from gateway.faults import RECEIVER, SENDER, WsnFault
from gateway.landing_parquet import ParquetLandingWriter  # imports pyarrow only when used
from gateway.metrics import Metrics
from gateway.publishers import PublisherObserver, Registration
from gateway.pullpoints import PullPoint
from gateway.soap import SoapRequest
from gateway.storage import (
    AcceptBatch,
    RegistrationRow,
    Storage,
    StorageError,
    SubscriptionRow,
)
from gateway.subscriptions import Subscription
from gateway.xmlutil import (
    Clock,
    Element,
    child,
    children,
    format_datetime,
    parse_duration,
    parse_xml,
    text_of,
    utcnow,
)

log = logging.getLogger("gateway.broker")

#: what a handler returns: (response action, body children); action None = one-way (202)
Reply = tuple[str | None, list[Element]]
Handler = Callable[[SoapRequest], Awaitable[Reply]]

ALL_DIALECTS = (topics.SIMPLE, topics.CONCRETE, topics.FULL, topics.XPATH)

#: b-2.xsd NotificationProducerRP (every one minOccurs=0) + br:RequiresRegistration
PRODUCER_RP = frozenset(
    {
        ns.q(ns.WSNT, "TopicExpression"),
        ns.q(ns.WSNT, "FixedTopicSet"),
        ns.q(ns.WSNT, "TopicExpressionDialect"),
        ns.q(ns.WSTOP, "TopicSet"),
        ns.q(ns.BR, "RequiresRegistration"),
    }
)


@dataclass
class Op:
    """A resolved operation: the handler and whether it needs management credentials."""

    name: str
    handler: Handler
    manage: bool


def _ts(dt: datetime | None) -> float | None:
    return dt.timestamp() if dt is not None else None


def _dt(x: float | None) -> datetime | None:
    return datetime.fromtimestamp(x, UTC) if x is not None else None


def _new_id() -> str:
    """A resource id (subscription, pull point, registration): random, unguessable."""
    return uuid.uuid4().hex


_RES_PATH = re.compile(r"^/wsn/(subscriptions|pullpoints|registrations)/([0-9A-Za-z_-]+)$")


class NotificationBroker:
    def __init__(self, cfg: Config, clock: Clock = utcnow) -> None:
        self.cfg = cfg
        self.clock = clock
        self.base_url = (cfg.public_url or f"http://{cfg.host}:{cfg.port}").rstrip("/")
        # raises consumer_policy.PolicyError (a clear message) for an unreadable rule
        self.consumer_policy = ConsumerPolicy.from_texts(cfg.consumer_allow, cfg.allow_loopback)
        self.loop_id = loops.new_loop_id()  # per process, edge:Via (loops.py)
        self.ts = topics.TopicSet(fixed=cfg.fixed_topic_set)
        for f in cfg.topic_namespace_files:
            self.ts.add_namespace(topics.load_topic_namespace(f.read_bytes()))
        self.index: topics.SubscriptionIndex[str] = topics.SubscriptionIndex(self.ts)
        self.subs: dict[str, Subscription] = {}
        self.no_topic_subs: set[str] = set()
        self.pullpoints: dict[str, PullPoint] = {}
        self.registrations: dict[str, Registration] = {}
        self.current: dict[topics.ConcreteTopic, str] = {}
        self.observers: list[PublisherObserver] = []
        self._demand: dict[tuple[str, topics.ConcreteTopic], bool] = {}
        self._rp_cache: tuple[int, Element] | None = None
        self._subref_xml: dict[str, str] = {}
        self.storage = Storage(
            cfg.data_dir / "broker.sqlite3", cfg.sqlite_synchronous, cfg.sqlite_busy_timeout_ms
        )
        self.metrics = Metrics()  # gateway.metrics: event counters; state is read at scrape
        self.storage.on_commit = self.metrics.observe_commit
        self.delivery = DeliveryManager(
            self.storage,
            timeout=cfg.delivery_timeout,
            batch=cfg.delivery_batch,
            backoff_initial=cfg.backoff_initial,
            backoff_max=cfg.backoff_max,
            dead_after=cfg.consumer_dead_after,
            max_backlog=cfg.max_backlog,
            on_dead=self._consumer_dead,
            metrics=self.metrics,
            policy=self.consumer_policy,
            loop_id=self.loop_id,
        )
        self.landing: landing.LandingWriter | None = None
        self.landing_parquet: ParquetLandingWriter | None = None
        if cfg.landing_enabled and cfg.landing_format in ("jsonl", "both"):
            self.landing = landing.LandingWriter(
                cfg.data_dir / "landing", self.storage, cfg.landing_max_bytes, cfg.landing_max_age
            )
        if cfg.landing_enabled and cfg.landing_format in ("parquet", "both"):
            # raises a RuntimeError naming the remedy when pyarrow is not installed
            self.landing_parquet = ParquetLandingWriter(
                cfg.data_dir / "landing", self.storage, cfg.landing_max_bytes, cfg.landing_max_age
            )
        # landing lines: built off the event loop when big (landing_record docstring)
        self.records = landing.RecordBuilder(cfg.gateway_id)
        self.add_observer(self.records)  # it keeps the device ids of the registrations
        self._sweeper: asyncio.Task[None] | None = None
        self.accepted = 0
        #: notifications dropped because their topic does not admit them (WS-Topics §6)
        self.inadmissible: Counter[str] = Counter()
        self._logged_topics: set[tuple[topics.ConcreteTopic | None, str]] = set()
        self.looped = 0  # Notify requests not published again (loops.py)

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
        self.storage.open()
        snap = self.storage.load()
        for tns, path in snap.grown:
            with contextlib.suppress(topics.TopicError):
                self.ts.grow(topics.ConcreteTopic(tns, tuple(path.split("/"))))
        for tns, path, xml in snap.current:
            self.current[topics.ConcreteTopic(tns, tuple(path.split("/")) if path else ())] = xml
        for pid, created, count in snap.pullpoints:
            self.pullpoints[pid] = PullPoint(pid, _dt(created) or self.clock(), queued=count)
        for rr in snap.registrations:
            try:
                reg = Registration(
                    rr.id,
                    Epr.from_xml(rr.publisher) if rr.publisher else None,
                    [(d, t, m) for d, t, m in json.loads(rr.topics)],
                    rr.demand,
                    _dt(rr.created) or self.clock(),
                    _dt(rr.termination),
                    rr.device_id,
                )
                publishers.compile_specs(reg)
                self.registrations[reg.id] = reg
            except Exception:
                log.exception("dropping unreadable registration %s", rr.id)
        await self.delivery.start()
        by_sub: dict[str, list[tuple[int, str]]] = {}
        for seq, sid, xml in snap.deliveries:
            by_sub.setdefault(sid, []).append((seq, xml))
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
            await self.storage.delete_subscriptions(unusable)
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
            created=_dt(row.created) or self.clock(),
            termination=_dt(row.termination),
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
        await self.storage.delete_subscriptions(ids)
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
        m = _RES_PATH.match(path)
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
        if kind == "broker":
            op = self._broker_ops.get(tag)
            if op is None:
                raise self._unknown_op(req, "the NotificationBroker (/wsn/broker)", on_broker=True)
            return op
        if kind == "subscriptions":
            sub = self.subs.get(rid)
            if sub is None or sub.expired(self.clock()):
                raise faults.resource_unknown(f"subscription {rid} does not exist (or expired)")
            return self._sub_op(tag, sub, req)
        if kind == "pullpoints":
            pp = self.pullpoints.get(rid)
            if pp is None:
                raise faults.resource_unknown(f"pull point {rid} does not exist")
            return self._pp_op(tag, pp, req)
        reg = self.registrations.get(rid)
        if reg is None or (reg.termination is not None and reg.termination <= self.clock()):
            raise faults.resource_unknown(
                f"publisher registration {rid} does not exist (or expired)"
            )
        return self._reg_op(tag, reg, req)

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

    @functools.cached_property
    def _broker_ops(self) -> dict[str, Op]:
        """The broker's operations by body element, built once (it was per request)."""
        return {
            ns.q(ns.WSNT, "Notify"): Op("Notify", lambda r: notify.notify_broker(self, r), False),
            ns.q(ns.WSNT, "Subscribe"): Op("Subscribe", self.subscribe, False),
            ns.q(ns.WSNT, "GetCurrentMessage"): Op(
                "GetCurrentMessage", self.get_current_message, False
            ),
            ns.q(ns.WSNT, "CreatePullPoint"): Op("CreatePullPoint", self.create_pullpoint, False),
            ns.q(ns.BR, "RegisterPublisher"): Op(
                "RegisterPublisher", self.register_publisher, True
            ),
            ns.q(ns.WSRF_RP, "GetResourceProperty"): Op(
                "GetResourceProperty",
                lambda r: self.get_rp(r, self.producer_properties(), PRODUCER_RP),
                False,
            ),
        }

    def _sub_op(self, tag: str, sub: Subscription, req: SoapRequest) -> Op:
        table: dict[str, Op] = {
            ns.q(ns.WSNT, "Renew"): Op("Renew", lambda r: self.renew(r, sub), True),
            ns.q(ns.WSNT, "Unsubscribe"): Op(
                "Unsubscribe", lambda r: self.unsubscribe(r, sub), True
            ),
            ns.q(ns.WSNT, "PauseSubscription"): Op(
                "PauseSubscription", lambda r: self.pause(r, sub, True), True
            ),
            ns.q(ns.WSNT, "ResumeSubscription"): Op(
                "ResumeSubscription", lambda r: self.pause(r, sub, False), True
            ),
            ns.q(ns.WSRF_RL, "SetTerminationTime"): Op(
                "SetTerminationTime", lambda r: self.set_termination_sub(r, sub), True
            ),
            ns.q(ns.WSRF_RL, "Destroy"): Op(
                "Destroy", lambda r: self.destroy(lambda: self.unsubscribe(r, sub)), True
            ),
            ns.q(ns.WSRF_RP, "GetResourceProperty"): Op(
                "GetResourceProperty",
                lambda r: self.get_rp(
                    r,
                    subscriptions.resource_properties(sub, self.clock()),
                    subscriptions.RESOURCE_PROPERTIES,
                ),
                False,
            ),
        }
        op = table.get(tag)
        if op is None:
            raise self._unknown_op(req, f"subscription {sub.id}")
        return op

    def _pp_op(self, tag: str, pp: PullPoint, req: SoapRequest) -> Op:
        table: dict[str, Op] = {
            ns.q(ns.WSNT, "GetMessages"): Op(
                "GetMessages", lambda r: self.get_messages(r, pp), False
            ),
            ns.q(ns.WSNT, "DestroyPullPoint"): Op(
                "DestroyPullPoint", lambda r: self.destroy_pullpoint(r, pp), True
            ),
            ns.q(ns.WSNT, "Notify"): Op("Notify", lambda r: self.notify_pullpoint(r, pp), False),
        }
        op = table.get(tag)
        if op is None:
            raise self._unknown_op(req, f"pull point {pp.id}")
        return op

    def _reg_op(self, tag: str, reg: Registration, req: SoapRequest) -> Op:
        table: dict[str, Op] = {
            ns.q(ns.WSNT, "Notify"): Op(
                "Notify", lambda r: notify.notify_registration(self, r, reg), False
            ),
            ns.q(ns.BR, "DestroyRegistration"): Op(
                "DestroyRegistration", lambda r: self.destroy_registration(r, reg), True
            ),
            ns.q(ns.WSRF_RL, "SetTerminationTime"): Op(
                "SetTerminationTime", lambda r: self.set_termination_reg(r, reg), True
            ),
            ns.q(ns.WSRF_RL, "Destroy"): Op(
                "Destroy", lambda r: self.destroy(lambda: self.destroy_registration(r, reg)), True
            ),
            ns.q(ns.WSRF_RP, "GetResourceProperty"): Op(
                "GetResourceProperty",
                lambda r: self.get_rp(
                    r,
                    publishers.resource_properties(reg, self.clock()),
                    publishers.RESOURCE_PROPERTIES,
                ),
                False,
            ),
        }
        op = table.get(tag)
        if op is None:
            raise self._unknown_op(req, f"publisher registration {reg.id}")
        return op

    # ------------------------------------------------------------------ Subscribe §4.2
    async def _own_pullpoint(self, address: str) -> str | None:
        """The id of our pull point that `address` names in any spelling (delivered
        in-process), if any."""
        t = consumer_policy.Target.parse(address)
        if isinstance(t, str):
            return None
        m = _RES_PATH.match(t.path)
        if not m or m.group(1) != "pullpoints" or m.group(2) not in self.pullpoints:
            return None
        return m.group(2) if await self.consumer_policy.refers_to_self(t) else None

    async def _loops_back(self, address: str) -> str | None:
        """Refuse consumers that are this broker (other than its pull points) in any
        spelling: scheme, resolved host and port compared, userinfo never part of it.
        A subscription delivering to /wsn/broker would publish its own notifications
        again, forever (consumer_policy.py)."""
        t = consumer_policy.Target.parse(address)
        if not isinstance(t, str) and await self.consumer_policy.refers_to_self(t):
            return (
                f"consumer address {address!r} is this broker itself: delivering there would "
                "loop; use a pull point (CreatePullPoint) to consume in the broker"
            )
        return None

    async def subscribe(self, req: SoapRequest) -> Reply:
        now = self.clock()
        if len(self.subs) >= self.cfg.max_subscriptions:
            raise faults.wsnt(
                "SubscribeCreationFailedFault",
                f"subscription limit reached ({self.cfg.max_subscriptions}); unsubscribe first",
                RECEIVER,
            )
        cons_el = child(req.payload, ns.q(ns.WSNT, "ConsumerReference"))
        pp_id = None
        if cons_el is not None:
            addr = text_of(child(cons_el, ns.q(ns.WSA, "Address")))
            why = self.consumer_policy.check(addr) if addr else None
            pp_id = await self._own_pullpoint(addr) if not why else None
            if pp_id is None and addr:
                why = why or await self._loops_back(addr)
                if why:
                    raise faults.wsnt("SubscribeCreationFailedFault", why)
        parsed = subscriptions.parse_subscribe(
            req.payload, self.ts, self.cfg, now, pp_id is not None
        )
        sub = Subscription(
            id=_new_id(),
            consumer=parsed.consumer,
            raw=parsed.raw,
            created=now,
            termination=parsed.termination,
            pullpoint=pp_id,
            filter_xml=parsed.filter_xml,
            policy_xml=parsed.policy_xml,
            topic_exprs=parsed.filter.topic_exprs,
            content=parsed.filter.content,
            producer=parsed.filter.producer,
            dialect=parsed.filter.topic_exprs[0].dialect
            if parsed.filter.topic_exprs
            else topics.CONCRETE,
            soap=req.version,
        )
        try:
            await self.storage.add_subscription(
                SubscriptionRow(
                    sub.id,
                    sub.consumer.to_xml(),
                    sub.filter_xml,
                    sub.policy_xml,
                    sub.raw,
                    now.timestamp(),
                    _ts(sub.termination),
                    False,
                    pp_id,
                    sub.dialect,
                    sub.soap,
                )
            )
        except StorageError as e:
            raise faults.wsnt(
                "SubscribeCreationFailedFault", f"could not store the subscription: {e}", RECEIVER
            ) from None
        self._activate(sub)
        oplog.event(
            "subscription_created",
            "subscription created",
            subscription=sub.id,
            consumer=f"pullpoint {pp_id}" if pp_id else sub.consumer.address,
            dialect=sub.dialect.rsplit("/", 1)[-1],
            expression=sub.topic_exprs[0].text if sub.topic_exprs else None,
            raw=sub.raw,
        )
        self._recompute_demand()
        resp = etree.Element(ns.q(ns.WSNT, "SubscribeResponse"), nsmap={"wsnt": ns.WSNT})
        resp.append(
            resource_epr(self.urls("subscriptions", sub.id), sub.id).to_element(
                ns.q(ns.WSNT, "SubscriptionReference")
            )
        )
        resp.append(subscriptions.time_element(ns.WSNT, "CurrentTime", now))
        resp.append(subscriptions.termination_element(ns.WSNT, "TerminationTime", sub.termination))
        return ns.A_SUBSCRIBE_RESP, [resp]

    # ------------------------------------------------------------------ SubscriptionManager §6
    async def renew(self, req: SoapRequest, sub: Subscription) -> Reply:
        now = self.clock()
        tt = child(req.payload, ns.q(ns.WSNT, "TerminationTime"))
        if tt is None:
            raise faults.unacceptable_tt(
                "Renew has no wsnt:TerminationTime",
                now + self.cfg.min_termination,
                now + self.cfg.max_termination if self.cfg.max_termination else None,
            )
        new = subscriptions.resolve_termination(
            tt,
            now,
            None,
            self.cfg.min_termination,
            self.cfg.max_termination,
            "UnacceptableTerminationTimeFault",
            "TerminationTime",
        )
        try:
            await self.storage.update_subscription(sub.id, termination=_ts(new))
        except StorageError as e:
            raise WsnFault(ns.BF, "BaseFault", f"could not renew: {e}", RECEIVER) from None
        sub.termination = new
        resp = etree.Element(ns.q(ns.WSNT, "RenewResponse"), nsmap={"wsnt": ns.WSNT})
        resp.append(subscriptions.termination_element(ns.WSNT, "TerminationTime", new))
        resp.append(subscriptions.time_element(ns.WSNT, "CurrentTime", now))
        return reply_action(req.wsa.action, ns.A_RENEW_RESP), [resp]

    async def unsubscribe(self, req: SoapRequest, sub: Subscription) -> Reply:
        try:
            await self._destroy_subscriptions([sub.id])
        except StorageError as e:
            raise faults.wsnt(
                "UnableToDestroySubscriptionFault", f"could not destroy: {e}", RECEIVER
            ) from None
        oplog.event("subscription_ended", "subscription ended", subscription=sub.id,
                    reason="Unsubscribe")  # fmt: skip
        return reply_action(req.wsa.action, ns.A_UNSUBSCRIBE_RESP), [
            etree.Element(ns.q(ns.WSNT, "UnsubscribeResponse"), nsmap={"wsnt": ns.WSNT})
        ]

    async def pause(self, req: SoapRequest, sub: Subscription, paused: bool) -> Reply:
        """§6.2. Policy: while paused, new notifications are NOT queued for the
        subscription (pausing is the consumer's flow control and the demand signal of
        demand-based publishing; a backlog released on resume would defeat both).
        Messages queued before the pause are held and sent after ResumeSubscription."""
        name = "PauseFailedFault" if paused else "ResumeFailedFault"
        if sub.paused != paused:
            try:
                await self.storage.update_subscription(sub.id, paused=paused)
            except StorageError as e:
                raise faults.wsnt(
                    name, f"could not {'pause' if paused else 'resume'}: {e}", RECEIVER
                ) from None
            sub.paused = paused
            self.delivery.set_paused(sub.id, paused)
            self._recompute_demand()
        if paused:
            return ns.A_PAUSE_RESP, [
                etree.Element(ns.q(ns.WSNT, "PauseSubscriptionResponse"), nsmap={"wsnt": ns.WSNT})
            ]
        return ns.A_RESUME_RESP, [
            etree.Element(ns.q(ns.WSNT, "ResumeSubscriptionResponse"), nsmap={"wsnt": ns.WSNT})
        ]

    def _set_tt_request(self, req: SoapRequest) -> tuple[datetime | None, datetime]:
        """WS-ResourceLifetime 1.2 §5.2 SetTerminationTime: RequestedTerminationTime
        (dateTime | nil) or RequestedLifetimeDuration."""
        now = self.clock()
        rt = child(req.payload, ns.q(ns.WSRF_RL, "RequestedTerminationTime"))
        rd = child(req.payload, ns.q(ns.WSRF_RL, "RequestedLifetimeDuration"))
        hi = now + self.cfg.max_termination if self.cfg.max_termination else None
        try:
            if rt is not None:
                if rt.get(ns.q(ns.XSI, "nil")) in ("true", "1"):
                    if hi is not None:
                        raise ValueError("infinite lifetime is not allowed on this broker")
                    return None, now
                from gateway.xmlutil import parse_datetime

                t = parse_datetime(text_of(rt))
            elif rd is not None:
                t = now + parse_duration(text_of(rd))
            else:
                raise ValueError(
                    "neither RequestedTerminationTime nor RequestedLifetimeDuration given"
                )
        except ValueError as e:
            raise faults.rl("UnableToSetTerminationTimeFault", str(e)) from None
        if t <= now or (hi is not None and t > hi):
            raise faults.rl(
                "TerminationTimeChangeRejectedFault",
                f"termination time {format_datetime(t)} rejected: must be in the future"
                + (f" and not after {format_datetime(hi)}" if hi else ""),
            )
        return t, now

    def _set_tt_response(self, new: datetime | None, now: datetime) -> Reply:
        resp = etree.Element(
            ns.q(ns.WSRF_RL, "SetTerminationTimeResponse"), nsmap={"wsrf-rl": ns.WSRF_RL}
        )
        resp.append(subscriptions.termination_element(ns.WSRF_RL, "NewTerminationTime", new))
        resp.append(subscriptions.time_element(ns.WSRF_RL, "CurrentTime", now))
        return ns.A_SET_TT_RESP, [resp]

    async def destroy(self, op: Callable[[], Awaitable[Reply]]) -> Reply:
        """WS-ResourceLifetime 1.2 §4.1 Destroy, which WS-BaseNotification 1.3 §6.4 and
        WS-BrokeredNotification require of a subscription or registration exposed as a
        WS-Resource: the resource's own destroy operation (`op`), answered as
        wsrf-rl:DestroyResponse; a failure is wsrf-rl:ResourceNotDestroyedFault."""
        try:
            await op()
        except WsnFault as f:
            raise faults.rl("ResourceNotDestroyedFault", f.description, f.code) from None
        resp = etree.Element(ns.q(ns.WSRF_RL, "DestroyResponse"), nsmap={"wsrf-rl": ns.WSRF_RL})
        return ns.A_DESTROY_RESP, [resp]

    async def set_termination_sub(self, req: SoapRequest, sub: Subscription) -> Reply:
        new, now = self._set_tt_request(req)
        try:
            await self.storage.update_subscription(sub.id, termination=_ts(new))
        except StorageError as e:
            raise faults.rl("UnableToSetTerminationTimeFault", str(e), RECEIVER) from None
        sub.termination = new
        return self._set_tt_response(new, now)

    # ------------------------------------------------------------------ GetResourceProperty
    def producer_properties(self) -> list[Element]:
        """§4.1 NotificationProducerRP + br:RequiresRegistration (rebuilt on topic growth)."""
        out: list[Element] = []
        for t in sorted(self.ts.topics(), key=str):
            dialect, text, nsmap = topics.render_topic(t, topics.CONCRETE)
            el = etree.Element(
                ns.q(ns.WSNT, "TopicExpression"),
                nsmap={k: v for k, v in nsmap.items() if k} or None,
            )
            el.set("Dialect", dialect)
            el.text = text
            out.append(el)
        fx = etree.Element(ns.q(ns.WSNT, "FixedTopicSet"))
        fx.text = "true" if self.ts.fixed else "false"
        out.append(fx)
        for d in ALL_DIALECTS:
            de = etree.Element(ns.q(ns.WSNT, "TopicExpressionDialect"))
            de.text = d
            out.append(de)
        out.append(self.ts.to_element())
        rr = etree.Element(ns.q(ns.BR, "RequiresRegistration"), nsmap={"br": ns.BR})
        rr.text = "true" if self.cfg.requires_registration else "false"
        out.append(rr)
        return out

    def producer_rp_document(self) -> Element:
        if self._rp_cache is None or self._rp_cache[0] != self.ts.version:
            doc = etree.Element(ns.q(ns.WSNT, "NotificationProducerRP"), nsmap={"wsnt": ns.WSNT})
            for el in self.producer_properties():
                doc.append(el)
            root = etree.fromstring(etree.tostring(doc))
            self._rp_cache = (self.ts.version, root)
        return self._rp_cache[1]

    async def get_rp(
        self, req: SoapRequest, props: list[Element], declared: frozenset[str]
    ) -> Reply:
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
                {etree.QName(p).localname for p in props}
                | {etree.QName(d).localname for d in declared}
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

    # ------------------------------------------------------------------ GetCurrentMessage §4.3
    async def get_current_message(self, req: SoapRequest) -> Reply:
        tel = child(req.payload, ns.q(ns.WSNT, "Topic"))
        if tel is None:
            raise faults.wsnt("InvalidTopicExpressionFault", "GetCurrentMessage has no wsnt:Topic")
        try:
            expr = topics.parse_topic_expression_element(tel)
            expr.validate(self.ts)  # §8.5: a final namespace or fixed set may forbid it
            # one concrete topic after AliasRef resolution (WS-Topics 2004 §8); wildcards
            # -> MultipleTopicsSpecified, an alias resolving to nothing -> TopicNotSupported
            one = topics.require_single_topic(expr, self.ts)
        except topics.TopicError as e:
            raise faults.from_topic_error(e) from None
        xml = self.current.get(one)
        if xml is None:
            raise faults.wsnt(
                "NoCurrentMessageOnTopicFault", f"no message has been published on {one} yet"
            )
        resp = etree.Element(ns.q(ns.WSNT, "GetCurrentMessageResponse"), nsmap={"wsnt": ns.WSNT})
        resp.append(parse_xml(xml.encode()))
        return ns.A_GCM_RESP, [resp]

    # ------------------------------------------------------------------ PullPoint §5
    async def create_pullpoint(self, req: SoapRequest) -> Reply:
        if len(self.pullpoints) >= self.cfg.max_pullpoints:
            raise faults.wsnt(
                "UnableToCreatePullPointFault",
                f"pull point limit reached ({self.cfg.max_pullpoints}); destroy unused ones",
                RECEIVER,
            )
        pid = _new_id()
        now = self.clock()
        try:
            await self.storage.add_pullpoint(pid, now.timestamp())
        except StorageError as e:
            raise faults.wsnt(
                "UnableToCreatePullPointFault", f"could not store the pull point: {e}", RECEIVER
            ) from None
        self.pullpoints[pid] = PullPoint(pid, now)
        resp = etree.Element(ns.q(ns.WSNT, "CreatePullPointResponse"), nsmap={"wsnt": ns.WSNT})
        resp.append(
            resource_epr(self.urls("pullpoints", pid), pid).to_element(ns.q(ns.WSNT, "PullPoint"))
        )
        return ns.A_CREATE_PP_RESP, [resp]

    async def get_messages(self, req: SoapRequest, pp: PullPoint) -> Reply:
        limit: int | None = None
        mn = child(req.payload, ns.q(ns.WSNT, "MaximumNumber"))
        if mn is not None:
            try:
                limit = int(text_of(mn))
                if limit < 0:
                    raise ValueError
            except ValueError:
                raise faults.wsnt(
                    "UnableToGetMessagesFault",
                    f"MaximumNumber {text_of(mn)!r} is not a non-negative integer",
                ) from None
        wait_el = child(req.payload, ns.q(ns.EDGE, "Wait"))
        if wait_el is not None and pp.queued <= 0 and limit != 0:
            try:
                wait = parse_duration(text_of(wait_el)).total_seconds()
            except ValueError:
                raise faults.wsnt(
                    "UnableToGetMessagesFault",
                    f"edge:Wait {text_of(wait_el)!r} is not an xsd:duration",
                ) from None
            await pp.wait(max(0.0, min(wait, self.cfg.max_wait)))
            if pp.id not in self.pullpoints:
                raise faults.resource_unknown(f"pull point {pp.id} was destroyed while waiting")
        msgs: list[str] = []
        if limit != 0:
            try:
                msgs = await self.storage.take_pp_messages(pp.id, limit)
            except StorageError as e:
                raise faults.wsnt(
                    "UnableToGetMessagesFault", f"could not read messages: {e}", RECEIVER
                ) from None
        pp.queued = max(0, pp.queued - len(msgs))
        resp = etree.Element(ns.q(ns.WSNT, "GetMessagesResponse"), nsmap={"wsnt": ns.WSNT})
        for x in msgs:
            resp.append(parse_xml(x.encode()))
        return ns.A_GET_MESSAGES_RESP, [resp]

    async def destroy_pullpoint(self, req: SoapRequest, pp: PullPoint) -> Reply:
        """§5.1.4. Subscriptions whose consumer is this pull point are destroyed with it
        (they could never deliver again)."""
        feeding = [s.id for s in self.subs.values() if s.pullpoint == pp.id]
        try:
            await self.storage.delete_pullpoint(pp.id, feeding)
        except StorageError as e:
            raise faults.wsnt(
                "UnableToDestroyPullPointFault", f"could not destroy: {e}", RECEIVER
            ) from None
        self.pullpoints.pop(pp.id, None)
        for s in feeding:
            self._deactivate(s)
            oplog.event("subscription_ended", "subscription ended", subscription=s,
                        reason="pull point destroyed")  # fmt: skip
        pp.signal()
        self._recompute_demand()
        return ns.A_DESTROY_PP_RESP, [
            etree.Element(ns.q(ns.WSNT, "DestroyPullPointResponse"), nsmap={"wsnt": ns.WSNT})
        ]

    async def notify_pullpoint(self, req: SoapRequest, pp: PullPoint) -> Reply:
        """A Notify posted to a pull point's own address: its NotificationMessages are
        accumulated exactly as received (§5.1.2)."""
        msgs = children(req.payload, ns.q(ns.WSNT, "NotificationMessage"))
        if not msgs:
            raise WsnFault(ns.BF, "BaseFault", "Notify has no wsnt:NotificationMessage", SENDER)
        batch = AcceptBatch(pp_limit=self.cfg.pullpoint_max_messages)
        for nm in msgs:
            batch.pp_messages.append(
                (pp.id, etree.tostring(nm, encoding="unicode", with_tail=False))
            )
        try:
            res = await self.storage.accept(batch)
        except StorageError as e:
            raise WsnFault(
                ns.BF, "BaseFault", f"notification not accepted: {e}", RECEIVER
            ) from None
        pp.queued += len(msgs) - res.pp_dropped.get(pp.id, 0)
        pp.dropped += res.pp_dropped.get(pp.id, 0)
        pp.signal()
        return None, []

    # ------------------------------------------------------------------ RegisterPublisher (br)
    async def register_publisher(self, req: SoapRequest) -> Reply:
        now = self.clock()
        if len(self.registrations) >= self.cfg.max_registrations:
            raise faults.br(
                "PublisherRegistrationRejectedFault",
                f"registration limit reached ({self.cfg.max_registrations})",
                RECEIVER,
            )
        r = publishers.parse_register(req.payload)
        if r.publisher is not None and r.demand:
            why = self.consumer_policy.check(r.publisher.address)
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
            self.cfg.registration_default_termination,
            self.cfg.min_termination,
            self.cfg.max_termination,
            "UnacceptableInitialTerminationTimeFault",
            "InitialTerminationTime",
        )
        reg = Registration(
            _new_id(),
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
                ).validate(self.ts)
            for t in reg.named_topics:
                # device topics grow under dev:<device_id>/ (design.md) at registration
                if t not in self.ts:
                    self.ts.grow(t)
        except topics.TopicError as e:
            raise faults.from_topic_error(e) from None
        try:
            await self.storage.add_registration(
                RegistrationRow(
                    reg.id,
                    reg.publisher.to_xml() if reg.publisher else None,
                    reg.topics_json(),
                    reg.demand,
                    now.timestamp(),
                    _ts(term),
                    reg.device_id,
                )
            )
            grown = [(t.namespace, "/".join(t.path)) for t in reg.named_topics]
            if grown:
                await self.storage.accept(AcceptBatch(grown=grown))
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
                for o in self.registrations.values()
                if o.publisher is not None and o.publisher.address == reg.publisher.address
            ]:
                with contextlib.suppress(StorageError):
                    await self._destroy_registration(old)
        self.registrations[reg.id] = reg
        self._notify_observers("registration_created", reg)
        self._recompute_demand()
        resp = etree.Element(ns.q(ns.BR, "RegisterPublisherResponse"), nsmap={"br": ns.BR})
        epr = resource_epr(self.urls("registrations", reg.id), reg.id)
        resp.append(epr.to_element(ns.q(ns.BR, "PublisherRegistrationReference")))
        resp.append(epr.to_element(ns.q(ns.BR, "ConsumerReference")))
        return ns.A_REGISTER_RESP, [resp]

    async def _destroy_registration(self, reg: Registration) -> None:
        await self.storage.delete_registration(reg.id)
        self.registrations.pop(reg.id, None)
        for k in [k for k in self._demand if k[0] == reg.id]:
            del self._demand[k]
        self._notify_observers("registration_destroyed", reg)

    async def destroy_registration(self, req: SoapRequest, reg: Registration) -> Reply:
        try:
            await self._destroy_registration(reg)
        except StorageError as e:
            raise faults.br(
                "ResourceNotDestroyedFault", f"could not destroy the registration: {e}", RECEIVER
            ) from None
        return ns.A_DESTROY_REG_RESP, [
            etree.Element(ns.q(ns.BR, "DestroyRegistrationResponse"), nsmap={"br": ns.BR})
        ]

    async def set_termination_reg(self, req: SoapRequest, reg: Registration) -> Reply:
        new, now = self._set_tt_request(req)
        try:
            await self.storage.set_registration_termination(reg.id, _ts(new))
        except StorageError as e:
            raise faults.rl("UnableToSetTerminationTimeFault", str(e), RECEIVER) from None
        reg.termination = new
        return self._set_tt_response(new, now)

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
            if topic is not None and any(not e.matches(topic, self.ts) for e in s.topic_exprs[1:]):
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
