"""The Notify request to one consumer endpoint (gateway/delivery.py decides what and when).

What is done once per endpoint rather than per request, because at a fan-out of 100 each
published message becomes 100 requests of about one message and the client's cost per
request bounds deliveries/s (docs/gateway.md "Performance"):
- the SOAP headers (WS-Addressing 1.0 SOAP binding §2.3: Action, To, the reference
  parameters, and edge:Via) are serialized once per (endpoint, via); only the wsa:MessageID
  changes;
- the HTTP headers, the parsed URL and the consumer address policy's verdict on the address
  (re-checked when the policy's own identity changes; names are still checked on their
  resolved addresses by the connector's PolicyResolver at each connection);
- the request goes over aiohttp's own pieces, not a ClientSession: a kept-alive connection
  per endpoint from aiohttp's TCPConnector (its pool, TLS, and names resolved through the
  consumer address policy's PolicyResolver at each new connection), the request line and
  headers built once per endpoint by aiohttp's ClientRequest (Host, and Authorization from
  credentials in the address) and written with the body in one write, and the answer read
  by aiohttp's response parser on the connection (`ResponseHandler`). A ClientSession's
  request costs about twice the CPU (163-176 against 71-80 µs per request in one sitting,
  docs/gateway.md "Performance"): per request it builds a ClientRequest and a
  ClientResponse, header multidicts, cookie and trace hooks and timers that a Notify to a
  known endpoint does not need. Kept as a session did it: one total timeout per request
  (connect, write and answer), redirects not followed, no User-Agent, Accept or
  Accept-Encoding headers, no decompression, and the connection closed instead of reused
  when the answer or an error says so.

Identity (WS-Addressing 1.0 Core §3.2; docs/gateway.md "Delivery policies"): each message
delivered to a subscription has a message id of its own, a name-based UUID of the
subscription and the message's durable outbox seq (`message_id`): the same on every
attempt, after a restart or kill -9 too, so a consumer can drop what it got twice from the
at-least-once resend. A request's wsa:MessageID is its message's id when it carries one
message (always, for a raw one), else a UUID of its messages' ids (the same batch sent again
has the same one; after a restart a batch may hold more or fewer messages). A wrapped
Notify also lists its messages' ids in order, in `edge:MessageIDs` after its
NotificationMessages (the schema of wsnt:Notify allows elements of other namespaces there).

The answer's body (`_drain`): a Notify is one-way (WS-BaseNotification 1.3 §3; the WSDL's
Notify has no output), so nothing in the body is used; it is read only so that the
connection can carry the next request. A consumer may answer with a body of any length,
or an endless one: it is read and discarded up to --max-consumer-answer-bytes (64 KiB)
within what is left of the request's --delivery-timeout, and past either the connection is
closed instead of reused. Memory stays bounded by aiohttp's stream buffer (it pauses the
socket past 128 KiB unread), not by what the consumer sends.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import aiohttp
from aiohttp import hdrs
from aiohttp.http_exceptions import HttpProcessingError
from yarl import URL

from gateway import consumer_policy, loops
from gateway.consumer_policy import ConsumerPolicy, connector_kwargs
from gateway.wire import ns, soap
from gateway.wire.addressing import Epr, request_headers

log = logging.getLogger("gateway.delivery")

_NOTIFY_START = f'<wsnt:Notify xmlns:wsnt="{ns.WSNT}">'
_NOTIFY_END = "</wsnt:Notify>"
_IDS_START = f'<edge:MessageIDs xmlns:edge="{ns.EDGE}">'
_IDS_END = "</edge:MessageIDs>"
#: stands for the body while an envelope template is made (a comment: never in a header)
_BODY_MARK = "<!--wsn-edge body-->"
#: defaults of --max-consumer-connections (per consumer host, port and TLS: one request is
#: in flight per endpoint at a time, gateway/delivery.py, more only for endpoints sharing an
#: address) and --max-delivery-connections (all consumers together); a request waiting for a
#: free connection counts against its --delivery-timeout
LIMIT_PER_HOST = 8
LIMIT_TOTAL = 256
#: default of --max-consumer-answer-bytes: the most of an answer's body read (and discarded)
MAX_ANSWER_BYTES = 64 * 1024


#: the namespace of the name-based UUIDs of delivered messages (RFC 9562 §5.5)
ID_NAMESPACE = uuid.UUID("6f9c2a4e-3b1d-5e0a-9c7b-2d4e8f1a6b30")


def message_id(sub_id: str, seq: int) -> str:
    """The id of the message with outbox seq `seq` delivered to subscription `sub_id`
    (module docstring): urn:uuid, stable across attempts and restarts."""
    return f"urn:uuid:{uuid.uuid5(ID_NAMESPACE, f'{sub_id}/{seq}')}"


def request_id(ids: Sequence[str]) -> str:
    """The wsa:MessageID of a request carrying the messages `ids` (module docstring)."""
    if len(ids) == 1:
        return ids[0]
    return f"urn:uuid:{uuid.uuid5(ID_NAMESPACE, ' '.join(ids))}"


@dataclass
class _Route:
    """What one endpoint's requests share: URL, HTTP headers, the policy's verdict."""

    url: URL | None
    headers: dict[str, str]
    refused: str  # why the address may not be sent to ("" if it may)
    policy_key: tuple[int | None, int]  # the policy identity the verdict was made with
    #: the connector's key for the endpoint (host, port, TLS), made by aiohttp
    request: aiohttp.ClientRequest | None = None
    #: the request line and headers, up to the value of Content-Length
    head: bytes = b""


class NotifySender:
    """Sends wsnt:Notify requests (or raw payloads) to consumer endpoints over one
    aiohttp connector (kept-alive connections, no ClientSession; module docstring)."""

    def __init__(
        self,
        policy: ConsumerPolicy,
        loop_id: str,
        timeout: float,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        max_connections: int = LIMIT_TOTAL,
        max_per_consumer: int = LIMIT_PER_HOST,
    ) -> None:
        self.policy = policy
        self.max_connections = max_connections
        self.max_per_consumer = max_per_consumer
        self.loop_id = loop_id
        self._total = timeout
        self._max_answer = max_answer_bytes
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._connector: aiohttp.TCPConnector | None = None
        self._envelopes: dict[tuple[Hashable, tuple[str, ...]], tuple[bytes, bytes, bytes]] = {}
        self._routes: dict[Hashable, _Route] = {}

    async def start(self) -> None:
        # names resolve through the consumer address policy (DNS rebinding)
        # bounded (issue 22: 1,200 consumers that never answer held an open file each
        # until the process met its limit); beyond, a request waits for a connection
        self._connector = aiohttp.TCPConnector(
            limit=self.max_connections,
            limit_per_host=self.max_per_consumer,
            **connector_kwargs(self.policy),
        )

    async def close(self) -> None:
        if self._connector is not None:
            await self._connector.close()

    def forget(self, key: Hashable) -> None:
        """The endpoint is gone: drop what was kept for it."""
        self._routes.pop(key, None)
        for k in [k for k in self._envelopes if k[0] == key]:
            del self._envelopes[k]

    def _route(self, key: Hashable, consumer: Epr, soap_version: str) -> _Route:
        pk = (self.policy.own_port, len(self.policy.own_names))
        r = self._routes.get(key)
        if r is not None and r.policy_key == pk:
            return r
        address = consumer.address
        # checked again per endpoint and whenever the policy's identity changes: the policy
        # may differ from the one at Subscribe (a restart with other options)
        target = consumer_policy.ConsumerAddress.parse(address)
        why = target if isinstance(target, str) else self.policy.check_target(target, address)
        if (
            not why
            and not isinstance(target, str)
            and target.ip is not None
            and self.policy.is_self_ip(target.ip, target.port)
        ):
            why = "the consumer address is this broker itself"
        action = ns.A_NOTIFY
        headers = {"Content-Type": soap.content_type(soap_version, action)}
        if soap_version == ns.SOAP11:
            headers["SOAPAction"] = f'"{action}"'
        url = None
        request = None
        head = b""
        if not why:
            try:
                url = URL(address)
                request = aiohttp.ClientRequest(
                    "POST",
                    url,
                    loop=asyncio.get_running_loop(),
                    headers=headers,
                    skip_auto_headers=_SKIP_HEADERS,
                )
                head = _request_head(request)
            except (ValueError, TypeError, aiohttp.ClientError) as e:
                why = f"consumer address not usable: {e}"
                url = request = None
        r = _Route(url, headers, why or "", pk, request, head)
        self._routes[key] = r
        return r

    def envelope(
        self,
        key: Hashable,
        consumer: Epr,
        soap_version: str,
        via: tuple[str, ...],
        body: str,
        mid: str,
    ) -> bytes:
        """The request: SOAP headers for the endpoint (WS-Addressing 1.0 SOAP binding §2.3:
        Action, To, MessageID `mid`, reference parameters) and edge:Via, then `body`.
        The serialized headers are kept per (endpoint, via): only the MessageID changes."""
        ckey = (key, via)
        parts = self._envelopes.get(ckey)
        if parts is None:
            if len(self._envelopes) > 2 * len(self._routes) + 64:
                self._envelopes.clear()  # bounded: many distinct via chains fall out
            hdrs = request_headers(consumer, ns.A_NOTIFY)
            hdrs.append(loops.via_header([*via, self.loop_id]))
            whole = soap.envelope_with_body(soap_version, hdrs, _BODY_MARK)
            # request_headers writes Action, To, MessageID, then the reference parameters:
            # the first wsa:MessageID element is ours (Action and To are text only)
            head, sep, rest = whole.partition(b"<wsa:MessageID>")
            _old_id, sep2, rest = rest.partition(b"</wsa:MessageID>")
            middle, sep3, tail = rest.rpartition(_BODY_MARK.encode())
            if not (sep and sep2 and sep3):  # not as expected: build every request anew
                hdrs = request_headers(consumer, ns.A_NOTIFY)
                hdrs.append(loops.via_header([*via, self.loop_id]))
                whole = soap.envelope_with_body(soap_version, hdrs, body)
                h, s2, r = whole.partition(b"<wsa:MessageID>")
                return h + s2 + mid.encode() + r[r.index(b"</wsa:MessageID>") :]
            parts = (head + sep, sep2 + middle, tail)
            self._envelopes[ckey] = parts
        head, middle, tail = parts
        return b"".join((head, mid.encode(), middle, body.encode("utf-8"), tail))

    async def send(
        self,
        key: Hashable,
        consumer: Epr,
        soap_version: str,
        raw: bool,
        xmls: list[str],
        via: tuple[str, ...],
        ids: Sequence[str],
    ) -> tuple[bool, str, str | None]:
        """POST one request of the messages `xmls` whose ids (`message_id`) are `ids`;
        (answered 2xx, why not, the broker id it answered with)."""
        r = self._route(key, consumer, soap_version)
        if r.refused or r.request is None:
            return False, r.refused, None
        # stored messages are serialized elements: raw, the payload is the body; wrapped,
        # the NotificationMessages go into one wsnt:Notify, spliced as text (no re-parse)
        if raw:
            body = xmls[0]
        else:
            listed = f"{_IDS_START}{' '.join(ids)}{_IDS_END}"
            body = "".join((_NOTIFY_START, *xmls, listed, _NOTIFY_END))
        data = self.envelope(key, consumer, soap_version, via, body, request_id(ids))
        try:
            status, peer = await self._post(r, data, asyncio.get_running_loop().time())
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            return False, self.describe(e), None
        except HttpProcessingError as e:  # an answer that is not HTTP (the parser's verdict)
            return False, f"not HTTP: {' '.join(str(e.message).split())}", None
        if 200 <= status < 300:
            return True, "", peer
        return False, f"HTTP {status}", peer

    def describe(self, e: BaseException) -> str:
        """A failed request's error in a few words: refused, a timeout, reset..."""
        if isinstance(e, TimeoutError):
            return f"timeout after {self._total:g} s (--delivery-timeout)"
        if isinstance(e, aiohttp.ClientConnectorError):
            err = e.os_error
            if isinstance(err, ConnectionRefusedError):
                return "connection refused"
            return f"cannot connect: {err.strerror or err}" if err else "cannot connect"
        if isinstance(e, aiohttp.ServerDisconnectedError):
            return "disconnected before answering"
        if isinstance(e, OSError) and e.strerror:
            return e.strerror
        return f"{type(e).__name__}: {e}"

    async def _post(self, r: _Route, data: bytes, start: float) -> tuple[int, str | None]:
        """(status, the WSN-Edge-Gateway header) of one request on a kept-alive connection,
        all of it within --delivery-timeout from `start` (loop time)."""
        assert self._connector is not None and r.request is not None
        deadline = start + self._total
        conn = None
        reuse = False
        try:
            async with asyncio.timeout_at(deadline):  # connect, write, the answer's head
                conn = await self._connector.connect(r.request, [], self._timeout)
                proto, transport = conn.protocol, conn.transport
                if proto is None or transport is None:
                    raise aiohttp.ServerDisconnectedError()
                proto.set_response_params(read_until_eof=True, auto_decompress=False)
                transport.write(b"".join((r.head, str(len(data)).encode(), b"\r\n\r\n", data)))
                while True:  # informational answers (1xx but 101) precede the answer
                    msg, payload = await proto.read()
                    if not 100 <= msg.code <= 199 or msg.code == 101:
                        break
            # The status line is the outcome: a 2xx said the consumer took the Notify, so it
            # counts as delivered whatever its body does (too long, endless, cut off, too
            # slow); sending it again would deliver it twice. The body only decides whether
            # the connection can carry the next request.
            whole = await _drain(payload, self._max_answer, deadline)
            reuse = whole and not (msg.should_close or proto.should_close)
            return msg.code, msg.headers.get(loops.HTTP_HEADER)
        finally:
            if conn is not None:
                if reuse:
                    conn.release()
                else:
                    conn.close()


async def _drain(payload: aiohttp.StreamReader, cap: int, deadline: float) -> bool:
    """Read an answer's body to its end and discard it: True if it ended within `cap`
    bytes and before `deadline` (loop time), so the connection may be reused; False past
    either, or if the body broke off (the caller closes the connection)."""
    if payload.at_eof():  # the usual answer: no body (a body in the buffer is read below)
        return True
    n = 0
    try:
        async with asyncio.timeout_at(deadline):
            while chunk := await payload.readany():  # b"" at its end
                n += len(chunk)
                if n > cap:
                    log.debug("answer body over %d bytes: connection closed", cap)
                    return False
    except (TimeoutError, aiohttp.ClientError, OSError, HttpProcessingError) as e:
        log.debug("answer body not read to its end (%s): connection closed", e)
        return False
    return True


#: headers a Notify's consumer does not read (a ClientRequest adds them unless skipped)
_SKIP_HEADERS = frozenset((hdrs.USER_AGENT, hdrs.ACCEPT, hdrs.ACCEPT_ENCODING))
#: set per request (the body's length) or not sent (the body is never chunked)
_PER_REQUEST = frozenset((hdrs.CONTENT_LENGTH, hdrs.TRANSFER_ENCODING))


def _request_head(request: aiohttp.ClientRequest) -> bytes:
    """The request line and headers aiohttp made for `request` (Host, ours, Authorization
    from credentials in the address), ending with the name of Content-Length."""
    lines = [f"POST {request.url.raw_path_qs} HTTP/1.1"]
    lines += [f"{k}: {v}" for k, v in request.headers.items() if k not in _PER_REQUEST]
    lines.append(f"{hdrs.CONTENT_LENGTH}: ")
    return "\r\n".join(lines).encode("latin-1")
