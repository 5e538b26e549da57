"""aiohttp binding of the broker: SOAP over HTTP POST, size limit, credentials. The request
goes to gateway.dispatch (resource and operation), then to the role's handler with the
gateway's context; gateway.app builds the application and owns its lifecycle.

URL space (design.md): /wsn/broker, /wsn/subscriptions/<id>, /wsn/pullpoints/<id>,
/wsn/registrations/<id>. Status codes: 200 with a SOAP response; 202 with an empty body for
one-way Notify (the message is committed when it is sent); SOAP faults with 500 (SOAP 1.1,
SOAP 1.2 Receiver) or 400 (SOAP 1.2 Sender); 400 text for non-SOAP bodies; 401 with
WWW-Authenticate for management operations without valid credentials; 413 over the size limit;
415 for a Content-Type that is not SOAP's; 408 for a stalled request, 503 over the connection
cap (http_limits.py).
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import logging
import socket
import time

from aiohttp import web

from gateway import dispatch, http_limits, longpoll, loops, status
from gateway.config import Config
from gateway.context import Context
from gateway.demand import DemandManager
from gateway.http_limits import Limits
from gateway.oplog import RefusalLog
from gateway.status import OP_KEY, REJECTED_KEY
from gateway.wire import ns, soap
from gateway.wire.faults import RECEIVER, WsnFault

log = logging.getLogger("gateway.http")

CONTEXT_KEY = web.AppKey("context", Context)
LIMITS_KEY = web.AppKey("limits", Limits)
REFUSALS_KEY = web.AppKey("refusals", RefusalLog)


def _soap_response(version: str, body: bytes, status: int, action: str | None) -> web.Response:
    return web.Response(
        body=body, status=status, headers={"Content-Type": soap.content_type(version, action)}
    )


def _authorized(cfg: Config, header: str | None) -> bool:
    if not cfg.auth_enabled:
        return True
    if not header:
        return False
    scheme, _, cred = header.partition(" ")
    scheme = scheme.lower()
    if scheme == "bearer" and cfg.auth_token:
        return hmac.compare_digest(cred.strip().encode(), cfg.auth_token.encode())
    if scheme == "basic" and cfg.auth_user and cfg.auth_password is not None:
        try:
            user, _, pw = base64.b64decode(cred.strip(), validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        ok_user = hmac.compare_digest(user.encode(), cfg.auth_user.encode())
        ok_pw = hmac.compare_digest(pw.encode(), cfg.auth_password.encode())
        return ok_user and ok_pw
    return False


def _challenge(cfg: Config) -> str:
    parts = []
    if cfg.auth_user:
        parts.append('Basic realm="wsn-edge"')
    if cfg.auth_token:
        parts.append('Bearer realm="wsn-edge"')
    return ", ".join(parts)


# SOAP 1.2 part 2 §7.1.4 (application/soap+xml), SOAP 1.1 §6.1.1 (text/xml); application/xml
# is accepted too (interoperates, and an XML body is all the parser needs)
SOAP_MEDIA_TYPES = ("application/soap+xml", "text/xml", "application/xml")


def _soap_media_type(request: web.Request) -> str | web.Response:
    """The request's media type (lower case) when it is SOAP's, else the 415 answer."""
    raw = request.headers.get("Content-Type")
    media = (raw or "").split(";", 1)[0].strip().lower()
    if media in SOAP_MEDIA_TYPES:
        return media
    what = f"Content-Type {media!r}" if raw else "no Content-Type"
    request[REJECTED_KEY] = "media-type"
    return web.Response(
        status=415,
        text=f"{what} is not SOAP: send SOAP 1.2 as application/soap+xml or SOAP 1.1 as text/xml\n",
        headers={"Accept-Post": ", ".join(SOAP_MEDIA_TYPES)},
    )


async def _read_body(request: web.Request, cfg: Config) -> bytes | web.Response:
    """The body, or the answer when it is too large (413) or stalls (408, connection
    closed after it: http_limits.py)."""
    try:
        if request.content.is_eof():  # all of it arrived with the head: nothing to wait for
            return await request.read()
        async with asyncio.timeout(cfg.request_timeout):
            return await request.read()
    except web.HTTPRequestEntityTooLarge:
        request[REJECTED_KEY] = "too-large"
        return web.Response(
            status=413,
            text=f"request body exceeds the limit of {cfg.max_request_bytes} bytes "
            "(--max-request-bytes)\n",
        )
    except ConnectionResetError:  # the client went away mid-body: one line, no traceback
        request.app[LIMITS_KEY].drops.drop(
            "disconnected", request.remote, "connection lost while reading the request body"
        )
        resp = web.Response(status=400, text="connection lost\n")
        resp.force_close()
        return resp
    except TimeoutError:
        request.app[LIMITS_KEY].drops.drop(
            "body-timeout",
            request.remote,
            f"request body incomplete after {cfg.request_timeout:g} s (--request-timeout); "
            "answered 408",
        )
        resp = web.Response(status=408, text="request body not complete in time\n")
        resp.force_close()
        return resp


async def handle(request: web.Request) -> web.StreamResponse:
    """A SOAP POST, timed for /metrics (status.observe): called here, not as a middleware,
    whose chain aiohttp would run for every request, the operator GETs included."""
    t0 = time.perf_counter()
    longpoll.WAITED.set(0.0)  # one connection's requests may share a task
    try:
        return await _handle(request)
    finally:
        # a GetMessages long poll's wait is not latency (longpoll.WAITED: this task's)
        status.observe(request, time.perf_counter() - t0 - longpoll.WAITED.get())


async def _handle(request: web.Request) -> web.StreamResponse:
    ctx = request.app[CONTEXT_KEY]
    cfg = ctx.cfg
    media = _soap_media_type(request)
    if isinstance(media, web.Response):
        return media
    if request.content_length is not None and request.content_length > cfg.max_request_bytes:
        request[REJECTED_KEY] = "too-large"
        return web.Response(
            status=413,
            text=f"request body of {request.content_length} bytes exceeds the limit of "
            f"{cfg.max_request_bytes} bytes (--max-request-bytes)\n",
        )
    data = await _read_body(request, cfg)
    if isinstance(data, web.Response):
        return data
    if not data or data.isspace():  # (strip() would copy the whole body)
        request[REJECTED_KEY] = "not-soap"
        return web.Response(
            status=400, text="empty request body: POST a SOAP 1.1 or 1.2 envelope\n"
        )
    try:
        req = soap.parse_request(data, _version_hint(media))
    except soap.NotSoap as e:
        request[REJECTED_KEY] = "not-soap"
        return web.Response(status=400, text=f"{e}\n")
    except soap.SoapFault as e:
        request[REJECTED_KEY] = "soap-fault"
        fault_action = ns.WSA_FAULT_ACTION
        body = soap.fault_envelope(e.version, None, e.code, e.reason, fault_action)
        status = soap.http_status_for(e.version, e.code)
        return _soap_response(e.version, body, status, fault_action)
    request[OP_KEY] = "unresolved"  # gateway.status.observe: metric label (a bounded set)
    req.client = request.remote or ""
    try:
        op, resource = dispatch.resolve(ctx.state, ctx.clock(), request.path, req)
        request[OP_KEY] = op.name
        if op.manage and not _authorized(cfg, request.headers.get("Authorization")):
            request.app[REFUSALS_KEY].refused(request.remote, op.name)
            return web.Response(
                status=401,
                text=f"{op.name} is a management operation: credentials required\n",
                headers={"WWW-Authenticate": _challenge(cfg)},
            )
        action, children = await op.handler(ctx, req, resource)
    except WsnFault as f:
        request[REJECTED_KEY] = f.name
        if req.payload.tag == ns.q(ns.WSNT, "Notify"):
            request[OP_KEY] = "Notify"
        body = soap.wsn_fault(req.version, req.wsa, f)
        return _soap_response(
            req.version, body, soap.http_status_for(req.version, f.code), f.action
        )
    except Exception as e:  # a bug must still produce a SOAP answer
        log.exception("internal error handling %s", req.payload.tag)
        internal = WsnFault(ns.BF, "BaseFault", f"internal error: {type(e).__name__}", RECEIVER)
        body = soap.wsn_fault(req.version, req.wsa, internal)
        return _soap_response(req.version, body, 500, internal.action)
    if action is None:
        return web.Response(status=202)
    return _soap_response(req.version, soap.response(req, action, children), 200, action)


async def not_allowed(request: web.Request) -> web.StreamResponse:
    return web.Response(
        status=405, text="POST a SOAP envelope to this address\n", headers={"Allow": "POST"}
    )


def _version_hint(media: str) -> str:
    """The SOAP version a media type names (SOAP 1.2 part 2 §7.1.4, SOAP 1.1 §6.1.1)."""
    return ns.SOAP12 if media == "application/soap+xml" else ns.SOAP11


async def _identify(request: web.Request, response: web.StreamResponse) -> None:
    # loops.py: a broker delivering here learns that this consumer is a broker
    response.headers[loops.HTTP_HEADER] = request.app[CONTEXT_KEY].loop_id


def setup(app: web.Application, ctx: Context, demand: DemandManager | None) -> Limits:
    """Add the SOAP routes, the transport limits and the operator endpoints to `app` (made
    with client_max_size = --max-request-bytes); -> the limits, for the site."""
    cfg = ctx.cfg
    app[CONTEXT_KEY] = ctx
    limits = app[LIMITS_KEY] = Limits(
        cfg.request_timeout,
        cfg.max_connections,
        cfg.max_client_connections,
        outgoing=cfg.max_delivery_connections,
    )
    # dropped clients (408, 503, gone mid-body) count in wsn_requests_rejected_total too
    limits.drops.on_drop = ctx.metrics.request_rejected
    refusals = app[REFUSALS_KEY] = RefusalLog()
    app.on_response_prepare.append(_identify)
    expect = http_limits.expect_handler(cfg.max_request_bytes)  # 413 before 100 Continue
    app.router.add_post("/wsn/broker", handle, expect_handler=expect)
    app.router.add_post(
        r"/wsn/{kind:subscriptions|pullpoints|registrations}/{rid}", handle, expect_handler=expect
    )
    app.router.add_get("/wsn/broker", not_allowed)
    # operator endpoints: GET only, routed apart from the SOAP handler (gateway.status)
    status.setup(app, ctx, demand, lambda h: _authorized(cfg, h), _challenge(cfg), refusals)
    return limits


class GuardedSite(web.SockSite):
    """aiohttp's SockSite with the connection cap and head timeout of http_limits.py."""

    def __init__(self, runner: web.AppRunner, sock: socket.socket, limits: Limits) -> None:
        super().__init__(runner, sock)
        self._limits = limits

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with the runner
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            lambda: self._limits.protocol(server), sock=self._sock, backlog=self._backlog
        )
