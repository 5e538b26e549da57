"""Where the gateway is put together and run: every part is built here and handed in
(`build`), and the aiohttp application owns their lifecycle (`create_app`), nested with
aiohttp's `cleanup_ctx`, so that they stop in the reverse order they started, by
construction:

    1. storage                 open (schema, migration)            ... closed
    2. delivery                its HTTP client                     ... workers stopped,
                                                                       acknowledgements flushed
    3. landing writers         what a crash left is published      ... the open file published
    4. state and sweeper       restored from storage, queues       ... sweeper stopped,
                               refilled, expiry sweeps start           long polls answered
    5. demand-based publishing its workers start                   ... stopped, remote
                                                                       subscriptions stored
    6. dedupe                  (nothing)                           ... the accepts of cancelled
                                                                       handlers commit or fail
    7. ONVIF cameras           each camera's cycle starts          ... stopped, each camera
       (--onvif-camera)        (gateway.cameras)                       unsubscribed

`start(cfg)` binds the socket first (the port fixes the EPR addresses; it listens, so a
client that connects early waits in the backlog), runs the steps, then serves; the
`Running` it returns stops the server, then the steps in reverse. The one entry for
`wsn-gateway` (gateway.cli), the tests and embedding.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from aiohttp import web

from gateway import cameras, http, http_limits, landing, loops, manager, status, topics, upkeep
from gateway.config import Config
from gateway.consumer_policy import ConsumerAddress, ConsumerPolicy
from gateway.context import Context, Landing
from gateway.dedupe import Dedupe
from gateway.delivery import DeliveryManager
from gateway.demand import DemandManager
from gateway.followers import DeliveryQueues, Publishers, PullCounts, QuotaAccount
from gateway.landing_parquet import ParquetLandingWriter  # imports pyarrow only when used
from gateway.landing_record import RecordBuilder
from gateway.longpoll import LongPolls
from gateway.metrics import Metrics, QuotaCollector
from gateway.onvif import CameraConfig, Cameras, webhook
from gateway.oplog import OperatorLog
from gateway.quotas import for_config as quotas_for
from gateway.render import Renderer
from gateway.state import BrokerState, Observer
from gateway.storage import Storage
from gateway.topics.xpath_budget import XPathBudget
from gateway.wire.xmlutil import Clock, utcnow

log = logging.getLogger("gateway.app")


@dataclass(frozen=True)
class Gateway:
    """The parts of one gateway, built and wired (`build`)."""

    ctx: Context
    demand: DemandManager
    #: the ONVIF cameras to subscribe to (--onvif-camera, --onvif-config)
    cameras: list[CameraConfig] = field(default_factory=list)


def build(cfg: Config, clock: Clock = utcnow) -> Gateway:
    """Build and wire the parts of a gateway from its configuration: the consumer address
    policy (raises consumer_policy.PolicyError, a clear message, for an unreadable rule),
    this process's loop id (edge:Via), Storage (SQLite under --data-dir), metrics, delivery,
    the landing writers of --landing-format, the Topic Set (--topic-namespace files; raises
    for an unreadable one) and the state, whose followers are added here in the order they
    hear each event."""
    policy = ConsumerPolicy.from_texts(cfg.consumer_allow, cfg.allow_loopback)
    cams = cameras.configured(cfg)  # a ValueError names the camera and the field
    loop_id = loops.new_loop_id()  # per process
    storage = Storage(
        cfg.data_dir / "broker.sqlite3",
        cfg.sqlite_synchronous,
        cfg.sqlite_busy_timeout_ms,
        seen_keep=cfg.notify_dedupe_ids,
        seen_max_age=cfg.notify_dedupe_age,
    )
    metrics = Metrics()  # gateway.metrics: event counters; state is read at scrape
    storage.on_commit = metrics.observe_commit
    delivery = DeliveryManager(
        storage,
        timeout=cfg.delivery_timeout,
        batch=cfg.delivery_batch,
        linger_max=cfg.delivery_linger_max,
        max_answer_bytes=cfg.max_consumer_answer_bytes,
        max_connections=cfg.max_delivery_connections,
        max_per_consumer=cfg.max_consumer_connections,
        backoff_initial=cfg.backoff_initial,
        backoff_max=cfg.backoff_max,
        dead_after=cfg.consumer_dead_after,
        max_backlog=cfg.max_backlog,
        metrics=metrics,
        policy=policy,
        loop_id=loop_id,
    )
    jsonl: landing.LandingWriter | None = None
    parquet: ParquetLandingWriter | None = None
    if cfg.landing_enabled and cfg.landing_format in ("jsonl", "both"):
        jsonl = landing.LandingWriter(
            cfg.data_dir / "landing", storage, cfg.landing_max_bytes, cfg.landing_max_age
        )
    if cfg.landing_enabled and cfg.landing_format in ("parquet", "both"):
        # raises a RuntimeError naming the remedy when pyarrow is not installed
        parquet = ParquetLandingWriter(
            cfg.data_dir / "landing", storage, cfg.landing_max_bytes, cfg.landing_max_age
        )
    # landing lines: built off the event loop when big (landing_record docstring)
    records = RecordBuilder(cfg.gateway_id)
    ts = topics.TopicSet(fixed=cfg.fixed_topic_set)
    for f in cfg.topic_namespace_files:
        ts.add_namespace(topics.load_topic_namespace(f.read_bytes()))
    # XPath not proven linear is evaluated in a worker process (gateway/topics/xpath_budget.py)
    xpath = XPathBudget(cfg.filter_timeout, cfg.filter_max_memory_mb)
    state = BrokerState(ts, clock, xpath)
    quotas = quotas_for(cfg)  # the quotas with names
    quotas.on_refused = lambda kind, scope: metrics.quota_refusals.labels(kind, scope).inc()
    metrics.registry.register(QuotaCollector(quotas))  # what they hold, at scrape
    render = Renderer(
        cfg.public_url or f"http://{cfg.host}:{cfg.port}",
        cfg.requires_registration,
        lambda: len(state.subscriptions),
    )
    ctx = Context(
        cfg=cfg,
        state=state,
        storage=storage,
        delivery=delivery,
        render=render,
        counts=metrics.counts,
        metrics=metrics,
        dedupe=Dedupe(storage, metrics.counts, enabled=cfg.notify_dedupe_ids > 0),
        polls=LongPolls(),
        landing=Landing(jsonl, parquet, records),
        policy=policy,
        loop_id=loop_id,
        clock=clock,
        xpath=xpath,
        quotas=quotas,
    )
    delivery.on_dead = functools.partial(manager.consumer_dead, ctx)
    demand = DemandManager(state, storage, render, policy, cfg)
    followers: list[Observer] = [
        DeliveryQueues(delivery),  # a queue per push subscription
        ctx.polls,  # GetMessages long polls woken
        Publishers(records),  # the landing lines' device ids
        OperatorLog(),  # the lifecycle log lines (gateway.oplog)
        QuotaAccount(quotas),  # what ends gives its quota back
        PullCounts(metrics.counts),  # a pull-point subscription's deliveries, forgotten
        Publishers(demand),  # demand-based publishing
    ]
    for follower in followers:
        state.observe(follower)
    return Gateway(ctx, demand, cams)


def listening(ctx: Context, host: str, port: int) -> None:
    """The broker listens on (host, port): that fixes the EPR addresses (unless
    --public-url) and the names by which a consumer address is this broker itself."""
    render = ctx.render
    if not ctx.cfg.public_url:
        h = f"[{host}]" if ":" in host else host
        render.base_url = f"http://{h}:{port}"
    pub = ConsumerAddress.parse(render.base_url)
    names = [(host, port), ("localhost", port)]
    if not isinstance(pub, str):
        names.append((pub.host, pub.port))
    ctx.policy.set_self(port, names)


def create_app(gw: Gateway) -> web.Application:
    """The aiohttp application: gateway.http's routes and the lifecycle steps of the
    module docstring as its cleanup_ctx."""
    ctx, demand = gw.ctx, gw.demand
    # aiohttp enforces client_max_size while reading; our own check (with the clearer
    # message) runs first for declared lengths (gateway.http)
    app = web.Application(client_max_size=ctx.cfg.max_request_bytes)
    http.setup(app, ctx, demand)
    # the cameras' sources are made once the broker's address is fixed (their Notify
    # endpoint is under it); the endpoint and the status find them here
    running_cams = app[CAMERAS_KEY] = Cameras([])
    collector = cameras.CameraCollector()
    if gw.cameras:
        app.add_routes(
            webhook.routes(
                lambda cid: app[CAMERAS_KEY].get(cid),
                ctx.cfg.max_request_bytes,
                cameras.WEBHOOK_PATH,
            )
        )
        ctx.metrics.registry.register(collector)
    app[status.STATUS_KEY].cameras = lambda: app[CAMERAS_KEY].statuses()

    async def storage(_app: web.Application) -> AsyncIterator[None]:
        ctx.storage.open()
        yield
        await ctx.xpath.close()  # its worker processes (they start when first needed)
        ctx.storage.close()

    async def delivery(_app: web.Application) -> AsyncIterator[None]:
        await ctx.delivery.start()
        yield
        await ctx.delivery.stop()

    async def landing_writers(_app: web.Application) -> AsyncIterator[None]:
        jsonl, parquet = ctx.landing.jsonl, ctx.landing.parquet
        if jsonl is not None:
            jsonl.recover()
            jsonl.start()
        if parquet is not None:
            parquet.recover()
            await parquet.start()
        yield
        if jsonl is not None:
            await jsonl.stop()
        if parquet is not None:
            await parquet.stop()
        ctx.landing.records.close()

    async def state(_app: web.Application) -> AsyncIterator[None]:
        await upkeep.restore(ctx)
        sweeper = asyncio.create_task(upkeep.sweeper(ctx), name="expiry-sweeper")
        yield
        sweeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeper
        ctx.polls.wake_all()

    async def demand_publishing(_app: web.Application) -> AsyncIterator[None]:
        await demand.start()
        yield
        await demand.stop()

    async def dedupe(_app: web.Application) -> AsyncIterator[None]:
        yield
        # an accept whose handler was cancelled (the server's shutdown) still commits or
        # fails, and updates the queues and landing writers, before they stop
        await ctx.dedupe.settle()

    async def answer_long_polls(_app: web.Application) -> None:
        # on_shutdown runs once the listeners are closed and before aiohttp waits for the
        # handlers still running: a long poll is answered now (with what its pull point
        # holds), not when its edge:Wait ends
        n = ctx.polls.total()
        ctx.polls.wake_all()
        if n:
            log.info("stopping: %d long poll(s) answered at once", n)
        if running := len(ctx.dedupe.running()):  # why the stop may take a moment
            log.info("stopping: waiting for %d accepted Notify to commit", running)

    app.on_shutdown.append(answer_long_polls)

    async def onvif_cameras(_app: web.Application) -> AsyncIterator[None]:
        if not gw.cameras:
            yield
            return
        cams = cameras.sources(ctx, gw.cameras)
        running_cams.by_id.update(cams.by_id)
        collector.statuses = cams.statuses()
        cams.start()
        yield
        await cams.stop()

    app.cleanup_ctx.extend(
        [storage, delivery, landing_writers, state, demand_publishing, dedupe, onvif_cameras]
    )
    return app


CAMERAS_KEY = web.AppKey("cameras", Cameras)


@dataclass
class Running:
    """A started gateway: its parts (`ctx`, `demand`), its runner and port."""

    ctx: Context
    demand: DemandManager
    runner: web.AppRunner
    port: int
    _stopped: bool = field(default=False, repr=False)

    @property
    def url(self) -> str:
        """The NotificationBroker's address."""
        return self.ctx.render.broker_url

    @property
    def state(self) -> BrokerState:
        return self.ctx.state

    async def stop(self) -> None:
        """Stop serving, then the lifecycle steps in reverse. A second call does nothing."""
        if self._stopped:
            return
        self._stopped = True
        await self.runner.cleanup()


def _bind(cfg: Config) -> socket.socket:
    family = socket.AF_INET6 if ":" in cfg.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((cfg.host, cfg.port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


async def start(cfg: Config, *, clock: Clock = utcnow) -> Running:
    """Build, start and serve a gateway (module docstring); `cfg.port == 0` picks a free
    port (Running.port). `clock`: the broker's time (tests inject one)."""
    gw = build(cfg, clock)
    sock = _bind(cfg)
    port = int(sock.getsockname()[1])
    listening(gw.ctx, cfg.host, port)
    app = create_app(gw)
    limits = app[http.LIMITS_KEY]
    runner = web.AppRunner(
        app, access_log=None, handle_signals=False, **http_limits.runner_kwargs(limits)
    )
    try:
        await runner.setup()  # the lifecycle steps start
    except BaseException:
        sock.close()
        # aiohttp runs no cleanup when startup fails: stop the steps that started
        app.on_cleanup.freeze()
        with contextlib.suppress(Exception):
            await app.cleanup()
        raise
    await http.GuardedSite(runner, sock, limits).start()
    return Running(gw.ctx, gw.demand, runner, port)
