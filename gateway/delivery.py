"""Push delivery to NotificationConsumers: one queue per subscription, one worker per
consumer endpoint.

- Consumer endpoint: what one Notify request goes to, i.e. the consumer address, the SOAP
  version and the reference parameters (sent as SOAP headers, WS-Addressing 1.0 SOAP
  binding §2.3). Wrapped subscriptions with the same endpoint share one worker, because a
  wsnt:Notify may carry NotificationMessages of several subscriptions, each naming its own
  SubscriptionReference (WS-BaseNotification 1.3 §3.2). Raw subscriptions each have their
  own endpoint: the payload element is the SOAP body, one message per request (§4.2 UseRaw).
- Batching: what is pending for an endpoint goes out as one wsnt:Notify (up to
  --delivery-batch messages, oldest first across its subscriptions; each subscription's
  messages stay in order). Paused subscriptions' messages are left out, so a pause never
  holds back another subscription of the same consumer.
- Pacing (adaptive batching, gateway/delivery_pacing.py): one request per endpoint is in
  flight at a time, and while many endpoints are active a not-full batch waits a little
  for more (at most --delivery-linger-max).
- Failures: timeout, connection error or a non-2xx answer -> retry after a jittered
  exponential backoff (initial * 2^n, capped, times a random factor in [0.5, 1]). A
  consumer endpoint that starts failing is one WARNING with the error (`consumer_failing`:
  connection refused, timeout, HTTP 503...), its recovery another (`consumer_recovered`);
  at most STATE_LOG_BURST (gateway/delivery_statelog.py) such lines in a row, then one per
  second with a count of the ones left out. Each subscription keeps its endpoint's last
  error and the time of its last 2xx (`state`).
- Bounds: at most --max-delivery-connections outgoing connections in all and
  --max-consumer-connections per consumer host (gateway/delivery_http.py).
- Isolation: each endpoint has its own asyncio task and HTTP timeout, so a slow or dead
  consumer never delays another.
- Backlog bound (policy, documented in docs/gateway.md): at most --max-backlog messages
  wait per subscription; beyond that the OLDEST are dropped (newest readings matter most at
  the edge) and counted. The log says so once when a subscription starts dropping, then at
  most once per DROP_LOG_INTERVAL with the count since its last line (a dead consumer would
  otherwise cost one line per incoming Notify). A consumer failing continuously for
  --consumer-dead-after seconds ends its subscriptions that were waiting to be delivered
  (the broker destroys them and their backlogs).
- Durability: queued messages are rows in SQLite until the consumer acknowledged them, so
  they are sent again after a restart (at-least-once). A clean stop lets the requests in
  flight have their answers (at most STOP_DRAIN_S), so only a crash sends a message the
  consumer took again. The rows a 2xx answer acknowledged
  and the dropped ones are deleted in the background (gateway/delivery_acks.py).
- The request itself (envelope, HTTP client) is gateway/delivery_http.py.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import heapq
import itertools
import logging
import random
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator
from operator import itemgetter

from gateway import loops, oplog
from gateway.consumer_policy import ConsumerPolicy
from gateway.delivery_acks import RowDeletions
from gateway.delivery_endpoints import Endpoint, Queue
from gateway.delivery_endpoints import Target as Target  # re-exported: callers build it
from gateway.delivery_http import (
    LIMIT_PER_HOST,
    LIMIT_TOTAL,
    MAX_ANSWER_BYTES,
    NotifySender,
    message_id,
)
from gateway.delivery_pacing import Pacer
from gateway.delivery_statelog import StateLog
from gateway.metrics import Metrics
from gateway.storage import Storage

#: how long a clean stop waits for the answers to the requests in flight (`Delivery.stop`)
STOP_DRAIN_S = 5.0

log = logging.getLogger("gateway.delivery")

#: seconds between two "backlog full" lines of one subscription (the later one has the count)
DROP_LOG_INTERVAL = 60.0
_seq_of = itemgetter(0)


def _tagged(sub_id: str, items: list[tuple[int, str]]) -> Iterator[tuple[int, str, str]]:
    return ((seq, sub_id, xml) for seq, xml in items)


class DeliveryManager:
    def __init__(
        self,
        storage: Storage,
        *,
        timeout: float = 10.0,
        batch: int = 100,
        backoff_initial: float = 0.5,
        backoff_max: float = 60.0,
        dead_after: float = 3600.0,
        max_backlog: int = 1000,
        linger_max: float = 0.05,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        max_connections: int = LIMIT_TOTAL,
        max_per_consumer: int = LIMIT_PER_HOST,
        on_dead: Callable[[str], Awaitable[None]] | None = None,
        metrics: Metrics | None = None,
        policy: ConsumerPolicy | None = None,
        loop_id: str | None = None,
    ) -> None:
        self.storage = storage
        self.metrics = metrics or Metrics()
        self.timeout = timeout
        self.batch = batch
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.dead_after = dead_after
        self.max_backlog = max_backlog
        self._pacer = Pacer(linger_max)
        self.on_dead = on_dead
        self.policy = policy or ConsumerPolicy([])
        self.loop_id = loop_id or loops.new_loop_id()
        # seq -> the brokers a queued message went through (edge:Via); in memory only
        self._via: dict[int, tuple[str, ...]] = {}
        self._queues: dict[str, Queue] = {}
        self._endpoints: dict[Hashable, Endpoint] = {}
        self._sender = NotifySender(
            self.policy, self.loop_id, timeout, max_answer_bytes, max_connections, max_per_consumer
        )
        self._state_log = StateLog()
        self._closing = False
        self._bg: set[asyncio.Future[None]] = set()  # on_dead calls
        self._rows = RowDeletions(storage)

    async def start(self) -> None:
        await self._sender.start()

    async def stop(self, drain: float = STOP_DRAIN_S) -> None:
        """Stop every worker. A request already sent gets up to `drain` seconds for its
        answer first: cancelled, a message the consumer took would be sent again after the
        restart (it stays unacknowledged); an idle or backing-off worker stops at once."""
        self._closing = True
        tasks = [e.task for e in self._endpoints.values() if e.task is not None]
        sending = [e.task for e in self._endpoints.values() if e.task is not None and e.sending]
        for t in tasks:
            if t not in sending:
                t.cancel()
        if sending and drain > 0:
            await asyncio.wait(sending, timeout=drain)
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await self._rows.close()
        for f in list(self._bg):
            f.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await f
        await self._sender.close()

    # ---- bookkeeping ----
    def add(self, target: Target, paused: bool = False) -> None:
        key = target.endpoint_key()
        ep = self._endpoints.get(key)
        if ep is None:
            ep = Endpoint(key, target)
            self._endpoints[key] = ep
            ep.task = asyncio.create_task(self._worker(ep), name=f"deliver-{target.sub_id}")
        q = Queue(target, ep, paused=paused)
        self._queues[target.sub_id] = q
        ep.queues[target.sub_id] = q

    def remove(self, sub_id: str) -> None:
        q = self._queues.pop(sub_id, None)
        if q is None:
            return
        if q.drops_unlogged:  # the summary line it would have had
            log.warning(
                "subscription %s: dropped %d more oldest messages before it ended (%d in all)",
                sub_id, q.drops_unlogged, q.dropped,
            )  # fmt: skip
        for seq, _x in q.items:
            self._via.pop(seq, None)
        if q.items:  # rows committed after the subscription's own deletion (a no-op else)
            self._rows.forget([seq for seq, _x in q.items])
        ep = q.endpoint
        ep.queues.pop(sub_id, None)
        if not ep.queues:
            self._endpoints.pop(ep.key, None)
            self._sender.forget(ep.key)
            if ep.task is not None and ep.task is not asyncio.current_task():
                ep.task.cancel()

    def set_paused(self, sub_id: str, paused: bool) -> None:
        q = self._queues.get(sub_id)
        if q is not None:
            q.paused = paused
            q.endpoint.wake.set()

    def pending_seqs(self, sub_id: str) -> list[int]:
        """The seqs of a subscription's queued messages (oldest first)."""
        q = self._queues.get(sub_id)
        return [seq for seq, _x in q.items] if q else []

    def backlog(self, sub_id: str) -> int:
        q = self._queues.get(sub_id)
        return len(q.items) if q else 0

    def stats(self, sub_id: str) -> dict[str, int]:
        """queued/delivered/dropped of one subscription; requests = Notify requests sent
        so far to its consumer endpoint (shared with the endpoint's other subscriptions)."""
        q = self._queues.get(sub_id)
        if q is None:
            return {}
        return {
            "queued": len(q.items),
            "delivered": q.delivered,
            "dropped": q.dropped,
            "requests": q.endpoint.requests,
        }

    def state(self, sub_id: str) -> dict[str, float | int | None]:
        """For operators (gateway.status): backlog, delivered, dropped, failed requests to
        the consumer endpoint (total and current streak) and the last 2xx answer (epoch s)."""
        q = self._queues.get(sub_id)
        if q is None:
            return {}
        return {
            "backlog": len(q.items),
            "delivered": q.delivered,
            "dropped": q.dropped,
            "failures": q.endpoint.failures,
            "failing": q.endpoint.attempts,
            "last_delivery": q.last_delivery,
        }

    def last_error(self, sub_id: str) -> tuple[str, float] | None:
        """For operators: the error of the last failed request to the consumer endpoint of
        `sub_id` and when (epoch seconds), None if none failed; with `state`'s
        last_delivery, the time of its last success."""
        q = self._queues.get(sub_id)
        if q is None or q.endpoint.last_error is None or q.endpoint.last_error_at is None:
            return None
        return q.endpoint.last_error, q.endpoint.last_error_at

    def peer(self, sub_id: str) -> str | None:
        """The broker id the consumer of `sub_id` answered with, if it is a broker."""
        q = self._queues.get(sub_id)
        return q.endpoint.peer if q else None

    def overflow(self, sub_id: str, incoming: int) -> list[int]:
        """Seqs to drop (oldest first) so that `incoming` more fit the backlog bound."""
        q = self._queues.get(sub_id)
        if q is None:
            return []
        excess = len(q.items) + incoming - self.max_backlog
        if excess <= 0:
            return []
        drop = [s for s, _ in q.items[:excess]]
        del q.items[:excess]
        for s in drop:
            self._via.pop(s, None)
        q.dropped += len(drop)
        self._dropped(q, drop)
        return drop

    def enqueue(self, sub_id: str, seq: int, xml: str, via: tuple[str, ...] = ()) -> None:
        self.enqueue_many([(sub_id, seq, xml)], via)

    def enqueue_many(
        self, entries: Iterable[tuple[str, int, str]], via: tuple[str, ...] = ()
    ) -> None:
        """Queue committed messages, (sub_id, seq, xml) each (a subscription that is gone
        is skipped); one Notify's entries with one clock reading."""
        now = time.monotonic()
        queues = self._queues
        gone: list[int] = []
        for sub_id, seq, xml in entries:
            q = queues.get(sub_id)
            if q is None:  # it ended while the Notify committed: its row must not stay
                gone.append(seq)
                continue
            if via:
                self._via[seq] = via
            items = q.items
            if not items or items[-1][0] < seq:  # the usual case: the newest so far
                items.append((seq, xml))
            else:
                bisect.insort(items, (seq, xml))
            q.queued_at[seq] = now
            if len(items) > self.max_backlog:  # concurrent Notify raced past overflow()
                excess = len(items) - self.max_backlog
                drop = [s for s, _ in items[:excess]]
                del items[:excess]
                q.dropped += excess
                self._dropped(q, drop)
                for s in drop:
                    self._via.pop(s, None)
                self._rows.forget(drop)
            q.endpoint.wake.set()
        if gone:
            self._rows.forget(gone)

    def _dropped(self, q: Queue, seqs: list[int]) -> None:
        for s in seqs:
            q.queued_at.pop(s, None)
        self.metrics.delivered("dropped", len(seqs))
        self._log_dropped(q, len(seqs))

    def _log_dropped(self, q: Queue, n: int) -> None:
        """One WARNING when the subscription starts dropping, then at most one per
        DROP_LOG_INTERVAL with the count since the previous line (as gateway.http_limits
        does for dropped clients); `remove` logs what is left uncounted."""
        q.drops_unlogged += n
        now = time.monotonic()
        last = q.drop_logged_at
        if last is not None and now - last < DROP_LOG_INTERVAL:
            return
        q.drop_logged_at = now
        n, q.drops_unlogged = q.drops_unlogged, 0
        if last is None:
            log.warning(
                "subscription %s: backlog full (--max-backlog %d), dropped %d oldest messages;"
                " further drops are logged at most every %g s",
                q.target.sub_id, self.max_backlog, n, DROP_LOG_INTERVAL,
            )  # fmt: skip
        else:
            log.warning(
                "subscription %s: backlog full, dropped %d oldest messages since the last"
                " line %.0f s ago (%d in all)",
                q.target.sub_id, n, now - last, q.dropped,
            )  # fmt: skip

    # ---- the worker ----
    def _next_batch(self, ep: Endpoint) -> list[tuple[int, str, str]]:
        """Up to one request's worth of (seq, sub_id, xml), oldest first over the
        endpoint's sendable subscriptions: a prefix of each one's queue, so each
        subscription's order is kept."""
        n = 1 if ep.target.raw else self.batch
        ready = [(sid, q.items) for sid, q in ep.queues.items() if q.sendable]
        if len(ready) == 1:  # the usual case: one subscription per consumer endpoint
            sid, items = ready[0]
            return [(seq, sid, xml) for seq, xml in items[:n]]
        streams = [_tagged(sid, items) for sid, items in ready]
        return list(itertools.islice(heapq.merge(*streams), n))

    async def _worker(self, ep: Endpoint) -> None:
        while not self._closing:
            batch = self._next_batch(ep)
            if not batch:
                ep.wake.clear()
                await ep.wake.wait()
                continue
            if len(batch) < self.batch and not ep.target.raw:
                wait = self._pacer.wait(ep.started)
                if wait > 0:  # let more accumulate for one larger request
                    await asyncio.sleep(wait)
                    batch = self._next_batch(ep)  # paused, removed or grown meanwhile
                    if not batch:
                        continue
            ep.window, ep.started = self._pacer.started(ep.window)
            ep.requests += 1
            via: list[str] = []
            for seq, _s, _x in batch:
                via.extend(self._via.get(seq, ()))
            t = ep.target
            ids = [message_id(sid, seq) for seq, sid, _x in batch]
            ep.sending = True
            try:
                ok, why, peer = await self._sender.send(
                    ep.key, t.consumer, t.soap_version, t.raw, [x for _, _, x in batch],
                    tuple(via), ids,
                )  # fmt: skip
            finally:
                ep.sending = False
            ep.peer = peer or ep.peer
            if ok:
                self._delivered(ep, batch)
                continue
            if self._closing:  # stopping (the request was let finish): no retry now
                return
            now = time.monotonic()
            ep.last_error, ep.last_error_at = why, time.time()
            if ep.failing_since is None:
                ep.failing_since = now
                self._state_log.line(
                    "consumer_failing",
                    "consumer endpoint failing; retrying with backoff",
                    consumer=ep.target.consumer.address,
                    error=why,
                    subscriptions=len(ep.queues),
                    backlog=sum(len(q.items) for q in ep.queues.values()),
                )
            ep.attempts += 1
            ep.failures += 1
            if now - ep.failing_since >= self.dead_after:
                self._dead(ep, now - ep.failing_since, why)
                continue
            self.metrics.delivered("retried", len(batch))
            delay = min(self.backoff_max, self.backoff_initial * (2 ** (ep.attempts - 1)))
            delay *= random.uniform(0.5, 1.0)
            log.debug(  # a retry is not an operator event; consumer_dead is
                "delivery to %s failed (%s); retry %d in %.2fs",
                ep.target.consumer.address,
                why,
                ep.attempts,
                delay,
            )
            await asyncio.sleep(delay)

    def _delivered(self, ep: Endpoint, batch: list[tuple[int, str, str]]) -> None:
        """The consumer answered 2xx for `batch`: out of the queues, counted, rows deleted."""
        via = self._via
        if via:
            for seq, _s, _x in batch:
                via.pop(seq, None)
        by_sub: dict[str, list[int]] = {}
        for seq, sid, _x in batch:
            by_sub.setdefault(sid, []).append(seq)
        answered, wall = time.monotonic(), time.time()
        waited: list[float] = []
        for sid, done in by_sub.items():
            q = ep.queues.get(sid)
            if q is None:  # removed meanwhile; its rows are gone with it
                continue
            # the batch took a prefix of the queue (seq order); anything queued since has
            # a higher seq, unless overflow dropped some of that prefix meanwhile
            k = bisect.bisect_right(q.items, done[-1], key=_seq_of)
            if k == len(done) and q.items[0][0] == done[0]:
                del q.items[:k]
            else:
                gone = set(done)
                q.items = [it for it in q.items if it[0] not in gone]
            q.delivered += len(done)
            q.last_delivery = wall
            queued_at = q.queued_at
            for seq in done:
                t0 = queued_at.pop(seq, None)
                if t0 is not None:
                    waited.append(answered - t0)
        self.metrics.observe_delivery_latencies(waited)
        self.metrics.delivered("ok", len(batch))
        if ep.failing_since is not None:
            self._state_log.line(
                "consumer_recovered",
                "consumer endpoint answers again",
                consumer=ep.target.consumer.address,
                failed_attempts=ep.attempts,
                failing_for_s=round(answered - ep.failing_since, 1),
                last_error=ep.last_error,
            )
        ep.attempts = 0
        ep.failing_since = None
        self._rows.ack([seq for seq, _, _ in batch])

    def _dead(self, ep: Endpoint, failing_for: float, why: str) -> None:
        """End the subscriptions that were waiting on this dead consumer. Paused ones (and
        ones with nothing queued) were not trying to deliver and stay; they start a fresh
        failure window."""
        for sid, q in list(ep.queues.items()):
            if not q.sendable:
                continue
            q.dead = True
            self.metrics.delivered("failed", len(q.items))
            oplog.event(
                "consumer_dead",
                "consumer marked dead: ending its subscription",
                level=logging.WARNING,
                subscription=sid,
                consumer=q.target.consumer.address,
                failing_for_s=round(failing_for),
                error=why,
                backlog=len(q.items),
            )
            if self.on_dead is not None:
                # the broker then calls remove(), which may cancel this worker: run apart
                fut = asyncio.ensure_future(self.on_dead(sid))
                self._bg.add(fut)
                fut.add_done_callback(self._bg.discard)
        ep.failing_since = None
        ep.attempts = 0
