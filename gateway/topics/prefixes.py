"""Which namespace prefix a topic is written with when the broker renders it.

A prefix is arbitrary in XML and matching never looks at one (a :class:`ConcreteTopic`
has none), but clients compare topic *text*: Home Assistant and onvif-parsers look an
ONVIF event up by ``tns1:RuleEngine/CellMotionDetector/Motion``, literally. So a rendered
topic keeps the prefix its publisher wrote. Per namespace on the topic's path (its root
and each extension step, WS-Topics 1.3 §6.1), the first of these that is usable:

1. the prefix the topic's publisher last used for that namespace (:meth:`PrefixBook.learn`,
   from the wsnt:Topic of its Notify or a camera's own message);
2. the subscriber's prefix for it (the one its TopicExpression wrote);
3. a conventional prefix (:data:`CONVENTIONAL`: ``tns1`` for the ONVIF topic namespace,
   ``dev`` and ``dt`` for the device namespaces of docs/design.md);
4. ``tns``, ``tns1``, ``tns2``, ... (the first not taken).

Usable means: an NCName that does not start with ``xml`` (Namespaces in XML 1.0 §3 reserves
those), and not already given to another namespace of the same rendering (one element
declares each prefix once; rules 1-3 are applied to every namespace of the topic, in path
order, before rule 4 generates one). A caller may rely on that, on the choice depending on nothing
else, and on :class:`PrefixBook` staying bounded whatever its publishers send.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

from .model import ConcreteTopic, is_ncname, split_step

#: the ONVIF topic namespace (ONVIF Core Specification, "Topic Structure"): its events are
#: known by the text tns1:..., the prefix every ONVIF document and client uses
ONVIF_TOPICS = "http://www.onvif.org/ver10/topics"

#: rule 3: a namespace's conventional prefix where one is established
CONVENTIONAL: Mapping[str, str] = {
    ONVIF_TOPICS: "tns1",
    "urn:wsn-edge:devices": "dev",
    "urn:wsn-edge:device-topics": "dt",
}

#: publishers remembered (least recently seen forgotten first), namespaces per publisher
MAX_PUBLISHERS = 4096
MAX_NAMESPACES_PER_PUBLISHER = 64


def usable(prefix: str | None) -> bool:
    """An NCName not reserved by Namespaces in XML 1.0 §3 (``xml...``)."""
    return bool(prefix) and is_ncname(prefix or "") and not (prefix or "").lower().startswith("xml")


def namespaces_of(topic: ConcreteTopic) -> list[str]:
    """The namespaces a rendering of `topic` declares, in order along its path (the ad-hoc
    namespace "" of WS-Topics 1.3 §10 is written unprefixed and is not among them)."""
    out: list[str] = []
    if topic.namespace:
        out.append(topic.namespace)
    for step in topic.path[1:]:
        ns, _ = split_step(step)
        if ns and ns not in out:
            out.append(ns)
    return out


def choose(
    topic: ConcreteTopic,
    publisher: Mapping[str, str] | None = None,
    subscriber: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Namespace -> prefix for each namespace of `topic` by rules 1-4 of the module
    docstring; `publisher` and `subscriber` map namespace URIs to the prefixes each wrote."""
    spaces = namespaces_of(topic)
    out: dict[str, str] = {}
    taken: set[str] = set()
    for ns in spaces:  # rules 1-3 first, so a generated prefix never takes a wanted one
        for source in (publisher, subscriber, CONVENTIONAL):
            p = source.get(ns) if source else None
            if p is not None and usable(p) and p not in taken:
                out[ns] = p
                taken.add(p)
                break
    n = 0
    for ns in spaces:
        if ns not in out:
            while (pick := "tns" if n == 0 else f"tns{n}") in taken:
                n += 1
            out[ns] = pick
            taken.add(pick)
    return {ns: out[ns] for ns in spaces}


class PrefixBook:
    """Rule 1's record: per publisher (its address; None for Notify without one), the
    prefix it last used for each namespace. Bounded (MAX_PUBLISHERS,
    MAX_NAMESPACES_PER_PUBLISHER): a forgotten publisher's topics fall back to rules 2-4
    until it publishes again. In memory only: a restarted broker learns again from the next
    message (a stored, already rendered message is not rendered again)."""

    def __init__(
        self,
        max_publishers: int = MAX_PUBLISHERS,
        max_namespaces: int = MAX_NAMESPACES_PER_PUBLISHER,
    ) -> None:
        self._by_publisher: OrderedDict[str | None, dict[str, str]] = OrderedDict()
        self._max_publishers = max_publishers
        self._max_namespaces = max_namespaces

    def __len__(self) -> int:
        return len(self._by_publisher)

    def learn(self, publisher: str | None, used: Mapping[str, str]) -> None:
        """Record that `publisher` wrote namespace URI -> prefix `used` (unusable prefixes,
        rule-wise, are ignored). Cheap when nothing changes: publishers repeat themselves."""
        known = self._by_publisher.get(publisher)
        if known is not None:
            for ns, p in used.items():
                if known.get(ns) != p:
                    break
            else:
                return
        if known is None:
            known = self._by_publisher[publisher] = {}
            if len(self._by_publisher) > self._max_publishers:
                self._by_publisher.popitem(last=False)
        else:
            self._by_publisher.move_to_end(publisher)
        for ns, p in used.items():
            if not ns or not usable(p):
                continue
            if ns not in known and len(known) >= self._max_namespaces:
                known.pop(next(iter(known)))
            known[ns] = p

    def of(self, publisher: str | None) -> Mapping[str, str]:
        """What `publisher` used, namespace URI -> prefix (empty if unknown)."""
        return self._by_publisher.get(publisher) or {}

    def choose(
        self,
        topic: ConcreteTopic,
        publisher: str | None,
        subscriber: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        """:func:`choose` with `publisher`'s record as rule 1."""
        return choose(topic, self._by_publisher.get(publisher), subscriber)
