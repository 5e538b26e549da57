"""The path dialects: Simple (WS-Topics 1.3 §8.1), Concrete (§8.2) and Full
(§8.3), compiled into one matcher form.

Every path expression is a union of *branches*; a branch is a sequence of
tokens matched against the element names of a topic in the TopicSet document
(§7), starting with the ``wstop:TopicSet`` element itself:

* ``ONE(ns, local)``: exactly one element; ``ns``/``local`` None = any
  (``*`` matches any element, ``p:*`` any element of namespace p, §8.3);
* ``DOS``: zero or more elements (XPath ``descendant-or-self``).

A Full expression is an XPath 1.0 location path evaluated with the TopicSet
element as context node (§8.3), so a relative branch starts with
``ONE(wstop, TopicSet)`` and ``//x`` at the start is XPath's absolute
``/descendant-or-self::node()/child::x``. Because Full paths only move down
through child/descendant/self axes with name tests, whether an element is
selected depends only on the names of it and its ancestors: matching needs no
XPath and no document. The one form that is not literal XPath, a prefixed
root followed by ``//`` (``tns://*``, ``tns://t3``), is read as "in the trees of
namespace tns": ``(tns:t3 | tns:*//t3)`` (§8.3 example ``tns://*`` = every
topic of the namespace); :meth:`PathExpression.to_xpath` writes it so.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from .dialects import CONCRETE, FULL, SIMPLE
from .errors import InvalidTopicExpression
from .expression import TopicExpression, resolve_prefix
from .model import WSTOP, ConcreteTopic, make_step

if TYPE_CHECKING:
    from .topicset import TopicSet

# A token: (kind, namespace, local). kind ONE consumes one element whose
# namespace/local equal the given ones (None = any); DOS consumes zero or more.
ONE = 0
DOS = 1
Token = tuple[int, str | None, str | None]
Branch = tuple[Token, ...]
Name = tuple[str, str]

TOPICSET: Token = (ONE, WSTOP, "TopicSet")
TOPICSET_NAME: Name = (WSTOP, "TopicSet")
_DOS: Token = (DOS, None, None)

_NCNAME = re.compile(r"[^\W\d][\w.\-\u00b7\u0300-\u036f\u203f-\u2040]*")
_SPACE = re.compile(r"\s")

_NAMES = {SIMPLE: "Simple", CONCRETE: "Concrete", FULL: "Full"}


def _name_ok(tok: Token, name: Name) -> bool:
    return (tok[1] is None or tok[1] == name[0]) and (tok[2] is None or tok[2] == name[1])


def match_branch(tokens: Branch, names: Iterable[Name]) -> bool:
    """NFA run of ``tokens`` over element ``names`` (TopicSet element first)."""
    n = len(tokens)
    states = {0}
    if tokens and tokens[0][0] == DOS:
        states.add(1)
    for name in names:
        nxt: set[int] = set()
        for i in states:
            if i == n:
                continue
            tok = tokens[i]
            if tok[0] == DOS:
                nxt.add(i)
            elif _name_ok(tok, name):
                nxt.add(i + 1)
        if not nxt:
            return False
        for i in list(nxt):
            # epsilon closure: a DOS may consume nothing (DOS runs are collapsed)
            if i < n and tokens[i][0] == DOS:
                nxt.add(i + 1)
        states = nxt
    return n in states


def topic_names(topic: ConcreteTopic) -> tuple[Name, ...]:
    """Element names of ``topic`` in the TopicSet document, TopicSet first."""
    return (TOPICSET_NAME, *topic.element_names())


class _Parser:
    """Recursive-descent parser of the Full grammar (§8.3 [1]-[9]) with the
    restrictions of Simple (§8.1) and Concrete (§8.2) switched on by dialect."""

    def __init__(self, dialect: str, text: str, nsmap: Mapping[str, str]) -> None:
        self.dialect = dialect
        self.full = dialect == FULL
        self.text = text
        self.nsmap = nsmap
        self.branches: list[Branch] = []
        self.explicit: list[ConcreteTopic] = []
        self.uses_prefixed_descendant = False
        #: namespace -> the first prefix the text used for it (topics keep their prefix)
        self.prefix_of: dict[str, str] = {}

    def error(self, part: str, offset: int, message: str) -> InvalidTopicExpression:
        where = f" at offset {offset}" if offset >= 0 else ""
        if where and part != self.text:
            where += f" of operand {part!r}"
        return InvalidTopicExpression(
            f"invalid {_NAMES[self.dialect]} topic expression {self.text!r}: {message}"
            f"{where} (WS-Topics 1.3 §{self.section})"
        )

    @property
    def section(self) -> str:
        return {SIMPLE: "8.1", CONCRETE: "8.2", FULL: "8.3"}[self.dialect]

    def parse(self) -> None:
        text = self.text
        if not text:
            raise self.error(text, -1, "the expression is empty")
        parts = text.split("|")
        if len(parts) > 1 and not self.full:
            raise self.error(text, text.index("|"), "'|' is only allowed in the Full dialect")
        for raw in parts:
            # xsd:token content: surrounding white space is not significant; we
            # also tolerate it around '|', as the 2004 drafts wrote "A | B".
            part = raw.strip()
            if not part:
                raise self.error(text, -1, "an operand of '|' is empty")
            m = _SPACE.search(part)
            if m:
                raise self.error(part, m.start(), "white space is not permitted in a path")
            self.parse_path(part)

    def qname(self, part: str, i: int, what: str) -> tuple[str | None, str, int]:
        """[prefix ':'] NCName at i -> (prefix, local, end)."""
        m = _NCNAME.match(part, i)
        if not m:
            raise self.error(part, i, f"expected {what}")
        if m.end() < len(part) and part[m.end()] == ":":
            if part.startswith("*", m.end() + 1):
                raise self.error(
                    part, m.end() + 1, "a prefixed wildcard is only allowed on the root topic"
                )
            m2 = _NCNAME.match(part, m.end() + 1)
            if not m2:
                raise self.error(part, m.end() + 1, "expected a topic name after the prefix")
            return m.group(), m2.group(), m2.end()
        return None, m.group(), m.end()

    def parse_path(self, part: str) -> None:
        toks: list[Token] = []
        alt: list[Token] | None = None  # second branch for "p://name"
        explicit = True
        lit: list[str] = []  # literal leading steps of an explicit path
        i = 0
        # RootTopic ::= NamespacePrefix? ('//')? (NCName | '*')   §8.3 [5]
        prefix: str | None = None
        m = _NCNAME.match(part, i)
        if m and m.end() < len(part) and part[m.end()] == ":":
            prefix = m.group()
            i = m.end() + 1
        ns = resolve_prefix(prefix, self.nsmap, self.text) if prefix is not None else ""
        if prefix is not None:
            self.prefix_of.setdefault(ns, prefix)
        descendant = part.startswith("//", i)
        if descendant:
            if not self.full:
                raise self.error(part, i, "'//' is only allowed in the Full dialect")
            i += 2
        if part.startswith("*", i):
            if not self.full:
                raise self.error(part, i, "'*' is only allowed in the Full dialect")
            local: str | None = None
            i += 1
            explicit = False
        else:
            m = _NCNAME.match(part, i)
            if not m:
                raise self.error(part, i, "expected a root topic name or '*'")
            local = m.group()
            i = m.end()
        if descendant:
            explicit = False
            if prefix is None:
                # literal XPath: //x from the TopicSet is absolute
                toks = [_DOS, (ONE, "", local) if local is not None else (ONE, None, None)]
            else:
                # "p://x" = (p:x | p:*//x) ; "p://*" = p:*//.   (see module doc)
                self.uses_prefixed_descendant = True
                if local is None:
                    toks = [TOPICSET, (ONE, ns, None), _DOS]
                else:
                    alt = [TOPICSET, (ONE, ns, local)]
                    toks = [TOPICSET, (ONE, ns, None), _DOS, (ONE, "", local)]
        else:
            # unprefixed '*' is XPath's '*': any root element, of any namespace
            any_ns = prefix is None and local is None
            toks = [TOPICSET, (ONE, None if any_ns else ns, local)]
            if local is not None:
                lit.append(local)
        if self.dialect == SIMPLE and i < len(part):
            if part[i] == "/":
                raise self.error(
                    part,
                    i,
                    "the Simple dialect addresses root topics only "
                    "(use the Concrete dialect for a path)",
                )
            raise self.error(part, i, "unexpected character")
        # ChildTopicExpression ::= '/' '/'? (QName | NCName | '*' | '.')  §8.3 [7]
        while i < len(part):
            if part[i] != "/":
                raise self.error(part, i, f"unexpected character {part[i]!r}, expected '/'")
            i += 1
            desc = part.startswith("/", i)
            if desc:
                if not self.full:
                    raise self.error(part, i, "'//' is only allowed in the Full dialect")
                i += 1
                explicit = False
            if i >= len(part):
                raise self.error(part, i, "a step is missing after '/'")
            step: Token | None
            if part[i] == "*":
                if not self.full:
                    raise self.error(part, i, "'*' is only allowed in the Full dialect")
                step = (ONE, None, None)
                explicit = False
                i += 1
            elif part[i] == ".":
                if not self.full:
                    raise self.error(part, i, "'.' is only allowed in the Full dialect")
                step = None  # self::node(): no move
                i += 1
            else:
                p, loc, end = self.qname(part, i, "a topic name, '*' or '.'")
                sns = resolve_prefix(p, self.nsmap, self.text) if p is not None else ""
                if p is not None:
                    self.prefix_of.setdefault(sns, p)
                step = (ONE, sns, loc)
                if explicit:
                    lit.append(make_step(None if p is None else sns, loc))
                i = end
            if desc:
                toks.append(_DOS)
                if alt is not None:
                    alt.append(_DOS)
            if step is not None:
                toks.append(step)
                if alt is not None:
                    alt.append(step)
        for br in (toks, alt):
            if br is None:
                continue
            collapsed: list[Token] = []
            for t in br:
                if t[0] == DOS and collapsed and collapsed[-1][0] == DOS:
                    continue
                collapsed.append(t)
            self.branches.append(tuple(collapsed))
        if lit:
            self.explicit.append(ConcreteTopic(ns, tuple(lit)))


def _concrete(branch: Branch) -> ConcreteTopic | None:
    """The topic a literal branch names, None if the branch has wildcards."""
    if not branch or branch[0] != TOPICSET or len(branch) < 2:
        return None
    steps: list[str] = []
    root_ns = ""
    for n, (kind, ns, local) in enumerate(branch[1:]):
        if kind != ONE or ns is None or local is None:
            return None
        if n == 0:
            root_ns = ns
            steps.append(local)
        else:
            steps.append(make_step(ns or None, local))
    return ConcreteTopic(root_ns, tuple(steps))


class PathExpression(TopicExpression):
    """A compiled Simple, Concrete or Full expression (see module docstring).

    ``branches`` are the token sequences of the union, deduplicated;
    ``concrete`` holds, per branch, the topic it names literally (or None).
    """

    __slots__ = (
        "_explicit",
        "_prefix_of",
        "_single",
        "branches",
        "concrete",
        "prefixed_descendant",
    )

    def __init__(self, dialect: str, text: str, nsmap: dict[str, str]) -> None:
        super().__init__(dialect, text, nsmap)
        parser = _Parser(dialect, text, nsmap)
        parser.parse()
        seen: dict[Branch, None] = dict.fromkeys(parser.branches)
        self.branches: tuple[Branch, ...] = tuple(seen)
        self.concrete: tuple[ConcreteTopic | None, ...] = tuple(_concrete(b) for b in self.branches)
        self._explicit = parser.explicit
        self.prefixed_descendant = parser.uses_prefixed_descendant
        self._prefix_of = parser.prefix_of
        self._single: ConcreteTopic | None = self.concrete[0] if len(self.branches) == 1 else None

    def single_topic(self) -> ConcreteTopic | None:
        return self._single

    def prefixes_used(self) -> dict[str, str]:
        return dict(self._prefix_of)

    @property
    def has_wildcards(self) -> bool:
        return any(c is None for c in self.concrete)

    def explicit_topics(self) -> list[ConcreteTopic]:
        return list(self._explicit)

    def parts(self) -> list[TopicExpression]:
        if len(self.branches) == 1 or self.prefixed_descendant:
            return [self]
        return [_Branch(self, b, c) for b, c in zip(self.branches, self.concrete, strict=True)]

    def matches_names(self, names: tuple[Name, ...]) -> bool:
        """True if an element with these names (TopicSet first) is selected."""
        return any(match_branch(b, names) for b in self.branches)

    def _matches_member(self, topic: ConcreteTopic, ts: TopicSet) -> bool:
        for b, c in zip(self.branches, self.concrete, strict=True):
            if c is not None:
                if c == topic:
                    return True
            elif match_branch(b, topic_names(topic)):
                return True
        return False

    def select(self, ts: TopicSet) -> frozenset[ConcreteTopic]:
        out: set[ConcreteTopic] = set()
        wild = [b for b, c in zip(self.branches, self.concrete, strict=True) if c is None]
        for c in self.concrete:
            if c is not None and c in ts:
                out.add(c)
        if wild:
            for topic in ts.topics():
                names = topic_names(topic)
                if any(match_branch(b, names) for b in wild):
                    out.add(topic)
        return frozenset(out)

    def to_xpath(self) -> tuple[str, dict[str, str]]:
        """The XPath 1.0 text of this expression (the §8.3 correspondence) and
        the prefix bindings it needs; evaluated with the TopicSet element as
        context node it selects what :meth:`select` selects."""
        return branches_to_xpath(self.branches)


def branches_to_xpath(branches: Iterable[Branch]) -> tuple[str, dict[str, str]]:
    prefixes: dict[str, str] = {}

    def name(ns: str | None, local: str | None) -> str:
        if ns is None:
            return "*"
        loc = "*" if local is None else local
        if ns == "":
            return loc
        if ns not in prefixes:
            prefixes[ns] = f"ns{len(prefixes)}"
        return f"{prefixes[ns]}:{loc}"

    out: list[str] = []
    for br in branches:
        s = ""
        toks = list(br)
        if toks and toks[0] == TOPICSET:
            toks = toks[1:]
            sep = ""
        else:
            sep = "/"  # absolute: a leading DOS gives "//"
        pending_dos = False
        for kind, ns, local in toks:
            if kind == DOS:
                pending_dos = True
                continue
            s += ("//" if pending_dos else sep) + name(ns, local)
            pending_dos = False
            sep = "/"
        if pending_dos:
            s += "//."
        out.append(s)
    return "|".join(out), {p: ns for ns, p in prefixes.items()}


class _Branch(TopicExpression):
    """One operand of a Full ``|`` union, seen as an expression of its own
    (alias resolution rule 4, WS-Topics 2004 §8)."""

    __slots__ = ("branch", "topic")

    def __init__(self, whole: PathExpression, branch: Branch, topic: ConcreteTopic | None):
        super().__init__(whole.dialect, whole.text, whole.nsmap)
        self.branch = branch
        self.topic = topic

    def single_topic(self) -> ConcreteTopic | None:
        return self.topic

    @property
    def has_wildcards(self) -> bool:
        return self.topic is None

    def select(self, ts: TopicSet) -> frozenset[ConcreteTopic]:
        if self.topic is not None:
            return frozenset((self.topic,)) if self.topic in ts else frozenset()
        return frozenset(t for t in ts.topics() if match_branch(self.branch, topic_names(t)))
