"""Transport limits of the HTTP binding against hostile or broken clients.

- Request head: a connection whose first request head (request line + headers) is not
  complete within `--request-timeout` seconds (default 10) gets `408 Request Timeout` and
  is closed. Later heads on a kept-alive connection are bounded by aiohttp's own
  `keepalive_timeout` (set to the same budget + 1 s): it closes a connection that has no
  complete request pending.
- Request body: bounded by the same budget in the handler (gateway/http.py answers 408).
- Concurrent connections: at most `--max-connections` (default 512, lowered to fit the
  process's open-file limit); one more gets `503` with `Retry-After` and is closed at
  once, so the listening socket keeps accepting and never meets EMFILE (which made
  asyncio log a traceback per accept). At the cap, a new connection first evicts the
  oldest connection still waiting for its first request head (slowloris connections are
  the oldest such; a real client sends its head at once), so idle half-requests cannot
  lock clients out; only when none is waiting is the newcomer refused. One client
  address may hold at most
  `--max-client-connections` (default 128) of them, so one hostile host cannot take all.
- Each dropped client is one log line (WARNING, at most one per second per reason plus a
  count), never a traceback. A request aiohttp's parser refuses (both Content-Length and
  Transfer-Encoding, an obs-fold line, too many headers, a bad request line...) is
  answered 400 by aiohttp and is such a line too (reason "malformed"): the RequestHandler
  gets a logger (`ServerLog`) that turns its "Error handling request" of an HTTP parse
  error into one, and passes everything else (a bug) on to `aiohttp.server`.
- `Expect: 100-continue` with a Content-Length over the limit is answered 413 at once,
  without the `100 Continue` aiohttp's default expect handler would send first
  (`expect_handler`; RFC 9110 §10.1.1: a server may answer the final status instead).

aiohttp's knobs (max_line_size, max_field_size, keepalive_timeout, client_max_size) are
used where they exist; aiohttp has no head timeout or connection cap of its own, hence
the small protocol wrapper below. It forwards every call to aiohttp's RequestHandler.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import hdrs, web
from aiohttp.http_exceptions import HttpProcessingError

log = logging.getLogger("gateway.http")

#: file descriptors kept free for SQLite, landing files, the XPath worker's pipes and the
#: like; outgoing delivery connections (--max-delivery-connections) are kept free on top
FD_RESERVE = 128


def effective_max_connections(configured: int, outgoing: int = 0) -> int:
    """`configured`, lowered to fit RLIMIT_NOFILE minus FD_RESERVE and the `outgoing`
    connections the delivery may hold (at least 16)."""
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ValueError, OSError):
        return configured
    if soft == resource.RLIM_INFINITY:
        return configured
    fit = max(16, int(soft) - FD_RESERVE - outgoing)
    if configured > fit:
        log.warning(
            "--max-connections %d lowered to %d to fit the open-file limit (%d, of which %d "
            "are kept for outgoing deliveries and %d for files)",
            configured,
            fit,
            soft,
            outgoing,
            FD_RESERVE,
        )
        return fit
    return configured


class DropLog:
    """One line per dropped client, at most one per second per reason (+ a count)."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        #: told each drop's reason (gateway.http: the wsn_requests_rejected_total counter)
        self.on_drop: Callable[[str], None] | None = None

    def drop(self, reason: str, peer: object, detail: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        if self.on_drop is not None:
            self.on_drop(reason)
        now = time.monotonic()
        if now - self._last.get(reason, 0.0) < 1.0:
            self._suppressed[reason] = self._suppressed.get(reason, 0) + 1
            return
        more = self._suppressed.pop(reason, 0)
        self._last[reason] = now
        extra = f" (+{more} more since the last line)" if more else ""
        log.warning("dropped client %s: %s%s", _peer(peer), detail, extra)


def _peer(peer: object) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


_TIMEOUT_408 = (
    b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Type: text/plain\r\n"
    b"Content-Length: %d\r\n\r\n%s"
)
_BUSY_503 = (
    b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n"
    b"Content-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
)


def _answer(template: bytes, text: str) -> bytes:
    body = text.encode()
    return template % (len(body), body)


class Limits:
    """Per-server state: the live connection count and the drop log."""

    def __init__(
        self,
        request_timeout: float,
        max_connections: int,
        max_client_connections: int = 128,
        outgoing: int = 0,
    ) -> None:
        self.request_timeout = request_timeout
        self.max_connections = effective_max_connections(max_connections, outgoing)
        self.max_client_connections = max_client_connections
        self.per_client: dict[str, int] = {}  # client address -> open connections
        self.pending: dict[_Guard, None] = {}  # waiting for their first head, oldest first
        self.active = 0
        self.lingering = 0  # _Busy connections waiting to be closed
        self.drops = DropLog()

    def protocol(self, make_inner: Callable[[], asyncio.Protocol]) -> asyncio.Protocol:
        if self.active >= self.max_connections:
            oldest = next(iter(self.pending), None)
            if oldest is None:
                return _Busy(self)
            oldest.evict()
        return _Guard(self, make_inner())


MAX_LINGER = 64


def _refuse(
    limits: Limits, transport: asyncio.Transport, answer: bytes
) -> asyncio.TimerHandle | None:
    """Write `answer`, half-close, and close after at most a second, reading (and
    discarding) what the client still sends meanwhile: closing with unread data would reset
    the connection and lose the answer. At most MAX_LINGER linger at a time; the returned
    timer (if any) is the caller's to cancel, and then to decrement `limits.lingering`."""
    transport.write(answer)
    if limits.lingering >= MAX_LINGER or not transport.can_write_eof():
        transport.close()
        return None
    limits.lingering += 1
    transport.write_eof()
    return asyncio.get_running_loop().call_later(1.0, transport.close)


class _Busy(asyncio.Protocol):
    """Answers 503 and closes: over --max-connections (see _refuse)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.limits.drops.drop(
            "busy",
            transport.get_extra_info("peername"),
            f"{self.limits.max_connections} connections open (--max-connections); answered 503",
        )
        self.timer = _refuse(
            self.limits, transport, _answer(_BUSY_503, "too many connections; retry later\n")
        )

    def data_received(self, data: bytes) -> None:
        pass  # discarded

    def eof_received(self) -> bool | None:
        if self.transport is not None:
            self.transport.close()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
            self.limits.lingering -= 1


class _Guard(asyncio.Protocol):
    """Forwards to aiohttp's RequestHandler; answers 408 and closes if the first request
    head is not complete in time."""

    def __init__(self, limits: Limits, inner: asyncio.Protocol) -> None:
        self.limits = limits
        self.inner = inner
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.tail = b""  # the last 3 bytes seen, to find CRLFCRLF across chunks
        self.received = 0
        self.client: str | None = None  # counted in limits.per_client
        self.forwarded = False
        self.refused: asyncio.TimerHandle | None = None  # over --max-client-connections
        # counted from creation: asyncio creates the protocols of a burst of accepted
        # connections before any of them is connection_made
        self.limits.active += 1
        self.counted = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        client = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        per = self.limits.per_client
        if per.get(client, 0) >= self.limits.max_client_connections:
            self.limits.drops.drop(
                "busy-client",
                peer,
                f"{self.limits.max_client_connections} connections open from this address "
                "(--max-client-connections); answered 503",
            )
            self.refused = _refuse(
                self.limits,
                transport,
                _answer(_BUSY_503, "too many connections from your address\n"),
            )
            return
        self.client = client
        per[client] = per.get(client, 0) + 1
        self.timer = asyncio.get_running_loop().call_later(
            self.limits.request_timeout, self._head_timeout
        )
        self.limits.pending[self] = None
        self.forwarded = True
        self.inner.connection_made(transport)

    def evict(self) -> None:
        """Make room at the connection cap: answer 503 and close; the slot is free now."""
        self._head_done()
        if self.counted:
            self.limits.active -= 1
            self.counted = False
        self._refuse(
            "evicted",
            f"no request head after {self.received} bytes while {self.limits.max_connections} "
            "connections are open (--max-connections); evicted with 503",
            _answer(_BUSY_503, "server full and your request head is incomplete\n"),
        )

    def _head_done(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.limits.pending.pop(self, None)

    def _head_timeout(self) -> None:
        self.timer = None
        self.limits.pending.pop(self, None)
        self._refuse(
            "head-timeout",
            f"request head incomplete after {self.limits.request_timeout:g} s "
            f"({self.received} bytes; --request-timeout); answered 408",
            _answer(_TIMEOUT_408, "request head not complete in time\n"),
        )

    def _refuse(self, reason: str, why: str, answer: bytes) -> None:
        """One log line for a client whose head never came, then its answer, then close."""
        t = self.transport
        if t is None or t.is_closing():
            return
        self.limits.drops.drop(reason, t.get_extra_info("peername"), why)
        t.write(answer)
        t.close()

    def data_received(self, data: bytes) -> None:
        if not self.forwarded:
            return
        if self.timer is not None:
            self.received += len(data)
            if b"\r\n\r\n" in self.tail + data:
                self._head_done()
            else:
                self.tail = (self.tail + data)[-3:]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        if self.forwarded:
            return self.inner.eof_received()
        if self.transport is not None:
            self.transport.close()
        return None

    def pause_writing(self) -> None:
        if self.forwarded:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.forwarded:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_done()
        if self.refused is not None:
            self.refused.cancel()
            self.refused = None
            self.limits.lingering -= 1
        if self.counted:
            self.limits.active -= 1
            self.counted = False
        if self.client is not None:
            per = self.limits.per_client
            per[self.client] -= 1
            if per[self.client] <= 0:
                del per[self.client]
            self.client = None
        if self.forwarded:
            self.forwarded = False
            self.inner.connection_lost(exc)


class ServerLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The logger aiohttp's RequestHandler writes to (module docstring): an HTTP parse
    error becomes one rate-limited drop line, anything else goes to `aiohttp.server`."""

    def __init__(self, drops: DropLog) -> None:
        super().__init__(logging.getLogger("aiohttp.server"), {})
        self.drops = drops

    def _malformed(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        exc = kwargs.get("exc_info")
        if not isinstance(exc, HttpProcessingError):
            return False
        peer = args[1] if len(args) > 1 else "?"
        # one line whatever the client sent: whitespace (line breaks) folded, length cut
        detail = " ".join(str(exc.message).split())[:200] or type(exc).__name__
        self.drops.drop("malformed", peer, f"malformed HTTP request ({detail}); answered 400")
        return True

    def exception(self, msg: object, *args: Any, **kwargs: Any) -> None:
        if not self._malformed((msg, *args), kwargs):
            super().exception(msg, *args, **kwargs)

    def error(self, msg: object, *args: Any, **kwargs: Any) -> None:
        if not self._malformed((msg, *args), kwargs):
            super().error(msg, *args, **kwargs)

    def debug(self, msg: object, *args: Any, **kwargs: Any) -> None:
        # a bad method on a connection's first request (TLS or other non-HTTP bytes)
        if not self._malformed((msg, *args), kwargs):
            super().debug(msg, *args, **kwargs)


def expect_handler(max_bytes: int) -> Callable[[web.Request], Awaitable[web.StreamResponse | None]]:
    """An aiohttp expect handler that answers 413 to a declared body over `max_bytes`
    instead of `100 Continue` (module docstring); otherwise aiohttp's own behaviour."""

    async def handler(request: web.Request) -> web.StreamResponse | None:
        expect = request.headers.get(hdrs.EXPECT, "")
        length = request.content_length
        if expect.lower() == "100-continue" and length is not None and length > max_bytes:
            resp = web.Response(
                status=413,
                text=f"request body of {length} bytes exceeds the limit of {max_bytes} bytes "
                "(--max-request-bytes)\n",
            )
            resp.force_close()  # the body is not read: the connection cannot go on
            return resp
        # as aiohttp's default handler does
        if request.version == (1, 1):
            if expect.lower() != "100-continue":
                raise web.HTTPExpectationFailed(text=f"Unknown Expect: {expect}")
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0  # the answer's own head is still to come
        return None

    return handler


def runner_kwargs(limits: Limits) -> dict[str, Any]:
    """AppRunner/RequestHandler options: aiohttp's own limits, and the log of malformed
    requests (ServerLog)."""
    return {
        "logger": ServerLog(limits.drops),
        # closes a connection with no complete request pending (idle keep-alive and a
        # stalled later head); the first head is the _Guard's
        "keepalive_timeout": limits.request_timeout + 1.0,
        # after an answer to an incompletely read body (408, 413), drain it for at most
        # 1 s (aiohttp's default 10 s held the connection) so the answer is not lost to a
        # reset, then close
        "lingering_time": 1.0,
        "max_line_size": 8190,
        "max_field_size": 8190,
    }
