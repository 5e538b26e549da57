"""The static XPath cost guard (gateway/topics/xpath_guard.py): what it lets through, what it
refuses and why, and that it sits in front of both places the broker evaluates XPath."""

from __future__ import annotations

import pytest
from lxml import etree

from gateway.filters import XPathFilter
from gateway.topics import InvalidTopicExpression, compile_expression
from gateway.topics.dialects import XPATH
from gateway.topics.xpath_guard import MAX_PREDICATE_DEPTH, check

NS = {
    "rd": "urn:wsn-edge:reading",
    "tns": "urn:test",
    "wstop": "http://docs.oasis-open.org/wsn/t-1",
}

ALLOWED = [
    "/rd:Reading[rd:value > 30]",
    "//rd:value[. > 30]",
    "boolean(//alarm)",
    "count(//x) > 2",
    "//a/b[c/d]",
    "//*[@wstop:topic='true']",
    "tns:a//b",
    "//*/..",  # outside a predicate: one step over a node-set
    "a[2*3 > 1]",  # `*` as multiplication
    "//a[@div div 2 = 1]",  # `div` as an attribute name and as an operator
    "/a/b[position() = last()]",
    "//x[contains(., 'a//b and ..')]",  # inside a string literal: not a step
    "(//a)/b[c]",
    "//a | //b",
    "//*[self::a or self::b]",
    "a[b[c[d]]]",  # three levels of predicates
    "/*/*/*[@wstop:topic='true']",
]

REFUSED = [
    ("//*[count(//*) > 0]", "'//' is refused inside a predicate"),
    ("//a[.//b]", "'//' is refused inside a predicate"),
    ("//a[2 * //b]", "'//' is refused inside a predicate"),  # `*` as multiplication
    ("//a[(//b)]", "'//' is refused inside a predicate"),
    ("//*/following::*", "the following axis is refused"),
    ("//a/preceding::b", "the preceding axis is refused"),
    ("//a[following-sibling::b]", "the following-sibling axis is refused"),
    ("//a[string(..) = 'x']", "'..' is refused inside a predicate"),
    ("//a[string(/) = 'x']", "an absolute path is refused inside a predicate"),
    ("//a[b = /x/y]", "an absolute path is refused inside a predicate"),
    ("//a[ancestor::b]", "the ancestor axis is refused inside a predicate"),
    ("//a[parent::b]", "the parent axis is refused inside a predicate"),
    ("//a[descendant::b]", "the descendant axis is refused inside a predicate"),
    ("a[b[c[d[e]]]]", f"nested more than {MAX_PREDICATE_DEPTH} deep"),
    ("(" * 33 + "1" + ")" * 33, "parentheses are nested more than 32 deep"),
]


@pytest.mark.parametrize("text", ALLOWED)
def test_allowed(text: str) -> None:
    assert check(text) is None
    etree.XPath(text, namespaces=NS)  # and it is XPath 1.0 indeed


@pytest.mark.parametrize(("text", "reason"), REFUSED)
def test_refused_with_a_reason(text: str, reason: str) -> None:
    got = check(text)
    assert got is not None and reason in got, got


def test_not_xpath_is_left_to_the_compiler() -> None:
    assert check("1 +") is None
    assert check("#!?") is None
    # an unknown character does not hide what follows it
    assert check("1 # //*[count(//*) > 0]") is not None


def test_guard_in_front_of_message_content_and_topic_xpath() -> None:
    with pytest.raises(ValueError, match="inside a predicate"):
        XPathFilter("//*[count(//*) > 0]", NS)
    with pytest.raises(InvalidTopicExpression, match="following axis is refused"):
        compile_expression(XPATH, "//*/following::*", NS)
    # the topic dialect has no EXSLT regular expressions either
    with pytest.raises(InvalidTopicExpression):
        compile_expression(
            XPATH,
            "//*[re:test(local-name(), '(a+)+$')]",
            {**NS, "re": "http://exslt.org/regular-expressions"},
        )
