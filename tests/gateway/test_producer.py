"""NotificationProducer side of the broker: GetCurrentMessage (§4.3) and the §4.1
resource properties (+ br:RequiresRegistration) through GetResourceProperty."""

from __future__ import annotations

from pathlib import Path

from gwtest import (
    BR,
    CONCRETE,
    FULL,
    RP,
    SIMPLE,
    WSNT,
    WSTOP,
    call,
    notify_body,
    reading,
    validate,
)

NS_DOC = b"""<wstop:TopicNamespace xmlns:wstop="http://docs.oasis-open.org/wsn/t-1"
  name="Test" targetNamespace="urn:test" final="true">
  <wstop:Topic name="a"><wstop:Topic name="b"/></wstop:Topic>
</wstop:TopicNamespace>"""


def _gcm(expr: str, dialect: str = CONCRETE, tns: str = "urn:test") -> str:
    return (
        f'<wsnt:GetCurrentMessage><wsnt:Topic Dialect="{dialect}" xmlns:tns="{tns}">{expr}'
        "</wsnt:Topic></wsnt:GetCurrentMessage>"
    )


async def test_get_current_message(gw):
    await call(
        gw.url, notify_body(("tns:a/b", reading(1)), ("tns:a/b", reading(2)), ("tns:c", reading(3)))
    )
    r = await call(
        gw.url,
        _gcm("tns:a/b"),
        action="http://docs.oasis-open.org/wsn/bw-2/NotificationProducer/GetCurrentMessageRequest",
    )
    assert r.status == 200, r.text
    validate(r.body)
    assert r.header("Action") == (
        "http://docs.oasis-open.org/wsn/bw-2/NotificationProducer/GetCurrentMessageResponse"
    )
    assert r.body.findtext(".//{urn:wsn-edge:reading}value") == "2"  # the last one
    r = await call(gw.url, _gcm("tns:c", SIMPLE), 11)
    assert r.body.findtext(".//{urn:wsn-edge:reading}value") == "3"
    # a Full expression naming exactly one topic of the set is fine
    r = await call(gw.url, _gcm("tns:c", FULL))
    assert r.body.findtext(".//{urn:wsn-edge:reading}value") == "3"


async def test_one_notify_reads_each_wsnt_topic_in_its_own_namespace_context(gw):
    # WS-Topics 1.3 §8: the prefix of a wsnt:Topic resolves through that element's
    # in-scope declarations, so one text in one Notify may name different topics (the
    # broker reads a repeated wsnt:Topic once per Notify: this is what that must keep)
    body = (
        "<wsnt:Notify>"
        + "".join(
            f"<wsnt:NotificationMessage>"
            f'<wsnt:Topic Dialect="{CONCRETE}" xmlns:tns="{uri}">tns:a</wsnt:Topic>'
            f"<wsnt:Message>{reading(v)}</wsnt:Message></wsnt:NotificationMessage>"
            for uri, v in (("urn:one", 1), ("urn:two", 2), ("urn:one", 3), ("urn:two", 4))
        )
        + "</wsnt:Notify>"
    )
    assert (await call(gw.url, body)).status == 202
    for uri, last in (("urn:one", "3"), ("urn:two", "4")):
        r = await call(gw.url, _gcm("tns:a", tns=uri))
        assert r.status == 200, r.text
        assert r.body.findtext(".//{urn:wsn-edge:reading}value") == last


async def test_notify_after_notify_reads_each_wsnt_topic_in_its_own_namespace_context(gw):
    # the broker keeps the topics of the wsnt:Topic elements it has read, across Notify
    # (gateway.notification_message._topic_of): a later Notify with the same text under another
    # declaration of its prefix names another topic (WS-Topics 1.3 §8)
    for uri, v in (("urn:first", 1), ("urn:second", 2), ("urn:first", 3)):
        body = (
            f'<wsnt:Notify><wsnt:NotificationMessage><wsnt:Topic Dialect="{CONCRETE}" '
            f'xmlns:tns="{uri}">tns:x</wsnt:Topic><wsnt:Message>{reading(v)}</wsnt:Message>'
            "</wsnt:NotificationMessage></wsnt:Notify>"
        )
        assert (await call(gw.url, body)).status == 202
    for uri, last in (("urn:first", "3"), ("urn:second", "2")):
        r = await call(gw.url, _gcm("tns:x", tns=uri))
        assert r.status == 200, r.text
        assert r.body.findtext(".//{urn:wsn-edge:reading}value") == last


async def test_get_current_message_faults(make_gateway, tmp_path: Path):
    f = tmp_path / "ns.xml"
    f.write_bytes(NS_DOC)
    gw = await make_gateway(topic_namespace_files=[f])
    await call(gw.url, notify_body(("tns:a/b", reading(1)), ("tns:a", reading(2))))
    cases = [
        (_gcm("tns:a//.", FULL), "MultipleTopicsSpecifiedFault"),
        (_gcm("tns:a|tns:a/b", FULL), "MultipleTopicsSpecifiedFault"),
        (_gcm("tns:zzz"), "TopicNotSupportedFault"),
        (_gcm("tns:a", "urn:bogus-dialect"), "TopicExpressionDialectUnknownFault"),
        (_gcm("tns:a///"), "InvalidTopicExpressionFault"),
        ("<wsnt:GetCurrentMessage/>", "InvalidTopicExpressionFault"),
    ]
    for body, name in cases:
        r = await call(gw.url, body)
        assert r.fault_name == name, (body, r.text)
        validate(r.fault)
    # a topic of the set that never had a message
    r = await call(gw.url, _gcm("o:t", CONCRETE).replace('xmlns:tns="urn:test"', 'xmlns:o="urn:o"'))
    assert r.fault_name == "NoCurrentMessageOnTopicFault"
    validate(r.fault)


async def test_producer_resource_properties(gw):
    await call(gw.url, notify_body(("tns:a/b", reading(1))))

    async def prop(qn: str) -> list:  # type: ignore[type-arg]
        r = await call(gw.url, f"<rp:GetResourceProperty>{qn}</rp:GetResourceProperty>")
        assert r.status == 200, r.text
        assert r.body.tag == f"{{{RP}}}GetResourcePropertyResponse"
        validate(r.body)
        return list(r.body)

    exprs = await prop("wsnt:TopicExpression")
    assert {(e.get("Dialect"), e.text) for e in exprs} >= {(CONCRETE, exprs[0].text)}
    assert any(e.text and e.text.endswith(":a/b") for e in exprs)
    fixed = await prop("wsnt:FixedTopicSet")
    assert [e.text for e in fixed] == ["false"]
    dialects = {e.text for e in await prop("wsnt:TopicExpressionDialect")}
    assert {SIMPLE, CONCRETE, FULL, "http://www.w3.org/TR/1999/REC-xpath-19991116"} <= dialects
    ts = await prop("wstop:TopicSet")
    assert ts[0].tag == f"{{{WSTOP}}}TopicSet"
    rr = await prop("br:RequiresRegistration")
    assert rr[0].tag == f"{{{BR}}}RequiresRegistration" and rr[0].text == "false"
    r = await call(gw.url, "<rp:GetResourceProperty>wsnt:Bogus</rp:GetResourceProperty>")
    assert r.fault_name == "InvalidResourcePropertyQNameFault"
    assert r.fault.tag == "{http://docs.oasis-open.org/wsrf/rp-2}InvalidResourcePropertyQNameFault"


async def test_fixed_topic_set_property(make_gateway, tmp_path: Path):
    f = tmp_path / "ns.xml"
    f.write_bytes(NS_DOC)
    gw = await make_gateway(topic_namespace_files=[f], fixed_topic_set=True)
    r = await call(gw.url, "<rp:GetResourceProperty>wsnt:FixedTopicSet</rp:GetResourceProperty>")
    assert r.body[0].text == "true"
    r = await call(
        gw.url,
        "<rp:GetResourceProperty xmlns:wstop='http://docs.oasis-open.org/wsn/t-1'>"
        "wstop:TopicSet</rp:GetResourceProperty>",
    )
    ts = r.body[0]
    assert ts.find("{urn:test}a") is not None
    # Notify on a topic outside a fixed set is refused and nothing is stored
    r = await call(gw.url, notify_body(("o:t", reading(1)), nsdecl='xmlns:o="urn:o"'))
    assert r.fault_name == "TopicNotSupportedFault"
    assert gw.ctx.storage.load().current == []
    assert WSNT


ALIAS_DOC = f"""<wstop:TopicNamespace xmlns:wstop="http://docs.oasis-open.org/wsn/t-1"
  name="Aliases" targetNamespace="urn:test" xmlns:tns="urn:test">
  <wstop:Topic name="a"><wstop:Topic name="b"/></wstop:Topic>
  <wstop:Topic name="old">
    <wstop:AliasRef Dialect="{CONCRETE}">tns:a/b</wstop:AliasRef></wstop:Topic>
  <wstop:Topic name="chain">
    <wstop:AliasRef Dialect="{SIMPLE}">tns:old</wstop:AliasRef></wstop:Topic>
  <wstop:Topic name="two">
    <wstop:AliasRef Dialect="{FULL}">tns:a|tns:a/b</wstop:AliasRef></wstop:Topic>
  <wstop:Topic name="loop">
    <wstop:AliasRef Dialect="{SIMPLE}">tns:loop</wstop:AliasRef></wstop:Topic>
</wstop:TopicNamespace>""".encode()


async def test_get_current_message_resolves_aliases(make_gateway, tmp_path: Path):
    """GetCurrentMessage on an alias topic answers for the one topic it resolves to
    (WS-Topics 2004 §8, AliasRef); aliases naming several topics or none are faults."""
    f = tmp_path / "aliases.xml"
    f.write_bytes(ALIAS_DOC)
    gw = await make_gateway(topic_namespace_files=[f])
    assert (await call(gw.url, notify_body(("tns:a/b", reading(1))))).status == 202
    for expr in ("tns:old", "tns:chain", "tns:a/b"):
        r = await call(gw.url, _gcm(expr))
        assert r.status == 200, (expr, r.text)
        assert r.body.findtext(".//{urn:wsn-edge:reading}value") == "1", expr
    # a notification on the alias is one on tns:a/b: its current message as well
    assert (await call(gw.url, notify_body(("tns:old", reading(2))))).status == 202
    for expr in ("tns:a/b", "tns:old"):
        r = await call(gw.url, _gcm(expr))
        assert r.body.findtext(".//{urn:wsn-edge:reading}value") == "2", expr
    r = await call(gw.url, _gcm("tns:two"))
    assert r.fault_name == "MultipleTopicsSpecifiedFault", r.text
    assert "2 topics" in r.text
    validate(r.fault)
    r = await call(gw.url, _gcm("tns:loop"))
    assert r.fault_name == "TopicNotSupportedFault", r.text
    validate(r.fault)
    # a wildcard that selects one topic (tns:a/b) references one topic (§4.3): answered
    r = await call(gw.url, _gcm("tns:a/*", FULL))
    assert r.body.findtext(".//{urn:wsn-edge:reading}value") == "2", r.text


def test_a_wsnt_topic_read_is_kept_only_when_its_key_is_small() -> None:
    # gateway.notification_message keeps the topics of the wsnt:Topic elements it read, keyed
    # with their in-scope declarations: one with a huge declaration in scope is read, not kept
    from lxml import etree

    from gateway import notification_message

    def topic_el(uri: str, dialect: str = CONCRETE) -> etree._Element:
        nm = etree.fromstring(
            f'<wsnt:NotificationMessage xmlns:wsnt="{WSNT}" xmlns:big="{uri}">'
            f'<wsnt:Topic Dialect="{dialect}" xmlns:tns="urn:keep">tns:k</wsnt:Topic>'
            "</wsnt:NotificationMessage>"
        )
        return nm[0]

    notification_message._topics_read.clear()
    assert str(notification_message._topic_of(topic_el("urn:small"))) == "{urn:keep}k"
    assert len(notification_message._topics_read) == 1
    assert str(notification_message._topic_of(topic_el("urn:" + "x" * 100_000))) == "{urn:keep}k"
    assert len(notification_message._topics_read) == 1
    # a Dialect padded with whitespace is the same dialect (its URI is stripped): read, not kept
    padded = CONCRETE + " " * 100_000
    assert str(notification_message._topic_of(topic_el("urn:small", padded))) == "{urn:keep}k"
    assert len(notification_message._topics_read) == 1
