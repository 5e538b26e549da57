# The HTTP/1.1 messages the device reads (RFC 9112), sans-I/O: the requests it serves (wsn.server
# feeds the bytes in and writes the answer out) and the body of an answer the gateway link reads.
# Loaded when needed and dropped when the device is idle again; writing a request and reading
# an answer's status, which every push does, is wsn.core.httpc.

from micropython import const

# "status reason" lines, one string: no objects on the heap, frozen or not
_REASONS = const("200 OK\n202 Accepted\n400 Bad Request\n401 Unauthorized\n404 Not Found\n"
            "405 Method Not Allowed\n408 Request Timeout\n411 Length Required\n"
            "413 Content Too Large\n431 Request Header Fields Too Large\n"
            "500 Internal Server Error\n503 Service Unavailable\n")


class HTTPError(ValueError):
    # HTTPError(status, message): e.args == (status, message)
    pass


def parse_head(head):
    # head: bytes up to (excluding) the blank line. -> (method, path, query, headers) with
    # header names lower-cased. Raises HTTPError(400/431).
    try:
        lines = head.decode().split("\r\n")
    except UnicodeError:
        raise HTTPError(400, "head not UTF-8")
    p = lines[0].split(" ")
    if len(p) != 3 or p[2][:7] != "HTTP/1." or p[1][:1] != "/":
        raise HTTPError(400, "bad request line")
    if len(lines) > 33:
        raise HTTPError(431, "over 32 header fields")
    h = {}
    for ln in lines[1:]:
        if ln:
            k, sep, v = ln.partition(":")
            if not sep or not k or k != k.strip():
                raise HTTPError(400, "bad header line")
            k = k.lower()
            v = v.strip()
            if k == "content-length" and h.get(k, v) != v:
                # RFC 9112 §6.3 (5): differing Content-Length values make the framing
                # invalid; answer 400 now rather than wait for a body of unknown length
                raise HTTPError(400, "conflicting Content-Length headers")
            h[k] = v
    path, _, query = p[1].partition("?")
    return p[0], path, query, h


def body_length(method, headers, size):
    # -> number of body bytes to read. Raises HTTPError 411 (chunked), 413 (over size bytes),
    # 400 (bad Content-Length). No Content-Length nor Transfer-Encoding: empty (RFC 9112 §6.3).
    if "transfer-encoding" in headers:
        raise HTTPError(411, "send Content-Length, not chunked")
    cl = headers.get("content-length", "0")
    if not cl.isdigit():
        raise HTTPError(400, "bad Content-Length")
    if int(cl) > size:
        raise HTTPError(413, "body over the %d-byte limit" % size)
    return int(cl)


def response_head(status, ctype, count):
    # the head of an answer of count body bytes (a status not in _REASONS: an empty reason
    # phrase, which RFC 9112 §4 allows)
    i = _REASONS.find(str(status) + " ")
    return ("HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n"
            "\r\n" % (status, _REASONS[i + 4:_REASONS.find("\n", i)] if i >= 0 else "", ctype,
                       count)).encode()


def body(data):
    # the body of a whole response whose head wsn.core.httpc.status accepted, a chunked body
    # decoded (RFC 9112 §7.1). Raises ValueError for a malformed or truncated chunked body.
    k = data.find(b"\r\n\r\n")
    b = data[k + 4:]
    for ln in data[:k].split(b"\r\n"):
        n, _, v = ln.partition(b":")
        if n.strip().lower() == b"transfer-encoding" and v.strip().lower() == b"chunked":
            out = []
            i = 0
            while True:
                j = b.find(b"\r\n", i)
                if j < 0:
                    raise ValueError("truncated chunk")
                n = int(b[i:j].split(b";")[0].strip(), 16)
                if not n:
                    return b"".join(out)
                out.append(b[j + 2:j + 2 + n])
                i = j + 4 + n
                if i > len(b):
                    raise ValueError("truncated chunk")
    return b
