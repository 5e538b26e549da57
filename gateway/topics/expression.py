"""TopicExpression: a compiled expression of any dialect (WS-Topics 1.3 §8).

A caller may rely on:

* an expression is parsed once, by :func:`gateway.topics.compile_expression`;
  a bad one raises :class:`InvalidTopicExpression` there, never later;
* ``select(ts)`` is exactly the set of members of ``ts`` the expression
  identifies (§8.3: elements of the TopicSet document with
  ``wstop:topic="true"``); ``matches(topic, ts)`` says whether a notification
  on ``topic`` is delivered to a subscription with this expression (members
  only, after alias resolution, 2004 §8); ``resolve(ts)`` is the alias-resolved
  set;
* ``validate(ts)`` implements WS-Topics 1.3 §8.5 and raises :class:`TopicNotSupported` (or
  :class:`InvalidTopicExpression` for an extension topic addressed as a root).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from .errors import InvalidTopicExpression, TopicNotInFixedSet
from .model import ConcreteTopic

if TYPE_CHECKING:
    from .topicset import TopicSet


def resolve_prefix(prefix: str, nsmap: Mapping[str, str], text: str) -> str:
    """Namespace URI bound to ``prefix``; an undeclared prefix makes the
    expression invalid (WS-Topics 1.3 §8: prefixes resolve through the
    namespace declarations in scope), never a silent non-match."""
    if prefix == "xml":
        return "http://www.w3.org/XML/1998/namespace"
    uri = nsmap.get(prefix)
    if not uri:
        raise InvalidTopicExpression(
            f"namespace prefix {prefix!r} used in topic expression {text!r} is not "
            "declared in scope of the element carrying the expression"
        )
    return uri


def clean_nsmap(nsmap: Mapping[str | None, str] | None) -> dict[str, str]:
    """Prefix -> URI, without the default namespace: unprefixed names in topic
    expressions are always in the ad-hoc namespace "" (WS-Topics 1.3 §10, and
    XPath 1.0 §2.3 for Full/XPath), whatever default namespace is in scope."""
    if not nsmap:
        return {}
    return {p: u for p, u in nsmap.items() if p}


class TopicExpression:
    """Base class of compiled expressions (see module docstring)."""

    __slots__ = ("_resolve_cache", "dialect", "nsmap", "text")

    def __init__(self, dialect: str, text: str, nsmap: dict[str, str]) -> None:
        self.dialect = dialect
        self.text = text
        self.nsmap = nsmap
        self._resolve_cache: tuple[tuple[int, int], frozenset[ConcreteTopic]] | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.text!r}>"

    @property
    def key(self) -> tuple[str, str, tuple[tuple[str, str], ...]]:
        """Identity of the expression's meaning holder: dialect, text and the
        prefixes it could use (equal keys select equal sets)."""
        return (self.dialect, self.text, tuple(sorted(self.nsmap.items())))

    # --- to be provided by dialects -------------------------------------
    def select(self, ts: TopicSet) -> frozenset[ConcreteTopic]:
        """Members of ``ts`` the expression identifies (no alias resolution)."""
        raise NotImplementedError

    def single_topic(self) -> ConcreteTopic | None:
        """The one topic a wildcard-free, union-free path names, else None."""
        return None

    def prefixes_used(self) -> dict[str, str]:
        """Namespace URI -> the prefix the text wrote it with (the first one, if it
        used several): what a rendering for this expression's author may reuse
        (gateway.topics.prefixes). Prefixes bound to no URI are not in it."""
        from .xpath import prefixes_used

        out: dict[str, str] = {}
        for p in sorted(prefixes_used(self.text)):
            uri = self.nsmap.get(p)
            if uri:
                out.setdefault(uri, p)
        return out

    def parts(self) -> list[TopicExpression]:
        """The components of a ``|`` union (2004 §8 rule 4), else ``[self]``."""
        return [self]

    @property
    def has_wildcards(self) -> bool:
        """True unless the expression names its topics literally."""
        return True

    def explicit_topics(self) -> list[ConcreteTopic]:
        """Topics the expression refers to explicitly (the literal leading path
        of each branch), checked against namespace rules by WS-Topics 1.3 §8.5."""
        return []

    # --- shared behaviour -----------------------------------------------
    def resolve(self, ts: TopicSet) -> frozenset[ConcreteTopic]:
        """The alias-resolved topics (2004 §8 rules 1-5), cached per Topic Set
        version."""
        cached = self._resolve_cache
        if cached is not None and cached[0] == ts.state:
            return cached[1]
        from .aliases import resolve_expression

        result = resolve_expression(self, ts)
        self._resolve_cache = (ts.state, result)
        return result

    def matches(self, topic: ConcreteTopic, ts: TopicSet) -> bool:
        """True if a notification on ``topic`` is delivered to a subscription
        with this expression, evaluated against ``ts`` as it is now (§9)."""
        if ts.has_aliases:
            from .aliases import resolve_topic

            targets = resolve_topic(topic, ts)
            if targets != {topic}:  # a notification on an alias topic (2004 §8)
                return any(self.matches(t, ts) for t in targets if t != topic)
            return topic in ts and topic in self.resolve(ts)
        if topic not in ts:
            return False
        return self._matches_member(topic, ts)

    def _matches_member(self, topic: ConcreteTopic, ts: TopicSet) -> bool:
        return topic in self.select(ts)

    def validate(self, ts: TopicSet) -> None:
        """WS-Topics 1.3 §8.5. Raises :class:`TopicNotSupported` when the
        expression explicitly refers to a topic its Topic Namespace does not
        permit, or when ``ts`` is fixed and the expression selects none of its
        topics."""
        for topic in self.explicit_topics():
            ts.check_permitted(topic)
        if ts.fixed and not any(t in ts for t in self.resolve(ts)):
            raise TopicNotInFixedSet(
                f"topic expression {self.text!r} selects no topic of this producer's "
                "fixed topic set"
            )
