# ruff: noqa: UP031 - MicroPython-compatible test code (%-formatting runs on every port)
from wsn.core import httpc as C
from wsn.core import httpmsg as H


def _status(fn, *a):
    try:
        fn(*a)
    except H.HTTPError as e:
        return e.args[0]
    return None


def test_parse_head():
    m, path, q, h = H.parse_head(b"POST /wsn/producer?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5")
    assert (m, path, q) == ("POST", "/wsn/producer", "x=1")
    assert h["content-length"] == "5" and h["host"] == "a"
    assert _status(H.parse_head, b"GARBAGE") == 400
    assert _status(H.parse_head, b"GET / HTTP/1.1\r\nbad header") == 400
    many = b"GET / HTTP/1.1" + b"".join([b"\r\nX: y"] * 40)
    assert _status(H.parse_head, many) == 431
    # issue 13: two conflicting Content-Length headers are a framing error (RFC 9112 §6.3)
    two = b"POST / HTTP/1.1\r\nContent-Length: 5\r\ncontent-length: 500"
    assert _status(H.parse_head, two) == 400
    same = b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5"
    assert H.parse_head(same)[3]["content-length"] == "5"


def test_body_length():
    assert H.body_length("POST", {"content-length": "10"}, 100) == 10
    assert H.body_length("POST", {}, 100) == 0
    assert _status(H.body_length, "POST", {"content-length": "101"}, 100) == 413
    assert _status(H.body_length, "POST", {"content-length": "-1"}, 100) == 400
    assert _status(H.body_length, "POST", {"transfer-encoding": "chunked"}, 100) == 411


def test_split_url():
    assert C.split_url("http://127.0.0.1:8080/wsn/broker") == ("127.0.0.1", 8080, "/wsn/broker")
    assert C.split_url("http://host") == ("host", 80, "/")
    assert C.split_url("http://[::1]:81/x") == ("::1", 81, "/x")
    for bad in ("https://a/", "http://:80/", "http://a:x/"):
        try:
            C.split_url(bad)
            raise AssertionError(bad)
        except ValueError:
            pass


def test_heads_are_well_formed():
    r = H.response_head(413, "text/plain", 3)
    assert (
        r.startswith(b"HTTP/1.1 413 ") and b"Content-Length: 3\r\n" in r and r.endswith(b"\r\n\r\n")
    )
    q = C.request_head("h", 1, "/p", "text/xml", 7, "")
    assert q.startswith(b"POST /p HTTP/1.1\r\nHost: h:1\r\n")
    ok = b"HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\nok"
    assert C.status(ok) == 202 and H.body(ok) == b"ok"
    for bad in (b"HTTP/1.1 202 Accepted", b"garbage\r\n\r\n", b"HTTP/1.1 2x2 OK\r\n\r\n"):
        try:
            C.status(bad)
            raise AssertionError("accepted %r" % bad)
        except ValueError:
            pass


def test_dechunk():
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\n\r\n"
    assert H.body(head + b"3\r\nabc\r\n2;x=1\r\nde\r\n0\r\n\r\n") == b"abcde"
    try:
        H.body(head + b"5\r\nab")
        raise AssertionError("truncated accepted")
    except ValueError:
        pass
