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
- the client session sends no headers nobody reads (User-Agent, Accept, Accept-Encoding),
  keeps no cookies and does not decompress: the answer's body is read only to free the
  connection for the next request (keep-alive).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Hashable
from dataclasses import dataclass

import aiohttp
from yarl import URL

from gateway import consumer_policy, loops
from gateway.consumer_policy import ConsumerPolicy, connector_kwargs
from gateway.wire import ns, soap
from gateway.wire.addressing import Epr, request_headers

_NOTIFY_START = f'<wsnt:Notify xmlns:wsnt="{ns.WSNT}">'
_NOTIFY_END = "</wsnt:Notify>"
#: stands for the body while an envelope template is made (a comment: never in a header)
_BODY_MARK = "<!--wsn-edge body-->"
_ID_PREFIX = int.from_bytes(os.urandom(8), "big")
_id_seq = itertools.count()
#: keep-alive connections per consumer endpoint (host and port): one request is in flight
#: per endpoint at a time (gateway/delivery.py), more only for endpoints sharing an address
LIMIT_PER_HOST = 8


def _message_id() -> bytes:
    """A fresh wsa:MessageID, urn:uuid form (version 4 and variant bits set): a random
    per-process half and a counter, unique without a system call per request."""
    hi = (_ID_PREFIX & ~(0xF << 12)) | (4 << 12)
    lo = (next(_id_seq) & ((1 << 62) - 1)) | (1 << 63)
    h = f"{hi:016x}{lo:016x}"
    return f"urn:uuid:{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}".encode()


@dataclass
class _Route:
    """What one endpoint's requests share: URL, HTTP headers, the policy's verdict."""

    url: URL | None
    headers: dict[str, str]
    refused: str  # why the address may not be sent to ("" if it may)
    policy_key: tuple[int | None, int]  # the policy identity the verdict was made with


class NotifySender:
    """Sends wsnt:Notify requests (or raw payloads) to consumer endpoints over one
    aiohttp client session."""

    def __init__(self, policy: ConsumerPolicy, loop_id: str, timeout: float) -> None:
        self.policy = policy
        self.loop_id = loop_id
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        self._envelopes: dict[tuple[Hashable, tuple[str, ...]], tuple[bytes, bytes, bytes]] = {}
        self._routes: dict[Hashable, _Route] = {}

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            # names resolve through the consumer address policy (DNS rebinding)
            connector=aiohttp.TCPConnector(
                limit=0, limit_per_host=LIMIT_PER_HOST, **connector_kwargs(self.policy)
            ),
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

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
        target = consumer_policy.Target.parse(address)
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
        if not why:
            try:
                url = URL(address)
            except (ValueError, TypeError) as e:
                why = f"consumer address not usable: {e}"
        r = _Route(url, headers, why or "", pk)
        self._routes[key] = r
        return r

    def envelope(
        self, key: Hashable, consumer: Epr, soap_version: str, via: tuple[str, ...], body: str
    ) -> bytes:
        """The request: SOAP headers for the endpoint (WS-Addressing 1.0 SOAP binding §2.3:
        Action, To, a fresh MessageID, reference parameters) and edge:Via, then `body`.
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
            mid, sep3, tail = rest.rpartition(_BODY_MARK.encode())
            if not (sep and sep2 and sep3):  # not as expected: build every request anew
                hdrs = request_headers(consumer, ns.A_NOTIFY)
                hdrs.append(loops.via_header([*via, self.loop_id]))
                return soap.envelope_with_body(soap_version, hdrs, body)
            parts = (head + sep, sep2 + mid, tail)
            self._envelopes[ckey] = parts
        head, mid, tail = parts
        return b"".join((head, _message_id(), mid, body.encode("utf-8"), tail))

    async def send(
        self,
        key: Hashable,
        consumer: Epr,
        soap_version: str,
        raw: bool,
        xmls: list[str],
        via: tuple[str, ...],
    ) -> tuple[bool, str, str | None]:
        """POST one request; (answered 2xx, why not, the broker id it answered with)."""
        assert self._session is not None
        r = self._route(key, consumer, soap_version)
        if r.refused or r.url is None:
            return False, r.refused, None
        # stored messages are serialized elements: raw, the payload is the body; wrapped,
        # the NotificationMessages go into one wsnt:Notify, spliced as text (no re-parse)
        body = xmls[0] if raw else _NOTIFY_START + "".join(xmls) + _NOTIFY_END
        data = self.envelope(key, consumer, soap_version, via, body)
        try:
            async with self._session.post(
                r.url,
                data=data,
                headers=r.headers,
                timeout=self._timeout,
                allow_redirects=False,
            ) as resp:
                await resp.read()  # frees the connection for keep-alive
                peer = resp.headers.get(loops.HTTP_HEADER)
                if 200 <= resp.status < 300:
                    return True, "", peer
                return False, f"HTTP {resp.status}", peer
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            return False, f"{type(e).__name__}: {e}", None
