# ruff: noqa: UP031 - MicroPython-compatible test code (%-formatting runs on every port)
from test_support import BASE, BR, DT, EDGE, NOW, REGISTER, SET_TT, WSRF_RL, req, topicset
from wsn.core import registration as R
from wsn.core import request as Q
from wsn.core import soap as S
from wsn.core.soap import format_datetime
from wsn.core.topics import topic_set


def test_register_publisher_message():
    ts = topicset()
    e = R.register_publisher(
        S.V12,
        "http://gw/wsn/broker",
        BASE + "/wsn/producer",
        "dev-1",
        ts,
        ts.names,
        NOW + 600,
        True,
    )
    r = req(e.encode())
    assert r.action == REGISTER + "Request"
    b = r.body
    assert b.ns == BR and b.name == "RegisterPublisher"
    pr = b.find(BR, "PublisherReference")
    assert pr.find(S.WSA, "Address").value() == BASE + "/wsn/producer"
    md = pr.find(S.WSA, "Metadata")
    assert md.find(EDGE, "DeviceId").value() == "dev-1"
    assert md.find(EDGE, "TopicNamespace").value() == DT
    topics = b.findall(BR, "Topic")
    assert topics[0].resolve(topics[0].value()) == (DT, "temperature")
    assert all([t.get("Dialect") == S.SIMPLE for t in topics])
    assert b.find(BR, "Demand").value() == "true"
    assert b.find(BR, "InitialTerminationTime").value() == format_datetime(NOW + 600)


def test_register_publisher_in_the_devices_own_namespace():
    # the topics registered are the device's, in its namespace (WS-Topics 1.3 §6), and the
    # metadata names it for the gateway (dev:<id>/<topic>)
    ts = topic_set("urn:acme:t", ["temperature", "flow"])
    e = R.register_publisher(
        S.V12, "http://gw/", "http://d/wsn/producer", "d1", ts, ["flow"], NOW, True
    )
    b = req(e.encode()).body
    topics = b.findall(BR, "Topic")
    assert [t.resolve(t.value()) for t in topics] == [("urn:acme:t", "flow")]
    md = b.find(BR, "PublisherReference").find(S.WSA, "Metadata")
    assert md.find(EDGE, "TopicNamespace").value() == "urn:acme:t"


def _resp(inner):
    return S.envelope(
        S.V12,
        "urn:r",
        '<br:RegisterPublisherResponse xmlns:br="%s">%s</br:RegisterPublisherResponse>'
        % (BR, inner),
        None,
        None,
        "",
    ).encode()


def test_read_registration():
    reg = S.epr("http://gw/wsn/registrations/7", "7", "br:PublisherRegistrationReference")
    con = S.epr("http://gw/wsn/registrations/7c", None, "br:ConsumerReference")
    a, arp, c, crp = R.read_registration(_resp(reg + con))
    assert a == "http://gw/wsn/registrations/7" and "ResourceId" in arp
    assert c == "http://gw/wsn/registrations/7c" and crp == ""
    a, arp, c, crp = R.read_registration(_resp(reg))
    assert c == a and crp == arp


def test_read_registration_fault_and_garbage():
    f = Q.fault_envelope(
        S.V12, Q.Fault("PublisherRegistrationRejectedFault", "no", fns=BR), NOW, None
    )
    for bad in (f.encode(), b"garbage", _resp("")):
        try:
            R.read_registration(bad)
            raise AssertionError("accepted")
        except ValueError as e:
            if bad is not None and b"Rejected" in bad:
                assert "PublisherRegistrationRejectedFault" in str(e)


def test_set_termination_time():
    e = R.set_termination_time(S.V12, "http://gw/r/7", "", NOW + 60)
    r = req(e.encode())
    assert r.action == SET_TT + "Request" and r.to == "http://gw/r/7"
    rtt = r.body.find(WSRF_RL, "RequestedTerminationTime")
    assert rtt.value() == format_datetime(NOW + 60)
