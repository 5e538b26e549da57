"""A copy of a Topic Set's document (WS-Topics 1.3 §7) grown topic by topic.

`TopicSet.document()` builds the whole document again for each version: 1.8 s for 100,000
topics here, once per new topic. XPath that reads topics' elements (gateway/topics/xpath.py,
index.py) reads this copy instead: a new topic costs its own elements.

A caller may rely on: `copy_of(ts)` is the one copy of `ts` (made at the first call);
after `sync()` it holds the same names, the same prefixes (each declared where first used,
which `name()` reads alike) and `wstop:topic="true"` on exactly the members, as
`ts.document()` would; `added_since(mark)` lists the members added after `mark` (a `mark()`
taken earlier), or None when the copy was built anew since (a member was removed): then
every member is new.
"""

from __future__ import annotations

import weakref

from lxml import etree

from .model import WSTOP, ConcreteTopic, make_step, split_step
from .topicset import TopicSet

_TOPIC_ATTR = "{" + WSTOP + "}topic"
_TOPICSET = "{" + WSTOP + "}TopicSet"

#: (generation, members seen): where a reader of the copy got to
Mark = tuple[int, int]


class TopicSetCopy:
    """See the module docstring."""

    def __init__(self, ts: TopicSet) -> None:
        self.ts = ts
        self.generation = 0
        self._reset()

    def _reset(self) -> None:
        self.root = etree.Element(_TOPICSET, nsmap={"wstop": WSTOP})
        self.els: dict[ConcreteTopic, etree._Element] = {}
        #: the members in the order they were added to the copy
        self.order: list[ConcreteTopic] = []
        self.removals = self.ts.removals
        self.prefixes: dict[str, str] = {}  # namespace -> prefix declared in the copy
        self.generation += 1

    def sync(self) -> None:
        """Add what the set gained since the last call (all of it again after a removal)."""
        ts = self.ts
        if ts.removals != self.removals or len(ts) < len(self.order):
            self._reset()
            new = list(ts.topics())
        else:
            new = ts.newest(len(ts) - len(self.order))
        for t in new:
            self._add(t)
        self.order.extend(new)

    def mark(self) -> Mark:
        return (self.generation, len(self.order))

    def added_since(self, mark: Mark) -> list[ConcreteTopic] | None:
        if mark[0] != self.generation:
            return None
        return self.order[mark[1] :]

    def element(self, t: ConcreteTopic) -> etree._Element | None:
        return self.els.get(t)

    def _prefix(self, namespace: str) -> dict[str, str] | None:
        """The declaration an element of `namespace` needs (the set's prefix for it), or
        None when one is in scope already."""
        if namespace in self.prefixes:
            return None
        p = {u: q for q, u in self.ts.prefix_map().items()}.get(namespace)
        if p is None:
            return None
        self.prefixes[namespace] = p
        return {p: namespace}

    def _add(self, t: ConcreteTopic) -> None:
        el = self.els.get(t)
        if el is None:
            parent = self.root
            for k in range(1, len(t.path) + 1):
                sub = ConcreteTopic(t.namespace, t.path[:k])
                e = self.els.get(sub)
                if e is None:
                    if k == 1:
                        tag = make_step(t.namespace or None, t.path[0])
                        ns = t.namespace or None
                    else:
                        tag = t.path[k - 1]
                        ns = split_step(tag)[0]
                    decl = self._prefix(ns) if ns else None
                    # declared where first used (the set declares them all on its root:
                    # the same prefixed names, which name() reads)
                    e = etree.SubElement(parent, tag, nsmap=decl)
                    self.els[sub] = e
                parent = e
            el = parent
        el.set(_TOPIC_ATTR, "true")


_copies: weakref.WeakKeyDictionary[TopicSet, TopicSetCopy] = weakref.WeakKeyDictionary()


def copy_of(ts: TopicSet) -> TopicSetCopy:
    """The copy of `ts` (not synced: call `sync()` before reading it)."""
    c = _copies.get(ts)
    if c is None:
        c = _copies[ts] = TopicSetCopy(ts)
    return c
