# ruff: noqa: UP031 - MicroPython-compatible test code (%-formatting runs on every port)
from test_support import DT, WSN_FAULT, env, req
from wsn.core import request as R
from wsn.core import soap as S
from wsn.core import xml as X


def test_parse_both_versions_and_wsa_headers():
    for v in (11, 12):
        r = req(env("<wsnt:Unsubscribe/>", v, "urn:act", "<wsa:To>http://x/</wsa:To>"))
        assert r.version == (S.V12 if v == 12 else S.V11)
        assert r.action == "urn:act" and r.message_id == "urn:uuid:m1"
        assert r.to == "http://x/"
        assert r.body.name == "Unsubscribe" and r.body.ns == S.WSNT


def test_resource_id_header():
    r = req(
        env("<x/>", 12, None, '<edge:ResourceId xmlns:edge="urn:wsn-edge">s1</edge:ResourceId>')
    )
    assert r.resource_id == "s1"


def test_version_mismatch_and_not_soap():
    try:
        req(b'<e:Envelope xmlns:e="urn:nope"><e:Body/></e:Envelope>')
        raise AssertionError("accepted")
    except R.Fault as f:
        assert f.code == "VersionMismatch"
    try:
        req(b"<html/>")
        raise AssertionError("accepted")
    except R.NotSoap:
        pass


def test_must_understand():
    h = '<x:H xmlns:x="urn:x" s:mustUnderstand="1"/>'
    try:
        req(env("<wsnt:Unsubscribe/>", 12, None, h))
        raise AssertionError("accepted")
    except R.Fault as f:
        assert f.code == "MustUnderstand"
    # mustUnderstand="0" is fine
    req(env("<wsnt:Unsubscribe/>", 12, None, h.replace('"1"', '"0"')))


def test_envelope_roundtrip():
    e = S.envelope(
        S.V12, "urn:a", '<wsnt:X xmlns:dt="%s">dt:t</wsnt:X>' % DT, "urn:rel", "http://to/", ""
    )
    r = req(e.encode())
    assert r.action == "urn:a" and r.to == "http://to/"
    assert r.body.resolve(r.body.value()) == (DT, "t")


def test_fault_bodies_both_versions():
    f = R.Fault(
        "InvalidFilterFault", "bad <filter>", extra="<wsnt:UnknownFilter>x</wsnt:UnknownFilter>"
    )
    for v in (S.V11, S.V12):
        e = R.fault_envelope(v, f, 0, "urn:m")
        root = X.parse(e.encode())
        body = root.children[1].children[0]
        assert body.name == "Fault"
        name, reason = R.fault_name(e.encode())
        assert name == "InvalidFilterFault" and reason == "bad <filter>", (name, reason)
        assert "<wsrf-bf:Timestamp>2000-01-01T00:00:00Z</wsrf-bf:Timestamp>" in e
        assert WSN_FAULT in e
    assert R.fault_status(S.V12, f) == 400
    assert R.fault_status(S.V11, f) == 500
    assert R.fault_status(S.V12, R.Fault("X", "y", code="Receiver")) == 500


def test_epr_and_reference_parameters():
    e = S.epr("http://a/b", "s123", "wsnt:SubscriptionReference")
    buf = (
        '<r xmlns:wsnt="%s" xmlns:wsa="%s" xmlns:edge="urn:wsn-edge">%s</r>' % (S.WSNT, S.WSA, e)
    ).encode()
    root = X.parse(buf)
    addr, sent, at = R.read_epr(root.children[0], buf)
    assert addr == "http://a/b"
    # as sent: no declaration every envelope has anyway (soap.DECLS)
    assert sent == "<edge:ResourceId>s123</edge:ResourceId>", sent
    hdr = S.headers(sent, at)
    assert hdr == '<edge:ResourceId wsa:IsReferenceParameter="true">s123</edge:ResourceId>', hdr
    r = req(S.envelope(S.V12, "urn:a", "<x/>", None, None, hdr).encode())
    assert r.resource_id == "s123"
    # several, one already marked, one with its own namespace (inherited declarations kept)
    buf = (
        '<r xmlns:wsa="%s" xmlns:o="urn:o"><wsa:ReferenceParameters><o:A/>'
        '<o:B wsa:IsReferenceParameter="true">b</o:B><C xmlns="urn:c">c</C>'
        "</wsa:ReferenceParameters></r>" % S.WSA
    ).encode()
    root = X.parse(buf)
    _, sent, at = R.read_epr(root, buf)
    h = X.parse(("<h xmlns:wsa=%r>%s</h>" % (S.WSA, S.headers(sent, at))).encode())
    marks = [c.get("{%s}IsReferenceParameter" % S.WSA) for c in h.children]
    assert marks == ["true", "true", "true"] and [c.ns for c in h.children] == [
        "urn:o",
        "urn:o",
        "urn:c",
    ]


def test_fault_name_of_non_fault():
    assert R.fault_name(S.envelope(S.V12, "urn:a", "<wsnt:X/>", None, None, "").encode()) == (
        None,
        None,
    )
    assert R.fault_name(b"garbage") == (None, None)
