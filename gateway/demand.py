"""Demand-based publishing (WS-BrokeredNotification 1.0 §4 and §6.1 `Demand`, in its 1.3
form): the broker subscribes to publishers that registered with `br:Demand` true, and
pauses those subscriptions while nobody at the broker wants what they publish.

For every Demand=true registration the DemandManager keeps, per registered topic, one
wrapped (non-raw) subscription at the publisher's NotificationProducer (the
PublisherReference address; design.md "Device <-> gateway" step 2):

- ConsumerReference = the registration's own address (`/wsn/registrations/<id>` with its
  `edge:ResourceId`), so every Notify it causes is attributed to that publisher;
- Filter = a TopicExpression of that one topic in the publisher's own namespace (a
  device's `dt:temperature`, Simple dialect for a root topic, Concrete otherwise), not the
  broker-side name `dev:<device_id>/temperature`;
- paused (WS-BaseNotification 1.3 §6.2.1) while no active broker subscription selects the
  broker-side topic (BrokerState.has_demand), resumed when one does
  ("the NotificationBroker is expected to pause its Subscription whenever it has no active
  Subscribers ... it is obliged to resume", WS-BrokeredNotification 1.0 §4);
- renewed (WS-BaseNotification 1.3 §6.1.1 Renew) before it expires; a lifetime is
  requested as a duration and the answer's TerminationTime is read against its
  CurrentTime, so clock skew between broker and publisher does not matter;
- subscribed again when the publisher lost it: a ResourceUnknownFault (or HTTP 404) to
  Pause/Resume/Renew, a termination time that has passed, or a fresh RegisterPublisher from
  the same publisher (a rebooted device registers again: the older registration
  is no longer served, its remote subscriptions are unsubscribed best-effort and
  forgotten; "the same publisher" is the same address or the same device id).

Each registration has its own worker task; a publisher that cannot be reached is retried
with a jittered exponential backoff (the broker's --backoff-initial/--backoff-max) without
delaying any other publisher or the broker. The remote SubscriptionReferences, their
termination and paused state are stored (Storage.demand_*), so a restarted broker keeps
managing the same remote subscriptions instead of subscribing twice. Stopping the broker
does not unsubscribe: the publisher keeps buffering for the registration address.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import aiohttp
from lxml import etree

from gateway import demand_messages as messages
from gateway import topics
from gateway.config import Config
from gateway.consumer_policy import ConsumerPolicy, connector_kwargs
from gateway.demand_client import PublisherClient, RemoteFault, Unreachable
from gateway.demand_messages import DemandTopic, Remote
from gateway.publishers import Registration
from gateway.render import Renderer
from gateway.state import BrokerState
from gateway.storage import Storage, StorageError
from gateway.storage_demand import DemandRow
from gateway.wire import ns
from gateway.wire.addressing import Epr, EprError
from gateway.wire.xmlutil import (
    XmlRejected,
)

log = logging.getLogger("gateway.demand")


@dataclass
class _Pub:
    reg: Registration
    wanted: list[DemandTopic]
    remote: dict[topics.ConcreteTopic, Remote] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    failures: int = 0
    last_error: str = ""


class DemandManager(PublisherClient):
    """A gateway.publishers.PublisherObserver that runs demand-based publishing for the
    Demand=true registrations of a broker's state (gateway.app makes it follow the state,
    gateway.followers.Publishers, before the state is restored, so it learns of the
    registrations reloaded; `start()` after the restore, `stop()` before storage closes)."""

    def __init__(
        self,
        state: BrokerState,
        storage: Storage,
        render: Renderer,
        policy: ConsumerPolicy,
        cfg: Config,
        *,
        lifetime: timedelta = timedelta(hours=1),
        renew_fraction: float = 1 / 3,
        timeout: float | None = None,
        backoff_initial: float | None = None,
        backoff_max: float | None = None,
        max_response_bytes: int = 64 * 1024,
    ) -> None:
        self.state = state
        self.storage = storage
        self.render = render
        self.policy = policy
        #: lifetime requested in Subscribe and Renew
        self.lifetime = lifetime
        #: renew when less than this fraction of the granted lifetime is left
        self.renew_fraction = renew_fraction
        self.timeout = timeout if timeout is not None else cfg.delivery_timeout
        self.backoff_initial = (
            backoff_initial if backoff_initial is not None else cfg.backoff_initial
        )
        self.backoff_max = backoff_max if backoff_max is not None else cfg.backoff_max
        self.max_response_bytes = max_response_bytes
        self.counters = {
            "subscribe": 0,
            "pause": 0,
            "resume": 0,
            "renew": 0,
            "resubscribe": 0,
            "unsubscribe": 0,
            "failures": 0,
        }
        self._pubs: dict[str, _Pub] = {}
        self._started = False
        self._closing = False
        self._session: aiohttp.ClientSession | None = None
        self._bg: set[asyncio.Task[None]] = set()
        self._soap11: set[str] = set()  # host:port of publishers that speak only SOAP 1.1

    # ------------------------------------------------------------------ observer (sync)
    def registration_created(self, reg: Registration) -> None:
        if not reg.demand or reg.publisher is None:
            return
        # A fresh RegisterPublisher from the same publisher (a rebooted device) supersedes
        # the older registrations: the publisher now sends to the new consumer address and
        # has lost (or dropped) the subscriptions made for the old one.
        for old in [p for p in self._pubs.values() if messages.same_publisher(p.reg, reg)]:
            log.info("registration %s supersedes %s: subscribing again", reg.id, old.reg.id)
            self._retire(old)
        pub = _Pub(reg, messages.topics_of(reg))
        self._pubs[reg.id] = pub
        if self._started:
            self._spawn(pub)

    def registration_destroyed(self, reg: Registration) -> None:
        pub = self._pubs.get(reg.id)
        if pub is not None and pub.reg is reg:
            self._retire(pub)

    def demand_changed(
        self, reg: Registration, topic: topics.ConcreteTopic, demanded: bool
    ) -> None:
        pub = self._pubs.get(reg.id)
        if pub is not None:
            pub.wake.set()

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Load the stored remote subscriptions, clean up those of registrations that are
        gone, start one worker per Demand=true registration."""
        # one connection per request (force_close): control traffic is rare, devices close
        # after each answer anyway, and a kept-alive connection the publisher dropped
        # meanwhile would turn a Subscribe into an ambiguous failure
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=0,
                limit_per_host=2,
                force_close=True,
                **connector_kwargs(self.policy),
            )
        )
        try:
            rows = await self.storage.demand_load()
        except StorageError:
            log.exception("could not load demand-based subscriptions; subscribing anew")
            rows = []
        for row in rows:
            topic = topics.ConcreteTopic(row.topic_ns, tuple(row.topic_path.split("/")))
            pub = self._pubs.get(row.reg_id)
            epr: Epr | None = None
            with contextlib.suppress(EprError, XmlRejected, ValueError):
                epr = Epr.from_xml(row.epr)
            if pub is None or epr is None or all(t.broker_topic != topic for t in pub.wanted):
                self._background(self._forget_remote(row.reg_id, topic, epr))
                continue
            renew_at = None
            if row.termination is not None:
                renew_at = row.termination - self.lifetime.total_seconds() * self.renew_fraction
            pub.remote[topic] = Remote(epr, row.termination, row.paused, renew_at)
        self._started = True
        for pub in self._pubs.values():
            self._spawn(pub)

    async def stop(self) -> None:
        """Stop the workers. Remote subscriptions are kept (they are stored): a restarted
        broker goes on with them."""
        self._closing = True
        tasks = [p.task for p in self._pubs.values() if p.task is not None] + list(self._bg)
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        # A worker cancelled while its row was still queued for SQLite loses that write:
        # store what we know now, in one transaction (call before the gateway's storage
        # closes). A request cancelled in flight leaves its outcome unknown; the restarted
        # broker repeats it (Pause/Resume/Renew are idempotent).
        rows = [self._row(p, t, r) for p in self._pubs.values() for t, r in self._remotes(p)]
        if rows:
            try:
                await self.storage.demand_put(*rows)
            except StorageError:
                log.exception("could not store the demand-based subscriptions on stop")
        if self._session is not None:
            await self._session.close()
            self._session = None

    def status(self) -> list[dict[str, Any]]:
        """One entry per managed (registration, topic): for tests, logs and operators."""
        out: list[dict[str, Any]] = []
        for pub in self._pubs.values():
            for t in pub.wanted:
                r = pub.remote.get(t.broker_topic)
                out.append(
                    {
                        "registration": pub.reg.id,
                        "publisher": pub.reg.publisher.address if pub.reg.publisher else None,
                        "topic": str(t.broker_topic),
                        "subscription": r.epr.address if r else None,
                        "paused": r.paused if r else None,
                        "termination": r.termination if r else None,
                        "failures": pub.failures,
                        "last_error": pub.last_error,
                    }
                )
        return out

    # ------------------------------------------------------------------ workers
    def _spawn(self, pub: _Pub) -> None:
        if pub.task is None and not self._closing:
            pub.task = asyncio.create_task(self._run(pub), name=f"demand-{pub.reg.id}")

    def _background(self, coro: Any) -> None:
        if self._closing:
            coro.close()
            return
        t: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._bg.add(t)
        t.add_done_callback(self._bg.discard)

    def _retire(self, pub: _Pub) -> None:
        """Stop managing `pub`: its remote subscriptions are unsubscribed (best-effort, one
        attempt) and forgotten. Before start() only the in-memory entry goes; the stored
        rows are found orphaned and cleaned up by start()."""
        self._pubs.pop(pub.reg.id, None)
        if pub.task is not None:
            pub.task.cancel()
        if self._started:
            for t in pub.wanted:
                r = pub.remote.get(t.broker_topic)
                self._background(
                    self._forget_remote(pub.reg.id, t.broker_topic, r.epr if r else None)
                )

    async def _forget_remote(
        self, reg_id: str, topic: topics.ConcreteTopic, epr: Epr | None
    ) -> None:
        with contextlib.suppress(StorageError):
            await self.storage.demand_delete(reg_id, (topic.namespace, "/".join(topic.path)))
        if epr is not None:
            try:
                await self._call(epr, ns.A_UNSUBSCRIBE, etree.Element(ns.q(ns.WSNT, "Unsubscribe")))
                self.counters["unsubscribe"] += 1
            except (RemoteFault, Unreachable) as e:
                log.debug("best-effort Unsubscribe of %s failed: %s", epr.address, e)

    async def _run(self, pub: _Pub) -> None:
        while True:
            pub.wake.clear()
            try:
                delay, backoff = await self._pass(pub)
            except Exception as e:  # a bug must not end demand-based publishing for good
                log.exception("demand-based publishing for registration %s failed", pub.reg.id)
                pub.failures += 1
                pub.last_error = f"internal error: {type(e).__name__}: {e}"
                delay, backoff = self.backoff_max, True
            if backoff:
                # unreachable or refusing: wait the backoff even if demand changes meanwhile
                # (pub.wake stays set, so the next pass sees the change)
                await asyncio.sleep(delay or 0)
                continue
            if delay is None:
                await pub.wake.wait()
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, delay)):  # not wait_for: onvif/client.py
                        await pub.wake.wait()

    async def _pass(self, pub: _Pub) -> tuple[float | None, bool]:
        """Bring every topic of `pub` to its wanted state. -> (seconds until the next
        renewal or retry, True if that is a backoff)."""
        due: list[float] = []
        try:
            for t in pub.wanted:
                d = await self._reconcile(pub, t)
                if d is not None:
                    due.append(d)
        except (Unreachable, RemoteFault) as e:
            pub.failures += 1
            self.counters["failures"] += 1
            pub.last_error = str(e)
            delay = min(self.backoff_max, self.backoff_initial * 2 ** min(pub.failures - 1, 30))
            delay *= random.uniform(0.5, 1.0)
            (log.warning if pub.failures == 1 else log.info)(
                "demand-based publishing: publisher %s (registration %s): %s; retry %d in %.2fs",
                pub.reg.publisher.address if pub.reg.publisher else "?",
                pub.reg.id,
                e,
                pub.failures,
                delay,
            )
            return delay, True
        pub.failures = 0
        if not due:
            return None, False
        return min(due) - time.time(), False

    async def _reconcile(self, pub: _Pub, t: DemandTopic) -> float | None:
        """One topic: subscribe if needed, pause/resume to match demand, renew when due.
        -> broker-clock time of the next renewal (None: no expiry)."""
        for attempt in range(2):
            r = pub.remote.get(t.broker_topic)
            now = time.time()
            if r is not None and r.termination is not None and r.termination <= now:
                # expired at the publisher (e.g. the broker was down past its lifetime)
                await self._drop(pub, t)
                r = None
            fresh = r is None
            if r is None:
                r = await self._subscribe(pub, t)
            want_paused = not self.state.has_demand(t.broker_topic)
            try:
                if r.paused != want_paused:
                    # WS-BaseNotification 1.3 §6.2.1 PauseSubscription / §6.3 ResumeSubscription
                    if want_paused:
                        await self._call(
                            r.epr, ns.A_PAUSE, etree.Element(ns.q(ns.WSNT, "PauseSubscription"))
                        )
                        self.counters["pause"] += 1
                    else:
                        await self._call(
                            r.epr, ns.A_RESUME, etree.Element(ns.q(ns.WSNT, "ResumeSubscription"))
                        )
                        self.counters["resume"] += 1
                    r.paused = want_paused
                    await self._persist(pub, t, r)
                if r.renew_at is not None and r.renew_at <= time.time():
                    await self._renew(pub, t, r)
            except RemoteFault as f:
                if f.resource_unknown and not fresh and attempt == 0:
                    log.info(
                        "publisher %s lost subscription %s (%s): subscribing again",
                        pub.reg.publisher.address if pub.reg.publisher else "?",
                        r.epr.address,
                        f.name,
                    )
                    self.counters["resubscribe"] += 1
                    await self._drop(pub, t)
                    continue
                raise
            return r.renew_at
        return None  # unreachable: the second attempt returns or raises

    async def _drop(self, pub: _Pub, t: DemandTopic) -> None:
        pub.remote.pop(t.broker_topic, None)
        try:
            await self.storage.demand_delete(
                pub.reg.id, (t.broker_topic.namespace, "/".join(t.broker_topic.path))
            )
        except StorageError:
            log.exception("could not forget a lost demand-based subscription")

    @staticmethod
    def _remotes(pub: _Pub) -> list[tuple[DemandTopic, Remote]]:
        return [(t, pub.remote[t.broker_topic]) for t in pub.wanted if t.broker_topic in pub.remote]

    @staticmethod
    def _row(pub: _Pub, t: DemandTopic, r: Remote) -> DemandRow:
        return DemandRow(
            pub.reg.id,
            t.broker_topic.namespace,
            "/".join(t.broker_topic.path),
            r.epr.to_xml(),
            r.termination,
            r.paused,
        )

    async def _persist(self, pub: _Pub, t: DemandTopic, r: Remote) -> None:
        try:
            await self.storage.demand_put(self._row(pub, t, r))
        except StorageError as e:
            # the in-memory state is right; a restart before the next change may
            # subscribe once more (the old remote subscription then expires on its own).
            # A full disk is an operator's matter, not a bug: one line, no traceback
            log.warning("could not store the demand-based subscription %s: %s", r.epr.address, e)

    async def _subscribe(self, pub: _Pub, t: DemandTopic) -> Remote:
        # WS-BaseNotification 1.3 §4.2: wrapped (no UseRaw policy), one topic, our lifetime
        assert pub.reg.publisher is not None
        consumer = self.render.epr("registrations", pub.reg.id)
        sent_at = time.time()
        resp = await self._call(
            pub.reg.publisher,
            ns.A_SUBSCRIBE,
            messages.subscribe_request(consumer, t, self.lifetime.total_seconds()),
        )
        epr = messages.subscription_reference(resp)
        term, renew_at = messages.termination(resp, sent_at, self.renew_fraction)
        r = Remote(epr, term, False, renew_at)
        pub.remote[t.broker_topic] = r
        self.counters["subscribe"] += 1
        log.info(
            "subscribed to %s for %s at %s", pub.reg.publisher.address, t.broker_topic, epr.address
        )
        await self._persist(pub, t, r)
        return r

    async def _renew(self, pub: _Pub, t: DemandTopic, r: Remote) -> None:
        # WS-BaseNotification 1.3 §6.1.1
        sent_at = time.time()
        resp = await self._call(
            r.epr, ns.A_RENEW, messages.renew_request(self.lifetime.total_seconds())
        )
        r.termination, r.renew_at = messages.termination(resp, sent_at, self.renew_fraction)
        self.counters["renew"] += 1
        await self._persist(pub, t, r)
