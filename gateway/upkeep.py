"""The broker's state over time: restored from storage at start, swept of resources whose
TerminationTime has passed while it runs (WS-BaseNotification 1.3 §6.2.1: a paused
subscription expires too; WS-ResourceLifetime 1.2 §5 scheduled termination). gateway.app
runs both in its lifecycle.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import datetime, timedelta

from gateway import manager, publishers, registrations, subscriptions, topics
from gateway.context import Context
from gateway.followers import restore_account
from gateway.lifecycle import Why
from gateway.publishers import Registration
from gateway.resource import from_epoch
from gateway.state import PullPoint, Restored
from gateway.storage import StorageError, SubscriptionRow
from gateway.subscriptions import Subscription
from gateway.wire import ns
from gateway.wire.addressing import Epr
from gateway.wire.xmlutil import parse_xml

log = logging.getLogger("gateway.upkeep")


async def restore(ctx: Context) -> None:
    """Load storage's snapshot into the state (one transition) and queue the deliveries
    still pending. A subscription that no longer compiles (the Topic Set was made fixed
    since, say) is dropped with its pending deliveries; an unreadable registration is
    dropped from memory."""
    snap = ctx.storage.load()
    now = ctx.clock()
    ts = ctx.state.ts
    # grown topics first: a subscription's expression is validated against the Topic Set
    refused = ctx.state.restore_topics(
        [topics.ConcreteTopic(tns, tuple(path.split("/"))) for tns, path in snap.grown]
    )
    for t, e in refused:
        log.warning("not restoring grown topic %s: %s", t, e)
    r = Restored(
        current={
            topics.ConcreteTopic(tns, tuple(path.split("/")) if path else ()): xml
            for tns, path, xml in snap.current
        },
        pullpoints=[
            # its idle time starts again at a restart (the last read is not stored)
            PullPoint(pid, from_epoch(c) or now, queued=n, read=now)
            for pid, c, n in snap.pullpoints
        ],
    )
    for rr in snap.registrations:
        try:
            reg = Registration(
                rr.id,
                Epr.from_xml(rr.publisher) if rr.publisher else None,
                [(d, t, m) for d, t, m in json.loads(rr.topics)],
                rr.demand,
                from_epoch(rr.created) or now,
                from_epoch(rr.termination),
                rr.device_id,
            )
            reg.last_seen = from_epoch(rr.last_seen)
            publishers.compile_specs(reg)
            r.registrations.append(reg)
        except Exception:
            log.exception("dropping unreadable registration %s", rr.id)
    unusable: list[str] = []
    for row in snap.subscriptions:
        try:
            r.subscriptions.append(_subscription(row, ts, now))
        except Exception as e:  # e.g. the topic set was made fixed since
            log.warning("dropping subscription %s that no longer compiles: %s", row.id, e)
            unusable.append(row.id)
    ctx.state.restore(r)
    restore_account(ctx.quotas, snap, ctx.state)  # each client's quota, as it was
    by_sub: dict[str, list[tuple[int, str]]] = {}
    for m in snap.deliveries:
        by_sub.setdefault(m.owner, []).append((m.seq, ctx.render.stored(m)))
    for sub in r.subscriptions:
        for seq, xml in by_sub.get(sub.id, []):
            ctx.delivery.enqueue(sub.id, seq, xml)
    if unusable:
        seqs = [seq for sid in unusable for seq, _x in by_sub.get(sid, [])]
        await ctx.storage.delete_subscriptions(unusable, seqs)


def _subscription(row: SubscriptionRow, ts: topics.TopicSet, now: datetime) -> Subscription:
    pf = subscriptions.parse_filter(parse_xml(row.filter.encode()) if row.filter else None, ts)
    return Subscription(
        id=row.id,
        consumer=Epr.from_xml(row.consumer),
        raw=row.raw,
        created=from_epoch(row.created) or now,
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


async def sweep(ctx: Context) -> None:
    """End the subscriptions and registrations whose TerminationTime has passed (a paused
    subscription too)."""
    now = ctx.clock()
    subs, regs = ctx.state.expired(now)
    if subs:
        await manager.end(ctx, subs, Why.EXPIRED)
    if regs:
        await registrations.end(ctx, regs, Why.EXPIRED)
    idle = ctx.cfg.pullpoint_idle_expiry
    if idle > 0:
        for pid in ctx.state.idle_pullpoints(now - timedelta(seconds=idle)):
            # as DestroyPullPoint: the subscriptions feeding it end with it
            await ctx.storage.delete_pullpoint(pid, ctx.state.feeding(pid))
            if pid in ctx.state.pullpoints:
                ctx.state.destroy_pullpoint(pid, Why.IDLE)


async def sweeper(ctx: Context) -> None:
    """Sweep every --sweep-interval seconds until cancelled; a failed sweep is logged and
    tried again at the next. With each sweep, and once more when cancelled, the devices'
    last-seen times that moved are stored (`write_last_seen`)."""
    written = {r.id: r.last_seen for r in ctx.state.registrations.values()}
    try:
        while True:
            await asyncio.sleep(ctx.cfg.sweep_interval)
            try:
                await sweep(ctx)
                await write_last_seen(ctx, written)
            except StorageError as e:
                # a full disk is an operator's matter, not a bug: one line, no traceback;
                # what was not stored is tried again at the next sweep
                log.warning("expiry sweep could not store its changes, retrying: %s", e)
            except Exception:
                log.exception("expiry sweep failed; retrying")
            ctx.counts.sweeps += 1
    finally:
        try:
            await write_last_seen(ctx, written)
        except StorageError as e:
            log.warning("could not store the devices' last-seen times at shutdown: %s", e)
        except Exception:
            log.exception("could not store the devices' last-seen times at shutdown")


async def write_last_seen(ctx: Context, written: dict[str, datetime | None]) -> None:
    """Store the last-seen time of each registration whose time moved since `written` (what
    was stored, updated here): one transaction per sweep, not one per message, so a restart
    loses at most one --sweep-interval of it (docs/gateway.md "Devices")."""
    regs = ctx.state.registrations
    moved = [
        (r.id, r.last_seen)
        for r in regs.values()
        if r.last_seen is not None and written.get(r.id) != r.last_seen
    ]
    for gone in [i for i in written if i not in regs]:
        del written[gone]
    if moved:
        await ctx.storage.set_last_seen([(i, t.timestamp()) for i, t in moved])
        written.update(moved)
