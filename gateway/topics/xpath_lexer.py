"""XPath 1.0's lexical structure (§3.7) for the cost analysis of gateway/topics/xpath_guard.py:
the tokens of an expression, with §3.7's disambiguation of operators, function names, node
types and axis names.

A caller may rely on: `tokens(text)` returns (kind, text, start, end) for each token, kind
one of literal, number, op (an Operator but '/', '//' and '|'), punct, var, func, nodetype,
axis or name; a text that is not made of XPath tokens raises `Unreadable`. Whether the
tokens form an expression is the parser's business, and whether the text is XPath at all is
lxml's.
"""

from __future__ import annotations

import re

# XPath 1.0 §3.7 ExprToken, longest first where prefixes overlap
_TOKEN = re.compile(
    r"""\s*(?:
      (?P<literal>"[^"]*"|'[^']*')
    | (?P<number>\d+(?:\.\d*)?|\.\d+)
    | (?P<punct>\.\.|//|::|!=|<=|>=|[./()\[\]@,|+\-=<>*$])
    | (?P<name>[^\W\d][\w.\-]*(?::(?:[^\W\d][\w.\-]*|\*))?)
    )""",
    re.VERBOSE,
)

AXES = {
    "ancestor", "ancestor-or-self", "attribute", "child", "descendant", "descendant-or-self",
    "following", "following-sibling", "namespace", "parent", "preceding",
    "preceding-sibling", "self",
}  # fmt: skip
_NODE_TYPES = {"comment", "text", "processing-instruction", "node"}
_OPERATOR_NAMES = {"and", "or", "mod", "div"}
_SYMBOL_OPERATORS = {"+", "-", "=", "!=", "<", "<=", ">", ">="}


class Unreadable(Exception):
    """The text cannot be read as XPath 1.0: not made of its tokens (here), or not of its
    grammar (raised by the parser of gateway/topics/xpath_guard.py)."""


def tokens(text: str) -> list[tuple[str, str, int, int]]:
    """XPath 1.0 tokens with §3.7's disambiguation: (kind, text, start, end); kind is
    literal, number, op (an Operator but '/', '//' and '|'), punct, var, func, nodetype,
    axis or name."""
    raw: list[tuple[str, str, int, int]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            if not text[pos:].strip():
                break
            raise Unreadable
        pos = m.end()
        group = m.lastgroup or "punct"
        raw.append((group, m.group(group), m.start(group), m.end(group)))
    out: list[tuple[str, str, int, int]] = []
    skip = False
    for i, (group, tok, s, e) in enumerate(raw):
        if skip:
            skip = False
            continue
        prev = out[-1] if out else None
        after_value = prev is not None and not (
            prev[1] in ("@", "::", "(", "[", ",") or prev[0] == "op" or prev[1] in ("/", "//", "|")
        )
        nxt = raw[i + 1] if i + 1 < len(raw) else None
        if group == "punct":
            if tok == "$":
                if nxt is None or nxt[0] != "name":
                    raise Unreadable
                out.append(("var", "$" + nxt[1], s, nxt[3]))
                skip = True
            elif (tok == "*" and after_value) or tok in _SYMBOL_OPERATORS:
                out.append(("op", tok, s, e))
            else:
                out.append(("punct", tok, s, e))
        elif group == "name":
            if after_value and tok in _OPERATOR_NAMES:
                out.append(("op", tok, s, e))
            elif nxt is not None and nxt[1] == "(":
                out.append(("nodetype" if tok in _NODE_TYPES else "func", tok, s, e))
            elif nxt is not None and nxt[1] == "::":
                out.append(("axis", tok, s, e))
            else:
                out.append(("name", tok, s, e))
        else:
            out.append((group, tok, s, e))
    return out
