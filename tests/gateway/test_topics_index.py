"""SubscriptionIndex (WS-Topics 1.3 §9): indexed lookup equals re-evaluation."""

from __future__ import annotations

from gateway.topics import (
    CONCRETE,
    FULL,
    SIMPLE,
    XPATH,
    ConcreteTopic,
    SubscriptionIndex,
    TopicExpression,
    TopicSet,
    compile_expression,
)

DEV = "urn:wsn-edge:devices"
NS = {"dev": DEV, "wstop": "http://docs.oasis-open.org/wsn/t-1"}


def dev(*path: str) -> ConcreteTopic:
    return ConcreteTopic(DEV, path)


def brute(subs: dict[str, TopicExpression], topic: ConcreteTopic, ts: TopicSet) -> set[str]:
    return {k for k, e in subs.items() if e.matches(topic, ts)}


def test_index_equals_reevaluation_across_dialects_and_growth() -> None:
    ts = TopicSet()
    idx: SubscriptionIndex[str] = SubscriptionIndex(ts)
    subs = {
        "s1": compile_expression(SIMPLE, "dev:esp32-01", NS),
        "c1": compile_expression(CONCRETE, "dev:esp32-01/temperature", NS),
        "f1": compile_expression(FULL, "dev:*/temperature", NS),
        "f2": compile_expression(FULL, "dev:esp32-01//.", NS),
        "f2b": compile_expression(FULL, "dev:esp32-01//.", NS),  # grouped with f2
        "f3": compile_expression(FULL, "//humidity|dev:pico-02/light", NS),
        "f4": compile_expression(FULL, "dev://*", NS),
        "f5": compile_expression(FULL, "*", NS),
        "x1": compile_expression(XPATH, "/*/*/*[@wstop:topic='true']", NS),
        "x2": compile_expression(XPATH, "dev:*/temperature", NS),  # Full-shaped XPath
        "x3": compile_expression(XPATH, "/*/*/*[@wstop:topic='true']", NS),
    }
    for k, e in subs.items():
        idx.add(k, e)
    assert len(idx) == len(subs)
    topics = [
        dev("esp32-01"),
        dev("esp32-01", "temperature"),
        dev("esp32-01", "humidity"),
        dev("pico-02", "light"),
        dev("pico-02", "temperature"),
        ConcreteTopic("", ("x",)),
    ]
    for t in topics:
        ts.grow(t)
        for u in topics:
            assert idx.match(u) == brute(subs, u, ts), (t, u)
    assert idx.match(dev("esp32-01", "temperature")) == {
        "c1",
        "f1",
        "f2",
        "f2b",
        "f4",
        "x1",
        "x2",
        "x3",
    }
    idx.remove("f2")
    idx.remove("x1")
    idx.remove("nope")
    del subs["f2"], subs["x1"]
    for u in topics:
        assert idx.match(u) == brute(subs, u, ts)
    # replacing a key replaces its expression
    idx.add("c1", compile_expression(CONCRETE, "dev:pico-02/light", NS))
    assert "c1" not in idx.match(dev("esp32-01", "temperature"))
    assert "c1" in idx.match(dev("pico-02", "light"))


def test_xpath_group_added_after_cache_is_built() -> None:
    ts = TopicSet()
    ts.grow(dev("a", "b"))
    idx: SubscriptionIndex[int] = SubscriptionIndex(ts)
    idx.add(1, compile_expression(XPATH, "//b[1]", NS))
    assert idx.match(dev("a", "b")) == {1}
    idx.add(2, compile_expression(XPATH, "//*[local-name()='b']", NS))
    assert idx.match(dev("a", "b")) == {1, 2}
    idx.remove(1)
    idx.remove(2)
    assert idx.match(dev("a", "b")) == set() and len(idx) == 0


def test_trie_prunes_on_remove() -> None:
    ts = TopicSet()
    idx: SubscriptionIndex[int] = SubscriptionIndex(ts)
    for i in range(50):
        idx.add(i, compile_expression(FULL, f"dev:d{i}/*//x{i}", NS))
    for i in range(50):
        idx.remove(i)
    root = idx._trie.root
    assert root.empty()


def test_discard_and_result_cache_follow_changes() -> None:
    ts = TopicSet()
    t = dev("a", "b")
    ts.grow(t)
    idx: SubscriptionIndex[int] = SubscriptionIndex(ts)
    idx.add(1, compile_expression(FULL, "dev:a/*", NS))
    assert idx.match(t) == {1}
    got = idx.match(t)
    got.add(99)  # the caller owns the returned set
    assert idx.match(t) == {1}
    idx.add(2, compile_expression(CONCRETE, "dev:a/b", NS))
    assert idx.match(t) == {1, 2}
    idx.remove(1)
    assert idx.match(t) == {2}
    assert ts.discard(t) and not ts.discard(t)
    assert idx.match(t) == set()
    ts.grow(t)
    assert idx.match(t) == {2}


def test_hostile_expression_length() -> None:
    import pytest

    from gateway.topics import InvalidTopicExpression

    with pytest.raises(InvalidTopicExpression, match="longer than"):
        compile_expression(XPATH, "*|" * 5000 + "*", NS)


def test_deep_topics_are_bounded() -> None:
    import pytest

    from gateway.topics import TopicNotSupported

    ts = TopicSet()
    deep = dev(*[f"s{i}" for i in range(64)])
    assert ts.grow(deep)
    assert len(ts.document().xpath("//*")) == 65
    with pytest.raises(TopicNotSupported, match="levels deep"):
        ts.grow(dev(*[f"s{i}" for i in range(65)]))
