"""Where the gateway is put together: the parts the broker works with (Storage, delivery,
the landing writers, metrics) are built here and handed in, and the aiohttp application's
startup and cleanup hooks start and stop them with the broker and demand-based publishing.

Order (a request never sees a half-loaded broker): bind the socket (the port fixes the EPR
addresses), `runner.setup()` runs the startup hook (storage opened and loaded, queues and
landing writers recovered), then serve, then demand-based publishing starts (a publisher may
push as soon as it is subscribed). Stop: demand-based publishing, then the server, then the
cleanup hook (broker, delivery, landing writers, storage).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from aiohttp import web

from gateway import http, http_limits, landing, loops, oplog
from gateway.broker import NotificationBroker
from gateway.config import Config
from gateway.consumer_policy import ConsumerPolicy
from gateway.delivery import DeliveryManager
from gateway.demand import DemandManager
from gateway.landing_parquet import ParquetLandingWriter  # imports pyarrow only when used
from gateway.landing_record import RecordBuilder
from gateway.metrics import Metrics
from gateway.storage import Storage
from gateway.topics.xpath_budget import XPathBudget


@dataclass
class Parts:
    """What the broker works with, built from the configuration."""

    consumer_policy: ConsumerPolicy
    loop_id: str
    storage: Storage
    metrics: Metrics
    delivery: DeliveryManager
    landing: landing.LandingWriter | None
    landing_parquet: ParquetLandingWriter | None
    records: RecordBuilder
    #: evaluates XPath not proven linear in a worker process (gateway/topics/xpath_budget.py)
    xpath_budget: XPathBudget


def build_parts(cfg: Config) -> Parts:
    """The consumer address policy (raises consumer_policy.PolicyError, a clear message, for
    an unreadable rule), this process's loop id (edge:Via, loops.py), Storage (SQLite under
    --data-dir), metrics, the delivery manager and the landing writers of --landing-format.
    The delivery manager's `on_dead` is the broker's to set."""
    policy = ConsumerPolicy.from_texts(cfg.consumer_allow, cfg.allow_loopback)
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
    budget = XPathBudget(cfg.filter_timeout, cfg.filter_max_memory_mb)
    return Parts(policy, loop_id, storage, metrics, delivery, jsonl, parquet, records, budget)


def create_app(broker: NotificationBroker, demand: DemandManager | None = None) -> web.Application:
    """The aiohttp application (gateway.http's routes) with the broker's startup and
    cleanup as its hooks."""
    app = http.create_app(broker, demand)

    async def startup(_app: web.Application) -> None:
        await broker.start()

    async def cleanup(_app: web.Application) -> None:
        await broker.stop()
        await broker.xpath.close()

    app.on_startup.append(startup)
    app.on_cleanup.append(cleanup)
    return app


async def start(cfg: Config, broker: NotificationBroker | None = None) -> http.Running:
    """Start broker + HTTP server; `cfg.port == 0` picks a free port (see Running.port)."""
    broker = broker or NotificationBroker(cfg, parts=build_parts(cfg))
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
    app = create_app(broker, demand)
    limits = app[http.LIMITS_KEY]
    runner = web.AppRunner(
        app, access_log=None, handle_signals=False, **http_limits.runner_kwargs(limits)
    )
    try:
        await runner.setup()  # the startup hook: the broker loads its state
    except BaseException:
        sock.close()
        raise
    await http.GuardedSite(runner, sock, limits).start()
    await demand.start()  # after serving: a publisher may push as soon as it is subscribed
    return http.Running(broker, runner, port, demand)
