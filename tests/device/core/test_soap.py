# ruff: noqa: UP031 - MicroPython-compatible test code (%-formatting runs on every port)
from test_support import DT, WSN_FAULT, env
from wsn.core import ns
from wsn.core import soap as S
from wsn.core import xml as X


def test_parse_both_versions_and_wsa_headers():
    for v in (11, 12):
        req = S.parse_request(
            env("<wsnt:Unsubscribe/>", v, "urn:act", "<wsa:To>http://x/</wsa:To>")
        )
        assert req.version == (ns.V12 if v == 12 else ns.V11)
        assert req.action == "urn:act" and req.message_id == "urn:uuid:m1"
        assert req.to == "http://x/"
        assert req.body.name == "Unsubscribe" and req.body.ns == ns.WSNT


def test_resource_id_header():
    req = S.parse_request(
        env("<x/>", 12, None, '<edge:ResourceId xmlns:edge="urn:wsn-edge">s1</edge:ResourceId>')
    )
    assert req.resource_id == "s1"


def test_version_mismatch_and_not_soap():
    try:
        S.parse_request(b'<e:Envelope xmlns:e="urn:nope"><e:Body/></e:Envelope>')
        raise AssertionError("accepted")
    except S.Fault as f:
        assert f.code == "VersionMismatch"
    try:
        S.parse_request(b"<html/>")
        raise AssertionError("accepted")
    except S.NotSoap:
        pass


def test_must_understand():
    h = '<x:H xmlns:x="urn:x" s:mustUnderstand="1"/>'
    try:
        S.parse_request(env("<wsnt:Unsubscribe/>", 12, None, h))
        raise AssertionError("accepted")
    except S.Fault as f:
        assert f.code == "MustUnderstand"
    # mustUnderstand="0" is fine
    S.parse_request(env("<wsnt:Unsubscribe/>", 12, None, h.replace('"1"', '"0"')))


def test_envelope_roundtrip():
    e = S.envelope(ns.V12, "urn:a", "<wsnt:X>dt:t</wsnt:X>", "urn:rel", "http://to/")
    req = S.parse_request(e.encode())
    assert req.action == "urn:a" and req.to == "http://to/"
    assert req.body.resolve(req.body.value()) == (DT, "t")


def test_fault_bodies_both_versions():
    f = S.Fault(
        "InvalidFilterFault", "bad <filter>", extra="<wsnt:UnknownFilter>x</wsnt:UnknownFilter>"
    )
    for v in (ns.V11, ns.V12):
        e = S.fault_envelope(v, f, 0, "urn:m")
        root = X.parse(e.encode())
        body = root.children[1].children[0]
        assert body.name == "Fault"
        name, reason = S.fault_name(e.encode())
        assert name == "InvalidFilterFault" and reason == "bad <filter>", (name, reason)
        assert "<wsrf-bf:Timestamp>2000-01-01T00:00:00Z</wsrf-bf:Timestamp>" in e
        assert WSN_FAULT in e
    assert S.fault_status(ns.V12, f) == 400
    assert S.fault_status(ns.V11, f) == 500
    assert S.fault_status(ns.V12, S.Fault("X", "y", code="Receiver")) == 500


def test_epr_and_reference_parameters():
    e = S.epr("http://a/b", "s123", "wsnt:SubscriptionReference")
    buf = (
        '<r xmlns:wsnt="%s" xmlns:wsa="%s" xmlns:edge="urn:wsn-edge">%s</r>' % (ns.WSNT, ns.WSA, e)
    ).encode()
    root = X.parse(buf)
    addr, hdr = S.read_epr(root.children[0], buf)
    assert addr == "http://a/b"
    assert 'wsa:IsReferenceParameter="true"' in hdr and "s123" in hdr
    req = S.parse_request(S.envelope(ns.V11, "urn:a", "<x/>", headers=hdr).encode())
    assert req.resource_id == "s123"


def test_fault_name_of_non_fault():
    assert S.fault_name(S.envelope(ns.V12, "urn:a", "<wsnt:X/>").encode()) == (None, None)
    assert S.fault_name(b"garbage") == (None, None)
