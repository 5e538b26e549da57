# ruff: noqa: UP031 - MicroPython-compatible test code (%-formatting runs on every port)
from test_support import BASE, BR, DT, EDGE, NOW, REGISTER, SET_TT, WSRF_RL, topicset
from wsn.core import ns
from wsn.core import registration as R
from wsn.core import soap as S
from wsn.core.xml import format_datetime


def test_register_publisher_message():
    e = R.register_publisher(
        ns.V12, "http://gw/wsn/broker", BASE + "/wsn/producer", "dev-1", topicset(), NOW + 600
    )
    req = S.parse_request(e.encode())
    assert req.action == REGISTER + "Request"
    b = req.body
    assert b.ns == BR and b.name == "RegisterPublisher"
    pr = b.find(BR, "PublisherReference")
    assert pr.find(ns.WSA, "Address").value() == BASE + "/wsn/producer"
    assert pr.find(ns.WSA, "Metadata").find(EDGE, "DeviceId").value() == "dev-1"
    topics = b.findall(BR, "Topic")
    assert topics[0].resolve(topics[0].value()) == (DT, "temperature")
    assert all([t.get("Dialect") == ns.SIMPLE for t in topics])
    assert b.find(BR, "Demand").value() == "true"
    assert b.find(BR, "InitialTerminationTime").value() == format_datetime(NOW + 600)


def _resp(inner):
    return S.envelope(
        ns.V12, "urn:r", "<br:RegisterPublisherResponse>%s</br:RegisterPublisherResponse>" % inner
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
    f = S.fault_envelope(ns.V12, S.Fault("PublisherRegistrationRejectedFault", "no", fns=BR), NOW)
    for bad in (f.encode(), b"garbage", _resp("")):
        try:
            R.read_registration(bad)
            raise AssertionError("accepted")
        except ValueError as e:
            if bad is not None and b"Rejected" in bad:
                assert "PublisherRegistrationRejectedFault" in str(e)


def test_set_termination_time():
    e = R.set_termination_time(ns.V11, "http://gw/r/7", "", NOW + 60)
    req = S.parse_request(e.encode())
    assert req.action == SET_TT + "Request" and req.to == "http://gw/r/7"
    rtt = req.body.find(WSRF_RL, "RequestedTerminationTime")
    assert rtt.value() == format_datetime(NOW + 60)
