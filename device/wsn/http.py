# A tiny HTTP/1.1 server and client on MicroPython asyncio (start_server / open_connection).
# One request per connection (Connection: close), Content-Length bodies only, every read under
# a timeout, sizes bounded: a slow, truncated or oversized request gets 408/400/413 and never
# holds the device. Message parsing lives in wsn.core.httpmsg.
import asyncio

from micropython import const

from wsn.core import httpmsg as H

_MAX_HEAD = const(4096)
# an oversized body up to this size is read and discarded before the 413
_DRAIN_LIMIT = const(65536)


async def _close(w):
    try:
        w.close()
        await w.wait_closed()
    except Exception:  # noqa: BLE001 - already reset by the peer: closed either way
        pass


async def _discard(r, left, wait):
    # read and drop up to `left` bytes, each read within `wait` seconds (None: no limit)
    try:
        while left > 0:
            rd = r.read(min(512, left))
            chunk = await (asyncio.wait_for(rd, wait) if wait else rd)
            if not chunk:
                break
            left -= len(chunk)
    except Exception:  # noqa: BLE001 - timeout or reset: done either way
        pass


class Server:
    # handler(method, path, query, headers, body) -> (status, ctype, body bytes) (a coroutine)
    def __init__(self, handler, host, port, max_body=8192, read_timeout_s=10, on_done=None):
        self.handler = handler
        self.host = host
        self.port = port
        self.max_body = max_body
        self.read_timeout = read_timeout_s
        self.on_done = on_done
        self.srv = None

    async def start(self):
        self.srv = await asyncio.start_server(self._conn, self.host, self.port, 8)
        return self.srv

    async def _read_head(self, r):
        buf = b""
        while True:
            k = buf.find(b"\r\n\r\n")
            if k >= 0 and k <= _MAX_HEAD:
                return buf[:k], buf[k + 4:]
            if len(buf) > _MAX_HEAD:
                raise H.HTTPError(431, "head over %d bytes" % _MAX_HEAD)
            chunk = await r.read(512)
            if not chunk:
                raise H.HTTPError(400, "truncated head")
            buf += chunk

    async def _read_body(self, r, rest, n):
        parts = [rest] if rest else []
        have = len(rest)
        while have < n:
            chunk = await r.read(min(1024, n - have))
            if not chunk:
                raise H.HTTPError(400, "truncated body (%d of %d bytes)" % (have, n))
            parts.append(chunk)
            have += len(chunk)
        body = b"".join(parts)
        return body[:n]

    async def _request(self, r, w):
        head, rest = await self._read_head(r)
        method, path, query, headers = H.parse_head(head)
        try:
            n = H.body_length(method, headers, self.max_body)
        except H.HTTPError as e:
            if e.status == 413:
                cl = headers.get("content-length", "0")
                if cl.isdigit() and int(cl) <= _DRAIN_LIMIT:
                    # read and discard it, so the client is reading when the 413 comes
                    await _discard(r, int(cl) - len(rest), None)
            raise
        if n and not rest and headers.get("expect", "").lower() == "100-continue":
            # RFC 9110 §10.1.1: curl and .NET clients wait for this before sending the body
            w.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await w.drain()
        body = await self._read_body(r, rest, n) if n else b""
        return method, path, query, headers, body

    async def _conn(self, r, w):
        status = 500
        try:
            try:
                req = await asyncio.wait_for(self._request(r, w), self.read_timeout)
                status, ctype, body = await self.handler(*req)
            except asyncio.TimeoutError:
                status, ctype, body = 408, "text/plain", b"request too slow\n"
            except H.HTTPError as e:
                status, ctype, body = e.status, "text/plain", (str(e) + "\n").encode()
            except MemoryError:
                status, ctype, body = 503, "text/plain", b"out of memory: retry\n"
            if isinstance(body, list):  # chunks of a large answer: no big contiguous block
                w.write(H.response_head(status, ctype, sum([len(c) for c in body])))
                for c in body:
                    w.write(c)
                    await asyncio.wait_for(w.drain(), self.read_timeout)
                body = None
            else:
                w.write(H.response_head(status, ctype, len(body)))
                if body:
                    w.write(body)
            await asyncio.wait_for(w.drain(), self.read_timeout)
            if status >= 400:
                # "lingering close" (RFC 9112 §9.6): read and discard what the client still
                # sends for a moment, so closing does not reset the connection before the
                # client has read the answer
                await _discard(r, _DRAIN_LIMIT, 0.2)
        except Exception as e:  # noqa: BLE001 - a broken connection must not stop the server
            print("http: connection error:", repr(e))
        finally:
            await _close(w)
            if self.on_done is not None:
                self.on_done(status)


async def _exchange(host, port, head, body, max_resp):
    r, w = await asyncio.open_connection(host, port)
    try:
        w.write(head)
        if isinstance(body, list):  # a batch in pieces: no big contiguous block on a small heap
            for c in body:
                w.write(c)
                await w.drain()
        else:
            w.write(body)
        await w.drain()
        buf = b""
        while True:
            chunk = await r.read(512)  # answers to pushes are small: small reads, small heap
            if not chunk:
                break
            buf += chunk
            if len(buf) > max_resp:
                raise H.HTTPError(502, "response over %d bytes" % max_resp)
        return buf
    finally:
        await _close(w)


async def post(url, body, ctype, timeout_s=5, extra_headers="", max_resp=16384):
    # POST body (bytes, or a list of bytes chunks) to url -> (status, response body bytes).
    # Raises OSError / asyncio.TimeoutError when the peer is unreachable or slow, H.HTTPError
    # for a malformed answer.
    host, port, path = H.split_url(url)
    n = sum([len(c) for c in body]) if isinstance(body, list) else len(body)
    head = H.request_head("POST", host, port, path, ctype, n, extra_headers)
    data = await asyncio.wait_for(_exchange(host, port, head, body, max_resp), timeout_s)
    k = data.find(b"\r\n\r\n")
    if k < 0:
        raise H.HTTPError(502, "truncated response")
    status, headers = H.parse_status(data[:k])
    rbody = data[k + 4:]
    if headers.get("transfer-encoding", "").lower() == "chunked":
        rbody = H.dechunk(rbody)
    return status, rbody


class Limiter:
    # a counting semaphore (MicroPython's asyncio has Lock and Event, no Semaphore): bounds
    # how many pushes are in flight, so their buffers fit a small heap
    def __init__(self, n):
        self.n = n
        self.ev = asyncio.Event()

    async def acquire(self):
        while self.n <= 0:
            self.ev.clear()
            await self.ev.wait()
        self.n -= 1

    def release(self):
        self.n += 1
        self.ev.set()
