# The HTTP/1.1 client of the device (RFC 9112), sans-I/O: the pushes and the gateway link
# (wsn.device.post) write a request and read the status of the whole answer. Reading an answer's
# body and the server side, loaded when needed, are wsn.core.httpmsg.


def request_head(host, port, path, ctype, count, extra):
    # a POST (the only request the device makes) of count body bytes; extra: header lines,
    # each ending in CRLF
    return ("POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
            "Connection: close\r\n%s\r\n" % (path, host, port, ctype, count, extra)).encode()


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
    if not host or port and not port.isdigit():
        raise ValueError("bad URL %s" % url)
    return host, int(port) if port else 80, "/" + path


def status(data):
    # the status code of a whole response (the body, if needed, is wsn.core.httpmsg.body: only
    # the gateway link's answers are read). Raises ValueError for a bad or truncated head.
    p = data[:data.find(b"\r\n")].split(b" ", 2)
    if b"\r\n\r\n" not in data or len(p) < 2 or p[0][:5] != b"HTTP/" or not p[1].isdigit():
        raise ValueError("bad or truncated response head")
    return int(p[1])
