"""Compiling TopicExpressions and rendering topics for wsnt:Topic.

A caller may rely on:

* :func:`compile_expression` canonicalises the dialect (2004 URIs included),
  strips surrounding white space of the text (xsd:token) and returns an
  immutable compiled expression, or raises
  :class:`TopicExpressionDialectUnknown` / :class:`InvalidTopicExpression`
  with a precise reason;
* :func:`parse_topic_expression_element` reads ``@Dialect`` (``@dialect`` of
  the 2004 drafts as well) and the text of the element, and resolves prefixes
  through the element's in-scope namespace declarations (WS-Topics 1.3 §8);
* :func:`render_topic` renders a topic in the subscriber's dialect
  (WS-BaseNotification 1.3 §3.1; see its docstring) with the prefixes of
  gateway.topics.prefixes.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from lxml import etree

from .dialects import CONCRETE, SIMPLE, XPATH, canonical_dialect, concrete_of
from .errors import InvalidTopicExpression
from .expression import TopicExpression, clean_nsmap
from .model import ConcreteTopic, split_step
from .path import PathExpression
from .prefixes import choose as choose_prefixes
from .xpath import XPathExpression

#: longest expression text accepted (hostile sizes; the XPath dialect is
#: evaluated over the whole Topic Set)
MAX_EXPRESSION_LENGTH = 4096
#: a compiled expression is kept in the caches below only when its text and the namespace
#: declarations of its key come to at most this many characters: a hostile request could
#: otherwise park a key as large as the request (a long namespace URI in scope) in each
#: of their entries
MAX_CACHED_KEY_CHARS = 4096


def cacheable(text: str | None, ns_items: tuple[tuple[str | None, str], ...]) -> bool:
    """Whether a compile key of `text` and `ns_items` is small enough to keep (see
    MAX_CACHED_KEY_CHARS)."""
    size = len(text or "")
    for prefix, uri in ns_items:
        size += len(prefix or "") + len(uri)
        if size > MAX_CACHED_KEY_CHARS:
            return False
    return size <= MAX_CACHED_KEY_CHARS


def compile_expression(
    dialect: str, text: str, nsmap: Mapping[str | None, str] | None = None
) -> TopicExpression:
    """Parse ``text`` of ``dialect`` once into a compiled expression; prefixes
    resolve through ``nsmap`` (the default namespace, key None, is ignored:
    unprefixed names are in the ad-hoc namespace, WS-Topics 1.3 §10)."""
    canon = canonical_dialect(dialect)
    if not isinstance(text, str):
        raise InvalidTopicExpression("a topic expression must be text")
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise InvalidTopicExpression(
            f"topic expression of {len(text)} characters is longer than the "
            f"{MAX_EXPRESSION_LENGTH} this producer accepts"
        )
    ns = clean_nsmap(nsmap)
    # Compiled expressions are immutable (their caches are keyed on the Topic
    # Set version), so identical text + prefixes share one compiled object.
    key = tuple(sorted(ns.items()))
    if cacheable(text, key):
        return _compile(canon, text.strip(), key)
    return _compile.__wrapped__(canon, text.strip(), key)


@lru_cache(maxsize=16384)
def _compile(canon: str, text: str, ns: tuple[tuple[str, str], ...]) -> TopicExpression:
    if canon == XPATH:
        if not text:
            raise InvalidTopicExpression("the XPath topic expression is empty")
        return XPathExpression(text, dict(ns))
    return PathExpression(canon, text, dict(ns))


def parse_topic_expression_element(el: etree._Element) -> TopicExpression:
    """Compile a ``wsnt:TopicExpression``/``wsnt:Topic``/``wsnt:Filter`` child
    (any TopicExpressionType element): ``@Dialect`` + text content + the
    element's in-scope namespaces (``el.nsmap``)."""
    dialect = el.get("Dialect")
    if dialect is None:
        dialect = el.get("dialect")  # WS-Topics 2004 spelling
    if dialect is None:
        raise InvalidTopicExpression(
            f"{etree.QName(el).localname} has no Dialect attribute (WS-Topics 1.3 §8)"
        )
    text = el.text or ""
    for kid in el:
        if isinstance(kid.tag, str):
            raise InvalidTopicExpression(
                f"{etree.QName(el).localname} must contain only the expression text, found a "
                f"child element {kid.tag!r}"
            )
        text += kid.tail or ""  # comments and PIs are not part of the text
    ns_items = tuple(el.nsmap.items())
    if cacheable(dialect + text, ns_items):  # the dialect is a key too (it may be padded)
        return _compile_element(dialect, text, ns_items)
    return compile_expression(dialect, text, dict(ns_items))


@lru_cache(maxsize=4096)
def _compile_element(
    dialect: str, text: str, ns_items: tuple[tuple[str | None, str], ...]
) -> TopicExpression:
    """One compiled expression per distinct (dialect, text, namespace context) as read from
    an element: publishers send the same wsnt:Topic in every Notify, so the dialect check,
    prefix map cleaning and compile-cache key are paid once (bounded; a bad expression
    raises each time, it is not cached)."""
    return compile_expression(dialect, text, dict(ns_items))


def render_topic(
    topic: ConcreteTopic, dialect: str, prefixes: Mapping[str, str] | None = None
) -> tuple[str, str, dict[str, str]]:
    """``(dialect_uri, text, {prefix: namespace})`` to put in the wsnt:Topic of
    a Notify sent to a subscriber whose subscription used ``dialect``.

    WS-BaseNotification 1.3 §3.1: wsnt:Topic/@Dialect "MUST be the same dialect
    used by the Subscriber when it created the Subscription". So the answer is
    ``dialect`` itself, spelled as the subscriber spelled it (a 2004 URI stays
    the 2004 URI, surrounding white space dropped), with the topic's concrete
    path as text: a Concrete path is valid Full (WS-Topics 1.3 §8.3), and as an
    XPath (WS-Topics 1.3 §8.4) it
    is a relative location path (``tns:t1/t2``) that selects exactly this
    topic's element from the TopicSet element, the context node. The one
    exception is Simple for a topic that is not a root topic, which Simple
    cannot express (WS-Topics 1.3 §8.1); a Simple subscription never selects one, and if it
    did the topic goes out as Concrete (in the Simple URI's family,
    :func:`concrete_of`). An expression without a dialect (no TopicExpression
    in the subscription) gets Concrete.

    ``prefixes`` (namespace URI -> prefix, e.g. :meth:`PrefixBook.choose`) name
    the prefix of each namespace on the path; a namespace it lacks, or whose
    prefix is unusable or taken, gets one by :func:`prefixes.choose`'s later
    rules (conventional, then ``tns``, ``tns1``, ...). The caller declares the
    returned prefixes on the wsnt:Topic element so the text resolves with the
    declarations in scope; ad-hoc roots (WS-Topics 1.3 §10) are unprefixed.
    """
    canon = canonical_dialect(dialect)
    if not topic.path:
        raise InvalidTopicExpression("an empty topic path cannot be rendered")
    chosen = choose_prefixes(topic, prefixes)

    def qname(ns: str, local: str) -> str:
        return f"{chosen[ns]}:{local}" if ns else local

    parts = [qname(topic.namespace, topic.path[0])]
    for step in topic.path[1:]:
        sns, local = split_step(step)
        parts.append(local if sns is None else qname(sns, local))
    text = "/".join(parts)
    declared = {p: ns for ns, p in chosen.items()}
    if canon == SIMPLE and not topic.is_root:
        return concrete_of(dialect), text, declared
    return dialect.strip(), text, declared


def topic_text(topic: ConcreteTopic, prefixes: Mapping[str, str] | None = None) -> str:
    """`topic` as a Concrete path with the prefixes :func:`render_topic` would choose
    (``tns1:RuleEngine/CellMotionDetector/Motion``): for people (status pages, the CLI)."""
    if not topic.path:
        return ""
    return render_topic(topic, CONCRETE, prefixes)[1]
