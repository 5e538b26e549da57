"""The Notify role (WS-BaseNotification 1.3 §3, WS-BrokeredNotification 1.3 §6): parse a
Notify, decide what accepting it means (a plan), and commit that in one transaction.

A caller may rely on:

* `notify_broker` / `notify_registration` answer a Notify posted to the broker or to a
  publisher registration's ConsumerReference; they return once the notifications are
  committed (a 202 means durably accepted, docs/gateway.md "Durability guarantee");
* `plan` is pure: it reads the broker's state and returns what to store, land and deliver
  (`Plan`); `commit` writes a plan in one SQLite transaction and only then updates the
  in-memory state (queues, current messages, pull points, landing writers);
* a wrapped message is rendered once per subscriber dialect per notification; only the
  SubscriptionReference differs between subscribers (`render_rest`,
  `subscription_reference`); each rendering is stored once, and each subscriber's outbox
  row references it (gateway/storage_schema.py, `stored_message`).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from lxml import etree

from gateway import dedupe, filters, landing, loops, publishers, topics
from gateway.producer import producer_rp_document
from gateway.publishers import Registration
from gateway.storage import AcceptBatch, Pending, StorageError
from gateway.storage_schema import AFTER_SUBREF, WHOLE
from gateway.topics.compile import cacheable
from gateway.wire import faults, ns
from gateway.wire.addressing import Epr, parse_epr, resource_epr
from gateway.wire.faults import RECEIVER, SENDER, WsnFault
from gateway.wire.soap import SoapRequest
from gateway.wire.xmlutil import Element, children, elements, prefix_bindings, serialize_all

if TYPE_CHECKING:
    from gateway.broker import NotificationBroker, Reply
    from gateway.subscriptions import Subscription

log = logging.getLogger("gateway.broker")

#: one notification of a Notify: (topic in the broker's namespace, producer, payload,
#: the NotificationMessage as received)
Item = tuple[topics.ConcreteTopic | None, Epr | None, Element, Element]

#: what a wsnt:Topic means depends on: Dialect (1.3 and 2004 spellings), text, the
#: namespaces of the prefixes the text uses (xmlutil.prefix_bindings)
_TopicKey = tuple[str | None, str | None, str | None, tuple[tuple[str, str], ...]]

_T_MESSAGE = ns.q(ns.WSNT, "Message")
_T_TOPIC = ns.q(ns.WSNT, "Topic")
_T_PRODUCER = ns.q(ns.WSNT, "ProducerReference")

_NM_NSMAP = {"wsnt": ns.WSNT, "wsa": ns.WSA}
#: the start and end tags lxml writes for a NotificationMessage made with _NM_NSMAP
_NM_START = f'<wsnt:NotificationMessage xmlns:wsnt="{ns.WSNT}" xmlns:wsa="{ns.WSA}">'
_NM_END = "</wsnt:NotificationMessage>"
#: placeholder text for the payload while rendering (the last text written, so the last
#: occurrence is it)
_PAYLOAD_MARK = "\u2063payload\u2063"

_MSG_PREFIX = os.urandom(8).hex()
_msg_seq = itertools.count()


def new_msg_id() -> str:
    """A message id, unique across restarts (a random prefix per process, then a counter),
    32 hex digits like a uuid4 but without a system call per message."""
    return f"{_MSG_PREFIX}{next(_msg_seq):016x}"


def parse_notify(b: NotificationBroker, req: SoapRequest, reg: Registration | None) -> list[Item]:
    """(topic in the broker's namespace, producer, payload, original NotificationMessage)."""
    payload = req.payload
    if payload.tag != ns.q(ns.WSNT, "Notify"):
        raise faults.wsnt("InvalidMessageContentExpressionFault", "not a Notify")
    out = []
    msgs = children(payload, ns.q(ns.WSNT, "NotificationMessage"))
    if not msgs:
        raise WsnFault(ns.BF, "BaseFault", "Notify has no wsnt:NotificationMessage", SENDER)
    for nm in msgs:
        # one pass over the message's children (the first of each kind counts)
        mel = tel = pel = None
        for c in nm:
            tag = c.tag
            if tag == _T_MESSAGE:
                mel = c if mel is None else mel
            elif tag == _T_TOPIC:
                tel = c if tel is None else tel
            elif tag == _T_PRODUCER:
                pel = c if pel is None else pel
        kids = elements(mel) if mel is not None else []
        if len(kids) != 1:
            raise WsnFault(
                ns.BF,
                "BaseFault",
                "each wsnt:NotificationMessage needs a wsnt:Message with exactly one element",
                SENDER,
            )
        topic = _topic_of(tel) if tel is not None else None
        producer: Epr | None = None
        if pel is not None:
            with contextlib.suppress(ValueError):
                producer = parse_epr(pel)
        # the publisher's registration: the one posted to, else (when the broker requires
        # registration) the one its ProducerReference names
        r = reg
        if r is None and b.cfg.requires_registration:
            r = registration_for(b, producer)
            if r is None:
                raise faults.br(
                    "PublisherRegistrationRejectedFault",
                    "this broker requires registration (br:RequiresRegistration=true): "
                    "send br:RegisterPublisher and post Notify to the ConsumerReference "
                    "it returns",
                )
        if r is not None:
            if topic is not None:
                topic = publishers.map_device_topic(topic, r.device_id)
            if not r.allows(topic, b.ts):
                raise faults.wsnt(
                    "TopicNotSupportedFault",
                    f"topic {topic} is not among the topics registered by this publisher",
                )
            if producer is None:
                producer = r.publisher
        out.append((topic, producer, kids[0], nm))
    return out


#: the concrete topics of the wsnt:Topic elements read so far, by what their meaning depends
#: on (_TopicKey); bounded, cleared when full, small keys only (topics.compile.cacheable)
_topics_read: dict[_TopicKey, topics.ConcreteTopic] = {}
_TOPICS_READ_MAX = 4096


def _topic_of(tel: Element) -> topics.ConcreteTopic:
    """The one concrete topic a Notify's wsnt:Topic names (WS-BaseNotification 1.3 §3.2),
    else the fault. What a wsnt:Topic means depends only on its dialect, text and in-scope
    namespaces (WS-Topics 1.3 §8): publishers repeat one topic in message after message and
    Notify after Notify, so it is looked up by those (`_topics_read`), not compiled and
    checked again (an element with child nodes is always compiled: its text is more than
    `.text`; a faulty one is never kept)."""
    key: _TopicKey | None = None
    if len(tel) == 0:
        text = tel.text
        key = (tel.get("Dialect"), tel.get("dialect"), text, prefix_bindings(tel, text or ""))
        hit = _topics_read.get(key)
        if hit is not None:
            return hit
    try:
        expr = topics.parse_topic_expression_element(tel)
    except topics.TopicError as e:
        raise faults.from_topic_error(e) from None
    topic = expr.single_topic()
    if topic is None:
        raise faults.wsnt(
            "InvalidTopicExpressionFault",
            f"the wsnt:Topic of a Notify must name one concrete topic, not {expr.text!r}",
        )
    # the dialect attributes count too: canonical_dialect strips its URI, so a padded
    # Dialect is accepted and would otherwise park its own size in each entry
    if key is not None and cacheable((key[0] or "") + (key[1] or "") + (key[2] or ""), key[3]):
        if len(_topics_read) >= _TOPICS_READ_MAX:
            _topics_read.clear()
        _topics_read[key] = topic
    return topic


def registration_for(b: NotificationBroker, producer: Epr | None) -> Registration | None:
    if producer is None:
        return None
    for r in b.registrations.values():
        if r.publisher is not None and r.publisher.address == producer.address:
            return r
    return None


async def notify_broker(b: NotificationBroker, req: SoapRequest) -> Reply:
    items = parse_notify(b, req, None)
    via = loops.via_of(req.header)
    if not looped(b, via):
        key = dedupe.key_of(b, req, None, items)
        await dedupe.accept_once(b, key, lambda: publish(b, items, via, key))
    return None, []


async def notify_registration(b: NotificationBroker, req: SoapRequest, reg: Registration) -> Reply:
    reg.last_seen = b.clock()
    items = parse_notify(b, req, reg)
    via = loops.via_of(req.header)
    if not looped(b, via):
        key = dedupe.key_of(b, req, reg, items)
        await dedupe.accept_once(b, key, lambda: publish(b, items, via, key))
    return None, []


def looped(b: NotificationBroker, via: tuple[str, ...]) -> bool:
    why = loops.looped(via, b.loop_id)
    if why:
        b.looped += 1
        log.info("Notify accepted but not published again: %s", why)
    return why is not None


def admitted(b: NotificationBroker, items: list[Item]) -> list[Item]:
    """Drop the notifications their topic's messageTypes/MessagePattern do not admit
    (WS-Topics 1.3 §6): not delivered, not landed, not current; counted per topic in
    `inadmissible`, logged once per topic. Dropped, not faulted: Notify is one-way
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
            d = constraining[topic] = b.ts.constraining(topic)
        why = topics.inadmissible(d, str(topic), item[2]) if d is not None else None
        if why is None:
            if (
                d is not None
                and (cant := topics.unjudgeable(d))
                and _log_once(b, (topic, "pattern"))
            ):
                log.warning("topic %s: %s; admitting every message", topic, cant)
            out.append(item)
            continue
        b.inadmissible[str(topic)] += 1
        if _log_once(b, (topic, "dropped")):
            log.warning("dropped a notification (counted, logged once per topic): %s", why)
    return out


def _log_once(b: NotificationBroker, key: tuple[topics.ConcreteTopic | None, str]) -> bool:
    if key in b._logged_topics:
        return False
    b._logged_topics.add(key)
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
    b: NotificationBroker,
    items: list[Item],
    via: tuple[str, ...] = (),
    seen: tuple[str, str] | None = None,
) -> None:
    """Accept notifications: topic growth (WS-Topics 1.3 §9), then the plan, then one
    commit. Returns once it is committed (a positive answer to Notify means durably
    accepted). `seen`: the Notify's seen-set key (gateway.dedupe), committed with it."""
    items = admitted(b, items)
    now = b.clock()
    # each payload serialized once: stored, delivered and landed from the same text
    xmls = serialize_all([it[2] for it in items])  # only the namespaces each uses
    landed: list[tuple[str, str]] | None = None
    if b.landing is not None or b.landing_parquet is not None:
        # first, before any state is read: big records are built on another thread
        its = landing.items_for(items, b.records, new_msg_id, xmls)
        landed = await b.records.lines(now, its)
    grown, grown_now = grow_topics(b, items)
    # XPath that is not proven linear (topic expressions, filters): off the event loop
    await b.index.prepare()
    judge = await filters.prejudge(
        [it[0] for it in items],
        lambda t: b.wanting(t, now),
        xmls,
        b.xpath,
        lambda: (producer_rp_document(b), b.ts.state),
    )
    p = plan(b, items, now, landed, via, xmls, judge)
    p.batch.grown = grown
    p.batch.seen = seen
    await commit(b, p, via)
    if grown_now:
        b._recompute_demand()


def grow_topics(
    b: NotificationBroker, items: list[Item]
) -> tuple[list[tuple[str, str]], list[topics.ConcreteTopic]]:
    """Add the Notify's topics the Topic Set lacks (§9; faults if a fixed set or final
    namespace forbids one). Returns the rows to record and the topics new in memory."""
    rows: list[tuple[str, str]] = []
    grown_now: list[topics.ConcreteTopic] = []
    seen: set[topics.ConcreteTopic] = set()
    for topic, _p, _pl, _nm in items:
        if topic is None or topic in seen:
            continue
        seen.add(topic)
        if topic not in b.ts:
            try:
                if b.ts.grow(topic):
                    grown_now.append(topic)
            except topics.TopicError as e:
                raise faults.from_topic_error(e) from None
        # recorded on every Notify (INSERT OR IGNORE): a topic grown in memory by a
        # Notify whose commit failed is persisted by the next one
        rows.append((topic.namespace, "/".join(topic.path)))
    return rows, grown_now


def plan(
    b: NotificationBroker,
    items: list[Item],
    now: datetime,
    landed: list[tuple[str, str]] | None,
    via: tuple[str, ...] = (),
    payload_xmls: list[str] | None = None,
    judge: filters.Judge | None = None,
) -> Plan:
    """What to store, land and deliver for `items` (pure: reads the broker's state).
    `payload_xmls`, if given, are the payloads already serialized, in order."""
    p = Plan(AcceptBatch(pp_limit=b.cfg.pullpoint_max_messages), accepted=len(items))
    batch, current = p.batch, p.current
    if payload_xmls is None:
        payload_xmls = serialize_all([it[2] for it in items])
    if judge is None:  # every filter judged here (prejudge has those that are not linear)
        judge = filters.Judge(payload_xmls, None)
    # who wants a topic depends on the topic and `now` only: asked once per topic
    wanting: dict[topics.ConcreteTopic | None, list[Subscription]] = judge.wanting
    for i, (topic, producer, _payload, _nm) in enumerate(items):
        payload_xml = payload_xmls[i]
        msg_id = landed[i][0] if landed is not None else new_msg_id()
        if topic is not None:
            # a notification on an alias topic is published on the topics it resolves
            # to (WS-Topics 2004 §8), so it is their current message too; the last
            # message of this Notify on a topic is the one kept
            current[topic] = payload_xml
            if b.ts.has_aliases:
                for t in topics.resolve_topic(topic, b.ts):
                    current[t] = payload_xml
        if landed is not None:
            line = landed[i][1]
            if b.landing is not None:
                batch.landing.append((msg_id, line))
            if b.landing_parquet is not None:
                batch.landing_parquet.append((msg_id, line))
        # stored once per distinct rendering (gateway/storage_schema.py): the part of a
        # wrapped message after its SubscriptionReference depends only on the subscriber's
        # dialect, a raw message is the payload; each subscriber's row references it
        rendered: dict[str | None, tuple[str, int]] = {}  # dialect (None: raw) -> text, ref
        subs = wanting.get(topic)
        if subs is None:
            subs = wanting[topic] = b.wanting(topic, now)
        for sub in subs:
            if via and b.delivery.peer(sub.id) in via:  # never back where it came from
                continue
            if sub.content and not judge.matches(i, sub.content):
                continue
            if sub.producer and not judge.producer_matches(
                sub.producer, producer_rp_document(b), b.ts.state
            ):
                continue
            kind = None if sub.raw else sub.dialect
            hit = rendered.get(kind)
            if hit is None:
                if kind is None:
                    hit = (payload_xml, len(batch.renderings))
                    batch.renderings.append((WHOLE, payload_xml))
                else:
                    rest = render_rest(b, kind, topic, producer, payload_xml)
                    hit = (rest, len(batch.renderings))
                    batch.renderings.append((AFTER_SUBREF, rest))
                rendered[kind] = hit
            text, ref = hit
            if sub.pullpoint is not None:
                batch.pp_messages.append((sub.pullpoint, sub.id, ref))
            else:
                batch.deliveries.append((sub.id, ref))
                p.delivery_xmls.append(text if kind is None else wrapped_message(b, sub.id, text))
                p.deliveries_per_sub[sub.id] = p.deliveries_per_sub.get(sub.id, 0) + 1
    batch.current = [(t.namespace, "/".join(t.path), x) for t, x in current.items()]
    return p


async def commit(b: NotificationBroker, p: Plan, via: tuple[str, ...] = ()) -> None:
    """Write the plan in one transaction (backlog overflow dropped in the same one), then
    apply it to the in-memory state."""
    batch = p.batch
    for sid, n in p.deliveries_per_sub.items():
        batch.drop_deliveries.extend(b.delivery.overflow(sid, n))
    try:
        res = await b.storage.accept(batch)
    except StorageError as e:
        raise WsnFault(ns.BF, "BaseFault", f"notification not accepted: {e}", RECEIVER) from None
    subs = [sid for sid, _r in batch.deliveries]
    b.delivery.enqueue_many(zip(subs, res.delivery_seqs, p.delivery_xmls, strict=True), via)
    b.current.update(p.current)
    touched: set[str] = set()
    for pid, _s, _r in batch.pp_messages:
        pp = b.pullpoints.get(pid)
        if pp is not None:
            pp.queued += 1
            touched.add(pid)
    for pid, n in res.pp_dropped.items():
        pp = b.pullpoints.get(pid)
        if pp is not None:
            pp.queued -= n
            pp.dropped += n
    for pid in touched:
        b.pullpoints[pid].signal()
    if b.landing is not None:
        b.landing.kick()
    if b.landing_parquet is not None:
        b.landing_parquet.kick(sum(len(x) for _, x in batch.landing_parquet))
    b.accepted += p.accepted


def wrapped_message(b: NotificationBroker, sub_id: str, rest: str) -> str:
    """The whole wsnt:NotificationMessage of subscription `sub_id` whose part after the
    SubscriptionReference is `rest` (`render_rest`; stored as storage_schema.AFTER_SUBREF)."""
    ref = b._subref_xml.get(sub_id)  # per message and subscriber: the cache read inline
    return "".join((_NM_START, ref or subscription_reference(b, sub_id), rest))


def stored_message(b: NotificationBroker, m: Pending) -> str:
    """The whole message a stored row stands for (storage.Pending)."""
    if m.after_subref and m.sub_id is not None:
        return wrapped_message(b, m.sub_id, m.xml)
    return m.xml


def subscription_reference(b: NotificationBroker, sub_id: str) -> str:
    """The serialized wsnt:SubscriptionReference of a subscription (cached: it never
    changes), without the namespace declarations _NM_START makes."""
    xml = b._subref_xml.get(sub_id)
    if xml is None:
        if len(b._subref_xml) > 2 * len(b.subs) + 64:
            b._subref_xml.clear()  # bounded: ended subscriptions fall out
        nm = etree.Element(ns.q(ns.WSNT, "NotificationMessage"), nsmap=_NM_NSMAP)
        nm.append(
            resource_epr(b.urls("subscriptions", sub_id), sub_id).to_element(
                ns.q(ns.WSNT, "SubscriptionReference")
            )
        )
        whole = etree.tostring(nm, encoding="unicode")
        xml = whole[len(_NM_START) : -len(_NM_END)]
        b._subref_xml[sub_id] = xml
    return xml


def render_rest(
    b: NotificationBroker,
    dialect: str,
    topic: topics.ConcreteTopic | None,
    producer: Epr | None,
    payload_xml: str,
) -> str:
    """What follows the SubscriptionReference in a wsnt:NotificationMessage (§3.2):
    Topic in the subscriber's dialect, ProducerReference, Message, and the end tag.
    `_NM_START + _subscription_reference(id) + this` is the whole message."""
    nm = etree.Element(ns.q(ns.WSNT, "NotificationMessage"), nsmap=_NM_NSMAP)
    if topic is not None:
        dialect, text, nsmap = topics.render_topic(topic, dialect)
        t = etree.SubElement(
            nm, ns.q(ns.WSNT, "Topic"), nsmap={k: v for k, v in nsmap.items() if k} or None
        )
        t.set("Dialect", dialect)
        t.text = text
    prod = producer or Epr(b.base_url + "/wsn/broker")
    nm.append(prod.to_element(ns.q(ns.WSNT, "ProducerReference")))
    etree.SubElement(nm, ns.q(ns.WSNT, "Message")).text = _PAYLOAD_MARK
    whole = etree.tostring(nm, encoding="unicode")
    # the payload is spliced in serialized (it carries its own namespace declarations):
    # no copy of its tree per rendering
    head, _, tail = whole[len(_NM_START) :].rpartition(_PAYLOAD_MARK)
    return head + payload_xml + tail
