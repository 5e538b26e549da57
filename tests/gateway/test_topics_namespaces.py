"""Topic Namespace documents (WS-Topics 1.3 §5, §6) and extension topics (§6.1)."""

from __future__ import annotations

import pytest

from gateway.topics import (
    CONCRETE,
    FULL,
    SIMPLE,
    WSTOP,
    XPATH,
    ConcreteTopic,
    InvalidTopicExpression,
    InvalidTopicNamespace,
    TopicNotSupported,
    TopicSet,
    compile_expression,
    load_topic_namespace,
)

EX1 = "http://example.org/topics/example1"
EX2 = "http://example.org/topics/example2"
NS = {"tns1": EX1, "tns2": EX2, "wstop": WSTOP}


def doc(tns: str, body: str, final: bool = False, extra: str = "") -> bytes:
    return (
        f'<wstop:TopicNamespace xmlns:wstop="{WSTOP}" xmlns:tns1="{EX1}" xmlns:tns2="{EX2}" '
        f'targetNamespace="{tns}" final="{str(final).lower()}" {extra}>{body}'
        "</wstop:TopicNamespace>"
    ).encode()


BASE = doc(
    EX1,
    '<wstop:Topic name="t1"><wstop:Topic name="c"/></wstop:Topic>'
    '<wstop:Topic name="fin" final="true"/>',
)
EXT = doc(EX2, '<wstop:Topic name="t3" parent="tns1:t1"><wstop:Topic name="k"/></wstop:Topic>')


def ext_topic(*rest: str) -> ConcreteTopic:
    return ConcreteTopic(EX1, ("t1", f"{{{EX2}}}t3", *rest))


def test_topic_attributes_and_message_pattern() -> None:
    ns = load_topic_namespace(
        doc(
            EX1,
            """
      <wstop:Topic name="a" final="1" messageTypes="tns1:m tns1:m tns2:n">
        <wstop:MessagePattern Dialect="http://www.w3.org/TR/1999/REC-xpath-19991116"
          >boolean(//tns1:m)</wstop:MessagePattern>
        <wstop:documentation>ignored</wstop:documentation>
        <wstop:Topic name="b"/>
      </wstop:Topic>""",
            final=True,
            extra='name="N"',
        )
    )
    assert ns.name == "N" and ns.final
    a = ns.topics["a"]
    assert a.final and a.message_types == (f"{{{EX1}}}m", f"{{{EX2}}}n")  # duplicate dropped
    assert a.message_pattern is not None and a.message_pattern.text == "boolean(//tns1:m)"
    assert list(a.children) == ["b"]


@pytest.mark.parametrize(
    "data,why",
    [
        (b"<not-xml", "well-formed"),
        (b'<x:Other xmlns:x="urn:x" targetNamespace="urn:a"/>', "expected wstop:TopicNamespace"),
        (doc("", ""), "non-empty @targetNamespace"),
        (doc(EX1, '<wstop:Topic name="a"/><wstop:Topic name="a"/>'), "duplicate root"),
        (
            doc(
                EX1,
                '<wstop:Topic name="a"><wstop:Topic name="b"/><wstop:Topic name="b"/>'
                "</wstop:Topic>",
            ),
            "duplicate child",
        ),
        (doc(EX1, '<wstop:Topic name="1a"/>'), "not an NCName"),
        (doc(EX1, "<wstop:Topic/>"), "missing"),
        (doc(EX1, '<wstop:Topic name="a" final="yes"/>'), "xsd:boolean"),
        (doc(EX1, '<wstop:Topic name="a" messageTypes="zz:m"/>'), "'zz' is not declared"),
        (
            doc(
                EX1,
                '<wstop:Topic name="a"><wstop:AliasRef Dialect="urn:x">a</wstop:AliasRef>'
                "</wstop:Topic>",
            ),
            "not supported",
        ),
    ],
)
def test_bad_documents(data: bytes, why: str) -> None:
    with pytest.raises(InvalidTopicNamespace, match=why):
        load_topic_namespace(data)


def test_hardened_parser_refuses_entities_and_dtds() -> None:
    bomb = (
        b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
        b'<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>'
        b'<wstop:TopicNamespace xmlns:wstop="http://docs.oasis-open.org/wsn/t-1" '
        b'targetNamespace="urn:a"><wstop:Topic name="a">&lol2;</wstop:Topic>'
        b"</wstop:TopicNamespace>"
    )
    with pytest.raises(InvalidTopicNamespace, match="DTD"):
        load_topic_namespace(bomb)
    ext = (
        b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]>'
        b'<wstop:TopicNamespace xmlns:wstop="http://docs.oasis-open.org/wsn/t-1" '
        b'targetNamespace="urn:a"><wstop:Topic name="a">&e;</wstop:Topic>'
        b"</wstop:TopicNamespace>"
    )
    with pytest.raises(InvalidTopicNamespace):
        load_topic_namespace(ext)


# --- §6.1 extension topics ---------------------------------------------------------
def test_extension_topic_sits_under_its_parent() -> None:
    ts = TopicSet()
    ts.add_namespace(load_topic_namespace(BASE))
    ts.add_namespace(load_topic_namespace(EXT))
    assert ext_topic() in ts and ext_topic("k") in ts
    assert ConcreteTopic(EX2, ("t3",)) not in ts
    el = ts.document()
    t1 = el.find(f"{{{EX1}}}t1")
    assert t1 is not None
    ext = t1.find(f"{{{EX2}}}t3")  # qualified, under its parent (§7)
    assert ext is not None and ext.get(f"{{{WSTOP}}}topic") == "true"
    assert ext.find("k") is not None  # its children unqualified
    assert el.find(f"{{{EX2}}}t3") is None  # never a child of TopicSet
    # §8.2 example: tns1:t1/tns2:t3 ; Full may wildcard the parent (§6.1)
    assert compile_expression(CONCRETE, "tns1:t1/tns2:t3", NS).select(ts) == {ext_topic()}
    assert compile_expression(FULL, "tns1:*/tns2:t3/k", NS).select(ts) == {ext_topic("k")}
    assert ext_topic() in compile_expression(FULL, "tns1:t1/*", NS).select(ts)
    assert compile_expression(XPATH, "//tns2:t3", NS).select(ts) == {ext_topic()}
    assert ts.get(ext_topic("k")).namespace == EX2  # type: ignore[union-attr]
    assert ext_topic("k").topic_namespace == EX2


@pytest.mark.parametrize("dialect", [SIMPLE, CONCRETE, FULL])
def test_extension_topic_is_not_addressable_as_a_root(dialect: str) -> None:
    ts = TopicSet()
    ts.add_namespace(load_topic_namespace(BASE))
    ts.add_namespace(load_topic_namespace(EXT))
    expr = compile_expression(dialect, "tns2:t3", NS)
    assert expr.select(ts) == frozenset()
    with pytest.raises(InvalidTopicExpression, match="through a path that includes its parent"):
        expr.validate(ts)


def test_extension_loaded_before_its_parent_namespace() -> None:
    ts = TopicSet()
    ts.add_namespace(load_topic_namespace(EXT))
    root = ts.document()[0]
    assert root.tag == f"{{{EX1}}}t1" and root.get(f"{{{WSTOP}}}topic") is None  # placeholder
    ts.add_namespace(load_topic_namespace(BASE))
    assert ConcreteTopic(EX1, ("t1",)) in ts and ext_topic("k") in ts


def test_rule1_parent_only_on_root_topics() -> None:
    bad = doc(EX2, '<wstop:Topic name="r"><wstop:Topic name="t3" parent="tns1:t1"/></wstop:Topic>')
    with pytest.raises(InvalidTopicNamespace, match="rule 1"):
        load_topic_namespace(bad)


def test_rule2_parent_in_another_namespace() -> None:
    bad = doc(EX2, '<wstop:Topic name="a"/><wstop:Topic name="t3" parent="tns2:a"/>')
    with pytest.raises(InvalidTopicNamespace, match="same topic namespace"):
        load_topic_namespace(bad)


def test_rule3_cycles_are_rejected() -> None:
    a = doc(EX1, '<wstop:Topic name="a" parent="tns2:x"/>')
    b = doc(EX2, '<wstop:Topic name="x" parent="tns1:a"/>')
    ts = TopicSet()
    ts.add_namespace(load_topic_namespace(a))
    with pytest.raises(InvalidTopicNamespace, match=r"circular|twice"):
        ts.add_namespace(load_topic_namespace(b))
    assert EX2 not in ts.namespaces  # state intact
    # a chain through a path in which the namespace comes back
    ts2 = TopicSet()
    ts2.add_namespace(load_topic_namespace(BASE))
    ts2.add_namespace(load_topic_namespace(EXT))
    loop = doc(EX1.replace("1", "3"), "", extra="")
    ts2.add_namespace(load_topic_namespace(loop))
    back = (
        f'<wstop:TopicNamespace xmlns:wstop="{WSTOP}" xmlns:tns1="{EX1}" xmlns:tns2="{EX2}" '
        f'targetNamespace="{EX1}x"><wstop:Topic name="z" parent="tns1:t1/tns2:t3"/>'
        "</wstop:TopicNamespace>"
    ).encode()
    ts2.add_namespace(load_topic_namespace(back))  # ex1 -> ex2 -> ex1x: fine
    again = (
        f'<wstop:TopicNamespace xmlns:wstop="{WSTOP}" xmlns:tns1="{EX1}" '
        f'xmlns:tns2="{EX2}" targetNamespace="{EX2}y">'
        f'<wstop:Topic name="z" parent="tns1:t1/tns2:t3/tns1:q"/></wstop:TopicNamespace>'
    )
    with pytest.raises(InvalidTopicNamespace, match="twice"):
        ts2.add_namespace(load_topic_namespace(again.encode()))


def test_rule3_chain_through_an_extension_root() -> None:
    # EX3 extends EX2's extension topic t3, naming it by its own root name
    ex3 = "urn:ex3"
    d3 = (
        f'<wstop:TopicNamespace xmlns:wstop="{WSTOP}" xmlns:tns2="{EX2}" '
        f'targetNamespace="{ex3}"><wstop:Topic name="deep" parent="tns2:t3/k"/>'
        "</wstop:TopicNamespace>"
    ).encode()
    ts = TopicSet()
    ts.add_namespace(load_topic_namespace(BASE))
    ts.add_namespace(load_topic_namespace(EXT))
    ts.add_namespace(load_topic_namespace(d3))
    assert ext_topic("k", f"{{{ex3}}}deep") in ts


def test_rule4_parent_not_final_and_defined() -> None:
    ts = TopicSet()
    ts.add_namespace(load_topic_namespace(BASE))
    fin = doc(EX2, '<wstop:Topic name="e" parent="tns1:fin"/>')
    with pytest.raises(InvalidTopicNamespace, match="rule 4"):
        ts.add_namespace(load_topic_namespace(fin))
    nope = doc(EX2, '<wstop:Topic name="e" parent="tns1:nope"/>')
    with pytest.raises(InvalidTopicNamespace, match="not defined"):
        ts.add_namespace(load_topic_namespace(nope))
    # and checked again when the parent's namespace arrives later
    ts2 = TopicSet()
    ts2.add_namespace(load_topic_namespace(doc(EX2, '<wstop:Topic name="e" parent="tns1:fin"/>')))
    with pytest.raises(InvalidTopicNamespace, match="rule 4"):
        ts2.add_namespace(load_topic_namespace(BASE))


def test_final_namespace_and_grown_extensions() -> None:
    ts = TopicSet()
    ts.add_namespace(load_topic_namespace(BASE))
    ts.add_namespace(
        load_topic_namespace(doc(EX2, '<wstop:Topic name="t3" parent="tns1:t1"/>', final=True))
    )
    with pytest.raises(TopicNotSupported, match="final topic namespace"):
        ts.grow(ConcreteTopic(EX1, ("t1", f"{{{EX2}}}other")))
    with pytest.raises(TopicNotSupported, match="is final"):
        ts.grow(ConcreteTopic(EX1, ("fin", "x")))
    assert ts.grow(ConcreteTopic(EX1, ("t1", "{urn:free}other")))  # not loaded: ad hoc


def test_duplicate_namespace_is_refused() -> None:
    ts = TopicSet()
    ns = load_topic_namespace(BASE)
    ts.add_namespace(ns)
    ts.add_namespace(ns)  # same object: no-op
    with pytest.raises(InvalidTopicNamespace, match="already loaded"):
        ts.add_namespace(load_topic_namespace(BASE))


def test_hostile_sizes() -> None:
    from gateway.topics import namespace

    deep = "".join(f'<wstop:Topic name="d{i}">' for i in range(70)) + "</wstop:Topic>" * 70
    with pytest.raises(InvalidTopicNamespace, match="deeper than"):
        load_topic_namespace(doc(EX1, deep))
    big = b" " * (namespace.MAX_DOCUMENT_BYTES + 1)
    with pytest.raises(InvalidTopicNamespace, match="larger than"):
        load_topic_namespace(big)
