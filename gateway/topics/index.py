"""SubscriptionIndex: which subscriptions select a notification's topic.

WS-Topics 1.3 §9: the producer "MUST behave as if each subscription's
TopicExpression is re-evaluated against the Topic Set as each message is
processed". A caller may rely on: ``idx.match(topic)`` returns exactly the keys
``k`` for which ``expr_k.matches(topic, ts)`` holds for the Topic Set as it is
at the time of the call (grown topics included, alias rules of 2004 §8
applied), and costs no XPath evaluation per message per subscription:

* Simple, Concrete and wildcard-free operands of Full/XPath unions are kept in
  a dict keyed by concrete topic: one lookup;
* wildcard Full paths (and XPath texts that are plain location paths) are
  compiled into a shared trie of name tests walked once along the topic's
  path; identical expressions share their trie node. Full selection depends
  only on the topic's path (see :mod:`.path`), so no cache is needed;
* other XPath expressions are grouped by (text, prefixes). A group of a *local
  path* (gateway/topics/xpath.py) keeps the set of topics it selects and, when the
  Topic Set grows, checks only the new topics and their ancestors (their paths on a
  trie, their predicates at their elements of the set's copy, gateway/topics/
  mirror.py): a new topic costs no evaluation over the whole set, nor a rebuilt
  document. Any other group is evaluated once per Topic Set version into a topic ->
  groups map: with a budget, only by its worker process (`prepare`, awaited by the
  broker before it plans a Notify; `match` reads the last result), else lazily on the
  event loop at the first match after a change;
* the result per topic is cached until a subscription is added or removed or
  the Topic Set changes (so a burst of notifications on one topic costs one
  lookup each).

``match`` of a topic that is not a member returns nothing: grow the set first
(the broker does on Notify). A notification on an alias topic matches what
its resolution matches.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Generic, TypeVar

from . import xpath
from .aliases import resolve_topic
from .expression import TopicExpression
from .mirror import Mark, TopicSetCopy, copy_of
from .model import ConcreteTopic
from .path import DOS, Branch, Name, PathExpression, topic_names
from .topicset import TopicSet
from .xpath import XPathExpression

if TYPE_CHECKING:
    from .xpath_budget import XPathBudget


K = TypeVar("K", bound=Hashable)


class _Node(Generic[K]):
    """Trie node over tokens. ``dos`` marks a node reached by a DOS token: it
    loops on any element name."""

    __slots__ = ("anyname", "dos", "dos_child", "exact", "keys", "nswild")

    def __init__(self, dos: bool = False) -> None:
        self.dos = dos
        self.exact: dict[Name, _Node[K]] = {}
        self.nswild: dict[str, _Node[K]] = {}
        self.anyname: _Node[K] | None = None
        self.dos_child: _Node[K] | None = None
        self.keys: set[K] = set()

    def empty(self) -> bool:
        return not (self.keys or self.exact or self.nswild or self.anyname or self.dos_child)


class _Trie(Generic[K]):
    def __init__(self) -> None:
        self.root: _Node[K] = _Node()

    def _step(
        self, node: _Node[K], tok: tuple[int, str | None, str | None], create: bool
    ) -> _Node[K] | None:
        kind, ns, local = tok
        if kind == DOS:
            if node.dos_child is None and create:
                node.dos_child = _Node(dos=True)
            return node.dos_child
        if ns is None:
            if node.anyname is None and create:
                node.anyname = _Node()
            return node.anyname
        if local is None:
            nxt = node.nswild.get(ns)
            if nxt is None and create:
                nxt = node.nswild[ns] = _Node()
            return nxt
        nxt = node.exact.get((ns, local))
        if nxt is None and create:
            nxt = node.exact[(ns, local)] = _Node()
        return nxt

    def add(self, branch: Branch, key: K) -> None:
        node = self.root
        for tok in branch:
            nxt = self._step(node, tok, True)
            assert nxt is not None
            node = nxt
        node.keys.add(key)

    def remove(self, branch: Branch, key: K) -> None:
        trail: list[tuple[_Node[K], tuple[int, str | None, str | None]]] = []
        node: _Node[K] | None = self.root
        for tok in branch:
            assert node is not None
            trail.append((node, tok))
            node = self._step(node, tok, False)
            if node is None:
                return
        assert node is not None
        node.keys.discard(key)
        # prune empty nodes bottom-up
        child = node
        for parent, (kind, ns, local) in reversed(trail):
            if not child.empty():
                break
            if kind == DOS:
                parent.dos_child = None
            elif ns is None:
                parent.anyname = None
            elif local is None:
                del parent.nswild[ns]
            else:
                del parent.exact[(ns, local)]
            child = parent

    def match(self, names: tuple[Name, ...]) -> set[K]:
        states: dict[int, _Node[K]] = {}

        def add(n: _Node[K]) -> None:
            while n is not None and id(n) not in states:
                states[id(n)] = n
                n = n.dos_child  # type: ignore[assignment]

        add(self.root)
        for name in names:
            cur = list(states.values())
            states = {}
            for s in cur:
                if s.dos:
                    add(s)
                c = s.exact.get(name)
                if c is not None:
                    add(c)
                c = s.nswild.get(name[0])
                if c is not None:
                    add(c)
                if s.anyname is not None:
                    add(s.anyname)
            if not states:
                return set()
        out: set[K] = set()
        for s in states.values():
            out |= s.keys
        return out


#: an XPath group's key: the expression's text and its namespace declarations
_GKey = tuple[str, tuple[tuple[str, str], ...]]


class _XGroup(Generic[K]):
    __slots__ = ("expr", "keys", "selected")

    def __init__(self, expr: XPathExpression) -> None:
        self.expr = expr
        self.keys: set[K] = set()
        #: for a local-path group: the topics it selects (kept up to date by the index)
        self.selected: set[ConcreteTopic] = set()


class SubscriptionIndex(Generic[K]):
    """Index of subscription keys by TopicExpression over one Topic Set."""

    def __init__(self, ts: TopicSet, budget: XPathBudget | None = None) -> None:
        self.ts = ts
        self.budget = budget
        if budget is not None:  # XPath not proven linear: only in its worker process
            xpath.attach(ts, budget)
        self._mark: Mark | None = None  # where the local groups got to in copy_of(ts)
        # the paths of local-path groups' parts: (group key, part) per trie node
        self._ltrie: _Trie[tuple[_GKey, int]] = _Trie()
        self._exprs: dict[K, TopicExpression] = {}
        self._concrete: dict[ConcreteTopic, set[K]] = {}
        self._trie: _Trie[K] = _Trie()
        self._xgroups: dict[tuple[str, tuple[tuple[str, str], ...]], _XGroup[K]] = {}
        # XPath results of the current version: topic -> group ids
        self._xver = -1
        self._xmap: dict[ConcreteTopic, set[tuple[str, tuple[tuple[str, str], ...]]]] = {}
        # alias support, per version: target topic -> alias topics resolving to it
        self._aver = -1
        self._amap: dict[ConcreteTopic, set[ConcreteTopic]] = {}
        # results per topic, valid while neither the subscriptions nor the
        # Topic Set change (cleared on add/remove and on a new version)
        self._mver = -1
        self._mcache: dict[ConcreteTopic, frozenset[K]] = {}

    def __len__(self) -> int:
        return len(self._exprs)

    def __contains__(self, key: object) -> bool:
        return key in self._exprs

    def expression(self, key: K) -> TopicExpression | None:
        return self._exprs.get(key)

    @staticmethod
    def _path_of(expr: TopicExpression) -> PathExpression | None:
        if isinstance(expr, PathExpression):
            return expr
        if isinstance(expr, XPathExpression):
            return expr.as_full
        return None

    def add(self, key: K, expr: TopicExpression) -> None:
        """Register (or replace) subscription ``key`` with ``expr``."""
        if key in self._exprs:
            self.remove(key)
        self._mcache.clear()
        self._exprs[key] = expr
        path = self._path_of(expr)
        if path is not None:
            for b, c in zip(path.branches, path.concrete, strict=True):
                if c is not None:
                    self._concrete.setdefault(c, set()).add(key)
                else:
                    self._trie.add(b, key)
            return
        assert isinstance(expr, XPathExpression)
        gk = (expr.text, tuple(sorted(expr.nsmap.items())))
        group = self._xgroups.get(gk)
        if group is None:
            if expr.local is not None:
                # the other groups first see what the set gained (the mirror's news)
                self._refresh_xpath()
                mirror = self._local_up_to_date()  # current, or built here
                group = _XGroup(expr)
                for part in expr.local:
                    group.selected.update(
                        part.passing(list(part.path.select(self.ts)), mirror.element)
                    )
                self._xgroups[gk] = group
                for n, part in enumerate(expr.local):
                    for b in part.path.branches:
                        self._ltrie.add(b, (gk, n))
            else:
                group = self._xgroups[gk] = _XGroup(expr)
                if self._xver == self.ts.version:
                    for t in expr.select(self.ts):
                        self._xmap.setdefault(t, set()).add(gk)
        group.keys.add(key)

    def remove(self, key: K) -> None:
        """Forget ``key``; unknown keys are ignored."""
        expr = self._exprs.pop(key, None)
        if expr is None:
            return
        self._mcache.clear()
        path = self._path_of(expr)
        if path is not None:
            for b, c in zip(path.branches, path.concrete, strict=True):
                if c is not None:
                    keys = self._concrete.get(c)
                    if keys is not None:
                        keys.discard(key)
                        if not keys:
                            del self._concrete[c]
                else:
                    self._trie.remove(b, key)
            return
        assert isinstance(expr, XPathExpression)
        gk = (expr.text, tuple(sorted(expr.nsmap.items())))
        group = self._xgroups.get(gk)
        if group is not None:
            group.keys.discard(key)
            if not group.keys:
                del self._xgroups[gk]
                for n, part in enumerate(expr.local or ()):
                    for b in part.path.branches:
                        self._ltrie.remove(b, (gk, n))
                for gks in self._xmap.values():
                    gks.discard(gk)

    async def prepare(self) -> None:
        """Have the expressions that only the budget's worker may evaluate brought up to
        this Topic Set version (xpath.refresh_all), so that `match` is exact for it."""
        if self._xver == self.ts.version or not xpath.has_budgeted(self.ts):
            return
        self._local_up_to_date()
        await xpath.refresh_all(self.ts)

    def _local_up_to_date(self) -> TopicSetCopy:
        """Grow the Topic Set's copy and decide the local-path groups' selections again for
        the topics added since they last looked."""
        ts = self.ts
        mirror = copy_of(ts)
        mirror.sync()
        local = [g for g in self._xgroups.values() if g.expr.local is not None]
        added = mirror.added_since(self._mark) if self._mark is not None else None
        self._mark = mirror.mark()
        if not local:
            return mirror
        if added is None:  # built anew (or never looked): every topic is a candidate
            cands = set(ts.topics())
        else:
            # a local path's selection of a topic depends on the topic's path and
            # subtree: only the new topics and their ancestors can change
            cands = set(added)
            for t in added:
                for k in range(1, len(t.path)):
                    up = ConcreteTopic(t.namespace, t.path[:k])
                    if up in ts:
                        cands.add(up)
        if cands:
            self._judge_local(cands, mirror)
        return mirror

    def _judge_local(self, cands: set[ConcreteTopic], mirror: TopicSetCopy) -> None:
        """Decide again, for every local-path group, whether it selects each of `cands`:
        one walk of the path trie per topic, then each part's predicates over the topics
        its path matched, in one XPath call."""
        by_part: dict[tuple[_GKey, int], list[ConcreteTopic]] = {}
        for t in cands:
            for hit in self._ltrie.match(topic_names(t)):
                by_part.setdefault(hit, []).append(t)
        for group in self._xgroups.values():
            if group.expr.local is not None:
                group.selected -= cands
        for (gk, n), found in by_part.items():
            group = self._xgroups[gk]
            assert group.expr.local is not None
            group.selected.update(group.expr.local[n].passing(found, mirror.element))

    def _refresh_xpath(self) -> None:
        if self._xver == self.ts.version:
            return
        self._local_up_to_date()
        self._xmap = {}
        for gk, group in self._xgroups.items():
            if group.expr.local is None:
                for t in group.expr.select(self.ts):
                    self._xmap.setdefault(t, set()).add(gk)
        self._xver = self.ts.version

    def _refresh_aliases(self) -> None:
        if self._aver == self.ts.version:
            return
        self._amap = {}
        for a in self.ts.alias_topics():
            for t in resolve_topic(a, self.ts):
                self._amap.setdefault(t, set()).add(a)
        self._aver = self.ts.version

    def match(self, topic: ConcreteTopic) -> set[K]:
        """Keys of the subscriptions that select ``topic`` (see module doc).
        The caller owns the returned set."""
        if self._mver != self.ts.version:
            self._mcache.clear()
            self._mver = self.ts.version
        hit = self._mcache.get(topic)
        if hit is None:
            hit = frozenset(self._match(topic))
            if len(self._mcache) >= self.CACHE_TOPICS:
                self._mcache.clear()
            self._mcache[topic] = hit
        return set(hit)

    #: at most this many topics' results are cached
    CACHE_TOPICS = 4096

    def _match(self, topic: ConcreteTopic) -> set[K]:
        ts = self.ts
        if ts.has_aliases and ts.is_alias(topic):
            out: set[K] = set()
            for t in resolve_topic(topic, ts):
                out |= self._match(t)
            return out
        if topic not in ts:
            return set()
        out = set(self._concrete.get(topic, ()))
        if ts.has_aliases:
            self._refresh_aliases()
            for a in self._amap.get(topic, ()):
                out |= self._concrete.get(a, set())
        if self._trie.root.exact or self._trie.root.dos_child is not None:
            out |= self._trie.match(topic_names(topic))
        if self._xgroups:
            self._refresh_xpath()
            for gk in self._xmap.get(topic, ()):
                out |= self._xgroups[gk].keys
            for group in self._xgroups.values():
                if topic in group.selected:
                    out |= group.keys
        return out

    def demand(self, topic: ConcreteTopic) -> bool:
        """True if at least one subscription selects ``topic`` (for
        demand-based publishing)."""
        return bool(self.match(topic))
