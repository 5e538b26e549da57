# One HTTP connection to the device (wsn.device accepts it): one request per connection
# (Connection: close), Content-Length bodies only, every read under a timeout, sizes bounded: a
# slow, truncated or oversized request gets 408/400/413 and never holds the device. Loaded for a
# request and dropped when the device is idle again (wsn.device.idle), like everything the
# request path needs; message parsing is wsn.core.httpmsg.
import asyncio

from wsn.core import httpmsg as H
from wsn.device import _alarm, _close, now


async def _discard(r, count):
    # read and drop up to count bytes (until EOF, an error or the caller's alarm)
    try:
        while count > 0:
            c = await r.read(512)
            if not c:
                break
            count -= len(c)
    except Exception:  # noqa: BLE001 - reset: done either way
        pass


async def serve(dev, r):
    # one connection, r its stream (MicroPython's asyncio Stream reads and writes), counted by
    # dev.serve (its accept loop): the slot is given back and what the request loaded dropped
    # (dev.idle) when it ends
    st = 500
    ct = "text/plain"  # of the answers made here
    al = None
    try:
        # the request must arrive, and the answer leave, within read_timeout_s
        al = _alarm(float(dev.limits.get("read_timeout_s", 10)))
        try:
            st, ct, b = handle(dev, *(await _request(dev, r)))
        except asyncio.CancelledError:
            st, b = 408, b"request too slow\n"
        except H.HTTPError as e:
            st, b = e.args[0], (e.args[1] + "\n").encode()
        except MemoryError:
            st, b = 503, b"out of memory: retry\n"
        if not isinstance(b, list):  # chunks of a large answer: no big contiguous block
            b = (b,)
        r.write(H.response_head(st, ct, sum([len(c) for c in b])))
        for c in b:
            r.write(c)
            await r.drain()
        b = None
        if st >= 400:
            # "lingering close" (RFC 9112 §9.6): read and discard what the client still sends
            # for a moment, so closing does not reset the connection before the client has read
            # the answer
            al.cancel()
            al = _alarm(0.2)
            await _discard(r, 65536)
    except Exception as e:  # noqa: BLE001 - a broken connection must not stop the server
        print("http: connection error:", repr(e))
    except asyncio.CancelledError:  # too slow writing, or the end of the lingering
        pass
    finally:
        if al:
            al.cancel()
        await _close(r)
        dev.conns -= 1
        dev.busy -= 1
        dev.idle()


async def _request(dev, r):
    buf = b""
    while True:
        k = buf.find(b"\r\n\r\n")
        if 0 <= k <= 4096:
            break
        if len(buf) > 4096:
            raise H.HTTPError(431, "head over 4096 bytes")
        c = await r.read(512)
        if not c:
            raise H.HTTPError(400, "truncated head")
        buf += c
    method, path, query, hd = H.parse_head(buf[:k])
    body = buf[k + 4:]
    buf = None
    try:
        n = H.body_length(method, hd, dev.limits["max_request_bytes"])
    except H.HTTPError as e:
        cl = hd.get("content-length", "")
        if e.args[0] == 413 and cl.isdigit() and int(cl) <= 65536:
            # read and discard it, so the client is reading when the 413 comes
            await _discard(r, int(cl) - len(body))
        raise
    if n > len(body):
        if not body and hd.get("expect", "").lower() == "100-continue":
            # RFC 9110 §10.1.1: curl and .NET clients wait for this before the body
            r.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await r.drain()
        try:
            body += await r.readexactly(n - len(body))
        except EOFError:
            raise H.HTTPError(400, "truncated body (of %d bytes)" % n)
    return method, path, query, hd, body[:n]


def handle(dev, method, path, query, headers, body):
    # -> (status, content type, body bytes or list of chunks)
    dev.requests += 1
    dev.mem()
    p = dev.producer
    if path in ("/status", "/admin/sample"):
        # the management pages: the optional package wsn.admin
        try:
            from wsn import admin
        except ImportError:
            return 404, "text/plain", ("%s needs the package wsn/admin\n" % path).encode()
        return admin.handle(dev, method, path, query, headers)
    if path == "/" and method == "GET":
        return 200, "text/plain", ("wsn-edge device %s: WS-Notification producer at %s\n"
                            % (dev.device_id, p.addr)).encode()
    from wsn.core import ops

    r = ops.handle(p, method, path, body, now(), headers.get("content-type", ""))
    for act, s in r.actions:
        if act == "resumed":
            dev.kick(s)
        if act in ("subscribed", "unsubscribed", "paused", "resumed"):
            dev.log("%s %s -> %s" % (act, s.id, s.consumer))
    dev.mem()
    return r.status, r.ctype, r.body
