"""notify.plan against the real state object and renderer: no HTTP, no SQLite. What
accepting notifications writes (renderings once per subscriber dialect, a row per
subscriber), who gets what (paused, filtered, looped back excluded), current messages,
grown topics and landing rows; and that planning changes nothing."""

from __future__ import annotations

from gwtest import CONCRETE, FULL, WSNT
from gwunit import reading, renderer, state, subscription, topic
from lxml import etree

from gateway import notify
from gateway.notification_message import Publication
from gateway.state import PullPoint
from gateway.storage_schema import AFTER_SUBREF, WHOLE
from gateway.wire.addressing import Epr

T = topic("tns:t")
OTHER = topic("tns:other")
PRODUCER = Epr("http://127.0.0.1:9/producer")


def world():  # type: ignore[no-untyped-def]
    s, rec, clock = state()
    s.grow_topics([T, OTHER])
    s.add_pullpoint(PullPoint("p1", clock()))
    subs = {
        "concrete": subscription("tns:t", sid="a-concrete"),
        "concrete2": subscription("tns:t", sid="b-concrete"),
        "full": subscription("tns:*", FULL, sid="c-full"),
        "raw": subscription("tns:t", sid="d-raw", raw=True),
        "pullpoint": subscription("tns:t", sid="e-pp", pullpoint="p1"),
        "hot": subscription("tns:t", sid="f-hot", content="/rd:Reading/rd:value > 30"),
        "paused": subscription("tns:t", sid="g-paused", paused=True),
        "other": subscription("tns:other", sid="h-other"),
    }
    for x in subs.values():
        s.add_subscription(x)
    rec.take()
    return s, rec, clock, subs


def test_renderings_once_per_dialect_and_a_row_per_subscriber() -> None:
    s, rec, clock, _subs = world()
    render = renderer()
    items = [Publication(T, PRODUCER, reading(10)), Publication(T, PRODUCER, reading(40))]
    p = notify.plan(s, render, items, clock(), pp_limit=7)
    b = p.batch
    assert p.accepted == 2 and b.pp_limit == 7
    # per notification: Concrete and Full once each (wrapped), the payload once (raw)
    kinds = [k for k, _x in b.renderings]
    assert kinds == [AFTER_SUBREF, AFTER_SUBREF, WHOLE] * 2
    first, second = b.renderings[:3], b.renderings[3:]
    assert 'Dialect="' + CONCRETE + '"' in first[0][1] and 'Dialect="' + FULL + '"' in first[1][1]
    assert ">10<" in first[2][1] and ">40<" in second[2][1]
    # push subscribers in id order, each with the rendering of its dialect
    by_sub = [(sid, ref) for sid, ref in b.deliveries]
    assert by_sub == [
        ("a-concrete", 0), ("b-concrete", 0), ("c-full", 1), ("d-raw", 2),
        ("a-concrete", 3), ("b-concrete", 3), ("c-full", 4), ("d-raw", 5), ("f-hot", 3),
    ]  # fmt: skip
    assert p.deliveries_per_sub == {
        "a-concrete": 2, "b-concrete": 2, "c-full": 2, "d-raw": 2, "f-hot": 1,
    }  # fmt: skip
    # the pull point's rows reference the same renderings; the paused one gets nothing
    assert b.pp_messages == [("p1", "e-pp", 0), ("p1", "e-pp", 3)]
    assert "g-paused" not in {sid for sid, _r in b.deliveries}
    # the whole message of each delivery: its own SubscriptionReference, then the rendering
    for (sid, ref), xml in zip(b.deliveries, p.delivery_xmls, strict=True):
        kind, text = b.renderings[ref]
        if kind == WHOLE:
            assert xml == text
            continue
        nm = etree.fromstring(xml)
        assert nm.tag == f"{{{WSNT}}}NotificationMessage" and xml.endswith(text)
        assert nm.findtext(".//{*}SubscriptionReference/{*}Address") == render.url(
            "subscriptions", sid
        )
        assert nm.findtext(f"{{{WSNT}}}ProducerReference/{{*}}Address") == PRODUCER.address
    # the last message on a topic is its current one; the topic is recorded as grown
    assert p.current == {T: b.renderings[5][1]}
    assert b.current == [("urn:test", "t", b.renderings[5][1])]
    assert b.grown == [("urn:test", "t")]
    assert b.landing == [] and b.landing_parquet == [] and b.seen is None
    # planning is pure: no event, nothing counted
    assert rec.events == [] and s.pullpoints["p1"].queued == 0 and s.current == {}


def test_nothing_goes_back_to_the_broker_it_came_from() -> None:
    s, _, clock, _subs = world()
    peers = {"a-concrete": "urn:uuid:peer", "c-full": "urn:uuid:elsewhere"}
    p = notify.plan(
        s,
        renderer(),
        [Publication(T, None, reading(1))],
        clock(),
        via=("urn:uuid:peer",),
        peer=peers.get,
    )
    assert [sid for sid, _r in p.batch.deliveries] == ["b-concrete", "c-full", "d-raw"]


def test_no_topic_expired_and_landing_rows() -> None:
    s, _, clock, subs = world()
    clock.advance(hours=1)
    subs["concrete"].termination = clock.now  # expired now: wants nothing
    landed = [("id-1", '{"a":1}'), ("id-2", '{"a":2}'), ("id-3", '{"a":3}')]
    items = [
        Publication(None, None, reading(1)),  # no topic: for subscriptions without a filter
        Publication(OTHER, None, reading(2)),
        Publication(T, None, reading(3)),
    ]
    p = notify.plan(s, renderer(), items, clock(), landed=landed, jsonl=True, parquet=True)
    assert [sid for sid, _r in p.batch.deliveries] == [
        "c-full", "h-other", "b-concrete", "c-full", "d-raw",
    ]  # fmt: skip
    assert p.current[OTHER] == etree.tostring(items[1].payload, encoding="unicode")
    assert p.batch.landing == landed and p.batch.landing_parquet == landed
    assert p.batch.grown == [("urn:test", "other"), ("urn:test", "t")]


def test_topics_of_and_admitted_keep_order_and_count() -> None:
    s, _, _ = state()
    items = [Publication(OTHER, None, reading(1)), Publication(T, None, reading(2)),
             Publication(OTHER, None, reading(3)), Publication(None, None, reading(4))]  # fmt: skip
    assert notify.topics_of(items) == [OTHER, T]
    from gateway.metrics import Counts

    counts = Counts()
    assert notify.admitted(counts, s.ts, items) == items  # no constraints: all admitted
    assert counts.inadmissible == {}


def test_a_second_name_adds_its_subscribers_once_under_the_first_name() -> None:
    """`also` (a camera event's dev:<camera>/... name, gateway.cameras): subscribers of
    either name, or of both, get the item once, rendered under its own topic; it is the
    current message under both names."""
    onvif = {"tns1": "http://www.onvif.org/ver10/topics", "dev": "urn:wsn-edge:devices"}
    own = topic("tns1:RuleEngine/CellMotionDetector/Motion", onvif)
    second = topic("dev:front/tns1:RuleEngine/CellMotionDetector/Motion", onvif)
    s, _rec, clock = state()
    s.grow_topics([own, second])
    for sid, expr, dialect in [
        ("a-own", "tns1:RuleEngine/CellMotionDetector/Motion", CONCRETE),
        ("b-camera", "dev:front//.", FULL),
        ("c-any-camera", "dev:*//Motion", FULL),
        ("d-other-camera", "dev:back//.", FULL),
        ("e-all", None, CONCRETE),  # selects both names
    ]:
        s.add_subscription(subscription(expr, dialect, nsmap=onvif, sid=sid))
    items = [Publication(own, PRODUCER, reading(1))]
    p = notify.plan(s, renderer(), items, clock(), also=[second])
    assert [sid for sid, _ref in p.batch.deliveries] == [
        "a-own",
        "b-camera",
        "c-any-camera",
        "e-all",
    ]
    assert all("tns1:RuleEngine/CellMotionDetector/Motion<" in x for x in p.delivery_xmls)
    assert set(p.current) == {own, second}
