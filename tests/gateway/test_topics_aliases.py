"""Topic aliases: AliasRef and its resolution rules 1-5 (WS-Topics 2004 §8)."""

from __future__ import annotations

import pytest

from gateway.topics import (
    CONCRETE,
    FULL,
    SIMPLE,
    ConcreteTopic,
    MultipleTopicsSpecified,
    SubscriptionIndex,
    TopicNotSupported,
    TopicSet,
    compile_expression,
    load_topic_namespace,
    require_single_topic,
    resolve_topic,
)

EX1 = "http://example.org/topicSpace/example1"
NS = {"tns": EX1}
CTP = "http://www.ibm.com/xmlns/stdwip/web-services/WS-Topics/TopicExpression/concreteTopicPath"
FTP = "http://www.ibm.com/xmlns/stdwip/web-services/WS-Topics/TopicExpression/FullTopicPath"

# WS-Topics 2004 (000_) §4 example, in its own 2004 form: t6 is an alias for
# tns:t1/t3. Extra aliases exercise the other rules.
DOC_2004 = f"""<?xml version="1.0" encoding="UTF-8"?>
<wstop:topicSpace name="TopicSpaceExample1"
   targetNamespace="http://example.org/topicSpace/example1"
   xmlns:tns="http://example.org/topicSpace/example1"
   xmlns:xyz="http://example.org/anotherNamespace"
   xmlns:wstop="http://www.ibm.com/xmlns/stdwip/web-services/WS-Topics">
   <wstop:topic name="t1">
      <wstop:topic name="t2" messageTypes="xyz:m1 tns:m2"/>
      <wstop:topic name="t3" messageTypes="xyz:m3"/>
   </wstop:topic>
   <wstop:topic name="t4">
      <wstop:topic name="t5" messageTypes="tns:m3"/>
      <wstop:topic name="t6">
         <wstop:AliasRef dialect="{CTP}">
            tns:t1/t3
         </wstop:AliasRef>
      </wstop:topic>
   </wstop:topic>
   <wstop:topic name="chain">
      <wstop:AliasRef dialect="{CTP}">tns:t4/t6</wstop:AliasRef>
   </wstop:topic>
   <wstop:topic name="kids">
      <wstop:AliasRef dialect="{FTP}">tns:t4/*</wstop:AliasRef>
   </wstop:topic>
   <wstop:topic name="both">
      <wstop:AliasRef dialect="{FTP}">tns:t4/t6|tns:t4/t5</wstop:AliasRef>
   </wstop:topic>
   <wstop:topic name="loopA">
      <wstop:AliasRef dialect="{CTP}">tns:loopB</wstop:AliasRef>
   </wstop:topic>
   <wstop:topic name="loopB">
      <wstop:AliasRef dialect="{FTP}">tns:loopA|tns:t1/t2</wstop:AliasRef>
   </wstop:topic>
   <wstop:topic name="self">
      <wstop:AliasRef dialect="{CTP}">tns:self</wstop:AliasRef>
   </wstop:topic>
</wstop:topicSpace>""".encode()


def T(*path: str) -> ConcreteTopic:
    return ConcreteTopic(EX1, path)


@pytest.fixture
def ts() -> TopicSet:
    s = TopicSet()
    s.add_namespace(load_topic_namespace(DOC_2004))
    return s


def res(text: str, ts: TopicSet, dialect: str = CONCRETE) -> set[str]:
    return {"/".join(t.path) for t in compile_expression(dialect, text, NS).resolve(ts)}


def test_alias_topics_are_members(ts: TopicSet) -> None:
    assert ts.is_alias(T("t4", "t6")) and not ts.is_alias(T("t4", "t5"))
    assert ts.definition(T("t4", "t6")).alias is not None  # type: ignore[union-attr]


def test_rule1_concrete_non_alias(ts: TopicSet) -> None:
    assert res("tns:t1/t3", ts) == {"t1/t3"}


def test_rule2_concrete_alias_resolves_recursively(ts: TopicSet) -> None:
    assert res("tns:t4/t6", ts) == {"t1/t3"}  # the §4/§8 example
    assert res("tns:chain", ts, SIMPLE) == {"t1/t3"}  # chain -> t6 -> t1/t3


def test_rule3_wildcards_resolve_without_looking_deeper(ts: TopicSet) -> None:
    # tns:t4/* selects t5 and the alias t6; t6 is not expanded, and being an
    # alias it is no topic of the resolved set
    assert res("tns:kids", ts) == {"t4/t5"}
    assert res("tns:t4/*", ts, FULL) == {"t4/t5"}


def test_rule4_each_union_operand_resolves_separately(ts: TopicSet) -> None:
    assert res("tns:both", ts) == {"t1/t3", "t4/t5"}
    assert res("tns:t4/t6|tns:chain|tns:t1/t2", ts, FULL) == {"t1/t3", "t1/t2"}


def test_rule5_cycle_contributes_nothing(ts: TopicSet) -> None:
    assert res("tns:self", ts) == set()
    # loopA -> loopB -> (loopA | t1/t2): the loopA branch is a cycle
    assert res("tns:loopA", ts) == {"t1/t2"}
    assert res("tns:loopB", ts) == {"t1/t2"}


def test_single_topic_operations(ts: TopicSet) -> None:
    assert require_single_topic(compile_expression(CONCRETE, "tns:t4/t6", NS), ts) == T("t1", "t3")
    with pytest.raises(MultipleTopicsSpecified, match="2 topics"):
        require_single_topic(compile_expression(SIMPLE, "tns:both", NS), ts)
    # judged by what it selects, not by its syntax (WS-BaseNotification 1.3 §4.3)
    with pytest.raises(MultipleTopicsSpecified, match="topics"):
        require_single_topic(compile_expression(FULL, "tns:t1/*", NS), ts)
    assert require_single_topic(compile_expression(FULL, "tns:t4/*", NS), ts) == T("t4", "t5")
    with pytest.raises(MultipleTopicsSpecified):
        require_single_topic(compile_expression(FULL, "tns:t1/t2|tns:t1/t3", NS), ts)
    with pytest.raises(TopicNotSupported, match="identifies no topic"):
        require_single_topic(compile_expression(SIMPLE, "tns:self", NS), ts)
    # a non-alias topic that is not a member yet (the broker grows it next)
    assert require_single_topic(compile_expression(CONCRETE, "tns:t1/new", NS), ts) == T(
        "t1", "new"
    )


def test_matching_through_aliases(ts: TopicSet) -> None:
    idx: SubscriptionIndex[str] = SubscriptionIndex(ts)
    subs = {
        "alias": compile_expression(CONCRETE, "tns:t4/t6", NS),
        "real": compile_expression(CONCRETE, "tns:t1/t3", NS),
        "wild": compile_expression(FULL, "tns:t4/*", NS),
        "both": compile_expression(SIMPLE, "tns:both", NS),
    }
    for k, e in subs.items():
        idx.add(k, e)
    assert idx.match(T("t1", "t3")) == {"alias", "real", "both"}
    assert idx.match(T("t4", "t5")) == {"wild", "both"}
    # a notification on the alias is one on what it resolves to
    assert resolve_topic(T("t4", "t6"), ts) == {T("t1", "t3")}
    assert idx.match(T("t4", "t6")) == {"alias", "real", "both"}
    for t in [T("t1", "t3"), T("t4", "t5"), T("t4", "t6"), T("t1", "t2")]:
        assert idx.match(t) == {k for k, e in subs.items() if e.matches(t, ts)}
