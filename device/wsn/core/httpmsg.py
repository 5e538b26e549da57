# HTTP/1.1 message parsing and writing for the device's tiny server and client (RFC 9112),
# sans-I/O: the asyncio layer (wsn.device) feeds bytes in and writes bytes out.
import binascii

# "status reason" lines, one string: no objects on the heap, frozen or not
_REASONS = ("200 OK\n202 Accepted\n400 Bad Request\n401 Unauthorized\n404 Not Found\n"
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


def body_length(method, headers, limit):
    # -> number of body bytes to read. Raises HTTPError 411 (chunked), 413 (over the limit),
    # 400 (bad Content-Length). No Content-Length nor Transfer-Encoding: empty (RFC 9112 §6.3).
    if "transfer-encoding" in headers:
        raise HTTPError(411, "send Content-Length, not chunked")
    cl = headers.get("content-length", "0")
    if not cl.isdigit():
        raise HTTPError(400, "bad Content-Length")
    if int(cl) > limit:
        raise HTTPError(413, "body over the %d-byte limit" % limit)
    return int(cl)


def _head(first, ctype, length, extra):
    return ("%s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n%s\r\n"
            % (first, ctype, length, extra)).encode()


def response_head(status, ctype, length):
    i = _REASONS.find("%d " % status)
    return _head("HTTP/1.1 %d %s" % (status, _REASONS[i + 4:_REASONS.find("\n", i)]
                                     if i >= 0 else "Status"), ctype, length, "")


def request_head(host, port, path, ctype, length, extra):
    # a POST (the only request the device makes)
    return _head("POST %s HTTP/1.1\r\nHost: %s:%d" % (path, host, port), ctype, length, extra)


def split_url(url):
    # http://host[:port]/path -> (host, port, path); ValueError otherwise
    if url[:7] != "http://":
        raise ValueError("not http://: %s" % url)
    hp, _, path = url[7:].partition("/")
    if hp[:1] == "[":  # IPv6 literal
        k = hp.find("]")
        host, port = hp[1:k], hp[k + 2:]
    else:
        host, _, port = hp.partition(":")
    port = port or "80"
    if not host or not port.isdigit():
        raise ValueError("bad URL %s" % url)
    return host, int(port), "/" + path


def parse_response(data):
    # a whole response -> (status, body), a chunked body decoded (RFC 9112 §7.1). Raises
    # HTTPError(502) for a bad or truncated head, ValueError for a malformed chunked body.
    k = data.find(b"\r\n\r\n")
    lines = data[:max(k, 0)].decode().split("\r\n")
    p = lines[0].split(" ", 2)
    if k < 0 or len(p) < 2 or p[0][:5] != "HTTP/" or not p[1].isdigit():
        raise HTTPError(502, "bad or truncated response head")
    body = data[k + 4:]
    for ln in lines:
        n, _, v = ln.partition(":")
        if n.strip().lower() == "transfer-encoding" and v.strip().lower() == "chunked":
            out = []
            i = 0
            while True:
                j = body.find(b"\r\n", i)
                if j < 0:
                    raise ValueError("truncated chunk")
                n = int(body[i:j].split(b";")[0].strip(), 16)
                if not n:
                    return int(p[1]), b"".join(out)
                out.append(body[j + 2:j + 2 + n])
                i = j + 4 + n
                if i > len(body):
                    raise ValueError("truncated chunk")
    return int(p[1]), body


def check_auth(header, secret):
    # The management secret, as `Authorization: Bearer <secret>` or HTTP Basic with any user
    # name and the secret as password. -> True if allowed (always, when no secret is set).
    if not secret:
        return True
    scheme, _, cred = (header or "").partition(" ")
    scheme = scheme.lower()
    cred = cred.strip()
    if scheme == "basic":
        try:
            cred = binascii.a2b_base64(cred).decode().partition(":")[2]
        except Exception:  # noqa: BLE001 - bad base64 is just "not authorised"
            return False
    elif scheme != "bearer":
        return False
    # constant time: no early exit on the first difference
    r = len(cred) ^ len(secret)
    for i in range(min(len(cred), len(secret))):
        r |= ord(cred[i]) ^ ord(secret[i])
    return r == 0
