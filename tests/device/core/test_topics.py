# ruff: noqa: UP031 - MicroPython-compatible test code (%-formatting runs on every port)
from test_support import TOPICS_XML, topicset
from wsn.core import xml as X
from wsn.core.request import Fault
from wsn.core.topics import load_namespace, resolve, topic_set


def _te(text, decl='xmlns:dt="urn:wsn-edge:device-topics"'):
    return X.parse(("<t %s>%s</t>" % (decl, text)).encode())


def _fault(ts, el):
    try:
        resolve(ts, el, False)
    except Fault as f:
        return f.name
    raise AssertionError("no fault")


def test_load_namespace():
    tns, names = load_namespace(TOPICS_XML)
    assert tns == "urn:wsn-edge:device-topics"
    assert names == ["temperature", "humidity", "heartbeat"]


def test_child_topics_rejected():
    doc = (
        b'<wstop:TopicNamespace xmlns:wstop="http://docs.oasis-open.org/wsn/t-1" '
        b'targetNamespace="urn:x"><wstop:Topic name="a"><wstop:Topic name="b"/></wstop:Topic>'
        b"</wstop:TopicNamespace>"
    )
    try:
        load_namespace(doc)
    except ValueError as e:
        assert "child" in str(e)
        return
    raise AssertionError("child topics accepted")


def test_resolve_simple():
    ts = topicset()
    assert resolve(ts, _te("dt:humidity"), False) == 1
    assert resolve(ts, _te("  dt:temperature \n"), False) == 0
    assert (
        resolve(ts, _te("other:heartbeat", 'xmlns:other="urn:wsn-edge:device-topics"'), False) == 2
    )


def test_unprefixed_simple_expression_is_in_no_namespace():
    # WS-Topics 1.3 §10: an unqualified TopicExpression names a topic of the ad-hoc Topic
    # Namespace (""), even with a default namespace in scope; the device's topics are in
    # urn:wsn-edge:device-topics, so `heartbeat` is not one of them.
    ts = topicset()
    assert _fault(ts, _te("heartbeat", "")) == "TopicNotSupportedFault"
    assert (
        _fault(ts, _te("heartbeat", 'xmlns="urn:wsn-edge:device-topics"'))
        == "TopicNotSupportedFault"
    )
    adhoc = topic_set("", ["heartbeat"])
    assert resolve(adhoc, _te("heartbeat", ""), False) == 0
    assert _fault(adhoc, _te("dt:heartbeat")) == "TopicNotSupportedFault"


def test_resolve_simple_faults():
    ts = topicset()
    assert _fault(ts, _te("dt:pressure")) == "TopicNotSupportedFault"
    assert _fault(ts, _te("x:temperature", 'xmlns:x="urn:other"')) == "TopicNotSupportedFault"
    assert _fault(ts, _te("nope:temperature")) == "InvalidTopicExpressionFault"
    assert _fault(ts, _te("dt:temperature/child")) == "InvalidTopicExpressionFault"
    assert _fault(ts, _te("dt:*")) == "InvalidTopicExpressionFault"
    assert _fault(ts, _te("")) == "InvalidTopicExpressionFault"
    assert _fault(ts, _te("dt:a dt:b")) == "InvalidTopicExpressionFault"
    assert _fault(ts, _te("dt:temperature|dt:humidity")) == "InvalidTopicExpressionFault"


def test_topic_set():
    ts = topicset()
    assert ts.all == 7 and ts.names == ["temperature", "humidity", "heartbeat"]
    assert ts.decl == ' xmlns:dt="urn:wsn-edge:device-topics"'


def test_resolve_in_the_devices_own_namespace():
    # WS-Topics 1.3 §6: a topics_file in its own namespace; Subscribe names its topics with a
    # prefix bound to that namespace
    ts = topic_set("urn:acme:t", ["temperature"])
    assert resolve(ts, _te("acme:temperature", 'xmlns:acme="urn:acme:t"'), False) == 0
    assert _fault(ts, _te("dt:temperature")) == "TopicNotSupportedFault"


def test_a_device_in_its_own_namespace_names_its_topics_in_it():
    # WS-BaseNotification 1.3 §3.1: the Topic of a push "MUST be the Topic that is associated
    # with the Notification"; the TopicSet and TopicExpression properties list the topics in
    # their namespace (WS-Topics 1.3 §7), and what they advertise is what Subscribe accepts
    from test_support import BASE, WSNT, body_of, call, rand
    from wsn.core.ops import new_producer

    p = new_producer("d1", topic_set("urn:acme:t", ["temperature", "flow"]), BASE, rand, None)
    acme = (
        "<wsnt:Subscribe><wsnt:ConsumerReference><wsa:Address>http://127.0.0.1:9/c"
        '</wsa:Address></wsnt:ConsumerReference><wsnt:Filter><wsnt:TopicExpression Dialect="'
        'http://docs.oasis-open.org/wsn/t-1/TopicExpression/Simple" xmlns:acme="urn:acme:t">'
        "acme:flow</wsnt:TopicExpression></wsnt:Filter></wsnt:Subscribe>"
    )
    st, root, _ = call(p, "/wsn/producer", acme)
    assert st == 200
    kick, _ = p.publish(1, "<v/>", 0)
    _, body, _ = p.render(kick[0].queue.peek(), False)
    t = body_of(X.parse(body)).find(WSNT, "NotificationMessage").find(WSNT, "Topic")
    assert t.resolve(t.value()) == ("urn:acme:t", "flow")
    grp = (
        '<wsrf-rp:GetResourceProperty xmlns:wsrf-rp="http://docs.oasis-open.org/wsrf/rp-2" '
        'xmlns:wstop="http://docs.oasis-open.org/wsn/t-1">%s</wsrf-rp:GetResourceProperty>'
    )
    st, root, _ = call(p, "/wsn/producer", grp % "wstop:TopicSet")
    ts = body_of(root).children[0]
    assert [(c.ns, c.name) for c in ts.children] == [
        ("urn:acme:t", "temperature"),
        ("urn:acme:t", "flow"),
    ]
    st, root, _ = call(p, "/wsn/producer", grp % "wsnt:TopicExpression")
    for te in body_of(root).children:
        assert te.resolve(te.value())[0] == "urn:acme:t"
        # the advertised expression, as a filter, is accepted
        again = acme.replace(
            '<wsnt:TopicExpression Dialect="http://docs.oasis-open.org/wsn/t-1/TopicExpression/'
            'Simple" xmlns:acme="urn:acme:t">acme:flow</wsnt:TopicExpression>',
            '<wsnt:TopicExpression Dialect="%s" xmlns:dt="urn:acme:t">%s</wsnt:TopicExpression>'
            % (te.get("Dialect"), te.value()),
        )
        assert call(p, "/wsn/producer", again)[0] == 200
