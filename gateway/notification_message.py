"""A Notify read (WS-BaseNotification 1.3 §3.2): its wsnt:NotificationMessages as the
publications the broker publishes (`Publication`), or the fault the spec names.

A caller may rely on:

* `parse_notify` returns one `Publication` per wsnt:NotificationMessage, in order, with the
  device topics of a registered publisher mapped into the broker's namespace (design.md),
  and the prefixes its topic text used learnt by the renderer; it changes no other state;
* a wsnt:Topic that is not one concrete topic, a Notify without NotificationMessage, a
  NotificationMessage without exactly one Message child, a topic outside a publisher's
  registration, or (on a broker that requires registration) an unregistered publisher is
  answered with its fault and nothing of the Notify is published.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple

from gateway import attribution, publishers, topics
from gateway.context import Context
from gateway.publishers import Registration
from gateway.topics.compile import cacheable
from gateway.wire import faults, ns
from gateway.wire.addressing import Epr, parse_epr
from gateway.wire.faults import SENDER, WsnFault
from gateway.wire.soap import SoapRequest
from gateway.wire.xmlutil import Element, children, elements, prefix_bindings


class Publication(NamedTuple):
    """One notification to publish: its topic in the broker's namespace (None: no topic),
    its producer, its payload (the wsnt:Message child) and the wsnt:NotificationMessage
    it came in (None when it did not come in a Notify)."""

    topic: topics.ConcreteTopic | None
    producer: Epr | None
    payload: Element
    message: Element | None = None


_publication = tuple.__new__

#: what a wsnt:Topic means depends on: Dialect (1.3 and 2004 spellings), text, the
#: namespaces of the prefixes the text uses (xmlutil.prefix_bindings)
_TopicKey = tuple[str | None, str | None, str | None, tuple[tuple[str, str], ...]]

_T_MESSAGE = ns.q(ns.WSNT, "Message")
_T_TOPIC = ns.q(ns.WSNT, "Topic")
_T_PRODUCER = ns.q(ns.WSNT, "ProducerReference")


def parse_notify(ctx: Context, req: SoapRequest, reg: Registration | None) -> list[Publication]:
    """The publications of a Notify posted to the broker (`reg` None) or to registration
    `reg`'s ConsumerReference, device topics mapped (design.md); faults as
    WS-BaseNotification 1.3 §3.2 says."""
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
        topic, used = _read_topic(tel) if tel is not None else (None, None)
        producer: Epr | None = None
        if pel is not None:
            with contextlib.suppress(ValueError):
                producer = parse_epr(pel)
        # the publisher's registration: the one posted to, else (when the broker requires
        # registration) the one its ProducerReference names
        r = reg
        if r is None and ctx.cfg.requires_registration:
            r = attribution.registration_for(ctx.state, producer, topic)
            if r is None:
                raise faults.br(
                    "PublisherRegistrationRejectedFault",
                    "this broker requires registration (br:RequiresRegistration=true): "
                    "send br:RegisterPublisher and post Notify to the ConsumerReference "
                    "it returns",
                )
        if r is not None:
            if topic is not None:
                topic = publishers.map_device_topic(topic, r.device_id, r.device_ns)
            if not r.allows(topic, ctx.state.ts):
                raise faults.wsnt(
                    "TopicNotSupportedFault",
                    f"topic {topic} is not among the topics registered by this publisher",
                )
            if producer is None:
                producer = r.publisher
        if used:  # topics keep their publisher's prefix (gateway/topics/prefixes.py)
            ctx.render.prefixes.learn(producer.address if producer is not None else None, used)
        # tuple.__new__: one C call (the NamedTuple's own __new__ is a Python function,
        # once per message of a 100-message Notify)
        out.append(_publication(Publication, (topic, producer, kids[0], nm)))
    return out


#: the concrete topics of the wsnt:Topic elements read so far, by what their meaning depends
#: on (_TopicKey); bounded, cleared when full, small keys only (topics.compile.cacheable)
_topics_read: dict[_TopicKey, tuple[topics.ConcreteTopic, dict[str, str]]] = {}
_TOPICS_READ_MAX = 4096


def _topic_of(tel: Element) -> topics.ConcreteTopic:
    """The one concrete topic a Notify's wsnt:Topic names (`_read_topic`)."""
    return _read_topic(tel)[0]


def _read_topic(tel: Element) -> tuple[topics.ConcreteTopic, dict[str, str]]:
    """The one concrete topic a Notify's wsnt:Topic names (WS-BaseNotification 1.3 §3.2),
    else the fault. What a wsnt:Topic means depends only on its dialect, text and in-scope
    namespaces (WS-Topics 1.3 §8): publishers repeat one topic in message after message and
    Notify after Notify, so it is looked up by those (`_topics_read`), not compiled and
    checked again (an element with child nodes is always compiled: its text is more than
    `.text`; a faulty one is never kept). With it, the prefix its text wrote per namespace."""
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
        _topics_read[key] = (topic, expr.prefixes_used())
        return _topics_read[key]
    return topic, expr.prefixes_used()
