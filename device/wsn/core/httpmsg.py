# HTTP/1.1 message parsing and writing for the device's tiny server and client (RFC 9112),
# sans-I/O: the asyncio layer feeds bytes in and writes bytes out.
import binascii

# (status, reason phrase) pairs: a constant tuple, frozen into flash it costs no heap
REASONS = ((200, "OK"), (202, "Accepted"), (400, "Bad Request"), (401, "Unauthorized"),
           (404, "Not Found"), (405, "Method Not Allowed"), (408, "Request Timeout"),
           (411, "Length Required"), (413, "Content Too Large"),
           (431, "Request Header Fields Too Large"), (500, "Internal Server Error"),
           (503, "Service Unavailable"))


class HTTPError(ValueError):
    def __init__(self, status, msg):
        super().__init__(msg)
        self.status = status


def parse_head(head, max_headers=32):
    # head: bytes up to (excluding) the blank line. -> (method, path, query, headers) with
    # header names lower-cased. Raises HTTPError(400/431).
    try:
        text = head.decode()
    except UnicodeError:
        raise HTTPError(400, "head not UTF-8")
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1][:1] == "/":
        raise HTTPError(400, "bad request line")
    if len(lines) - 1 > max_headers:
        raise HTTPError(431, "over %d header fields" % max_headers)
    headers = {}
    for ln in lines[1:]:
        if not ln:
            continue
        k, sep, v = ln.partition(":")
        if not sep or not k or k != k.strip():
            raise HTTPError(400, "bad header line")
        k = k.lower()
        v = v.strip()
        if k == "content-length" and headers.get(k, v) != v:
            # RFC 9112 §6.3 (5): differing Content-Length values make the framing invalid;
            # answer 400 now rather than wait for a body whose length is unknown
            raise HTTPError(400, "conflicting Content-Length headers")
        headers[k] = v
    path, _, query = parts[1].partition("?")
    return parts[0], path, query, headers


def body_length(method, headers, limit):
    # -> number of body bytes to read. Raises HTTPError 411 (chunked),
    # 413 (over the limit), 400 (bad Content-Length).
    if "transfer-encoding" in headers:
        raise HTTPError(411, "send Content-Length, not chunked")
    cl = headers.get("content-length")
    if cl is None:
        return 0  # RFC 9112 §6.3: no Content-Length, no Transfer-Encoding -> empty body
    if not cl.isdigit():
        raise HTTPError(400, "bad Content-Length")
    n = int(cl)
    if n > limit:
        raise HTTPError(413, "body over the %d-byte limit" % limit)
    return n


def response_head(status, ctype, length, extra=""):
    reason = "Status"
    for code, text in REASONS:
        if code == status:
            reason = text
    return ("HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
            "Connection: close\r\n%s\r\n" % (status, reason, ctype, length,
                                             extra)).encode()


def request_head(method, host, port, path, ctype, length, extra=""):
    return ("%s %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
            "Connection: close\r\n%s\r\n" % (method, path, host, port, ctype, length, extra)).encode()


def split_url(url):
    # http://host[:port]/path -> (host, port, path); ValueError otherwise
    if url[:7] != "http://":
        raise ValueError("not http://: %s" % url)
    rest = url[7:]
    k = rest.find("/")
    hostport, path = (rest, "/") if k < 0 else (rest[:k], rest[k:])
    if hostport[:1] == "[":  # IPv6 literal
        k = hostport.find("]")
        host, port = hostport[1:k], hostport[k + 2:] or "80"
    else:
        host, sep, port = hostport.partition(":")
        if not sep:
            port = "80"
    if not host or not port.isdigit():
        raise ValueError("bad URL %s" % url)
    return host, int(port), path


def parse_status(head):
    # response head bytes -> (status, headers)
    lines = head.decode().split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise HTTPError(502, "bad status line")
    headers = {}
    for ln in lines[1:]:
        k, sep, v = ln.partition(":")
        if sep:
            headers[k.strip().lower()] = v.strip()
    return int(parts[1]), headers


def dechunk(data):
    # a complete chunked body -> bytes (RFC 9112 §7.1); ValueError if malformed/truncated
    out = []
    i = 0
    while True:
        j = data.find(b"\r\n", i)
        if j < 0:
            raise ValueError("truncated chunk")
        size = int(data[i:j].split(b";")[0].strip(), 16)
        if size == 0:
            return b"".join(out)
        out.append(data[j + 2:j + 2 + size])
        i = j + 2 + size + 2
        if i > len(data):
            raise ValueError("truncated chunk")


def _eq(a, b):
    # constant-time comparison of two strings (no early exit on the first difference)
    if len(a) != len(b):
        return False
    r = 0
    for i in range(len(a)):
        r |= ord(a[i]) ^ ord(b[i])
    return r == 0


def check_auth(header, secret):
    # The management secret, as `Authorization: Bearer <secret>` or HTTP Basic with any user
    # name and the secret as password. -> True if allowed (always, when no secret is set).
    if not secret:
        return True
    if not header:
        return False
    scheme, _, cred = header.partition(" ")
    scheme = scheme.lower()
    cred = cred.strip()
    if scheme == "bearer":
        return _eq(cred, secret)
    if scheme == "basic":
        try:
            dec = binascii.a2b_base64(cred).decode()
        except Exception:  # noqa: BLE001 - bad base64 is just "not authorised"
            return False
        return _eq(dec.partition(":")[2], secret)
    return False
