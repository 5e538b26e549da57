"""Topics keep their prefix (gateway/topics/prefixes.py, render_topic): the rules, their
order, the bounds of the record, and the prefixes an expression wrote."""

from __future__ import annotations

import pytest

from gateway.topics import (
    CONCRETE,
    FULL,
    ONVIF_TOPICS,
    SIMPLE,
    XPATH,
    ConcreteTopic,
    PrefixBook,
    compile_expression,
    concrete_of,
    render_topic,
    topic_text,
)
from gateway.topics.prefixes import choose, namespaces_of, usable

MOTION = ConcreteTopic(ONVIF_TOPICS, ("RuleEngine", "CellMotionDetector", "Motion"))
IBM = "http://www.ibm.com/xmlns/stdwip/web-services/WS-Topics/TopicExpression/"
OASIS_2004 = "http://docs.oasis-open.org/wsn/2004/06/TopicExpression/"


def test_rules_in_order_publisher_subscriber_convention_generated():
    assert choose(MOTION, {ONVIF_TOPICS: "ev"}, {ONVIF_TOPICS: "s"}) == {ONVIF_TOPICS: "ev"}
    assert choose(MOTION, None, {ONVIF_TOPICS: "s"}) == {ONVIF_TOPICS: "s"}
    assert choose(MOTION) == {ONVIF_TOPICS: "tns1"}
    assert choose(ConcreteTopic("urn:x", ("a",))) == {"urn:x": "tns"}
    assert choose(ConcreteTopic("urn:wsn-edge:devices", ("d1", "t"))) == {
        "urn:wsn-edge:devices": "dev"
    }


def test_unusable_prefixes_fall_through():
    for bad in ("", "xml", "XMLfoo", "xmlns", "1a", "a:b", "a b"):
        assert not usable(bad)
        assert choose(MOTION, {ONVIF_TOPICS: bad}) == {ONVIF_TOPICS: "tns1"}, bad
    assert usable("tns1") and usable("_x") and usable("ev.2")


def test_one_prefix_per_namespace_and_wanted_ones_before_generated_ones():
    t = ConcreteTopic("urn:a", ("x", "{urn:b}y", "{urn:c}z"))
    assert namespaces_of(t) == ["urn:a", "urn:b", "urn:c"]
    # urn:c wants tns: it keeps it, the generated ones step around it
    got = choose(t, {"urn:c": "tns"})
    assert got == {"urn:a": "tns1", "urn:b": "tns2", "urn:c": "tns"}
    # two namespaces wanting one prefix: the first along the path gets it
    got = choose(t, {"urn:a": "p", "urn:b": "p"})
    assert got["urn:a"] == "p" and got["urn:b"] != "p" and len(set(got.values())) == 3
    # a generated prefix never collides with a conventional one
    t2 = ConcreteTopic("urn:a", ("x", "{" + ONVIF_TOPICS + "}y", "{urn:c}z"))
    got = choose(t2)
    assert got[ONVIF_TOPICS] == "tns1" and len(set(got.values())) == 3
    # the ad-hoc namespace (WS-Topics 1.3 §10) is unprefixed
    assert choose(ConcreteTopic("", ("a", "b"))) == {}


def test_render_topic_uses_the_chosen_prefixes_and_declares_them():
    d, text, decl = render_topic(MOTION, CONCRETE, {ONVIF_TOPICS: "ev"})
    assert (d, text, decl) == (
        CONCRETE,
        "ev:RuleEngine/CellMotionDetector/Motion",
        {"ev": ONVIF_TOPICS},
    )
    d, text, decl = render_topic(ConcreteTopic("urn:a", ("x", "{urn:b}y")), FULL, {"urn:b": "b"})
    assert text == "tns:x/b:y" and decl == {"tns": "urn:a", "b": "urn:b"}
    assert topic_text(MOTION) == "tns1:RuleEngine/CellMotionDetector/Motion"
    assert topic_text(ConcreteTopic("", ("a",))) == "a"
    # what it renders resolves back to the topic with the declarations it returns
    for dialect in (CONCRETE, FULL):
        _, text, decl = render_topic(MOTION, dialect, {ONVIF_TOPICS: "x1"})
        assert compile_expression(dialect, text, decl).single_topic() == MOTION


@pytest.mark.parametrize(
    "given, back",
    [
        (SIMPLE, SIMPLE),
        (IBM + "simple", IBM + "simple"),
        (IBM + "concreteTopicPath", IBM + "concreteTopicPath"),
        (OASIS_2004 + "Full", OASIS_2004 + "Full"),
        (f"  {XPATH}\n", XPATH),
    ],
)
def test_render_topic_answers_in_the_subscribers_spelling(given, back):
    """WS-BaseNotification 1.3 §3.1: the same dialect used by the Subscriber."""
    assert render_topic(ConcreteTopic("urn:x", ("a",)), given)[0] == back


@pytest.mark.parametrize(
    "simple, concrete",
    [
        (SIMPLE, CONCRETE),
        (IBM + "simple", IBM + "concreteTopicPath"),
        (
            IBM.replace("WS-Topics", "WSTopics") + "simple",
            IBM.replace("WS-Topics", "WSTopics") + "concreteTopicPath",
        ),
        (OASIS_2004 + "Simple", OASIS_2004 + "Concrete"),
    ],
)
def test_a_child_topic_for_a_simple_subscriber_goes_out_as_its_familys_concrete(simple, concrete):
    assert concrete_of(simple) == concrete
    assert render_topic(MOTION, simple)[0] == concrete


def test_prefixes_an_expression_wrote():
    nsmap = {"ev": ONVIF_TOPICS, "x": "urn:x", "unused": "urn:u"}
    e = compile_expression(CONCRETE, "ev:RuleEngine/x:Ext", nsmap)
    assert e.prefixes_used() == {ONVIF_TOPICS: "ev", "urn:x": "x"}
    e = compile_expression(FULL, "ev://* | x:a", nsmap)
    assert e.prefixes_used() == {ONVIF_TOPICS: "ev", "urn:x": "x"}
    e = compile_expression(XPATH, "//ev:Motion[child::x:a and @name='unused:z']", nsmap)
    assert e.prefixes_used() == {ONVIF_TOPICS: "ev", "urn:x": "x"}
    # two prefixes for one namespace: the first the text used
    e = compile_expression(CONCRETE, "b:t/a:u", {"a": "urn:s", "b": "urn:s"})
    assert e.prefixes_used() == {"urn:s": "b"}


def test_the_book_records_per_publisher_and_stays_bounded():
    book = PrefixBook(max_publishers=2, max_namespaces=2)
    book.learn("p1", {ONVIF_TOPICS: "ev"})
    book.learn(None, {ONVIF_TOPICS: "anon"})
    assert book.choose(MOTION, "p1") == {ONVIF_TOPICS: "ev"}
    assert book.choose(MOTION, None) == {ONVIF_TOPICS: "anon"}
    assert book.choose(MOTION, "unknown", {ONVIF_TOPICS: "s"}) == {ONVIF_TOPICS: "s"}
    book.learn("p1", {ONVIF_TOPICS: "ev2"})  # last one wins; p1 is now the most recent
    assert book.of("p1") == {ONVIF_TOPICS: "ev2"}
    book.learn("p3", {ONVIF_TOPICS: "three"})  # evicts the least recent: None
    assert len(book) == 2 and book.of(None) == {} and book.of("p1")
    book.learn("p1", {"urn:a": "a", "urn:b": "b"})  # at most 2 namespaces per publisher
    assert len(book.of("p1")) == 2 and book.of("p1")["urn:b"] == "b"
    book.learn("p1", {"urn:c": "xmlbad", "": "adhoc"})  # unusable ones are not recorded
    assert "urn:c" not in book.of("p1") and "" not in book.of("p1")
