"""What the broker writes about itself: its resources' addresses and EPRs, the
wsnt:NotificationMessage of a wrapped delivery (WS-BaseNotification 1.3 §3.2) and the
NotificationProducer's resource properties (§4.1).

A caller may rely on:

* a wrapped message is rendered once per subscriber dialect per notification: `rest` is
  everything after the SubscriptionReference, and `wrapped(sub_id, rest)` the whole message
  of one subscriber (its SubscriptionReference serialized once per subscription and cached);
  each rendering is stored once, and each subscriber's outbox row references it
  (gateway/storage_schema.py, `stored`);
* `producer_document(ts)` is the NotificationProducerRP document ProducerProperties filters
  are evaluated against, rebuilt only when the Topic Set changes.
"""

from __future__ import annotations

from collections.abc import Callable

from lxml import etree

from gateway import topics
from gateway.storage import Pending
from gateway.wire import ns
from gateway.wire.addressing import Epr, resource_epr
from gateway.wire.xmlutil import Element

_NM_NSMAP = {"wsnt": ns.WSNT, "wsa": ns.WSA}
#: the start and end tags lxml writes for a NotificationMessage made with _NM_NSMAP
_NM_START = f'<wsnt:NotificationMessage xmlns:wsnt="{ns.WSNT}" xmlns:wsa="{ns.WSA}">'
_NM_END = "</wsnt:NotificationMessage>"
#: placeholder text for the payload while rendering (the last text written, so the last
#: occurrence is it)
_PAYLOAD_MARK = "\u2063payload\u2063"

ALL_DIALECTS = (topics.SIMPLE, topics.CONCRETE, topics.FULL, topics.XPATH)


class Renderer:
    """Renders for one broker. `base_url` is fixed once the broker listens (gateway.app);
    `live()` is the number of subscriptions now, which bounds the SubscriptionReference
    cache (ended subscriptions fall out)."""

    def __init__(self, base_url: str, requires_registration: bool, live: Callable[[], int]):
        self.base_url = base_url.rstrip("/")
        self.requires_registration = requires_registration
        self._live = live
        self._subref: dict[str, str] = {}
        self._producer_doc: tuple[int, Element] | None = None
        #: the prefix each publisher wrote per namespace, reused when rendering its topics
        self.prefixes = topics.PrefixBook()

    # ------------------------------------------------------------------ addresses
    @property
    def broker_url(self) -> str:
        return f"{self.base_url}/wsn/broker"

    def url(self, kind: str, rid: str) -> str:
        """The address of resource `rid` of `kind` (subscriptions, pullpoints,
        registrations; docs/design.md "Gateway URL space")."""
        return f"{self.base_url}/wsn/{kind}/{rid}"

    def epr(self, kind: str, rid: str) -> Epr:
        """The EPR of a resource: its address and its id as edge:ResourceId."""
        return resource_epr(self.url(kind, rid), rid)

    # ------------------------------------------------------------------ messages (§3.2)
    def rest(
        self,
        dialect: str,
        topic: topics.ConcreteTopic | None,
        producer: Epr | None,
        payload_xml: str,
    ) -> str:
        """What follows the SubscriptionReference in a wsnt:NotificationMessage: Topic in
        the subscriber's dialect, ProducerReference, Message, and the end tag."""
        nm = etree.Element(ns.q(ns.WSNT, "NotificationMessage"), nsmap=_NM_NSMAP)
        if topic is not None:
            # topics keep their publisher's prefix (gateway/topics/prefixes.py, issue 25)
            prefixes = self.prefixes.choose(topic, producer.address if producer else None)
            dialect, text, nsmap = topics.render_topic(topic, dialect, prefixes)
            t = etree.SubElement(
                nm, ns.q(ns.WSNT, "Topic"), nsmap={k: v for k, v in nsmap.items() if k} or None
            )
            t.set("Dialect", dialect)
            t.text = text
        prod = producer or Epr(self.base_url + "/wsn/broker")
        nm.append(prod.to_element(ns.q(ns.WSNT, "ProducerReference")))
        etree.SubElement(nm, ns.q(ns.WSNT, "Message")).text = _PAYLOAD_MARK
        whole = etree.tostring(nm, encoding="unicode")
        # the payload is spliced in serialized (it carries its own namespace declarations):
        # no copy of its tree per rendering
        head, _, tail = whole[len(_NM_START) :].rpartition(_PAYLOAD_MARK)
        return head + payload_xml + tail

    def wrapped(self, sub_id: str, rest: str) -> str:
        """The whole wsnt:NotificationMessage of subscription `sub_id` whose part after the
        SubscriptionReference is `rest` (stored as storage_schema.AFTER_SUBREF)."""
        ref = self._subref.get(sub_id)  # per message and subscriber: the cache read inline
        return "".join((_NM_START, ref or self.subscription_reference(sub_id), rest))

    def stored(self, m: Pending) -> str:
        """The whole message a stored row stands for (storage.Pending)."""
        if m.after_subref and m.sub_id is not None:
            return self.wrapped(m.sub_id, m.xml)
        return m.xml

    def subscription_reference(self, sub_id: str) -> str:
        """The serialized wsnt:SubscriptionReference of a subscription (cached: it never
        changes), without the namespace declarations the message's start tag makes."""
        xml = self._subref.get(sub_id)
        if xml is None:
            if len(self._subref) > 2 * self._live() + 64:
                self._subref.clear()  # bounded: ended subscriptions fall out
            nm = etree.Element(ns.q(ns.WSNT, "NotificationMessage"), nsmap=_NM_NSMAP)
            nm.append(
                self.epr("subscriptions", sub_id).to_element(ns.q(ns.WSNT, "SubscriptionReference"))
            )
            whole = etree.tostring(nm, encoding="unicode")
            xml = whole[len(_NM_START) : -len(_NM_END)]
            self._subref[sub_id] = xml
        return xml

    # ------------------------------------------------------------------ producer (§4.1)
    def producer_properties(self, ts: topics.TopicSet) -> list[Element]:
        """§4.1 NotificationProducerRP + br:RequiresRegistration, built anew."""
        out: list[Element] = []
        for t in sorted(ts.topics(), key=str):
            dialect, text, nsmap = topics.render_topic(t, topics.CONCRETE)
            el = etree.Element(
                ns.q(ns.WSNT, "TopicExpression"),
                nsmap={k: v for k, v in nsmap.items() if k} or None,
            )
            el.set("Dialect", dialect)
            el.text = text
            out.append(el)
        fx = etree.Element(ns.q(ns.WSNT, "FixedTopicSet"))
        fx.text = "true" if ts.fixed else "false"
        out.append(fx)
        for d in ALL_DIALECTS:
            de = etree.Element(ns.q(ns.WSNT, "TopicExpressionDialect"))
            de.text = d
            out.append(de)
        out.append(ts.to_element())
        rr = etree.Element(ns.q(ns.BR, "RequiresRegistration"), nsmap={"br": ns.BR})
        rr.text = "true" if self.requires_registration else "false"
        out.append(rr)
        return out

    def producer_document(self, ts: topics.TopicSet) -> Element:
        """The NotificationProducerRP document (cached per Topic Set version). Read-only."""
        if self._producer_doc is None or self._producer_doc[0] != ts.version:
            doc = etree.Element(ns.q(ns.WSNT, "NotificationProducerRP"), nsmap={"wsnt": ns.WSNT})
            for el in self.producer_properties(ts):
                doc.append(el)
            root = etree.fromstring(etree.tostring(doc))
            self._producer_doc = (ts.version, root)
        return self._producer_doc[1]
