"""Push delivery to NotificationConsumers: one queue and one worker per subscription.

- Batching: everything pending for a wrapped subscription goes out as one wsnt:Notify with
  several NotificationMessages (up to --delivery-batch); raw subscriptions get one message
  per HTTP request (the payload element is the SOAP body, WS-BaseNotification 1.3 §4.2 UseRaw).
- Failures: timeout, connection error or a non-2xx answer -> retry the same batch after a
  jittered exponential backoff (initial * 2^n, capped, times a random factor in [0.5, 1]).
- Isolation: each subscription has its own asyncio task, HTTP timeout and backlog, so a slow
  or dead consumer never delays another.
- Backlog bound (policy, documented in docs/gateway.md): at most --max-backlog messages
  wait per subscription; beyond that the OLDEST are dropped (newest readings matter most at
  the edge) and counted. A consumer failing continuously for --consumer-dead-after seconds
  ends its subscription (the broker destroys it and its backlog).
- Durability: queued messages are rows in SQLite until the consumer acknowledged them, so
  they are sent again after a restart (at-least-once).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
from lxml import etree

from gateway import ns, soap
from gateway.addressing import Epr, request_headers
from gateway.storage import Storage
from gateway.xmlutil import parse_xml

log = logging.getLogger("gateway.delivery")


@dataclass
class Target:
    """Where and how one subscription's messages go."""

    sub_id: str
    consumer: Epr
    raw: bool
    soap_version: str = ns.SOAP12


@dataclass
class _Queue:
    target: Target
    items: list[tuple[int, str]] = field(default_factory=list)  # (seq, xml) sorted by seq
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    paused: bool = False
    task: asyncio.Task[None] | None = None
    failing_since: float | None = None
    attempts: int = 0
    delivered: int = 0
    dropped: int = 0


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
        on_dead: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.storage = storage
        self.timeout = timeout
        self.batch = batch
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.dead_after = dead_after
        self.max_backlog = max_backlog
        self.on_dead = on_dead
        self._queues: dict[str, _Queue] = {}
        self._session: aiohttp.ClientSession | None = None
        self._closing = False
        self._bg: set[asyncio.Future[None]] = set()

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, limit_per_host=8),
            auto_decompress=True,
        )

    async def stop(self) -> None:
        self._closing = True
        tasks = [q.task for q in self._queues.values() if q.task is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        for f in list(self._bg):  # row deletions still queued are redone after a restart
            f.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await f
        if self._session is not None:
            await self._session.close()

    # ---- bookkeeping ----
    def add(self, target: Target, paused: bool = False) -> None:
        q = _Queue(target, paused=paused)
        self._queues[target.sub_id] = q
        q.task = asyncio.create_task(self._worker(q), name=f"deliver-{target.sub_id}")

    def remove(self, sub_id: str) -> None:
        q = self._queues.pop(sub_id, None)
        if q is not None and q.task is not None:
            q.task.cancel()

    def set_paused(self, sub_id: str, paused: bool) -> None:
        q = self._queues.get(sub_id)
        if q is not None:
            q.paused = paused
            q.wake.set()

    def backlog(self, sub_id: str) -> int:
        q = self._queues.get(sub_id)
        return len(q.items) if q else 0

    def stats(self, sub_id: str) -> dict[str, int]:
        q = self._queues.get(sub_id)
        if q is None:
            return {}
        return {"queued": len(q.items), "delivered": q.delivered, "dropped": q.dropped}

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
        q.dropped += len(drop)
        log.warning("subscription %s: backlog full, dropped %d oldest messages", sub_id, len(drop))
        return drop

    def enqueue(self, sub_id: str, seq: int, xml: str) -> None:
        q = self._queues.get(sub_id)
        if q is None:
            return
        bisect.insort(q.items, (seq, xml))
        if len(q.items) > self.max_backlog:  # concurrent Notify raced past overflow()
            excess = len(q.items) - self.max_backlog
            drop = [s for s, _ in q.items[:excess]]
            del q.items[:excess]
            q.dropped += excess
            self._forget(drop)
        q.wake.set()

    def _forget(self, seqs: list[int]) -> None:
        """Delete dropped rows in the background (they must not come back on restart)."""
        fut = asyncio.ensure_future(self.storage.delete_deliveries(seqs))
        self._bg.add(fut)
        fut.add_done_callback(self._bg.discard)

    # ---- the worker ----
    async def _worker(self, q: _Queue) -> None:
        while not self._closing:
            if not q.items or q.paused:
                q.wake.clear()
                await q.wake.wait()
                continue
            n = 1 if q.target.raw else self.batch
            batch = q.items[:n]
            ok, why = await self._send(q.target, [x for _, x in batch])
            if ok:
                seqs = [s for s, _ in batch]
                done = set(seqs)
                q.items = [it for it in q.items if it[0] not in done]
                q.delivered += len(batch)
                q.attempts = 0
                q.failing_since = None
                try:
                    await self.storage.delete_deliveries(seqs)
                except Exception:  # at-least-once: a row left behind is sent again later
                    log.exception("could not delete delivered rows")
                continue
            now = time.monotonic()
            if q.failing_since is None:
                q.failing_since = now
            q.attempts += 1
            if now - q.failing_since >= self.dead_after:
                log.warning(
                    "consumer of %s dead for %.0fs (%s): ending subscription",
                    q.target.sub_id,
                    now - q.failing_since,
                    why,
                )
                if self.on_dead is not None:
                    # this task is about to be cancelled by remove(): run the callback apart
                    fut = asyncio.ensure_future(self.on_dead(q.target.sub_id))
                    self._bg.add(fut)
                    fut.add_done_callback(self._bg.discard)
                return
            delay = min(self.backoff_max, self.backoff_initial * (2 ** (q.attempts - 1)))
            delay *= random.uniform(0.5, 1.0)
            log.info(
                "delivery to %s failed (%s); retry %d in %.2fs",
                q.target.consumer.address,
                why,
                q.attempts,
                delay,
            )
            await asyncio.sleep(delay)

    async def _send(self, t: Target, xmls: list[str]) -> tuple[bool, str]:
        assert self._session is not None
        if t.raw:
            body_children = [parse_xml(xmls[0].encode())]
            action = ns.A_NOTIFY
        else:
            notify = etree.Element(ns.q(ns.WSNT, "Notify"), nsmap={"wsnt": ns.WSNT})
            for x in xmls:
                notify.append(parse_xml(x.encode()))
            body_children = [notify]
            action = ns.A_NOTIFY
        data = soap.envelope(t.soap_version, request_headers(t.consumer, action), body_children)
        headers = {"Content-Type": soap.content_type(t.soap_version, action)}
        if t.soap_version == ns.SOAP11:
            headers["SOAPAction"] = f'"{action}"'
        try:
            async with self._session.post(
                t.consumer.address,
                data=data,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                allow_redirects=False,
            ) as resp:
                await resp.read()
                if 200 <= resp.status < 300:
                    return True, ""
                return False, f"HTTP {resp.status}"
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            return False, f"{type(e).__name__}: {e}"
