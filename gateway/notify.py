"""The Notify role (WS-BaseNotification 1.3 §3.2, WS-BrokeredNotification 1.0 §5.2): read a
Notify (gateway.notification_message), decide what accepting it means (a plan), commit that
in one transaction, then apply it to the state.

A caller may rely on:

* `notify_broker` / `notify_registration` answer a Notify posted to the broker or to a
  publisher registration's ConsumerReference; they return once the notifications are
  committed (a 202 means durably accepted, docs/gateway.md "Durability guarantee");
* `publish(ctx, publications)` is the one entry by which anything is published: a Notify
  over HTTP, and any producer inside the gateway (a camera poller, say) alike. It grows the
  Topic Set, plans, persists and applies, and returns once committed;
* `plan` is pure: it reads the state and returns what to store, land and deliver (`Plan`);
  `persist` writes a plan in one SQLite transaction (or faults: "not accepted") and only
  then `apply` updates delivery queues, current messages, pull points and the landing
  writers. Rendering (a wrapped message once per subscriber dialect) is gateway.render's.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from gateway import (
    filters,
    landing,
    loops,
    pullpoint_bytes,
    quotas,
    topics,
)
from gateway.context import Context, Reply
from gateway.metrics import Counts
from gateway.notification_message import Publication, parse_notify
from gateway.publishers import Registration
from gateway.render import Renderer
from gateway.state import BrokerState
from gateway.storage import AcceptBatch, AcceptResult, StorageError
from gateway.storage_schema import AFTER_SUBREF, WHOLE
from gateway.storage_seen import SeenKey
from gateway.subscriptions import Subscription
from gateway.wire import faults, ns
from gateway.wire.faults import RECEIVER, WsnFault
from gateway.wire.soap import SoapRequest
from gateway.wire.xmlutil import serialize_all

log = logging.getLogger("gateway.notify")


_MSG_PREFIX = os.urandom(8).hex()
_msg_seq = itertools.count()


def new_msg_id() -> str:
    """A message id, unique across restarts (a random prefix per process, then a counter),
    32 hex digits like a uuid4 but without a system call per message."""
    return f"{_MSG_PREFIX}{next(_msg_seq):016x}"


async def notify_broker(ctx: Context, req: SoapRequest, _broker: None) -> Reply:
    """A Notify posted to the broker (WS-BaseNotification 1.3 §3.2)."""
    return await _notify(ctx, req, None)


async def notify_registration(ctx: Context, req: SoapRequest, reg: Registration) -> Reply:
    """A Notify posted to a registration's ConsumerReference: attributed to its publisher
    (WS-BrokeredNotification 1.0 §5.4)."""
    ctx.state.registration_seen(reg.id, ctx.clock())
    return await _notify(ctx, req, reg)


async def _notify(ctx: Context, req: SoapRequest, reg: Registration | None) -> Reply:
    items = parse_notify(ctx, req, reg)
    via = loops.via_of(req.header)
    if not looped(ctx, via):
        key = ctx.dedupe.key_of(req, reg, items[0].producer if items else None)
        await ctx.dedupe.accept_once(key, lambda: publish(ctx, items, via, key, client=req.client))
    return None, []


def looped(ctx: Context, via: tuple[str, ...]) -> bool:
    why = loops.looped(via, ctx.loop_id)
    if why:
        ctx.counts.looped += 1
        log.info("Notify accepted but not published again: %s", why)
    return why is not None


def admitted(counts: Counts, ts: topics.TopicSet, items: list[Publication]) -> list[Publication]:
    """Drop the notifications their topic's messageTypes/MessagePattern do not admit
    (WS-Topics 1.3 §6): not delivered, not landed, not current; counted per topic in
    `counts.inadmissible`, logged once per topic. Dropped, not faulted: Notify is one-way
    (bw-2.wsdl declares no fault for it) and the admitted messages of the same Notify
    are still accepted (docs/gateway.md)."""
    out = []
    # per distinct topic of the Notify: its definition, if it constrains messages at all
    # (a topic without messageTypes and MessagePattern admits every message: not asked
    # per message)
    constraining: dict[topics.ConcreteTopic, topics.Topic | None] = {}
    for item in items:
        topic = item[0]
        if topic is None:
            out.append(item)
            continue
        if topic in constraining:
            d = constraining[topic]
        else:
            d = constraining[topic] = ts.constraining(topic)
        why = topics.inadmissible(d, str(topic), item[2]) if d is not None else None
        if why is None:
            if (
                d is not None
                and (cant := topics.unjudgeable(d))
                and _first_time(counts, (topic, "pattern"))
            ):
                log.warning("topic %s: %s; admitting every message", topic, cant)
            out.append(item)
            continue
        counts.inadmissible[str(topic)] += 1
        if _first_time(counts, (topic, "dropped")):
            log.warning("dropped a notification (counted, logged once per topic): %s", why)
    return out


def _first_time(counts: Counts, key: tuple[object, str]) -> bool:
    if key in counts.warned:
        return False
    counts.warned.add(key)
    return True


@dataclass
class Plan:
    """What accepting some notifications means, decided before anything is written."""

    batch: AcceptBatch
    #: topic -> its new current message (the last of the Notify on it)
    current: dict[topics.ConcreteTopic, str] = field(default_factory=dict)
    #: subscription -> how many deliveries it gets (for the backlog bound)
    deliveries_per_sub: dict[str, int] = field(default_factory=dict)
    #: the whole message of each of batch.deliveries, in order (for the delivery queues)
    delivery_xmls: list[str] = field(default_factory=list)
    accepted: int = 0


async def publish(
    ctx: Context,
    items: Sequence[Publication],
    via: tuple[str, ...] = (),
    seen: SeenKey | None = None,
    also: Sequence[topics.ConcreteTopic | None] | None = None,
    client: str = "",
) -> None:
    """Accept notifications (module docstring): topic growth (WS-Topics 1.3 §9), then the
    plan, then one commit, then the state. Returns once committed (a positive answer to
    Notify means durably accepted). `via`: the brokers they went through (gateway.loops);
    `seen`: the Notify's seen-set key (gateway.dedupe), committed with it; `also`: per
    item, a second name of its topic (a camera event's `dev:<camera>/...`,
    gateway.cameras): grown too, and its subscribers get the item once, under its topic;
    `client`: the address it came from, whose --max-client-topics bounds the topics it
    adds."""
    state = ctx.state
    if also is not None:  # admitted() may drop items: keep each second name with its item
        pairs = [(it, a) for it, a in zip(items, also, strict=True)]
        kept = {id(it) for it in admitted(ctx.counts, state.ts, [it for it, _ in pairs])}
        pubs = [it for it, _ in pairs if id(it) in kept]
        also = [a for it, a in pairs if id(it) in kept]
    else:
        pubs = admitted(ctx.counts, state.ts, list(items))
    now = ctx.clock()
    # each payload serialized once: stored, delivered and landed from the same text
    xmls = serialize_all([it[2] for it in pubs])  # only the namespaces each uses
    lines: list[tuple[str, str]] | None = None
    jsonl, parquet = ctx.landing.jsonl is not None, ctx.landing.parquet is not None
    if jsonl or parquet:
        # first, before any state is read: big records are built on another thread
        records = ctx.landing.records
        # (a Publication's message may be None; items_for reads only its first three)
        its = landing.items_for(pubs, records, new_msg_id, xmls)  # type: ignore[arg-type]
        lines = await records.lines(now, its)
    named = topics_of(pubs)
    if also is not None:
        named += [t for t in dict.fromkeys(also) if t is not None and t not in named]
    adds = [t for t in named if t not in state.ts]
    if adds:  # topic growth bounded per client address and in all (quotas.TOPICS)
        refused = ctx.quotas.refuse(quotas.TOPICS, client, len(adds))
        if refused is not None:
            raise faults.wsnt(
                "TopicNotSupportedFault",
                f"the Topic Set may not grow by {len(adds)} more topic(s): {refused}; "
                "publish on existing topics",
            )
    try:
        grown = state.grow_topics(named)
    except topics.TopicError as e:
        raise faults.from_topic_error(e) from None
    for t in grown:
        ctx.quotas.hold(quotas.TOPICS, client, quotas.topic_key(t.namespace, "/".join(t.path)))
    # XPath that is not proven linear (topic expressions, filters): off the event loop
    await state.index.prepare()
    render, ts = ctx.render, state.ts
    judge = await filters.prejudge(
        [_key(it[0], also[i] if also is not None else None) for i, it in enumerate(pubs)],
        lambda key: _subscribers(state, key, now),
        xmls,
        ctx.xpath,
        lambda: (render.producer_document(ts), ts.state),
    )
    p = plan(
        state,
        ctx.render,
        pubs,
        now,
        named=named,
        pp_limit=ctx.cfg.pullpoint_max_messages,
        landed=lines,
        jsonl=jsonl,
        parquet=parquet,
        via=via,
        peer=ctx.delivery.peer,
        payload_xmls=xmls,
        judge=judge,
        also=also,
    )
    p.batch.seen = seen  # and the topics a client holds, stored as its (quotas)
    p.batch.grown_clients = ctx.quotas.topic_holders(p.batch.grown)
    for sid, n in p.deliveries_per_sub.items():  # the backlog bound, in the same commit
        p.batch.drop_deliveries.extend(ctx.delivery.overflow(sid, n))
    res = await persist(ctx, p.batch)
    apply(ctx, p, res, via)
    ctx.state.devices_seen([(it[1].address if it[1] else None, it[0]) for it in pubs], now)


class _Both(NamedTuple):
    """A topic and its second name (`publish`'s `also`): whose subscribers are asked."""

    topic: topics.ConcreteTopic | None
    second: topics.ConcreteTopic


def _key(topic: topics.ConcreteTopic | None, second: topics.ConcreteTopic | None) -> object:
    return topic if second is None else _Both(topic, second)


def _subscribers(state: BrokerState, key: object, now: datetime) -> list[Subscription]:
    """Who wants an item under `key` (`_key`): the topic's subscribers, and its second
    name's, once each, in id order as state.wanting gives them."""
    if not isinstance(key, _Both):
        return state.wanting(key, now)  # type: ignore[arg-type]
    subs = state.wanting(key.topic, now)
    if extra := state.wanting(key.second, now):
        subs = sorted({s.id: s for s in (*subs, *extra)}.values(), key=lambda s: s.id)
    return subs


def topics_of(items: Sequence[Publication]) -> list[topics.ConcreteTopic]:
    """The distinct topics of `items`, in order."""
    out: dict[topics.ConcreteTopic, None] = {}
    for it in items:  # a loop, not a generator: once per message of a Notify
        if (t := it[0]) is not None:
            out[t] = None
    return list(out)


def _nobody(_sub_id: str) -> str | None:
    return None


def plan(
    state: BrokerState,
    render: Renderer,
    items: Sequence[Publication],
    now: datetime,
    *,
    named: Sequence[topics.ConcreteTopic] | None = None,
    pp_limit: int = 0,
    landed: list[tuple[str, str]] | None = None,
    jsonl: bool = False,
    parquet: bool = False,
    via: tuple[str, ...] = (),
    peer: Callable[[str], str | None] = _nobody,
    payload_xmls: Sequence[str] | None = None,
    judge: filters.Judge | None = None,
    also: Sequence[topics.ConcreteTopic | None] | None = None,
) -> Plan:
    """What to store, land and deliver for `items` (pure: reads the state). Their topics
    are in the Topic Set (`publish` grew it) and recorded as grown with the commit.
    `landed`: a (message id, landing line) per item, for the writers `jsonl`/`parquet`;
    `via`/`peer`: nothing goes back to a broker it came through (gateway.loops; `peer(id)`
    is the broker a subscription's consumer answered as); `payload_xmls`: the payloads
    already serialized, in order; `named`: `topics_of(items)` when the caller has it;
    `pp_limit`: the pull-point bound; `also`: per item, a second name of its topic
    (`publish`): its subscribers get the item too, once, and it is a current message there."""
    p = Plan(AcceptBatch(pp_limit=pp_limit), accepted=len(items))
    batch, current = p.batch, p.current
    ts = state.ts
    # recorded on every Notify (INSERT OR IGNORE): a topic grown in memory by a Notify
    # whose commit failed is persisted by the next one
    grown = topics_of(items) if named is None else named
    batch.grown = [(t.namespace, "/".join(t.path)) for t in grown]
    if payload_xmls is None:
        payload_xmls = serialize_all([it[2] for it in items])
    if judge is None:  # every filter judged here (prejudge has those that are not linear)
        judge = filters.Judge(list(payload_xmls), None)
    # who wants a topic depends on the topic and `now` only: asked once per topic
    wanting: dict[object, list[Subscription]] = judge.wanting
    for i, (topic, producer, _payload, _nm) in enumerate(items):
        payload_xml = payload_xmls[i]
        msg_id = landed[i][0] if landed is not None else new_msg_id()
        if topic is not None:
            # a notification on an alias topic is published on the topics it resolves
            # to (WS-Topics 2004 §8), so it is their current message too; the last
            # message of this Notify on a topic is the one kept
            current[topic] = payload_xml
            if ts.has_aliases:
                for t in topics.resolve_topic(topic, ts):
                    current[t] = payload_xml
        second = also[i] if also is not None else None
        if second is not None:
            current[second] = payload_xml
        if landed is not None:
            line = landed[i][1]
            if jsonl:
                batch.landing.append((msg_id, line))
            if parquet:
                batch.landing_parquet.append((msg_id, line))
        # stored once per distinct rendering (gateway/storage_schema.py): the part of a
        # wrapped message after its SubscriptionReference depends only on the subscriber's
        # dialect, a raw message is the payload; each subscriber's row references it
        rendered: dict[str | None, tuple[str, int]] = {}  # dialect (None: raw) -> text, ref
        key = _key(topic, second)
        subs = wanting.get(key)
        if subs is None:
            subs = wanting[key] = _subscribers(state, key, now)
        for sub in subs:
            if via and peer(sub.id) in via:  # never back where it came from
                continue
            if sub.content and not judge.matches(i, sub.content):
                continue
            if sub.producer and not judge.producer_matches(
                sub.producer, render.producer_document(ts), ts.state
            ):
                continue
            kind = None if sub.raw else sub.dialect
            hit = rendered.get(kind)
            if hit is None:
                if kind is None:
                    hit = (payload_xml, len(batch.renderings))
                    batch.renderings.append((WHOLE, payload_xml))
                else:
                    rest = render.rest(kind, topic, producer, payload_xml)
                    hit = (rest, len(batch.renderings))
                    batch.renderings.append((AFTER_SUBREF, rest))
                rendered[kind] = hit
            text, ref = hit
            if sub.pullpoint is not None:
                batch.pp_messages.append((sub.pullpoint, sub.id, ref))
            else:
                batch.deliveries.append((sub.id, ref))
                p.delivery_xmls.append(text if kind is None else render.wrapped(sub.id, text))
                p.deliveries_per_sub[sub.id] = p.deliveries_per_sub.get(sub.id, 0) + 1
    batch.current = [(t.namespace, "/".join(t.path), x) for t, x in current.items()]
    return p


async def persist(ctx: Context, batch: AcceptBatch) -> AcceptResult:
    """Commit `batch` in one transaction (the group commit's); a storage failure is the
    fault of a Notify not accepted (its publisher may send it again). The pull points'
    bytes are bounded and accounted (gateway.pullpoint_bytes)."""
    pullpoint_bytes.bound(ctx, batch)
    try:
        res = await ctx.storage.accept(batch)
    except StorageError as e:
        raise WsnFault(ns.BF, "BaseFault", f"notification not accepted: {e}", RECEIVER) from None
    pullpoint_bytes.account(ctx, res)
    return res


def apply(ctx: Context, p: Plan, res: AcceptResult, via: tuple[str, ...] = ()) -> None:
    """After the commit: queue the deliveries, update the state (current messages, pull
    points) and wake the landing writers."""
    batch = p.batch
    subs = [sid for sid, _r in batch.deliveries]
    ctx.delivery.enqueue_many(zip(subs, res.delivery_seqs, p.delivery_xmls, strict=True), via)
    into: dict[str, int] = {}
    if batch.pp_messages:
        counted, at = ctx.counts.into_pullpoints, time.time()
        for pid, sid, _r in batch.pp_messages:
            into[pid] = into.get(pid, 0) + 1
            if sid is not None:  # a pull-point subscription's deliveries (gateway.status)
                counted[sid] += 1
                ctx.counts.into_pullpoints_last[sid] = at
    ctx.state.notifications_accepted(p.current, into, res.pp_dropped)
    if ctx.landing.jsonl is not None:
        ctx.landing.jsonl.kick()
    if ctx.landing.parquet is not None:
        ctx.landing.parquet.kick(sum(len(x) for _, x in batch.landing_parquet))
    ctx.counts.accepted += p.accepted
