# ruff: noqa: UP031 - MicroPython-compatible test code (%-formatting runs on every port)
from test_support import TOPICS_XML, topicset
from wsn.core import xml as X
from wsn.core.soap import Fault
from wsn.core.topics import TopicSet, load_namespace


def _te(text, decl='xmlns:dt="urn:wsn-edge:device-topics"'):
    return X.parse(("<t %s>%s</t>" % (decl, text)).encode())


def _fault(ts, el):
    try:
        ts.resolve_simple(el)
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
    assert ts.resolve_simple(_te("dt:humidity")) == 1
    assert ts.resolve_simple(_te("  dt:temperature \n")) == 0
    assert (
        ts.resolve_simple(_te("other:heartbeat", 'xmlns:other="urn:wsn-edge:device-topics"')) == 2
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
    adhoc = TopicSet("", ["heartbeat"])
    assert adhoc.resolve_simple(_te("heartbeat", "")) == 0
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


def test_mask_names_and_sets():
    ts = topicset()
    assert ts.all == 7
    assert ts.mask_names(5) == ["temperature", "heartbeat"]
    assert "dt:humidity" in ts.topic_set_xml()
