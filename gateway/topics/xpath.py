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
  any other is evaluated at most once per Topic Set version.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from lxml import etree

from . import xpath_guard
from .dialects import FULL, XPATH
from .errors import InvalidTopicExpression
from .expression import TopicExpression, resolve_prefix
from .model import WSTOP, ConcreteTopic, make_step
from .path import PathExpression

if TYPE_CHECKING:
    from .topicset import TopicSet

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

    __slots__ = ("_cache", "_xpath", "as_full")

    def __init__(self, text: str, nsmap: dict[str, str]) -> None:
        super().__init__(XPATH, text, nsmap)
        for p in prefixes_used(text):
            resolve_prefix(p, nsmap, text)  # raises on an undeclared prefix
        refused = xpath_guard.check(text)
        if refused:
            raise InvalidTopicExpression(
                f"XPath topic expression {text!r} refused: {refused} (see xpath_guard)"
            )
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
        return topic in self.select(ts)

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
        result = self.evaluate(ts)
        self._cache = (ts.state, result)
        return result
