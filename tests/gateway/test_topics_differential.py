"""Differential property test: the fast Full matcher (and the SubscriptionIndex
trie) select exactly what lxml's XPath 1.0 evaluation of the same expression
selects over the TopicSet document (WS-Topics 1.3 §8.3 correspondence)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.topics import (
    FULL,
    XPATH,
    ConcreteTopic,
    PathExpression,
    SubscriptionIndex,
    TopicSet,
    XPathExpression,
    compile_expression,
)
from gateway.topics.xpath import element_topic

NS1, NS2 = "urn:n1", "urn:n2"
PREFIX = {"p": NS1, "q": NS2}
NAMES = ["a", "b", "c"]

name = st.sampled_from(NAMES)
step = st.one_of(name, name.map(lambda n: f"{{{NS2}}}{n}"))  # plain or extension step
topic = st.builds(
    lambda ns, root, rest: ConcreteTopic(ns, (root, *rest)),
    st.sampled_from([NS1, NS2, ""]),
    name,
    st.lists(step, max_size=3),
)

# Full grammar (§8.3 [1]-[9]) over the same small alphabet
root_step = st.tuples(
    st.sampled_from(["", "p:", "q:"]), st.sampled_from(["", "//"]), st.sampled_from(["*", *NAMES])
).map("".join)
child_step = st.tuples(
    st.sampled_from(["/", "//"]),
    st.sampled_from(["*", ".", *NAMES, "q:a", "q:b", "p:c"]),
).map("".join)
path = st.tuples(root_step, st.lists(child_step, max_size=3)).map(lambda t: t[0] + "".join(t[1]))
full_expr = st.lists(path, min_size=1, max_size=2).map("|".join)

SETTINGS = settings(
    max_examples=150,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def xpath_select(ts: TopicSet, xp: str, ns: dict[str, str]) -> set[ConcreteTopic]:
    out = set()
    for el in ts.document().xpath(xp, namespaces=ns):  # type: ignore[union-attr]
        t = element_topic(el)
        if t is not None:
            out.add(t)
    return out


@SETTINGS
@given(st.lists(topic, min_size=1, max_size=12), st.lists(full_expr, min_size=1, max_size=4))
def test_full_matcher_equals_lxml_xpath(topics: list[ConcreteTopic], exprs: list[str]) -> None:
    ts = TopicSet()
    for t in topics:
        ts.grow(t)
    idx: SubscriptionIndex[int] = SubscriptionIndex(ts)
    compiled = []
    for i, text in enumerate(exprs):
        e = compile_expression(FULL, text, PREFIX)
        assert isinstance(e, PathExpression)
        compiled.append(e)
        idx.add(i, e)
    for e in compiled:
        xp, ns = e.to_xpath()
        want = xpath_select(ts, xp, ns)
        assert set(e.select(ts)) == want, (e.text, xp)
        if not e.prefixed_descendant:
            # the same text is literal XPath: evaluate it as the XPath dialect
            x = compile_expression(XPATH, e.text, PREFIX)
            assert isinstance(x, XPathExpression)
            assert set(x.evaluate(ts)) == want, e.text
    for t in ts.topics():
        assert idx.match(t) == {i for i, e in enumerate(compiled) if e.matches(t, ts)}
