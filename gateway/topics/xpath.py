"""The XPath TopicExpression dialect (WS-Topics 1.3 §8.4).

A caller may rely on:

* any XPath 1.0 expression lxml/libxml2 accepts compiles; syntax errors,
  undeclared namespace prefixes, unknown functions and unbound variables are
  :class:`InvalidTopicExpression` at compile time;
* the expression is evaluated with the ``wstop:TopicSet`` element of the Topic
  Set document (§7) as context node; only elements carrying
  ``wstop:topic="true"`` in a node-set result identify topics. A number, a
  string, a boolean, attributes, or a run-time evaluation error select nothing
  (§8.4: "123", "//@topic=true", "//@topic" and "//*[@topic=false]" identify no
  topics);
* an XPath text that is also a Full expression (a plain location path) is
  matched by the Full matcher, with identical results and no XPath evaluation;
* a *local path* (xpath_guard: location paths whose only predicates are on their last
  step, read only the candidate's subtree and do not depend on position) is matched per
  topic: its path by the Full matcher, its predicates evaluated with the topic's element
  as context (`matches_topic`), so one new topic costs its own check, not an evaluation
  over the whole Topic Set (gateway/topics/index.py keeps selections up to date that way);
* any other expression is evaluated over the whole Topic Set at most once per version;
  once `attach` gave the Topic Set a budget, only in the budget's worker process
  (`refresh_all`, within its time limit), so no evaluation over the whole set runs on the
  event loop: `select` then answers the last result computed, possibly of an older
  version, and nothing before the first.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from lxml import etree

from . import xpath_guard
from .dialects import FULL, XPATH
from .errors import InvalidTopicExpression
from .expression import TopicExpression, resolve_prefix
from .mirror import copy_of
from .model import WSTOP, ConcreteTopic, make_step
from .path import DOS, ONE, TOPICSET, Branch, PathExpression, Token, match_branch, topic_names
from .xpath_budget import Job

if TYPE_CHECKING:
    from .topicset import TopicSet
    from .xpath_budget import XPathBudget

#: the budget that evaluates expressions not proven linear over each Topic Set (attach)
_budgets: weakref.WeakKeyDictionary[TopicSet, XPathBudget] = weakref.WeakKeyDictionary()
#: the live expressions evaluated over the whole Topic Set that are not proven linear
_budgeted: weakref.WeakSet[XPathExpression] = weakref.WeakSet()


def attach(ts: TopicSet, budget: XPathBudget) -> None:
    """Evaluate the XPath expressions over `ts` that are not proven linear with `budget`."""
    _budgets[ts] = budget


def has_budgeted(ts: TopicSet) -> bool:
    """Whether `ts` has a budget and an expression only its worker evaluates is alive."""
    return ts in _budgets and len(_budgeted) > 0


async def refresh_all(ts: TopicSet) -> None:
    """Bring the result of every live expression evaluated with `ts`'s budget over the whole
    Topic Set up to `ts`'s version (one request to the worker for all of them), over the
    set's copy (gateway/topics/mirror.py), not its rebuilt document."""
    budget = _budgets.get(ts)
    if budget is None:
        return
    stale = [x for x in list(_budgeted) if x._cache is None or x._cache[0] != ts.state]
    if not stale:
        return
    state = ts.state
    mirror = copy_of(ts)
    mirror.sync()
    doc = etree.tostring(mirror.root, encoding="unicode")
    key = f"ts:{state[0]}:{state[1]}"
    jobs = [Job(x.text, x.nsmap, key, doc, "topics", "XPath topic expression") for x in stale]
    outcomes = await budget.evaluate(jobs)
    for x, out in zip(stale, outcomes, strict=True):
        found: set[ConcreteTopic] = set()
        if isinstance(out, list):
            for namespace, path in out:
                t = ConcreteTopic(namespace, tuple(path))
                if t in ts:
                    found.add(t)
        x._cache = (state, frozenset(found))


def _branch(steps: list[tuple[str, str]], nsmap: dict[str, str]) -> Branch | None:
    """A local path's steps (xpath_guard.LocalPath) as a branch of the path matcher
    (gateway/topics/path.py): names from the TopicSet element down. An unprefixed name test
    is in no namespace (XPath 1.0 §2.3), as the Topic Set's child topics are."""
    lead = steps[0][0]
    tokens: list[Token] = []
    if lead == "":
        tokens.append(TOPICSET)  # the context node: the TopicSet element
    elif lead == "//":
        tokens.append((DOS, None, None))
    for n, (sep, test) in enumerate(steps):
        if n and sep == "//":
            tokens.append((DOS, None, None))
        if test == ".":
            continue
        if test in ("*", "node()"):
            tokens.append((ONE, None, None))
            continue
        prefix, colon, local = test.rpartition(":")
        ns = ""
        if colon:
            if prefix not in nsmap:
                return None
            ns = nsmap[prefix]
        tokens.append((ONE, ns, None if local == "*" else local))
    return tuple(tokens)


class _Steps:
    """A local path's steps as one branch of the path matcher: selection by names alone."""

    __slots__ = ("branches",)

    def __init__(self, branch: Branch) -> None:
        self.branches = (branch,)

    def _matches_member(self, topic: ConcreteTopic, ts: TopicSet) -> bool:
        return match_branch(self.branches[0], topic_names(topic))

    def select(self, ts: TopicSet) -> frozenset[ConcreteTopic]:
        return frozenset(t for t in ts.topics() if self._matches_member(t, ts))


#: finds a topic's element in a copy of the Topic Set document
ElementOf = Callable[[ConcreteTopic], "etree._Element | None"]


class _LocalPart:
    """One location path of a local-path expression: its steps (matched by names) and its
    last step's predicates, evaluated at a candidate element."""

    __slots__ = ("batch", "path", "preds")

    def __init__(self, path: _Steps, preds: etree.XPath | None, batch: etree.XPath | None) -> None:
        self.path = path
        self.preds = preds
        #: the predicates over a node-set variable $c: the candidates that pass, in one call
        self.batch = batch

    def passing(self, topics: list[ConcreteTopic], element_of: ElementOf) -> list[ConcreteTopic]:
        """Those of `topics` (whose path this part matches) that its predicates accept."""
        if self.batch is None:
            return topics
        els: dict[etree._Element, ConcreteTopic] = {}
        for t in topics:
            el = element_of(t)
            if el is not None:
                els[el] = t
        if not els:
            return []
        try:
            # the result's proxies are the same objects as ours (we hold them)
            got = self.batch(next(iter(els)), c=list(els))
        except etree.XPathError:
            return []
        assert isinstance(got, list)
        return [els[e] for e in got if e in els]  # type: ignore[index]

    def matches(self, topic: ConcreteTopic, ts: TopicSet, element_of: ElementOf) -> bool:
        if not self.path._matches_member(topic, ts):
            return False
        if self.preds is None:
            return True
        el = element_of(topic)
        if el is None:
            return False
        try:
            return bool(self.preds(el))
        except etree.XPathError:
            return False


_TOPIC_ATTR = "{" + WSTOP + "}topic"
_TOPICSET = "{" + WSTOP + "}TopicSet"
# XPath 1.0 §3.7 lexical structure, enough to find the prefixes of QNames and
# NameTests outside string literals ("p:name", "p:*"), not axis names ("a::").
_LEX = re.compile(
    r"""("[^"]*"|'[^']*')"""
    r"""|([^\W\d][\w.\-]*):(?=[^\W\d]|\*)"""
    r"""|::"""
)


def prefixes_used(text: str) -> set[str]:
    """Namespace prefixes an XPath 1.0 expression uses."""
    out: set[str] = set()
    for m in _LEX.finditer(text):
        if m.group(2) is not None:
            out.add(m.group(2))
    return out


def element_topic(el: etree._Element) -> ConcreteTopic | None:
    """The topic an element of a TopicSet document represents, or None when it
    is not a topic element (no ``wstop:topic="true"``) or not in a TopicSet."""
    if el.get(_TOPIC_ATTR) not in ("true", "1"):
        return None
    steps: list[str] = []
    node: etree._Element | None = el
    root_ns = ""
    while node is not None:
        parent = node.getparent()
        if parent is None:
            return None
        q = etree.QName(node)
        if parent.tag == _TOPICSET:
            root_ns = q.namespace or ""
            steps.append(q.localname)
            break
        steps.append(make_step(q.namespace or None, q.localname))
        node = parent
    else:
        return None
    steps.reverse()
    return ConcreteTopic(root_ns, tuple(steps))


class XPathExpression(TopicExpression):
    """A compiled XPath dialect expression (see module docstring)."""

    __slots__ = ("__weakref__", "_cache", "_xpath", "as_full", "linear", "local", "reason")

    def __init__(self, text: str, nsmap: dict[str, str]) -> None:
        super().__init__(XPATH, text, nsmap)
        for p in prefixes_used(text):
            resolve_prefix(p, nsmap, text)  # raises on an undeclared prefix
        analysis = xpath_guard.analyze(text)
        self.linear = analysis.linear
        self.reason = analysis.reason
        try:
            # regexp=False: no EXSLT regular expressions, which a subscriber could bind to
            # make every topic set version run a catastrophic regex
            self._xpath = etree.XPath(text, namespaces=nsmap, regexp=False)
        except etree.XPathError as e:
            raise InvalidTopicExpression(
                f"invalid XPath topic expression {text!r}: {e} (WS-Topics 1.3 §8.4)"
            ) from e
        # A trial run over an empty TopicSet finds unknown functions and
        # variables, which libxml2 only reports when evaluating.
        try:
            self._xpath(etree.Element(_TOPICSET, nsmap={"wstop": WSTOP}))
        except etree.XPathError as e:
            raise InvalidTopicExpression(
                f"invalid XPath topic expression {text!r}: {e} (WS-Topics 1.3 §8.4)"
            ) from e
        # §8.4 extends §8.3: a text valid in both has the same meaning; match
        # it without XPath. "p://x" is not XPath, so it never gets here.
        self.as_full: PathExpression | None = None
        try:
            full = PathExpression(FULL, text, nsmap)
        except InvalidTopicExpression:
            full = None
        if full is not None and not full.prefixed_descendant:
            self.as_full = full
        self._cache: tuple[tuple[int, int], frozenset[ConcreteTopic]] | None = None
        self.local: list[_LocalPart] | None = None
        if self.as_full is None and analysis.local:
            self.local = _local_parts(analysis.local, nsmap)
        if self.as_full is None and self.local is None:
            _budgeted.add(self)

    def single_topic(self) -> ConcreteTopic | None:
        return self.as_full.single_topic() if self.as_full is not None else None

    @property
    def has_wildcards(self) -> bool:
        return self.as_full.has_wildcards if self.as_full is not None else True

    def explicit_topics(self) -> list[ConcreteTopic]:
        return self.as_full.explicit_topics() if self.as_full is not None else []

    def parts(self) -> list[TopicExpression]:
        return self.as_full.parts() if self.as_full is not None else [self]

    def _matches_member(self, topic: ConcreteTopic, ts: TopicSet) -> bool:
        if self.as_full is not None:
            return self.as_full._matches_member(topic, ts)
        if self.local is not None:
            return self.matches_topic(topic, ts)
        return topic in self.select(ts)

    def matches_topic(
        self, topic: ConcreteTopic, ts: TopicSet, element_of: ElementOf | None = None
    ) -> bool:
        """For a local-path expression: whether it selects member `topic`, judged from the
        topic's path and subtree alone (module docstring); `element_of` finds a topic's
        element in a copy of the set's document (by default its mirror.copy_of, synced)."""
        assert self.local is not None
        if element_of is None:
            mirror = copy_of(ts)
            mirror.sync()
            element_of = mirror.element
        return any(part.matches(topic, ts, element_of) for part in self.local)

    def evaluate(self, ts: TopicSet) -> frozenset[ConcreteTopic]:
        """Evaluate with lxml over ``ts.to_element()`` (no Full shortcut)."""
        doc = ts.document()
        try:
            result = self._xpath(doc)
        except etree.XPathError:
            return frozenset()  # a run-time error selects nothing (§8.4)
        if not isinstance(result, list):
            return frozenset()  # number, string, boolean (§8.4)
        out: set[ConcreteTopic] = set()
        for item in result:
            if isinstance(item, etree._Element):
                t = ts.topic_of(item)  # None for placeholders and non-topics
                if t is not None:
                    out.add(t)
        return frozenset(out)

    def select(self, ts: TopicSet) -> frozenset[ConcreteTopic]:
        if self.as_full is not None:
            return self.as_full.select(ts)
        cached = self._cache
        if cached is not None and cached[0] == ts.state:
            return cached[1]
        if self.local is not None:
            result = frozenset(t for t in ts.topics() if self.matches_topic(t, ts))
        elif ts not in _budgets:
            result = self.evaluate(ts)
        else:  # only the budget's worker evaluates it (refresh_all): the last result
            return cached[1] if cached is not None else frozenset()
        self._cache = (ts.state, result)
        return result


def _local_parts(
    parts: list[xpath_guard.LocalPath], nsmap: dict[str, str]
) -> list[_LocalPart] | None:
    """The matchers of a local-path expression's paths, None when one of them is not also a
    Full expression or its predicates are not proven linear at one element."""
    out = []
    for lp in parts:
        branch = _branch(lp.steps, nsmap) if lp.steps else None
        if branch is None:
            return None
        path = _Steps(branch)
        preds = batch = None
        if lp.predicates:
            tail = "".join(f"[{p}]" for p in lp.predicates)
            text = "self::node()" + tail
            if not xpath_guard.analyze(text).linear:
                return None
            try:
                preds = etree.XPath(text, namespaces=nsmap, regexp=False, smart_strings=False)
                batch = etree.XPath("$c" + tail, namespaces=nsmap, regexp=False)
            except etree.XPathError:
                return None
        out.append(_LocalPart(path, preds, batch))
    return out
