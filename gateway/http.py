"""aiohttp binding of the broker: SOAP over HTTP POST, size limit, credentials.

URL space (design.md): /wsn/broker, /wsn/subscriptions/<id>, /wsn/pullpoints/<id>,
/wsn/registrations/<id>. Status codes: 200 with a SOAP response; 202 with an empty body for
one-way Notify (the message is committed when it is sent); SOAP faults with 500 (SOAP 1.1,
SOAP 1.2 Receiver) or 400 (SOAP 1.2 Sender); 400 text for non-SOAP bodies; 401 with
WWW-Authenticate for management operations without valid credentials; 413 over the size limit.
"""

from __future__ import annotations

import base64
import hmac
import logging
import socket
from dataclasses import dataclass

from aiohttp import web

from gateway import ns, oplog, soap, status
from gateway.broker import NotificationBroker
from gateway.config import Config
from gateway.demand import DemandManager
from gateway.faults import RECEIVER, WsnFault
from gateway.status import OP_KEY, REJECTED_KEY

log = logging.getLogger("gateway.http")

BROKER_KEY = web.AppKey("broker", NotificationBroker)


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


async def handle(request: web.Request) -> web.StreamResponse:
    broker = request.app[BROKER_KEY]
    cfg = broker.cfg
    if request.content_length is not None and request.content_length > cfg.max_request_bytes:
        return web.Response(
            status=413,
            text=f"request body of {request.content_length} bytes exceeds the limit of "
            f"{cfg.max_request_bytes} bytes (--max-request-bytes)\n",
        )
    try:
        data = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return web.Response(
            status=413,
            text=f"request body exceeds the limit of {cfg.max_request_bytes} bytes "
            "(--max-request-bytes)\n",
        )
    if not data.strip():
        return web.Response(
            status=400, text="empty request body: POST a SOAP 1.1 or 1.2 envelope\n"
        )
    if request.host and len(broker.own_netlocs) < 64:  # bounded: Host is client-chosen
        broker.own_netlocs.add(request.host)
    try:
        req = soap.parse_request(data)
    except soap.NotSoap as e:
        return web.Response(status=400, text=f"{e}\n")
    except soap.SoapFault as e:
        fault_action = ns.WSA_FAULT_ACTION
        body = soap.fault_envelope(e.version, None, e.code, e.reason, fault_action)
        status = soap.http_status_for(e.version, e.code)
        return _soap_response(e.version, body, status, fault_action)
    request[OP_KEY] = "unresolved"  # gateway.status.timed: metric label (a bounded set)
    try:
        op = broker.resolve(request.path, req)
        request[OP_KEY] = op.name
        if op.manage and not _authorized(cfg, request.headers.get("Authorization")):
            return web.Response(
                status=401,
                text=f"{op.name} is a management operation: credentials required\n",
                headers={"WWW-Authenticate": _challenge(cfg)},
            )
        action, children = await op.handler(req)
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


def create_app(broker: NotificationBroker, demand: DemandManager | None = None) -> web.Application:
    # aiohttp enforces client_max_size while reading; keep a margin so our own check
    # (with the clearer message) runs first for declared lengths.
    app = web.Application(
        client_max_size=broker.cfg.max_request_bytes, middlewares=[status.timed]
    )
    app[BROKER_KEY] = broker
    app.router.add_post("/wsn/broker", handle)
    app.router.add_post(r"/wsn/{kind:subscriptions|pullpoints|registrations}/{rid}", handle)
    app.router.add_get("/wsn/broker", not_allowed)
    # operator endpoints: GET only, routed apart from the SOAP handler (gateway.status)
    cfg = broker.cfg
    status.setup(app, broker, demand, lambda h: _authorized(cfg, h), _challenge(cfg))
    return app


@dataclass
class Running:
    broker: NotificationBroker
    runner: web.AppRunner
    port: int
    demand: DemandManager | None = None

    @property
    def url(self) -> str:
        return f"{self.broker.base_url}/wsn/broker"

    async def stop(self) -> None:
        if self.demand is not None:
            await self.demand.stop()
        await self.runner.cleanup()
        await self.broker.stop()


async def start(cfg: Config, broker: NotificationBroker | None = None) -> Running:
    """Start broker + HTTP server; `cfg.port == 0` picks a free port (see Running.port)."""
    broker = broker or NotificationBroker(cfg)
    # Bind first (to learn the port for EPR addresses), load state, then serve: no
    # request ever sees a half-loaded broker.
    family = socket.AF_INET6 if ":" in cfg.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((cfg.host, cfg.port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    port = int(sock.getsockname()[1])
    broker.set_listening(cfg.host, port)
    demand = DemandManager(broker)  # observes the registrations broker.start() reloads
    broker.add_observer(oplog.RegistrationLog())  # operator log lines (gateway.oplog)
    try:
        await broker.start()
    except BaseException:
        sock.close()
        raise
    runner = web.AppRunner(create_app(broker, demand), access_log=None, handle_signals=False)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    await demand.start()  # after serving: a publisher may push as soon as it is subscribed
    return Running(broker, runner, port, demand)
