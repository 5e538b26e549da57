"""The producer's Topic Set (WS-Topics 1.3 §7), growable at run time (§9).

A caller may rely on:

* membership (``topic in ts``) is exactly "the TopicSet document has an
  element for the topic with ``wstop:topic="true"``";
* ``ts.version`` changes on every change of membership or of the loaded
  namespaces, and only then: caches may key on ``(id(ts), ts.version)``;
* :meth:`TopicSet.grow` refuses (``TopicNotSupported``, with the reason) a
  topic a final namespace or a final ancestor forbids (§5, §6, §9), and every
  new topic when the set is fixed; a namespace URI that is not loaded behaves
  like the ad-hoc namespace (§10): any root, any child;
* :meth:`TopicSet.to_element` is a fresh copy of the §7 document: root topics
  namespace-qualified (ad-hoc ones unqualified), children unqualified,
  extension topics qualified under their parent, ``wstop:topic="true"`` only on
  members, ancestors that are not members present without it, no default
  namespace; prefixes ``tns``, ``tns1``, ... in order of first use.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator

from lxml import etree

from .errors import (
    InvalidTopicExpression,
    InvalidTopicNamespace,
    TopicNotInFixedSet,
    TopicNotPermitted,
    TopicNotSupported,
)
from .model import WSTOP, ConcreteTopic, Topic, TopicNamespace, make_step, split_step

_TOPIC_ATTR = "{" + WSTOP + "}topic"
_TOPICSET = "{" + WSTOP + "}TopicSet"
_SERIAL = itertools.count(1)
#: deepest topic :meth:`TopicSet.grow` accepts (hostile sizes)
MAX_DEPTH = 64


class TopicSet:
    """See the module docstring."""

    def __init__(self, fixed: bool = False) -> None:
        self.fixed = fixed
        self._namespaces: dict[str, TopicNamespace] = {}
        # member -> its definition in a loaded namespace (None if grown ad hoc)
        self._members: dict[ConcreteTopic, Topic | None] = {}
        # (full parent path, namespace, name) -> extension topic definition
        self._extensions: dict[tuple[ConcreteTopic, str, str], Topic] = {}
        self._aliases: set[ConcreteTopic] = set()
        self._prefixes: dict[str, str] = {}
        self._version = 0
        self._removals = 0
        self._uid = next(_SERIAL)
        self._doc: tuple[int, etree._Element] | None = None
        self._topic_of: dict[etree._Element, ConcreteTopic] = {}

    # --- queries ----------------------------------------------------------
    @property
    def version(self) -> int:
        return self._version

    @property
    def state(self) -> tuple[int, int]:
        """(unique id of this set, version): a cache key that, unlike
        ``id(ts)``, is never reused by another Topic Set."""
        return (self._uid, self._version)

    def __contains__(self, topic: object) -> bool:
        return topic in self._members

    def __len__(self) -> int:
        return len(self._members)

    def topics(self) -> Iterator[ConcreteTopic]:
        """Members, in the order they were added."""
        return iter(list(self._members))

    def newest(self, n: int) -> list[ConcreteTopic]:
        """The `n` members added last, oldest first, in time proportional to `n`: with
        `removals`, how a reader follows the set's growth without a pass over it."""
        out = list(itertools.islice(reversed(self._members), max(0, n)))
        out.reverse()
        return out

    @property
    def removals(self) -> int:
        """How many times a member was removed (`discard`) so far."""
        return self._removals

    @property
    def namespaces(self) -> dict[str, TopicNamespace]:
        """Loaded Topic Namespaces by targetNamespace (do not modify)."""
        return self._namespaces

    @property
    def has_aliases(self) -> bool:
        """True if some member is an alias topic (WS-Topics 2004 §8)."""
        return bool(self._aliases)

    def alias_topics(self) -> frozenset[ConcreteTopic]:
        """Members that are alias topics."""
        return frozenset(self._aliases)

    def is_alias(self, topic: ConcreteTopic) -> bool:
        return topic in self._aliases

    def get(self, topic: ConcreteTopic) -> Topic | None:
        """The definition of a member (messageTypes, final, MessagePattern...);
        for a member grown at run time, a synthesized non-final Topic with no
        message type constraint (§10); None if ``topic`` is not a member."""
        if topic not in self._members:
            return None
        d = self._members[topic]
        if d is not None:
            return d
        return Topic(name=topic.name, namespace=topic.topic_namespace)

    def constraining(self, topic: ConcreteTopic) -> Topic | None:
        """The definition of a member whose messageTypes or MessagePattern constrain what
        may be published on it (WS-Topics 1.3 §6), else None: what `get` answers, without
        synthesizing a definition for a grown member (which constrains nothing)."""
        d = self._members.get(topic)
        if d is None or (not d.message_types and d.message_pattern is None):
            return None
        return d

    def definition(self, topic: ConcreteTopic) -> Topic | None:
        """The Topic definition of ``topic`` in a loaded namespace, member or
        not; None when it is not defined (or not permitted)."""
        if topic in self._members:
            return self._members[topic]
        try:
            return self.check_permitted(topic)
        except (TopicNotSupported, InvalidTopicExpression):
            return None

    # --- §8.5 / §9 rules ---------------------------------------------------
    def check_permitted(self, topic: ConcreteTopic) -> Topic | None:
        """Raise :class:`TopicNotSupported` if the loaded namespaces do not
        permit ``topic`` (WS-Topics 1.3 §8.5 first rule, §9), or
        :class:`InvalidTopicExpression` if it addresses an extension topic as a
        root (§6.1, §8.2). Returns its definition (None if undefined)."""
        if not topic.path:
            raise InvalidTopicExpression("an empty topic path names no topic")
        root = topic.path[0]
        nsdoc = self._namespaces.get(topic.namespace)
        d: Topic | None = None
        if nsdoc is not None:
            d = nsdoc.topics.get(root)
            if d is not None and d.parent is not None:
                raise InvalidTopicExpression(
                    f"topic {root!r} of {topic.namespace!r} is an extension topic of "
                    f"{d.parent}; it can only be referenced through a path that includes "
                    "its parent (WS-Topics 1.3 §6.1, §8.2)"
                )
            if d is None and nsdoc.final:
                raise TopicNotPermitted(
                    f"{root!r} is not a root topic of the final topic namespace "
                    f"{topic.namespace!r}, so {topic} is not permitted (WS-Topics 1.3 §5, §8.5)"
                )
        path: list[str] = [root]
        for step in topic.path[1:]:
            sns, local = split_step(step)
            here = ConcreteTopic(topic.namespace, tuple(path))
            nxt: Topic | None
            if sns is None:
                nxt = d.children.get(local) if d is not None else None
            else:
                nxt = self._extensions.get((here, sns, local))
                if nxt is None:
                    ext_ns = self._namespaces.get(sns)
                    if ext_ns is not None and ext_ns.final:
                        raise TopicNotPermitted(
                            f"{local!r} is not an extension topic of {here} defined by the "
                            f"final topic namespace {sns!r}, so {topic} is not permitted "
                            "(WS-Topics 1.3 §6.1, §8.5)"
                        )
            if nxt is None and d is not None and d.final:
                raise TopicNotPermitted(
                    f"topic {here} is final: it has no child {step!r}, so {topic} is not "
                    "permitted (WS-Topics 1.3 §6 @final, §8.5, §9)"
                )
            d = nxt
            path.append(step)
        return d

    # --- changes -----------------------------------------------------------
    def grow(self, topic: ConcreteTopic) -> bool:
        """Add ``topic`` at run time (§9); True if it is new. Raises
        :class:`TopicNotSupported` when the set is fixed or a final namespace or
        ancestor forbids it (see :meth:`check_permitted`)."""
        if topic in self._members:
            return False
        if len(topic.path) > MAX_DEPTH:
            raise TopicNotSupported(
                f"topic {topic} is {len(topic.path)} levels deep; this producer accepts at "
                f"most {MAX_DEPTH}"
            )
        if self.fixed:
            raise TopicNotInFixedSet(
                f"topic {topic} is not in this producer's fixed topic set (WS-Topics 1.3 §8.5)"
            )
        d = self.check_permitted(topic)
        self._add_member(topic, d)
        self._version += 1
        return True

    def discard(self, topic: ConcreteTopic) -> bool:
        """Stop supporting ``topic`` (WS-Topics 1.3 §11: the set of topics may
        change over time); True if it was a member. Its descendants stay."""
        if topic not in self._members:
            return False
        del self._members[topic]
        self._removals += 1
        self._aliases.discard(topic)
        self._version += 1
        return True

    def add_namespace(
        self, ns: TopicNamespace, members: Iterable[ConcreteTopic] | None = None
    ) -> None:
        """Load a Topic Namespace; its topics (or only ``members``, each of
        which it must define) become members. Works on a fixed set too
        (configuration, not growth). Extension topics (§6.1) are placed under
        their parent; the four constraints of §6.1 are checked against the
        namespaces loaded so far, raising :class:`InvalidTopicNamespace`."""
        tns = ns.target_namespace
        if tns in self._namespaces:
            if self._namespaces[tns] is ns and members is None:
                return
            raise InvalidTopicNamespace(f"topic namespace {tns!r} is already loaded")
        pending = {tns: ns}
        placed: dict[ConcreteTopic, Topic] = {}
        new_ext: dict[tuple[ConcreteTopic, str, str], Topic] = {}
        for name, topic in ns.topics.items():
            if topic.parent is None:
                for path, d in topic.walk((name,)):
                    placed[ConcreteTopic(tns, path)] = d
                continue
            parent = self._full_parent(topic, pending, ())
            new_ext[(parent, tns, name)] = topic
            for path, d in topic.walk((make_step(tns, name),)):
                placed[ConcreteTopic(parent.namespace, (*parent.path, *path))] = d
        # earlier extensions whose parent lives in this namespace: check them now
        for (parent, _ens, _name), ext in self._extensions.items():
            if parent.namespace == tns:
                self._check_parent(ext, parent, pending)
        self._namespaces[tns] = ns
        self._extensions.update(new_ext)
        self._prefix(tns)
        wanted = None if members is None else set(members)
        if wanted is not None:
            unknown = wanted - placed.keys()
            if unknown:
                raise TopicNotSupported(
                    f"topics {sorted(map(str, unknown))} are not defined by topic namespace {tns!r}"
                )
        for ct, d in placed.items():
            if wanted is None or ct in wanted:
                self._add_member(ct, d)
        # definitions of members grown before this namespace was loaded
        for ct in list(self._members):
            if self._members[ct] is None:
                d2 = self.definition(ct)
                self._members[ct] = d2
                if d2 is not None and d2.alias is not None:
                    self._aliases.add(ct)
        self._version += 1

    def _full_parent(
        self,
        ext: Topic,
        pending: dict[str, TopicNamespace],
        seen: tuple[tuple[str, str], ...],
    ) -> ConcreteTopic:
        """Full path of the parent of extension topic ``ext`` (§6.1 rule 3):
        follows Extension/parent/root links through known namespaces; a
        namespace may not appear twice in the chain."""
        assert ext.parent is not None
        me = (ext.namespace, ext.name)
        if me in seen:
            raise InvalidTopicNamespace(
                f"extension topic {ext.name!r} of {ext.namespace!r} is part of a circular chain "
                "of @parent references (WS-Topics 1.3 §6.1 rule 3)"
            )
        parent = ext.parent
        known = {**self._namespaces, **pending}
        pdoc = known.get(parent.namespace)
        if pdoc is not None:
            r = pdoc.topics.get(parent.path[0])
            if r is not None and r.parent is not None:
                base = self._full_parent(r, pending, (*seen, me))
                parent = ConcreteTopic(
                    base.namespace,
                    (*base.path, make_step(parent.namespace, parent.path[0]), *parent.path[1:]),
                )
        chain = [parent.namespace]
        chain += [s for s, _ in map(split_step, parent.path[1:]) if s is not None]
        chain.append(ext.namespace)
        if len(set(chain)) != len(chain):
            raise InvalidTopicNamespace(
                f"extension topic {ext.name!r} of {ext.namespace!r}: topic namespace appears "
                f"twice in its chain of parents {chain} (WS-Topics 1.3 §6.1 rules 2, 3)"
            )
        self._check_parent(ext, parent, pending)
        return parent

    def _check_parent(
        self, ext: Topic, parent: ConcreteTopic, pending: dict[str, TopicNamespace]
    ) -> None:
        """§6.1 rule 4 (parent not final) and existence of the parent when its
        namespace is known."""
        known = {**self._namespaces, **pending}
        if parent.namespace not in known:
            return  # parent namespace not loaded: placeholder elements (§7)
        d: Topic | None = known[parent.namespace].topics.get(parent.path[0])
        for step in parent.path[1:]:
            if d is None:
                break
            sns, local = split_step(step)
            if sns is None:
                d = d.children.get(local)
            else:
                sdoc = known.get(sns)
                d = sdoc.topics.get(local) if sdoc is not None else None
                if sdoc is None:
                    return
        if d is None:
            raise InvalidTopicNamespace(
                f"extension topic {ext.name!r} of {ext.namespace!r}: its parent {parent} is "
                "not defined (WS-Topics 1.3 §6.1)"
            )
        if d.final:
            raise InvalidTopicNamespace(
                f"extension topic {ext.name!r} of {ext.namespace!r}: its parent {parent} is "
                "final (WS-Topics 1.3 §6.1 rule 4)"
            )

    def _add_member(self, topic: ConcreteTopic, d: Topic | None) -> None:
        self._members[topic] = d
        self._prefix(topic.namespace)
        for step in topic.path[1:]:
            sns, _ = split_step(step)
            if sns is not None:
                self._prefix(sns)
        if d is not None and d.alias is not None:
            self._aliases.add(topic)

    def _prefix(self, ns: str) -> str:
        p = self._prefixes.get(ns)
        if p is None and ns:
            p = "tns" if not self._prefixes else f"tns{len(self._prefixes)}"
            self._prefixes[ns] = p
        return p or ""

    def prefix_map(self) -> dict[str, str]:
        """Prefix -> namespace used in :meth:`to_element`."""
        return {p: ns for ns, p in self._prefixes.items()}

    # --- §7 document -------------------------------------------------------
    def document(self) -> etree._Element:
        """The cached §7 document of this version. Read-only: do not modify
        or re-parent it (use :meth:`to_element` for a copy to embed)."""
        if self._doc is not None and self._doc[0] == self._version:
            return self._doc[1]
        nsmap: dict[str, str] = {"wstop": WSTOP}
        for ns, p in self._prefixes.items():
            nsmap[p] = ns
        root = etree.Element(_TOPICSET, nsmap=nsmap)
        els: dict[ConcreteTopic, etree._Element] = {}

        def ensure(t: ConcreteTopic) -> etree._Element:
            e = els.get(t)
            if e is not None:
                return e
            # walk up to the nearest existing ancestor, then create downwards
            n = len(t.path)
            while n > 1 and ConcreteTopic(t.namespace, t.path[: n - 1]) not in els:
                n -= 1
            for k in range(n, len(t.path) + 1):
                sub = ConcreteTopic(t.namespace, t.path[:k])
                if sub in els:
                    continue
                # a root is qualified by its namespace (unqualified if ad-hoc); a
                # child step is an NCName, an extension step is in Clark notation
                if k == 1:
                    e = etree.SubElement(root, make_step(t.namespace or None, t.path[0]))
                else:
                    e = etree.SubElement(
                        els[ConcreteTopic(t.namespace, t.path[: k - 1])], t.path[k - 1]
                    )
                els[sub] = e
            return els[t]

        topic_of: dict[etree._Element, ConcreteTopic] = {}
        for t in self._members:
            e = ensure(t)
            e.set(_TOPIC_ATTR, "true")
            topic_of[e] = t
        # the dict keeps the element proxies alive, so lxml hands out these
        # same objects from XPath results and identity lookups work
        self._doc = (self._version, root)
        self._topic_of = topic_of
        return root

    def topic_of(self, el: etree._Element) -> ConcreteTopic | None:
        """The member an element of :meth:`document` (this version) stands for."""
        self.document()
        return self._topic_of.get(el)

    def to_element(self) -> etree._Element:
        """A fresh copy of the ``wstop:TopicSet`` document (§7), safe to embed
        in a response."""
        return etree.fromstring(etree.tostring(self.document()))
