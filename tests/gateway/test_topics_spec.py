"""WS-Topics 1.3 examples (§4, §7, §8.1-8.5, §9, §10) against gateway.topics.

Self-contained: no conftest; each test builds its Topic Set from the spec's
own documents.
"""

from __future__ import annotations

import pytest
from lxml import etree

from gateway.topics import (
    CONCRETE,
    FULL,
    SIMPLE,
    WSTOP,
    XPATH,
    ConcreteTopic,
    InvalidTopicExpression,
    SubscriptionIndex,
    TopicExpressionDialectUnknown,
    TopicNotInFixedSet,
    TopicNotPermitted,
    TopicNotSupported,
    TopicSet,
    canonical_dialect,
    compile_expression,
    load_topic_namespace,
    parse_topic_expression_element,
    render_topic,
)

EX1 = "http://example.org/topicSpace/example1"
EX2 = "http://example.org/topics/example2"
NS = {"tns": EX1, "tns1": EX1, "tns2": EX2, "wstop": WSTOP}

# WS-Topics 1.3 §4, the example Topic Namespace document (verbatim but for
# the schemaLocation)
SECTION4_DOC = b"""<?xml version="1.0" encoding="UTF-8"?>
<wstop:TopicNamespace name="TopicSpaceExample1"
    targetNamespace="http://example.org/topicSpace/example1"
    xmlns:tns="http://example.org/topicSpace/example1"
    xmlns:xyz="http://example.org/anotherNamespace"
    xmlns:wstop="http://docs.oasis-open.org/wsn/t-1"
    xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
  <wstop:Topic name="t1">
    <wstop:Topic name="t2" messageTypes="xyz:m1 tns:m2"/>
    <wstop:Topic name="t3" messageTypes="xyz:m3"/>
  </wstop:Topic>
  <wstop:Topic name="t4">
    <wstop:Topic name="t5" messageTypes="tns:m3"/>
    <wstop:Topic name="t6"/>
  </wstop:Topic>
</wstop:TopicNamespace>"""


def T(*path: str, ns: str = EX1) -> ConcreteTopic:
    return ConcreteTopic(ns, tuple(path))


def full_set() -> TopicSet:
    ts = TopicSet()
    ts.add_namespace(load_topic_namespace(SECTION4_DOC))
    return ts


def section4_set() -> TopicSet:
    """The producer of §4 supports tns:t1, tns:t1/t2 and tns:t4/t5."""
    ts = TopicSet()
    ts.add_namespace(
        load_topic_namespace(SECTION4_DOC), members=[T("t1"), T("t1", "t2"), T("t4", "t5")]
    )
    return ts


def sel(dialect: str, text: str, ts: TopicSet) -> set[str]:
    return {"/".join(t.path) for t in compile_expression(dialect, text, NS).select(ts)}


# --- §4 / §5 / §6 ------------------------------------------------------------
def test_section4_namespace_loads_six_topics_with_metadata() -> None:
    ns = load_topic_namespace(SECTION4_DOC)
    assert ns.name == "TopicSpaceExample1" and ns.target_namespace == EX1 and not ns.final
    assert list(ns.topics) == ["t1", "t4"]
    t2 = ns.topics["t1"].children["t2"]
    assert t2.message_types == ("{http://example.org/anotherNamespace}m1", f"{{{EX1}}}m2")
    assert t2.accepts_message(f"{{{EX1}}}m2") and not t2.accepts_message("{urn:x}other")
    assert ns.topics["t4"].children["t6"].accepts_message("{urn:any}thing")
    ts = full_set()
    assert len(ts) == 6
    assert ts.get(T("t4", "t5")) is not None
    assert ts.get(T("t4", "t5")).message_types == (f"{{{EX1}}}m3",)  # type: ignore[union-attr]


def test_section4_topic_set_document_is_exactly_section_7() -> None:
    el = section4_set().to_element()
    assert el.tag == f"{{{WSTOP}}}TopicSet"
    assert None not in el.nsmap  # §7: no default namespace
    roots = list(el)
    assert [r.tag for r in roots] == [f"{{{EX1}}}t1", f"{{{EX1}}}t4"]
    t1, t4 = roots
    assert t1.get(f"{{{WSTOP}}}topic") == "true"
    assert t4.get(f"{{{WSTOP}}}topic") is None  # placeholder, not a topic (§4)
    assert [c.tag for c in t1] == ["t2"] and [c.tag for c in t4] == ["t5"]  # unqualified
    assert t1[0].get(f"{{{WSTOP}}}topic") == "true" and t4[0].get(f"{{{WSTOP}}}topic") == "true"
    text = etree.tostring(el).decode()
    assert f'xmlns:tns="{EX1}"' in text and "<tns:t1" in text


def test_membership_and_placeholder_are_not_confused() -> None:
    ts = section4_set()
    assert T("t1") in ts and T("t1", "t2") in ts and T("t4", "t5") in ts
    assert T("t4") not in ts and T("t1", "t3") not in ts
    assert sel(FULL, "tns:*", ts) == {"t1"}  # tns:t4 is only a placeholder (§4)


# --- §8.1 Simple -----------------------------------------------------------------
def test_simple_example_identifies_root_t1() -> None:
    el = etree.fromstring(
        b'<wsnt:TopicExpression xmlns:wsnt="http://docs.oasis-open.org/wsn/b-2"'
        b' xmlns:tns="http://example.org/topicSpace/example1"'
        b' Dialect="http://docs.oasis-open.org/wsn/t-1/TopicExpression/Simple">'
        b"\n   tns:t1\n</wsnt:TopicExpression>"
    )
    expr = parse_topic_expression_element(el)
    assert expr.dialect == SIMPLE and expr.single_topic() == T("t1")
    assert expr.select(full_set()) == {T("t1")}


@pytest.mark.parametrize("text", ["tns:t1/t3", "tns:*", "tns:t1|tns:t4", "//t1", "a b"])
def test_simple_rejects_paths_and_wildcards(text: str) -> None:
    with pytest.raises(InvalidTopicExpression):
        compile_expression(SIMPLE, text, NS)


# --- §8.2 Concrete ---------------------------------------------------------------
def test_concrete_example_identifies_t3_child_of_t1() -> None:
    expr = compile_expression(CONCRETE, "tns:t1/t3", NS)
    assert expr.single_topic() == T("t1", "t3")
    assert expr.select(full_set()) == {T("t1", "t3")}


def test_concrete_prefixed_extension_step() -> None:
    expr = compile_expression(CONCRETE, "tns1:t1/tns2:t3", NS)
    assert expr.single_topic() == ConcreteTopic(EX1, ("t1", f"{{{EX2}}}t3"))
    assert expr.single_topic().topic_namespace == EX2  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "text,why",
    [
        ("tns:t1/*", "Full dialect"),
        ("tns:t1//t3", "Full dialect"),
        ("tns:t1/t3|tns:t4", "Full dialect"),
        ("tns:t1/ t3", "white space"),
        ("tns:t1/", "missing"),
        ("nope:t1", "'nope' used in topic expression"),
        ("tns:t1/nope:t3", "'nope'"),
        ("tns:1t", "expected a root topic name"),
    ],
)
def test_concrete_errors_are_precise(text: str, why: str) -> None:
    with pytest.raises(InvalidTopicExpression) as e:
        compile_expression(CONCRETE, text, NS)
    assert why in str(e.value)


# --- §8.3 Full: every example ----------------------------------------------------
@pytest.fixture
def deep() -> TopicSet:
    ts = full_set()
    for path in [("t1", "t3", "x"), ("t1", "t3", "x", "y"), ("t1", "t2", "t3"), ("t4", "t5", "t3")]:
        ts.grow(T(*path))
    return ts


@pytest.mark.parametrize(
    "text,expected",
    [
        # "identifies all of the child Topics of the root Topic t1" (not t1, no grandchildren)
        ("tns:t1/*", {"t1/t2", "t1/t3"}),
        # "all grandchildren of tns:t1 that have the name t3"
        ("tns:t1/*/t3", {"t1/t2/t3"}),
        # "all root Topics in the tns: Topic Namespace"
        ("tns:*", {"t1", "t4"}),
        # "the sub-tree consisting of tns:t1/t3 and all its descendents"
        ("tns:t1/t3//.", {"t1/t3", "t1/t3/x", "t1/t3/x/y"}),
        # "the descendents of tns:t1/t3 but ... does not include tns:t1/t3 itself"
        ("tns:t1/t3//*", {"t1/t3/x", "t1/t3/x/y"}),
        # "all the Topics in the entire Topic Namespace"
        (
            "tns://*",
            {
                "t1",
                "t1/t2",
                "t1/t3",
                "t4",
                "t4/t5",
                "t4/t6",
                "t1/t3/x",
                "t1/t3/x/y",
                "t1/t2/t3",
                "t4/t5/t3",
            },
        ),
        # "all descendents of tns:t1 that have the name t3"
        ("tns:t1//t3", {"t1/t3", "t1/t2/t3"}),
        # conjunction = set union
        ("tns:t1/t2|tns:t4/t5", {"t1/t2", "t4/t5"}),
        # "/." is the topic itself
        ("tns:t1/.", {"t1"}),
        ("tns:t1/t3/./x", {"t1/t3/x"}),
        # two or more wildcards of both kinds
        ("tns:*//*/t3", {"t1/t2/t3", "t4/t5/t3"}),
        ("//t3", {"t1/t3", "t1/t2/t3", "t4/t5/t3"}),
    ],
)
def test_full_examples(deep: TopicSet, text: str, expected: set[str]) -> None:
    expr = compile_expression(FULL, text, NS)
    assert sel(FULL, text, deep) == expected
    # and lxml agrees through the §8.3 correspondence
    xp, ns = expr.to_xpath()  # type: ignore[attr-defined]
    hits = deep.document().xpath(xp, namespaces=ns)
    assert {"/".join(t.path) for t in map(_topic_of, hits) if t} == expected


def _topic_of(el: etree._Element) -> ConcreteTopic | None:
    from gateway.topics.xpath import element_topic

    return element_topic(el)


def test_concrete_is_full_and_simple_is_concrete() -> None:
    ts = full_set()
    for text in ["tns:t1", "tns:t1/t3"]:
        a = compile_expression(CONCRETE, text, NS).select(ts)
        assert a == compile_expression(FULL, text, NS).select(ts)
        assert a == compile_expression(XPATH, text, NS).select(ts)
    assert compile_expression(SIMPLE, "tns:t4", NS).select(ts) == compile_expression(
        CONCRETE, "tns:t4", NS
    ).select(ts)


@pytest.mark.parametrize(
    "text,why",
    [
        ("tns:t1/tns:*", "prefixed wildcard"),
        ("tns:t1 | ", "empty"),
        ("tns:t1/t2 /t3", "white space"),
        ("tns:t1///t2", "expected"),
        ("tns:t1/t2/", "missing"),
        ("un:t1", "'un'"),
        ("tns:t1[1]", "unexpected character"),
    ],
)
def test_full_errors_are_precise(text: str, why: str) -> None:
    with pytest.raises(InvalidTopicExpression) as e:
        compile_expression(FULL, text, NS)
    assert why in str(e.value)


# --- §8.4 XPath -----------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "123",
        "//@topic=true",
        "//@topic",
        "//*[@topic=false]",
        "//*[@wstop:topic='false']",
        "'tns:t1'",
        "count(//*)",
    ],
)
def test_xpath_examples_that_identify_no_topics(text: str) -> None:
    ts = full_set()
    expr = compile_expression(XPATH, text, NS)
    assert expr.select(ts) == frozenset()
    assert not any(expr.matches(t, ts) for t in ts.topics())


def test_xpath_full_power() -> None:
    ts = section4_set()
    assert sel(XPATH, "//*[@wstop:topic='true'][not(*)]", ts) == {"t1/t2", "t4/t5"}
    assert sel(XPATH, "tns:t4/t5 | tns:t1", ts) == {"t1", "t4/t5"}
    assert sel(XPATH, "*[local-name()='t4']/*", ts) == {"t4/t5"}
    assert sel(XPATH, "descendant::t5/parent::*", ts) == set()  # tns:t4 is no topic


@pytest.mark.parametrize(
    "text,why",
    [("nope:t1", "'nope'"), ("tns:t1[", "Invalid"), ("nosuch()", "function"), ("$v", "variable")],
)
def test_xpath_errors(text: str, why: str) -> None:
    with pytest.raises(InvalidTopicExpression) as e:
        compile_expression(XPATH, text, NS)
    assert why.lower() in str(e.value).lower()


def test_prefixes_come_from_in_scope_declarations_of_the_carrier() -> None:
    wrapper = etree.fromstring(
        b'<s xmlns:q="http://example.org/topicSpace/example1">'
        b'<wsnt:TopicExpression xmlns:wsnt="http://docs.oasis-open.org/wsn/b-2" '
        b'Dialect="http://docs.oasis-open.org/wsn/t-1/TopicExpression/Full">q:t1/*'
        b"</wsnt:TopicExpression>"
        b'<wsnt:TopicExpression xmlns:wsnt="http://docs.oasis-open.org/wsn/b-2" '
        b'Dialect="http://docs.oasis-open.org/wsn/t-1/TopicExpression/Full">z:t1'
        b"</wsnt:TopicExpression></s>"
    )
    expr = parse_topic_expression_element(wrapper[0])
    assert expr.select(full_set()) == {T("t1", "t2"), T("t1", "t3")}
    with pytest.raises(InvalidTopicExpression, match="'z'"):
        parse_topic_expression_element(wrapper[1])


def test_dialect_uris() -> None:
    assert (
        canonical_dialect(
            "http://www.ibm.com/xmlns/stdwip/web-services/WS-Topics/TopicExpression/simple"
        )
        == SIMPLE
    )
    assert (
        canonical_dialect(
            "http://www.ibm.com/xmlns/stdwip/web-services/WS-Topics/TopicExpression/concreteTopicPath"
        )
        == CONCRETE
    )
    assert (
        canonical_dialect(
            "http://www.ibm.com/xmlns/stdwip/web-services/WS-Topics/TopicExpression/FullTopicPath"
        )
        == FULL
    )
    expr = compile_expression(
        "http://www.ibm.com/xmlns/stdwip/web-services/WS-Topics/TopicExpression/FullTopicPath",
        "tns:t1/*",
        NS,
    )
    assert expr.dialect == FULL
    with pytest.raises(TopicExpressionDialectUnknown, match="urn:nope"):
        compile_expression("urn:nope", "tns:t1", NS)
    with pytest.raises(TopicExpressionDialectUnknown):
        canonical_dialect("http://docs.oasis-open.org/wsn/t-1/TopicExpression/simple")


# --- §8.5 validation: the tns1:A / tns1:B examples -------------------------------------
TNS1_DOC = b"""<wstop:TopicNamespace xmlns:wstop="http://docs.oasis-open.org/wsn/t-1"
  targetNamespace="urn:tns1" final="true">
  <wstop:Topic name="A" final="true"/>
  <wstop:Topic name="B" final="false"/>
</wstop:TopicNamespace>"""
V = {"tns1": "urn:tns1"}


def producer_x(fixed: bool) -> TopicSet:
    ts = TopicSet(fixed=fixed)
    ns = load_topic_namespace(TNS1_DOC)
    ts.add_namespace(ns, members=[ConcreteTopic("urn:tns1", ("B",))] if fixed else None)
    return ts


def check(text: str, ts: TopicSet, dialect: str = FULL) -> set[str]:
    expr = compile_expression(dialect, text, V)
    expr.validate(ts)
    return {"/".join(t.path) for t in expr.resolve(ts) if t in ts}


@pytest.mark.parametrize("fixed", [True, False])
def test_85_tns1_D_is_rejected(fixed: bool) -> None:
    for text in ["tns1:D", "tns1:B|tns1:D", "tns1:D/x", "tns1:D//."]:
        with pytest.raises(TopicNotPermitted, match="final topic namespace"):
            check(text, producer_x(fixed))


@pytest.mark.parametrize("fixed", [True, False])
def test_85_tns1_A_X_is_rejected(fixed: bool) -> None:
    with pytest.raises(TopicNotPermitted, match="is final"):
        check("tns1:A/X", producer_x(fixed), CONCRETE)


def test_85_tns1_B_X_rejected_only_with_fixed_set() -> None:
    with pytest.raises(TopicNotInFixedSet, match="fixed topic set"):
        check("tns1:B/X", producer_x(True), CONCRETE)
    check("tns1:B/X", producer_x(False), CONCRETE)


def test_85_tns1_A_rejected_only_with_fixed_set() -> None:
    with pytest.raises(TopicNotInFixedSet, match="fixed topic set"):
        check("tns1:A", producer_x(True), SIMPLE)
    assert check("tns1:A", producer_x(False), SIMPLE) == {"A"}


@pytest.mark.parametrize("text", ["tns1:*", "tns1://*", "tns1:A|tns1:B"])
def test_85_permitted_and_equivalent_to_B(text: str) -> None:
    assert check(text, producer_x(True)) == {"B"}


def test_unknown_namespace_in_fixed_set_has_no_intersection() -> None:
    with pytest.raises(TopicNotSupported):
        compile_expression(FULL, "q:*", {"q": "urn:other"}).validate(producer_x(True))


# --- §9 growing ------------------------------------------------------------------
def test_growing_respects_final() -> None:
    ts = producer_x(False)
    with pytest.raises(TopicNotSupported, match="is final"):
        ts.grow(ConcreteTopic("urn:tns1", ("A", "X")))
    with pytest.raises(TopicNotSupported, match="final topic namespace"):
        ts.grow(ConcreteTopic("urn:tns1", ("D",)))
    v = ts.version
    assert ts.grow(ConcreteTopic("urn:tns1", ("B", "X"))) is True
    assert ts.version == v + 1
    assert ts.grow(ConcreteTopic("urn:tns1", ("B", "X"))) is False and ts.version == v + 1
    with pytest.raises(TopicNotSupported, match="fixed"):
        producer_x(True).grow(ConcreteTopic("urn:tns1", ("B", "X")))


def test_wildcard_subscriptions_see_grown_topics() -> None:
    ts = full_set()
    idx: SubscriptionIndex[str] = SubscriptionIndex(ts)
    idx.add("kids", compile_expression(FULL, "tns:t1/*", NS))
    idx.add("tree", compile_expression(FULL, "tns:t1//.", NS))
    idx.add("xp", compile_expression(XPATH, "tns:t1/*[starts-with(local-name(),'n')]", NS))
    idx.add("exact", compile_expression(CONCRETE, "tns:t1/new", NS))
    new = T("t1", "new")
    assert idx.match(new) == set()  # not a member yet: grow first
    ts.grow(new)
    assert idx.match(new) == {"kids", "tree", "xp", "exact"}
    assert idx.match(T("t1", "t2")) == {"kids", "tree"}


# --- §10 ad-hoc namespace ----------------------------------------------------------
def test_ad_hoc_namespace() -> None:
    ts = TopicSet()
    assert ts.grow(ConcreteTopic("", ("weather",))) is True
    assert ts.grow(ConcreteTopic("", ("weather", "rain"))) is True  # children allowed
    el = ts.to_element()
    assert el[0].tag == "weather" and el[0][0].tag == "rain"  # unqualified roots (§7)
    assert compile_expression(SIMPLE, "weather", {}).select(ts) == {ConcreteTopic("", ("weather",))}
    # unqualified = ad-hoc, even with a default namespace in scope
    expr = compile_expression(CONCRETE, "weather/rain", {None: "urn:default"})
    assert expr.single_topic() == ConcreteTopic("", ("weather", "rain"))
    assert sel(FULL, "*", ts) == {"weather"}
    assert ts.get(ConcreteTopic("", ("weather",))).final is False  # type: ignore[union-attr]
    assert render_topic(ConcreteTopic("", ("weather",)), SIMPLE) == (SIMPLE, "weather", {})


def test_unknown_namespace_grows_like_ad_hoc() -> None:
    ts = TopicSet()
    assert ts.grow(ConcreteTopic("urn:wsn-edge:devices", ("esp32-01", "temperature")))
    assert compile_expression(FULL, "dev:*/temperature", {"dev": "urn:wsn-edge:devices"}).matches(
        ConcreteTopic("urn:wsn-edge:devices", ("esp32-01", "temperature")), ts
    )


# --- render_topic -------------------------------------------------------------------
def test_render_topic() -> None:
    # WS-BaseNotification 1.3 §3.1: @Dialect MUST be the subscriber's dialect
    assert render_topic(T("t1"), SIMPLE) == (SIMPLE, "tns:t1", {"tns": EX1})
    # (Simple cannot express a child topic, and never selects one)
    assert render_topic(T("t1", "t3"), SIMPLE) == (CONCRETE, "tns:t1/t3", {"tns": EX1})
    assert render_topic(T("t1"), FULL) == (FULL, "tns:t1", {"tns": EX1})
    assert render_topic(T("t1", "t3"), CONCRETE) == (CONCRETE, "tns:t1/t3", {"tns": EX1})
    ext = ConcreteTopic(EX1, ("t1", f"{{{EX2}}}t3", "c"))
    dialect, text, ns = render_topic(ext, XPATH)
    assert (dialect, text, ns) == (XPATH, "tns:t1/tns1:t3/c", {"tns": EX1, "tns1": EX2})
    # round trip
    assert compile_expression(dialect, text, ns).single_topic() == ext


def test_concrete_topic_str_roundtrip() -> None:
    t = ConcreteTopic(EX1, ("t1", f"{{{EX2}}}t3"))
    assert str(t) == f"{{{EX1}}}t1/{{{EX2}}}t3"
    assert ConcreteTopic.parse(str(t)) == t
    assert ConcreteTopic.parse("a/b") == ConcreteTopic("", ("a", "b"))
    assert ConcreteTopic.from_path(EX1, t.path_text) == t  # URI slashes survive
    assert ConcreteTopic.from_path(EX1, "") == ConcreteTopic(EX1, ())
    with pytest.raises(InvalidTopicExpression):
        ConcreteTopic(EX1, ("bad name",))
    # the empty path is a "no topic" key: never a member, never grown
    none = ConcreteTopic(EX1, ())
    ts = TopicSet()
    assert none not in ts and none.name == "" and none.element_names() == ()
    with pytest.raises(InvalidTopicExpression):
        ts.grow(none)


def test_xpath_prefix_scan_ignores_axes_and_literals() -> None:
    from gateway.topics.xpath import prefixes_used

    assert prefixes_used("child::tns:t1[@wstop:topic='x:y']") == {"tns", "wstop"}
    assert prefixes_used('ancestor-or-self::*[namespace-uri()="urn:a:b"]') == set()
    assert sel(XPATH, "child::tns:t1/child::*", section4_set()) == {"t1/t2"}


def test_topic_expression_element_edge_cases() -> None:
    def el(xml: bytes) -> etree._Element:
        return etree.fromstring(xml)

    with pytest.raises(InvalidTopicExpression, match="no Dialect"):
        parse_topic_expression_element(el(b"<Topic>a</Topic>"))
    with pytest.raises(InvalidTopicExpression, match="child element"):
        parse_topic_expression_element(
            el(
                b'<Topic Dialect="http://docs.oasis-open.org/wsn/t-1/TopicExpression/Simple">'
                b"<x/></Topic>"
            )
        )
    with pytest.raises(InvalidTopicExpression, match="empty"):
        parse_topic_expression_element(
            el(
                b'<Topic Dialect="http://docs.oasis-open.org/wsn/t-1/TopicExpression/Simple">'
                b" </Topic>"
            )
        )
    expr = parse_topic_expression_element(
        el(
            b'<Topic xmlns:tns="http://example.org/topicSpace/example1" '
            b'Dialect="http://docs.oasis-open.org/wsn/t-1/TopicExpression/Concrete">'
            b"tns:t1<!-- a comment -->/t2</Topic>"
        )
    )
    assert expr.single_topic() == T("t1", "t2")
    # the 2004 drafts' lower-case @dialect and URI
    expr = parse_topic_expression_element(
        el(
            b'<Topic xmlns:tns="http://example.org/topicSpace/example1" dialect="http://www.ibm.com/'
            b'xmlns/stdwip/web-services/WS-Topics/TopicExpression/simple">tns:t1</Topic>'
        )
    )
    assert expr.dialect == SIMPLE and expr.single_topic() == T("t1")


def test_expressions_with_huge_keys_are_compiled_but_not_kept() -> None:
    # the compile caches (bounded LRUs) keep an expression by its text and namespace
    # declarations: one read with a huge declaration in scope is compiled each time, so a
    # hostile request cannot park a key of its own size in each entry
    from gateway.topics import compile as tc

    def topic_el(uri: str, dialect: str = CONCRETE) -> etree._Element:
        return etree.fromstring(
            f'<wsnt:Topic xmlns:wsnt="http://docs.oasis-open.org/wsn/b-2" xmlns:big="{uri}" '
            f'xmlns:tns="urn:keep" Dialect="{dialect}">tns:a/b</wsnt:Topic>'
        )

    tc._compile_element.cache_clear()
    tc._compile.cache_clear()
    huge = "urn:" + "x" * 100_000
    assert str(tc.parse_topic_expression_element(topic_el(huge)).single_topic()) == "{urn:keep}a/b"
    assert str(tc.compile_expression(CONCRETE, "big:a", {"big": huge}).single_topic()) == (
        "{" + huge + "}a"
    )
    assert tc._compile_element.cache_info().currsize == 0
    assert tc._compile.cache_info().currsize == 0
    # a Dialect padded with whitespace (its URI is stripped, so it is accepted)
    padded = topic_el("urn:s", CONCRETE + " " * 100_000)
    assert str(tc.parse_topic_expression_element(padded).single_topic()) == "{urn:keep}a/b"
    assert tc._compile_element.cache_info().currsize == 0
    small = tc.parse_topic_expression_element(topic_el("urn:s"))
    assert str(small.single_topic()) == "{urn:keep}a/b"
    assert tc._compile_element.cache_info().currsize == 1
    assert tc._compile.cache_info().currsize == 1
