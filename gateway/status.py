"""What an operator sees: `GET /status` (HTML), `/status.json`, `/metrics` (Prometheus),
`/healthz` and `/readyz`.

These are plain GET routes, apart from the SOAP POST handler of gateway.http. What they
show is read from the gateway's context (gateway.context) through a few explicit accessors
(the state's subscription, pull-point and registration tables, `DeliveryManager.state`,
`DemandManager.status`, the landing writers, `Storage.landing_lag`, the counts), never by
touching the hot path: a page load costs one small SQLite read (the landing lag) and a walk
over the tables.

Access (docs/gateway.md "Operating the gateway"): with credentials configured
(`--auth-token`, `--auth-user/--auth-password`) /status, /status.json and /metrics need
them; without credentials they are served to loopback clients only, unless
`--status-public`. /healthz and /readyz are always open: they say nothing but "alive" and
"ready" (or what is not ready), which a load balancer or an orchestrator must see.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from importlib import metadata
from typing import Any

import aiohttp_jinja2
import jinja2
from aiohttp import web

from gateway import topics
from gateway.context import Context
from gateway.demand import DemandManager
from gateway.metrics import StateCollector, StateSample
from gateway.onvif.model import CameraStatus
from gateway.oplog import RefusalLog
from gateway.publishers import Registration
from gateway.status_feeds import Rates, RecentErrors, iso
from gateway.storage import StorageError
from gateway.subscriptions import Subscription

Authorizer = Callable[[str | None], bool]

_DIALECTS = {
    topics.SIMPLE: "Simple",
    topics.CONCRETE: "Concrete",
    topics.FULL: "Full",
    topics.XPATH: "XPath",
}


def _version() -> str:
    try:
        return metadata.version("wsn-edge")
    except metadata.PackageNotFoundError:
        return "unknown"


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    return False


def _last_seen(regs: Iterable[Registration]) -> list[tuple[str, float]]:
    """(device id, epoch s) of each registered device's latest Notify, one per device."""
    out: dict[str, float] = {}
    for r in regs:
        if r.device_id and r.last_seen is not None:
            out[r.device_id] = max(out.get(r.device_id, 0.0), r.last_seen.timestamp())
    return sorted(out.items())


class StatusView:
    """The operator endpoints of one gateway."""

    def __init__(
        self,
        ctx: Context,
        demand: DemandManager | None,
        authorized: Authorizer,
        challenge: str,
        refusals: RefusalLog | None = None,
    ) -> None:
        self.ctx = ctx
        self.demand = demand
        self.authorized = authorized
        self.challenge = challenge
        self.refusals = refusals or RefusalLog()
        self.started = time.time()
        self.version = _version()
        #: the ONVIF cameras' statuses (gateway.app sets it; gateway.cameras)
        self.cameras: Callable[[], list[CameraStatus]] = list
        self._sample = StateSample()
        ctx.metrics.registry.register(StateCollector(lambda: self._sample))
        self.errors = RecentErrors()
        self._rates = Rates()
        self._rates.rates(time.monotonic(), self._counters())  # from the start

    def _counters(self) -> dict[str, float]:
        m = self.ctx.metrics
        delivered = sum(
            s.value
            for fam in m.deliveries.collect()
            for s in fam.samples
            if s.name.endswith("_total") and s.labels.get("outcome") == "ok"
        )
        into_pp = sum(self.ctx.counts.into_pullpoints.values())
        return {"accepted": float(self.ctx.counts.accepted), "delivered": delivered + into_pp}

    def _free_bytes(self) -> int:
        try:
            return shutil.disk_usage(self.ctx.cfg.data_dir).free
        except OSError:
            return 0

    # ------------------------------------------------------------------ access
    def _refuse(self, request: web.Request) -> web.Response | None:
        cfg = self.ctx.cfg
        if cfg.auth_enabled:
            if self.authorized(request.headers.get("Authorization")):
                return None
            self.refusals.refused(request.remote, request.path)
            return web.Response(
                status=401,
                text=f"{request.path} needs the gateway's credentials "
                "(Authorization: Bearer <--auth-token>, or HTTP Basic)\n",
                headers={"WWW-Authenticate": self.challenge},
            )
        if cfg.status_public or _is_loopback(request.remote):
            return None
        return web.Response(
            status=403,
            text=f"{request.path} is served to loopback clients only; start the gateway with "
            "--auth-token (then send it) or --status-public\n",
        )

    # ------------------------------------------------------------------ the snapshot
    async def snapshot(self) -> dict[str, Any]:
        """Everything /status shows, JSON-ready (documented in docs/gateway.md)."""
        ctx = self.ctx
        state = ctx.state
        now = ctx.clock()
        landing = await self._landing()
        by_age = sorted(state.subscriptions.values(), key=lambda s: s.created)
        subs = [self._subscription(s) for s in by_age]
        pps = [
            {
                "id": pp.id,
                "address": ctx.render.url("pullpoints", pp.id),
                "depth": pp.queued,
                "dropped": pp.dropped,
                "waiting_clients": ctx.polls.waiting(pp.id),
                "created": iso(pp.created),
                "subscriptions": sorted(state.feeding(pp.id)),
            }
            for pp in sorted(state.pullpoints.values(), key=lambda p: p.created)
        ]
        return {
            "gateway": {
                "gateway_id": ctx.cfg.gateway_id,
                "version": self.version,
                "broker": ctx.render.broker_url,
                "started": iso(self.started),
                "uptime_s": round(time.time() - self.started, 1),
                "now": iso(now),
                "storage_bytes": self._storage_bytes(),
                "free_disk_bytes": self._free_bytes(),
                "accepted": ctx.counts.accepted,
                # per second over about the last minute (delivered: push 2xx + pull points)
                "rates": self._rates.rates(time.monotonic(), self._counters()),
                "topics": len(list(state.ts.topics())),
            },
            "registrations": [
                self._registration(r)
                for r in sorted(state.registrations.values(), key=lambda r: r.created)
            ],
            "subscriptions": subs,
            "pullpoints": pps,
            "cameras": [c.as_dict() for c in self.cameras()],
            "landing": landing,
            "recent_errors": list(reversed(self.errors.lines)),  # newest first
        }

    def _subscription(self, s: Subscription) -> dict[str, Any]:
        ctx = self.ctx
        if s.pullpoint is None:
            st = ctx.delivery.state(s.id)
            err = ctx.delivery.last_error(s.id)
        else:  # into its pull point: counted as committed (gateway.notify.apply)
            st = {
                "delivered": ctx.counts.into_pullpoints.get(s.id, 0),
                "last_delivery": ctx.counts.into_pullpoints_last.get(s.id),
            }
            err = None
        expr = s.topic_exprs[0] if s.topic_exprs else None
        return {
            "id": s.id,
            "address": self.ctx.render.url("subscriptions", s.id),
            "consumer": s.consumer.address,
            "pullpoint": s.pullpoint,
            "dialect": _DIALECTS.get(expr.dialect, expr.dialect) if expr else None,
            "expression": expr.text if expr else None,
            "message_content": len(s.content),
            "raw": s.raw,
            "paused": s.paused,
            "backlog": st.get("backlog", 0),
            "delivered": st.get("delivered", 0),
            "dropped": st.get("dropped", 0),
            "failures": st.get("failures", 0),
            "failing": st.get("failing", 0),
            "last_delivery": iso(st.get("last_delivery")),
            "last_error": err[0] if err else None,
            "last_error_at": iso(err[1]) if err else None,
            "created": iso(s.created),
            "expires": iso(s.termination),
        }

    def _registration(self, r: Registration) -> dict[str, Any]:
        address = r.publisher.address if r.publisher else None
        managed = self.demand.status() if self.demand is not None else []
        remote = [e for e in managed if e["registration"] == r.id]
        if not r.demand:
            state = "pushing"  # a publisher without Demand pushes whenever it likes
        elif not remote or all(e["paused"] is None for e in remote):
            state = "not subscribed"
        elif any(e["paused"] is False for e in remote):
            state = "pushing"
        else:
            state = "paused"
        return {
            "id": r.id,
            "device_id": r.device_id,
            "producer": r.publisher.address if r.publisher else None,
            "topics": [str(t) for t in sorted(r.named_topics, key=str)]
            or [text for _d, text, _n in r.topic_specs],
            # the same as text with the prefix the publisher wrote (else the conventional
            # one: dev: for the device hierarchy; gateway/topics/prefixes.py)
            "topic_texts": [
                topics.topic_text(t, self.ctx.render.prefixes.choose(t, address))
                for t in sorted(r.named_topics, key=str)
            ]
            or [text for _d, text, _n in r.topic_specs],
            "demand": r.demand,
            "state": state,
            "topic_states": [
                {"topic": e["topic"], "paused": e["paused"], "failures": e["failures"]}
                for e in remote
            ],
            "last_seen": iso(r.last_seen),
            "created": iso(r.created),
            "expires": iso(r.termination),
        }

    def _storage_bytes(self) -> int:
        p = self.ctx.storage.path
        total = 0
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                total += os.stat(f"{p}{suffix}").st_size
        return total

    async def _landing(self) -> dict[str, Any]:
        ctx = self.ctx
        out: dict[str, Any] = {
            "enabled": ctx.cfg.landing_enabled,
            "format": ctx.cfg.landing_format,
            "directory": str(ctx.cfg.data_dir / "landing"),
            "current_file": None,
            "current_bytes": 0,
            "files": 0,
            "bytes": 0,
            "lag_rows": 0,
            "lag_s": 0.0,
        }
        w = ctx.landing.jsonl
        if w is not None:
            if (current := w.open_file) is not None:
                out["current_file"], out["current_bytes"] = current
            out["lines_written"] = w.lines_written
            with contextlib.suppress(StorageError):
                rows, oldest = await ctx.storage.landing_lag()
                out["lag_rows"] = rows
                if oldest is not None:
                    with contextlib.suppress(ValueError, KeyError, TypeError):
                        got = datetime.fromisoformat(json.loads(oldest)["received_at"])
                        out["lag_s"] = round(max(0.0, (ctx.clock() - got).total_seconds()), 3)
        if ctx.landing.parquet is not None:
            with contextlib.suppress(StorageError):
                rows, _bytes, _seq = await ctx.storage.parquet_outbox_stats()
                out["parquet_pending_rows"] = rows
        with contextlib.suppress(OSError):
            for e in os.scandir(out["directory"]):
                if e.name.startswith("landing-") and e.is_file():
                    out["files"] += 1
                    out["bytes"] += e.stat().st_size
        return out

    # ------------------------------------------------------------------ handlers
    async def status_html(self, request: web.Request) -> web.StreamResponse:
        refused = self._refuse(request)
        if refused is not None:
            return refused
        snap = await self.snapshot()
        try:
            refresh = max(1, min(3600, int(request.query.get("refresh", "5"))))
        except ValueError:
            refresh = 5
        resp = aiohttp_jinja2.render_template(
            "status.html", request, {"s": snap, "refresh": refresh}
        )
        resp.headers["Cache-Control"] = "no-store"
        return resp

    async def status_json(self, request: web.Request) -> web.StreamResponse:
        refused = self._refuse(request)
        if refused is not None:
            return refused
        return web.json_response(await self.snapshot(), dumps=lambda o: json.dumps(o, indent=1))

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        refused = self._refuse(request)
        if refused is not None:
            return refused
        self._sample = await self._state_sample()
        return web.Response(
            body=self.ctx.metrics.exposition(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    async def _state_sample(self) -> StateSample:
        ctx = self.ctx
        subs, counts = ctx.state.subscriptions, ctx.counts
        backlogs = [ctx.delivery.backlog(sid) for sid, s in subs.items() if s.pullpoint is None]
        lag_rows, lag_s = 0, 0.0
        if ctx.landing.jsonl is not None:
            land = await self._landing()
            lag_rows, lag_s = land["lag_rows"], land["lag_s"]
        return StateSample(
            accepted=counts.accepted,
            inadmissible=sum(counts.inadmissible.values()),
            duplicates=counts.duplicates,
            subscriptions_active=sum(1 for s in subs.values() if not s.paused),
            subscriptions_paused=sum(1 for s in subs.values() if s.paused),
            backlog_total=sum(backlogs),
            backlog_max=max(backlogs, default=0),
            pullpoints=len(ctx.state.pullpoints),
            pullpoint_messages=sum(p.queued for p in ctx.state.pullpoints.values()),
            registrations=len(ctx.state.registrations),
            landing_lag_rows=lag_rows,
            landing_lag_seconds=lag_s,
            uptime_seconds=time.time() - self.started,
            data_dir_free_bytes=self._free_bytes(),
            devices_last_seen=_last_seen(ctx.state.registrations.values()),
        )

    async def healthz(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok\n")

    async def readyz(self, request: web.Request) -> web.StreamResponse:
        """Ready = storage answers a transaction, the landing directory is writable and the
        landing writers are not failing."""
        problems: list[str] = []
        ctx = self.ctx
        try:
            await ctx.storage.ping()
        except StorageError as e:
            problems.append(f"storage: {e}")
        if ctx.cfg.landing_enabled:
            d = ctx.cfg.data_dir / "landing"
            if not (d.is_dir() and os.access(d, os.W_OK | os.X_OK)):
                problems.append(f"landing: directory {d} is not writable")
            for w in (ctx.landing.jsonl, ctx.landing.parquet):  # failing now (disk full)
                if w is not None and w.problem:
                    problems.append(f"landing: {w.problem}")
        if problems:
            return web.Response(status=503, text="not ready: " + "; ".join(problems) + "\n")
        return web.Response(text="ready\n")


STATUS_KEY = web.AppKey("status", StatusView)
#: set by gateway.http.handle for `observe`: the operation (a name from gateway.dispatch's
#: fixed table, so label values stay bounded) and the fault a request was refused with, or,
#: without an operation, the reason (gateway.metrics.REQUEST_REJECT_REASONS)
OP_KEY = web.RequestKey("wsn_op", str)
REJECTED_KEY = web.RequestKey("wsn_rejected", str)


def observe(request: web.Request, seconds: float) -> None:
    """wsn_request_duration_seconds by operation, wsn_notifications_rejected_total and
    wsn_requests_rejected_total (refused before an operation was known) for a SOAP POST
    answered in `seconds`; gateway.http.handle names the operation and the fault or reason
    in the request."""
    view = request.app.get(STATUS_KEY)
    if view is None:
        return
    m = view.ctx.metrics
    op = request.get(OP_KEY, "invalid")
    m.observe_request(op, seconds)
    rejected = request.get(REJECTED_KEY)
    if rejected and OP_KEY not in request:  # refused before it had an operation
        m.request_rejected(rejected)
    elif op == "Notify" and rejected:
        m.rejected.labels(rejected).inc()


def setup(
    app: web.Application,
    ctx: Context,
    demand: DemandManager | None,
    authorized: Authorizer,
    challenge: str,
    refusals: RefusalLog | None = None,
) -> StatusView:
    """Add the operator routes (GET only) and the template environment to `app`."""
    view = StatusView(ctx, demand, authorized, challenge, refusals)
    app[STATUS_KEY] = view
    aiohttp_jinja2.setup(
        app,
        loader=jinja2.PackageLoader("gateway", "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
        undefined=jinja2.StrictUndefined,
    )
    app.router.add_get("/status", view.status_html)
    app.router.add_get("/status.json", view.status_json)
    app.router.add_get("/metrics", view.metrics)
    app.router.add_get("/healthz", view.healthz)
    app.router.add_get("/readyz", view.readyz)

    async def attach(_app: web.Application) -> None:
        view.errors.attach()

    async def detach(_app: web.Application) -> None:
        view.errors.detach()

    # signals, not a lifecycle step (gateway.app's cleanup_ctx): nothing depends on it
    app.on_startup.append(attach)
    app.on_cleanup.append(detach)
    return view
