"""A static guard against XPath 1.0 expressions whose cost grows faster than the document.

The broker evaluates MessageContent and ProducerProperties filters (WS-BaseNotification 1.3
§4.2) on every notification and XPath TopicExpressions (WS-Topics 1.3 §8.4) on every topic
set version, for anyone allowed to Subscribe. libxml2 cannot be interrupted once it starts
evaluating, so one subscriber could stall the broker with a single expression:
``//*[count(//*) > 0]`` visits n² nodes of an n-node document, each further nesting
multiplies by n again, and ``//*/following::*`` is n² without any predicate.

What this guard refuses (the reason names the construct and the way around it):

* the ``following``, ``preceding``, ``following-sibling`` and ``preceding-sibling`` axes,
  anywhere: from a node-set of n nodes each visits up to n² nodes;
* inside a predicate, any step that leaves the candidate's own subtree or scans a whole
  subtree per candidate: ``//``, an absolute path (``/``), ``..`` and the ``descendant``,
  ``descendant-or-self``, ``parent``, ``ancestor`` and ``ancestor-or-self`` axes. A
  predicate may still use child and attribute steps, ``self``, ``.``, literals and
  functions, so it costs at most the size of the candidate's subtree;
* predicates nested more than MAX_PREDICATE_DEPTH deep, parentheses more than
  MAX_PAREN_DEPTH deep.

With these, one evaluation costs at most about (steps x nodes x depth): linear in the
document for a given expression. Everything else in XPath 1.0 is allowed, including ``//`` and
``..`` outside predicates (``//rd:value[. > 30]``, ``boolean(//alarm)``, ``count(//x) > 2``).
"""

from __future__ import annotations

import re

MAX_PREDICATE_DEPTH = 3
MAX_PAREN_DEPTH = 32

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

_ANYWHERE = {"following", "preceding", "following-sibling", "preceding-sibling"}
_IN_PREDICATE = {"descendant", "descendant-or-self", "parent", "ancestor", "ancestor-or-self"}
_OPERATOR_NAMES = {"and", "or", "mod", "div"}
_OPERATORS = {"/", "//", "|", "+", "-", "=", "!=", "<", "<=", ">", ">="}
# §3.7: after these (or at the start), `*` is a NameTest and an NCName is not an operator
_NOT_AFTER_VALUE = {None, "@", "::", "(", "[", ","}


def check(text: str) -> str | None:
    """None when `text` is safe to evaluate on untrusted documents, else why it is not.

    Lexical only: characters that are no XPath token are skipped over (the compiler
    judges them), everything around them is checked.
    """
    tokens: list[str] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            if not text[pos:].strip():
                break
            # not an XPath token: kept as an opaque one so the rest is still checked (the
            # compiler gives the precise error, or accepts what this lexer does not know)
            tokens.append(text[pos])
            pos += 1
            continue
        pos = m.end()
        tokens.append(m.group(m.lastgroup or "punct"))

    stack: list[str] = []  # open "[" and "("
    prev: str | None = None
    prev_is_operator = False
    for i, tok in enumerate(tokens):
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        after_value = not (prev in _NOT_AFTER_VALUE or prev_is_operator)
        in_predicate = "[" in stack
        is_operator = False
        if tok[0] in "\"'" or tok[0].isdigit():
            pass
        elif tok == "*":
            is_operator = after_value  # MultiplyOperator, else a NameTest
        elif tok[0].isalpha() or tok[0] == "_":
            if after_value and tok in _OPERATOR_NAMES:
                is_operator = True
            elif nxt == "::":
                if tok in _ANYWHERE:
                    return (
                        f"the {tok} axis is refused: from n nodes it visits up to n² "
                        "(select the nodes you want with child steps or predicates instead)"
                    )
                if in_predicate and tok in _IN_PREDICATE:
                    return (
                        f"the {tok} axis is refused inside a predicate: it is evaluated once "
                        "per candidate node (move the step out of the predicate, e.g. "
                        "//a/b[c] instead of //b[ancestor::a])"
                    )
        elif tok in ("[", "("):
            stack.append(tok)
            if stack.count("[") > MAX_PREDICATE_DEPTH:
                return f"predicates are nested more than {MAX_PREDICATE_DEPTH} deep"
            if stack.count("(") > MAX_PAREN_DEPTH:
                return f"parentheses are nested more than {MAX_PAREN_DEPTH} deep"
        elif tok in ("]", ")"):
            if stack:
                stack.pop()
        elif tok == "//" and in_predicate:
            return (
                "'//' is refused inside a predicate: it scans a subtree once per candidate "
                "node (put the // outside the predicate, //a/b rather than a[//b], and use "
                "child steps inside it, a[b/c])"
            )
        elif tok == ".." and in_predicate:
            return (
                "'..' is refused inside a predicate: it reaches outside the candidate's "
                "subtree once per candidate (write the parent first: //p[@x]/c)"
            )
        elif tok == "/" and in_predicate and not after_value:
            return (
                "an absolute path is refused inside a predicate: it is evaluated over the "
                "whole document once per candidate node"
            )
        if tok in _OPERATORS and tok not in ("/", "//"):
            is_operator = True
        elif tok in ("/", "//"):
            is_operator = True  # for what follows: a step, never a value
        prev, prev_is_operator = tok, is_operator
    return None
