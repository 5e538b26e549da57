"""Which XPath 1.0 expressions are proven to cost time linear in the document, and why the
others are not.

The broker evaluates MessageContent and ProducerProperties filters (WS-BaseNotification 1.3
§4.2) on every notification and XPath TopicExpressions (WS-Topics 1.3 §8.4) on the Topic
Set, for anyone allowed to Subscribe, with libxml2, which cannot be interrupted once it
starts. Every valid expression is accepted (WS-BaseNotification 1.3 §4.1: a listed dialect
promises that); this module only decides *where* one is evaluated: `analyze(text).linear`
ones on the event loop, every other one in a worker process with a time limit
(gateway/topics/xpath_budget.py), so one subscriber's expression can stall nothing but its
own evaluation.

The proof follows libxml2's evaluation (measured with documents of n and 4n nodes): a step
over the child, attribute or self axis appends its results without looking for duplicates
(one parent per node), so it is linear from any number of context nodes. Every other axis
merges each context node's results into the set collected so far, comparing each new node
with every node already in it: from one context node that is linear, from many it is
quadratic (`//a//b`, `//*//*`, `//b/..`, `//a/following-sibling::*`). So `linear` holds
when:

* a descendant, parent, ancestor, sibling, following, preceding or namespace step starts
  from at most one node: the context node, the root (`/`), or the document element
  (`/name`); a parenthesized expression, a union or a function's node-set counts as many;
* a predicate (evaluated once per candidate, the candidate as its single context node)
  reads only the candidate's subtree: relative paths with downward steps (`.//b` is fine),
  no absolute path, no `..`, no ancestor or sibling axis;
* no two node-sets are compared (`//a = //b` compares every pair) and no node-sets are
  united (`|` merges with the same quadratic check);
* every function is one of XPath 1.0's core library with a linear cost; `contains`,
  `substring-before`, `substring-after` search with a literal pattern of at most
  MAX_PATTERN_CHARS characters, `translate` with literal tables of at most that many (a
  pattern taken from the document makes the naive search quadratic); `id()`, extension
  functions (a prefixed name) and variables are never proven linear;
* predicates nest at most MAX_PREDICATE_DEPTH deep and parentheses MAX_PAREN_DEPTH deep.

With these, one evaluation costs at most about (steps x nodes x depth), and the parser
limits the depth to 256. `analyze` also says, for a topic expression, whether it is a
*local path* (`Analysis.local`): a union of location paths with downward steps whose only
predicates are on their last step, read only the candidate's subtree and do not depend on
position. Whether such a path selects a topic depends only on the topic's own path and
subtree, so a new topic needs its own check and its ancestors', not a new evaluation over
the whole Topic Set (gateway/topics/index.py).

The parser is XPath 1.0's grammar (§3) over the tokens of §3.7 (gateway/topics/xpath_lexer.py);
a text it cannot read is not linear ("not understood"), and whether it is XPath at all is
lxml's verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .xpath_lexer import AXES, Unreadable, tokens

MAX_PREDICATE_DEPTH = 8
MAX_PAREN_DEPTH = 32
#: longest literal pattern of contains()/substring-before()/substring-after() and tables of
#: translate() proven linear (the naive search costs pattern x text)
MAX_PATTERN_CHARS = 256

#: axes that append without a duplicate check: linear from any number of nodes
_APPENDING = {"child", "attribute", "self"}
_DOWNWARD = {"child", "attribute", "self", "descendant", "descendant-or-self"}
_COMPARISONS = {"=", "!=", "<", "<=", ">", ">="}

#: the core function library (XPath 1.0 §4): name -> the type it returns
_CORE = {
    **dict.fromkeys(
        ("last", "position", "count", "string-length", "number", "sum", "floor", "ceiling",
         "round"), "number"),
    **dict.fromkeys(
        ("local-name", "namespace-uri", "name", "string", "concat", "substring-before",
         "substring-after", "substring", "normalize-space", "translate"), "string"),
    **dict.fromkeys(
        ("starts-with", "contains", "boolean", "not", "true", "false", "lang"), "boolean"),
    "id": "nodeset",
}  # fmt: skip
#: functions whose arguments after the first must be short literals to be linear
_SEARCHES = {"contains", "substring-before", "substring-after", "translate"}
#: binary operators from the loosest to the tightest (§3.4, §3.5)
_LEVELS = (("or",), ("and",), ("=", "!="), ("<", "<=", ">", ">="), ("+", "-"),
           ("*", "div", "mod"))  # fmt: skip


@dataclass
class LocalPath:
    """A location path of a local-path topic expression (see the module docstring): the
    path without the predicates of its last step (`path`), those predicates' texts, and
    its steps as (the separator before it: "", "/" or "//"; its node test: a QName, `*`,
    `p:*`, `node()` or `.`), or None when a step is not one of those on the child axis."""

    path: str
    predicates: list[str] = field(default_factory=list)
    steps: list[tuple[str, str]] | None = None


@dataclass
class Analysis:
    """What `analyze` found: `linear` (else `reason` says why not) and, for a local path
    or a union of them, its operands (else None)."""

    linear: bool
    reason: str | None
    local: list[LocalPath] | None


@dataclass
class _Val:
    """A sub-expression: its type (nodeset, number, string, boolean), for a node-set
    whether it holds at most one node, whether it reads the context position or size or
    looks outside the context's subtree at its own level (`positional`, `nonlocal_`), and
    for a location path its local-path form."""

    type: str
    single: bool = False
    positional: bool = False
    nonlocal_: bool = False
    local: list[LocalPath] | None = None

    @property
    def nodeset(self) -> bool:
        return self.type == "nodeset"


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = tokens(text)  # (kind, text, start, end)
        self.i = 0
        self.problem: str | None = None
        self.preds = 0  # predicate nesting
        self.parens = 0

    # ---- tokens ----
    def peek(self) -> str | None:
        return self.toks[self.i][1] if self.i < len(self.toks) else None

    def kind(self) -> str | None:
        return self.toks[self.i][0] if self.i < len(self.toks) else None

    def take(self, want: str | None = None) -> str:
        if self.i >= len(self.toks):
            raise Unreadable
        tok = self.toks[self.i][1]
        if want is not None and tok != want:
            raise Unreadable
        self.i += 1
        return tok

    def pos(self) -> int:
        return self.toks[self.i][2] if self.i < len(self.toks) else len(self.text)

    def end_of_previous(self) -> int:
        return self.toks[self.i - 1][3]

    def refuse(self, why: str) -> None:
        if self.problem is None:
            self.problem = why

    # ---- expressions (§3.4, §3.5) ----
    def expr(self, level: int = 0) -> _Val:
        if level == len(_LEVELS):
            return self.unary()
        left = self.expr(level + 1)
        while self.kind() == "op" and self.peek() in _LEVELS[level]:
            op = self.take()
            right = self.expr(level + 1)
            if op in _COMPARISONS and left.nodeset and right.nodeset:
                self.refuse(
                    f"'{op}' compares two node-sets, every node of one with every node of the other"
                )
            result = "number" if level >= 4 else "boolean"
            left = _Val(
                result,
                positional=left.positional or right.positional,
                nonlocal_=left.nonlocal_ or right.nonlocal_,
            )
        return left

    def unary(self) -> _Val:
        if self.kind() == "op" and self.peek() == "-":
            self.take()
            v = self.unary()
            return _Val("number", positional=v.positional, nonlocal_=v.nonlocal_)
        return self.union()

    def union(self) -> _Val:
        v = self.path_expr()
        while self.peek() == "|":
            self.take()
            w = self.path_expr()
            if not (v.nodeset and w.nodeset):
                raise Unreadable
            self.refuse("'|' unites node-sets with a duplicate check per node (quadratic)")
            local = v.local + w.local if v.local is not None and w.local is not None else None
            v = _Val(
                "nodeset",
                positional=v.positional or w.positional,
                nonlocal_=v.nonlocal_ or w.nonlocal_,
                local=local,
            )
        return v

    def path_expr(self) -> _Val:
        if self.kind() in ("literal", "number", "var", "func") or self.peek() == "(":
            v = self.filter_expr()
            if self.peek() in ("/", "//"):
                if not v.nodeset:
                    raise Unreadable
                w = self.relative(v.single, start=-1, continued=True)
                w.positional = v.positional or w.positional
                w.nonlocal_ = v.nonlocal_ or w.nonlocal_
                return w
            return v
        return self.location_path()

    def filter_expr(self) -> _Val:
        v = self.primary()
        while self.peek() == "[":
            if not v.nodeset:
                raise Unreadable
            self.predicate()
            v = _Val("nodeset", positional=v.positional, nonlocal_=v.nonlocal_)
        return v

    def primary(self) -> _Val:
        tok, kind = self.peek(), self.kind()
        if kind == "literal":
            self.take()
            return _Val("string")
        if kind == "number":
            self.take()
            return _Val("number")
        if kind == "var":
            self.take()
            self.refuse(f"a variable ({tok}) is never proven linear")
            return _Val("nodeset", nonlocal_=True)
        if tok == "(":
            self.take()
            self.parens += 1
            if self.parens > MAX_PAREN_DEPTH:
                self.refuse(f"parentheses are nested more than {MAX_PAREN_DEPTH} deep")
            v = self.expr()
            self.take(")")
            self.parens -= 1
            # a node-set in parentheses counts as many nodes
            return _Val(v.type, positional=v.positional, nonlocal_=v.nonlocal_)
        if kind == "func":
            return self.function()
        raise Unreadable

    def function(self) -> _Val:
        name = self.take()
        self.take("(")
        args: list[tuple[_Val, str | None]] = []  # (its value, its text if a literal)
        if self.peek() != ")":
            while True:
                start = self.i
                v = self.expr()
                lit = self.toks[start][1] if self.i == start + 1 and v.type == "string" else None
                args.append((v, lit))
                if self.peek() != ",":
                    break
                self.take()
        self.take(")")
        positional = name in ("position", "last") or any(a.positional for a, _ in args)
        nonlocal_ = name in ("lang", "id") or any(a.nonlocal_ for a, _ in args)
        if ":" in name:
            self.refuse(f"the extension function {name}() is never proven linear")
            return _Val("nodeset", positional=positional, nonlocal_=True)
        returns = _CORE.get(name)
        if returns is None:
            self.refuse(f"{name}() is not an XPath 1.0 core function")
            return _Val("nodeset", positional=positional, nonlocal_=True)
        if name == "id":
            self.refuse("id() is never proven linear")
        if name in _SEARCHES:
            for _v, lit in args[1:]:
                if lit is None or len(lit) - 2 > MAX_PATTERN_CHARS:
                    self.refuse(
                        f"{name}() with a pattern that is not a literal of at most "
                        f"{MAX_PATTERN_CHARS} characters searches in pattern x text time"
                    )
        return _Val(returns, positional=positional, nonlocal_=nonlocal_)

    # ---- location paths (§2) ----
    def location_path(self) -> _Val:
        start = self.pos()
        tok = self.peek()
        if tok in ("/", "//"):
            if self.preds:
                self.refuse(
                    "an absolute path inside a predicate is evaluated over the whole "
                    "document once per candidate node"
                )
            self.take()
            if tok == "/" and not self._step_starts():
                return _Val("nodeset", single=True, nonlocal_=True)  # the root alone
            if tok == "//":  # /descendant-or-self::node()/ from the root: one node
                self._axis_from("descendant-or-self", True)
                return self.relative(False, start, nonlocal_=True, lead="//")
            return self.relative(True, start, from_root=True, nonlocal_=True, lead="/")
        return self.relative(True, start)

    def _step_starts(self) -> bool:
        return self.kind() in ("name", "axis", "nodetype") or self.peek() in (".", "..", "@", "*")

    def relative(
        self,
        single: bool,
        start: int,
        *,
        from_root: bool = False,
        continued: bool = False,
        nonlocal_: bool = False,
        lead: str = "",
    ) -> _Val:
        """Steps from one context node (`single`) or many. `start`: where the path's text
        starts (-1 after a filter expression: never a local path); `continued`: a '/' or
        '//' comes first; `from_root`: the first step starts at the root; `lead`: the
        absolute path's first separator."""
        local_ok = start >= 0
        preds_before_last = False
        last_preds: list[str] = []
        path_end = start
        after_root = from_root
        first = not continued
        steps: list[tuple[str, str]] | None = []
        sep = lead
        while True:
            if not first:
                sep = self.take()
                if sep == "//":
                    single = self._axis_from("descendant-or-self", single)
                if last_preds:
                    preds_before_last = True
            first = False
            test_start = self.i
            axis, single, path_end = self.step(single, after_root)
            test = self.toks[self.i - 1][1]
            if steps is not None:
                if (
                    axis == "child"
                    and self.i - test_start == 1
                    and self.toks[test_start][0]
                    in (
                        "name",
                        "punct",
                    )
                ):
                    steps.append((sep, test))  # a name, p:*, or *
                elif axis == "child" and self.toks[test_start][1] == "node":
                    steps.append((sep, "node()"))
                elif test == ".":
                    steps.append((sep, "."))
                else:
                    steps = None
            if axis not in _DOWNWARD:
                local_ok = False
                nonlocal_ = True
            after_root = False
            last_preds = []
            while self.peek() == "[":
                p0 = self.pos()
                v = self.predicate()
                last_preds.append(self.text[p0 + 1 : self.end_of_previous() - 1])
                if v.positional or v.type == "number" or v.nonlocal_:
                    local_ok = False
            if self.peek() not in ("/", "//"):
                break
        if preds_before_last:
            local_ok = False
        local = None
        if local_ok and not self.preds:
            local = [LocalPath(self.text[start:path_end].strip(), last_preds, steps)]
        return _Val("nodeset", single=single, nonlocal_=nonlocal_, local=local)

    def _axis_from(self, axis: str, single: bool) -> bool:
        """Judge a step over `axis` from one node or many; whether it yields at most one."""
        if axis not in _APPENDING and not single:
            what = "'//' (descendant-or-self)" if axis == "descendant-or-self" else axis
            self.refuse(
                f"a {what} step from several nodes: libxml2 merges each node's results "
                "with a duplicate check (quadratic)"
            )
        if self.preds and axis not in _DOWNWARD:
            self.refuse(
                f"the {axis} axis inside a predicate leaves the candidate's subtree, once per "
                "candidate node"
            )
        return single and axis in ("self", "parent")

    def step(self, single: bool, after_root: bool) -> tuple[str, bool, int]:
        """One step: (its axis, at most one node after it, the end of its node test)."""
        tok, kind = self.peek(), self.kind()
        if tok == ".":
            self.take()
            return "self", single, self.end_of_previous()
        if tok == "..":
            self.take()
            return "parent", self._axis_from("parent", single), self.end_of_previous()
        axis = "child"
        if tok == "@":
            self.take()
            axis = "attribute"
        elif kind == "axis":
            axis = self.take()
            if axis not in AXES:
                raise Unreadable
            self.take("::")
        one = self._axis_from(axis, single)
        tok, kind = self.peek(), self.kind()
        if kind == "nodetype":
            self.take()
            self.take("(")
            if tok == "processing-instruction" and self.kind() == "literal":
                self.take()
            self.take(")")
        elif kind == "name" or tok == "*":
            self.take()
        else:
            raise Unreadable
        if axis == "child" and after_root:
            one = True  # the root has one element child
        return axis, one, self.end_of_previous()

    def predicate(self) -> _Val:
        """A predicate, its candidate the single context node (§2.4). The value says
        whether it is positional (a number, position(), last()) or looks outside the
        candidate's subtree, at its own level (nested predicates judge their own)."""
        self.take("[")
        self.preds += 1
        if self.preds > MAX_PREDICATE_DEPTH:
            self.refuse(f"predicates are nested more than {MAX_PREDICATE_DEPTH} deep")
        v = self.expr()
        self.take("]")
        self.preds -= 1
        return v


def analyze(text: str) -> Analysis:
    """Whether `text` is proven linear (module docstring), why not if it is not, and its
    local-path form for a topic expression."""
    try:
        p = _Parser(text)
        v = p.expr()
        if p.i != len(p.toks):
            raise Unreadable
    except (Unreadable, RecursionError):
        return Analysis(False, "not understood by the cost analysis", None)
    return Analysis(p.problem is None, p.problem, v.local if v.nodeset else None)


def check(text: str) -> str | None:
    """None when `text` is proven linear, else why not (see `analyze`)."""
    return analyze(text).reason
