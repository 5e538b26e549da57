"""TopicExpression dialect URIs (WS-Topics 1.3 §8) and their 2004 aliases.

A caller may rely on: :func:`canonical_dialect` maps every accepted URI onto
one of :data:`SIMPLE`, :data:`CONCRETE`, :data:`FULL`, :data:`XPATH` and
raises :class:`TopicExpressionDialectUnknown` for anything else. Comparison is
exact except for surrounding whitespace (URIs are case-sensitive).
:func:`concrete_of` is the Concrete dialect spelled as another accepted URI
spells its family (for a topic a Simple subscriber's dialect cannot express).
"""

from __future__ import annotations

from .errors import TopicExpressionDialectUnknown

_T1 = "http://docs.oasis-open.org/wsn/t-1/TopicExpression/"

SIMPLE = _T1 + "Simple"  # WS-Topics 1.3 §8.1
CONCRETE = _T1 + "Concrete"  # §8.2
FULL = _T1 + "Full"  # §8.3
XPATH = "http://www.w3.org/TR/1999/REC-xpath-19991116"  # §8.4

# WS-Topics 2004 drafts (000_/003_ §7): the IBM "stdwip" URIs. The 1.0 PDF
# text (003_) prints the path as "WSTopics" where the draft (000_) has
# "WS-Topics"; both spellings circulate, both are accepted. The OASIS 1.2
# draft URIs (".../wsn/2004/06/TopicExpression/...") were used by WSN 1.2
# implementations (Apache Muse, Globus) and are accepted as well: they
# interoperate and cannot mean anything else.
_IBM = "http://www.ibm.com/xmlns/stdwip/web-services/"
_ALIASES: dict[str, str] = {
    SIMPLE: SIMPLE,
    CONCRETE: CONCRETE,
    FULL: FULL,
    XPATH: XPATH,
}
for _base in (_IBM + "WS-Topics/TopicExpression/", _IBM + "WSTopics/TopicExpression/"):
    _ALIASES[_base + "simple"] = SIMPLE
    _ALIASES[_base + "concreteTopicPath"] = CONCRETE
    _ALIASES[_base + "FullTopicPath"] = FULL
for _base in ("http://docs.oasis-open.org/wsn/2004/06/TopicExpression/",):
    _ALIASES[_base + "Simple"] = SIMPLE
    _ALIASES[_base + "Concrete"] = CONCRETE
    _ALIASES[_base + "Full"] = FULL
#: each accepted URI -> the Concrete dialect as its own family spells it (2004 IBM,
#: 2004 OASIS draft, 1.3)
_CONCRETE_OF: dict[str, str] = {}
for _uri, _canon in _ALIASES.items():
    if _uri.endswith("/simple") or _uri.endswith("/concreteTopicPath"):
        _CONCRETE_OF[_uri] = _uri.rsplit("/", 1)[0] + "/concreteTopicPath"
    elif _uri.startswith("http://docs.oasis-open.org/wsn/2004/06/"):
        _CONCRETE_OF[_uri] = _uri.rsplit("/", 1)[0] + "/Concrete"
    else:
        _CONCRETE_OF[_uri] = CONCRETE

#: every dialect URI accepted, old and new
ACCEPTED_DIALECTS: frozenset[str] = frozenset(_ALIASES)
#: the four canonical dialects (what TopicExpressionDialect properties list)
DIALECTS: tuple[str, ...] = (SIMPLE, CONCRETE, FULL, XPATH)


def canonical_dialect(uri: str) -> str:
    """The WS-Topics 1.3 URI of dialect ``uri``; raises
    :class:`TopicExpressionDialectUnknown` naming the URI and the accepted ones."""
    canon = _ALIASES.get(uri.strip()) if isinstance(uri, str) else None
    if canon is None:
        raise TopicExpressionDialectUnknown(
            f"topic expression dialect {uri!r} is not supported; use one of " + ", ".join(DIALECTS)
        )
    return canon


def concrete_of(uri: str) -> str:
    """The Concrete dialect in the spelling of the family of accepted URI ``uri``
    (``.../WS-Topics/TopicExpression/simple`` -> ``.../concreteTopicPath``); raises
    :class:`TopicExpressionDialectUnknown` like :func:`canonical_dialect`."""
    canonical_dialect(uri)
    return _CONCRETE_OF[uri.strip()]
