# The HTTP/1.1 client of the device (RFC 9112), sans-I/O: the pushes and the gateway link
# (wsn.device.post) write a request and read the whole answer. The server side, loaded per
# request, is wsn.core.httpmsg.


def request_head(host, port, path, ctype, length, extra):
    # a POST (the only request the device makes); extra: header lines, each ending in CRLF
    return ("POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
            "Connection: close\r\n%s\r\n" % (path, host, port, ctype, length, extra)).encode()


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
    # ValueError for a bad or truncated head or a malformed chunked body.
    k = data.find(b"\r\n\r\n")
    lines = data[:max(k, 0)].decode().split("\r\n")
    p = lines[0].split(" ", 2)
    if k < 0 or len(p) < 2 or p[0][:5] != "HTTP/" or not p[1].isdigit():
        raise ValueError("bad or truncated response head")
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
