"""`wsn-gateway` command line: parse options into a Config, run until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from gateway import oplog
from gateway.config import Config
from gateway.consumer_policy import PolicyError, parse_rule
from gateway.wire.xmlutil import parse_duration


def _duration(text: str) -> timedelta | None:
    """xsd:duration (PT30S), plain seconds (30), or 'none' for no limit/default."""
    t = text.strip()
    if t.lower() in ("none", "inf", "infinite"):
        return None
    try:
        return timedelta(seconds=float(t))
    except ValueError:
        pass
    try:
        return parse_duration(t)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _seconds(text: str) -> float:
    d = _duration(text)
    if d is None:
        raise argparse.ArgumentTypeError("a duration is required here")
    return d.total_seconds()


def _consumer_rule(text: str) -> str:
    try:
        parse_rule(text)
    except PolicyError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


#: the limits group, as data: (flag, type, default, help); flags with a metavar in _METAVARS
_LIMITS: list[tuple[str, Callable[[str], object], object, str | None]] = [
    ("--max-request-bytes", int, 1024 * 1024, None),
    ("--max-subscriptions", int, 10_000, "subscriptions in all (10000)"),
    ("--max-client-subscriptions", int, 1_000, "subscriptions made from one client address (1000)"),
    ("--max-pullpoints", int, 1_000, "pull points in all (1000)"),
    ("--max-client-pullpoints", int, 100, "pull points made from one client address (100)"),
    (
        "--pullpoint-max-bytes",
        int,
        16 * 1024 * 1024,
        "bytes of messages per pull point; the oldest are dropped beyond (16 MiB)",
    ),
    (
        "--max-pullpoint-bytes",
        int,
        512 * 1024 * 1024,
        "bytes of messages in all pull points; beyond, the oldest of the pull point "
        "added to are dropped (512 MiB)",
    ),
    (
        "--max-client-pullpoint-bytes",
        int,
        128 * 1024 * 1024,
        "bytes of messages in the pull points made from one client address; beyond, "
        "the oldest of the pull point added to are dropped (128 MiB)",
    ),
    ("--max-topics", int, 10_000, "topics a Notify may add to the Topic Set, in all (10000)"),
    ("--max-client-topics", int, 1_000, "topics the Notify of one client address may add (1000)"),
    (
        "--max-getmessages",
        int,
        1_000,
        "messages one GetMessages answers at most, MaximumNumber or not (1000)",
    ),
    (
        "--max-getmessages-bytes",
        int,
        4 * 1024 * 1024,
        "bytes one GetMessages answers at most, past its first message (4 MiB)",
    ),
    (
        "--pullpoint-idle-expiry",
        _seconds,
        86_400.0,
        "a pull point nobody has read for this long is destroyed; 0: never (86400 s)",
    ),
    (
        "--quota-log-interval",
        _seconds,
        60.0,
        "a refusal at a quota is logged at most once per client and kind per interval",
    ),
    ("--max-registrations", int, 10_000, None),
    ("--pullpoint-max-messages", int, 10_000, "per pull point; the oldest are dropped beyond"),
    (
        "--max-backlog",
        int,
        1_000,
        "undelivered messages per subscription; the oldest are dropped beyond",
    ),
    (
        "--default-termination",
        _duration,
        timedelta(hours=1),
        "subscription lifetime when Subscribe gives none (default PT1H; 'none' = no expiry)",
    ),
    (
        "--max-termination",
        _duration,
        timedelta(days=1),
        "longest lifetime granted (default P1D; 'none' = unlimited, nil accepted)",
    ),
    ("--min-termination", _duration, timedelta(seconds=1), None),
    ("--registration-default-termination", _duration, timedelta(hours=1), None),
    ("--max-wait", _seconds, 60.0, "cap of edge:Wait long polls"),
    (
        "--request-timeout",
        _seconds,
        10.0,
        "a request's head and its body must each arrive within this (default 10 s; 408)",
    ),
    (
        "--max-connections",
        int,
        512,
        "concurrent client connections; more get 503 (default 512, lowered to fit the "
        "open-file limit)",
    ),
    (
        "--max-client-connections",
        int,
        128,
        "concurrent connections from one client address; more get 503 (default 128)",
    ),
    (
        "--max-consumer-answer-bytes",
        int,
        64 * 1024,
        "the most of a consumer's answer body read to a delivery (discarded); beyond "
        "it the connection is closed (default 65536)",
    ),
    (
        "--filter-timeout",
        _seconds,
        0.25,
        "the longest one evaluation of an XPath filter or topic expression that is not "
        "proven linear may take (in a worker process); past it: no match (default 0.25 s)",
    ),
    (
        "--filter-max-memory",
        int,
        512,
        "address space of that worker process (default 512 MiB); past it: no match",
    ),
    (
        "--max-delivery-connections",
        int,
        256,
        "outgoing connections to consumers in all; beyond, a delivery waits for one (default 256)",
    ),
    (
        "--max-consumer-connections",
        int,
        8,
        "outgoing connections to one consumer host:port (default 8)",
    ),
]
_METAVARS = {"--filter-max-memory": "MIB"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="wsn-gateway",
        description="WS-Notification broker (WS-BaseNotification/WS-BrokeredNotification 1.3) "
        "with durable state and a JSON-lines landing zone.",
    )
    a = p.add_argument
    a("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    a("--port", type=int, default=8080, help="listen port; 0 picks a free one (default 8080)")
    a("--data-dir", type=Path, default=Path("./var"), help="state and landing zone (default ./var)")
    a("--public-url", help="base URL used in EPRs (default http://HOST:PORT)")
    a(
        "--topic-namespace",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help="load a wstop:TopicNamespace document (repeatable)",
    )
    a(
        "--fixed-topic-set",
        action="store_true",
        help="the loaded namespaces are the whole topic set: no growth (FixedTopicSet=true)",
    )
    a(
        "--requires-registration",
        action="store_true",
        help="Notify only from registered publishers (br:RequiresRegistration=true)",
    )
    g = p.add_argument_group("limits")
    for flag, kind, default, text in _LIMITS:
        g.add_argument(flag, type=kind, default=default, help=text, metavar=_METAVARS.get(flag))
    d = p.add_argument_group("delivery")
    d.add_argument("--delivery-timeout", type=_seconds, default=10.0)
    d.add_argument("--delivery-batch", type=int, default=100)
    d.add_argument(
        "--delivery-linger-max",
        type=_seconds,
        default=0.05,
        help="longest wait for a larger batch while many consumers are busy (0: none)",
    )
    d.add_argument("--backoff-initial", type=_seconds, default=0.5)
    d.add_argument("--backoff-max", type=_seconds, default=60.0)
    d.add_argument(
        "--consumer-dead-after",
        type=_seconds,
        default=3600.0,
        help="continuous failure after which a subscription is ended",
    )
    d.add_argument("--no-raw-delivery", action="store_true", help="refuse wsnt:UseRaw")
    d.add_argument("--no-wrapped-delivery", action="store_true", help="require wsnt:UseRaw")
    d.add_argument(
        "--allow-consumer",
        action="append",
        default=[],
        type=_consumer_rule,
        metavar="RULE",
        help="also allow consumers at [http(s)://]HOST[:PORT], HOST an address, a CIDR range "
        "(10.0.0.0/24), a name or *.suffix (repeatable; docs/gateway.md Security)",
    )
    d.add_argument(
        "--no-loopback-consumers",
        action="store_true",
        help="do not allow loopback consumers by default",
    )
    s = p.add_argument_group("credentials (management operations)")
    s.add_argument("--auth-user")
    s.add_argument("--auth-password", help="or env WSN_GATEWAY_PASSWORD")
    s.add_argument("--auth-token", help="bearer token, or env WSN_GATEWAY_TOKEN")
    s.add_argument(
        "--status-public",
        action="store_true",
        help="without credentials, serve /status, /status.json and /metrics to any client "
        "(default: loopback clients only)",
    )
    st = p.add_argument_group("storage and landing zone")
    st.add_argument("--sqlite-synchronous", choices=["FULL", "NORMAL", "EXTRA"], default="FULL")
    st.add_argument("--sqlite-busy-timeout-ms", type=int, default=5000)
    st.add_argument(
        "--notify-dedupe-ids",
        type=int,
        default=100_000,
        help="remember the wsa:MessageID of this many accepted Notify: one sent again is "
        "answered, not published twice (0 = off; docs/gateway.md)",
    )
    st.add_argument(
        "--notify-dedupe-age",
        type=_seconds,
        default=86_400.0,
        help="and forget each after this long (default P1D)",
    )
    st.add_argument("--landing-max-bytes", type=int, default=64 * 1024 * 1024)
    st.add_argument("--landing-max-age", type=_seconds, default=60.0)
    st.add_argument("--no-landing", action="store_true", help="do not write the landing zone")
    st.add_argument(
        "--landing-format",
        choices=["jsonl", "parquet", "both"],
        default="jsonl",
        help="landing files as JSON lines (default), Parquet (needs pyarrow) or both",
    )
    st.add_argument(
        "--gateway-id",
        default=None,
        help="this gateway's name in every landing line and its status (default: host name)",
    )
    cam = p.add_argument_group('ONVIF cameras (docs/gateway.md "Cameras"; needs the onvif extra)')
    cam.add_argument(
        "--onvif-camera",
        action="append",
        default=[],
        metavar="ID=URL",
        help="subscribe to this camera's events and publish them (repeatable), e.g. "
        "front=http://admin:secret@192.168.1.20",
    )
    cam.add_argument(
        "--onvif-config",
        type=Path,
        metavar="FILE",
        help='a JSON file of cameras: {"cameras": [{"id", "address", "user", '
        '"password_file", "mode", "lifetime"}, ...]}',
    )
    p.add_argument("--sweep-interval", type=_seconds, default=1.0, help=argparse.SUPPRESS)
    p.add_argument(
        "--log-level",
        default="INFO",
        help="INFO (default) logs one line per lifecycle event; WARNING only problems",
    )
    p.add_argument(
        "--log-format",
        choices=oplog.FORMATS,
        default="text",
        help="text (default) or json: one JSON object per line (gateway.oplog)",
    )
    return p


def config_from_args(ns: argparse.Namespace) -> Config:
    return Config(
        data_dir=ns.data_dir,
        host=ns.host,
        port=ns.port,
        public_url=ns.public_url,
        topic_namespace_files=list(ns.topic_namespace),
        fixed_topic_set=ns.fixed_topic_set,
        requires_registration=ns.requires_registration,
        max_request_bytes=ns.max_request_bytes,
        max_subscriptions=ns.max_subscriptions,
        max_pullpoints=ns.max_pullpoints,
        max_client_subscriptions=ns.max_client_subscriptions,
        max_client_pullpoints=ns.max_client_pullpoints,
        pullpoint_max_bytes=ns.pullpoint_max_bytes,
        max_pullpoint_bytes=ns.max_pullpoint_bytes,
        max_client_pullpoint_bytes=ns.max_client_pullpoint_bytes,
        max_topics=ns.max_topics,
        max_client_topics=ns.max_client_topics,
        max_getmessages=ns.max_getmessages,
        max_getmessages_bytes=ns.max_getmessages_bytes,
        pullpoint_idle_expiry=ns.pullpoint_idle_expiry,
        quota_log_interval=ns.quota_log_interval,
        max_registrations=ns.max_registrations,
        pullpoint_max_messages=ns.pullpoint_max_messages,
        max_backlog=ns.max_backlog,
        default_termination=ns.default_termination,
        max_termination=ns.max_termination,
        min_termination=ns.min_termination or timedelta(0),
        registration_default_termination=ns.registration_default_termination,
        max_wait=ns.max_wait,
        request_timeout=ns.request_timeout,
        max_connections=ns.max_connections,
        max_client_connections=ns.max_client_connections,
        max_consumer_answer_bytes=ns.max_consumer_answer_bytes,
        filter_timeout=ns.filter_timeout,
        filter_max_memory_mb=ns.filter_max_memory,
        max_delivery_connections=ns.max_delivery_connections,
        max_consumer_connections=ns.max_consumer_connections,
        delivery_timeout=ns.delivery_timeout,
        delivery_batch=ns.delivery_batch,
        delivery_linger_max=ns.delivery_linger_max,
        backoff_initial=ns.backoff_initial,
        backoff_max=ns.backoff_max,
        consumer_dead_after=ns.consumer_dead_after,
        raw_delivery=not ns.no_raw_delivery,
        wrapped_delivery=not ns.no_wrapped_delivery,
        consumer_allow=list(ns.allow_consumer),
        allow_loopback=not ns.no_loopback_consumers,
        auth_user=ns.auth_user,
        auth_password=ns.auth_password or os.environ.get("WSN_GATEWAY_PASSWORD"),
        auth_token=ns.auth_token or os.environ.get("WSN_GATEWAY_TOKEN"),
        status_public=ns.status_public,
        sqlite_synchronous=ns.sqlite_synchronous,
        sqlite_busy_timeout_ms=ns.sqlite_busy_timeout_ms,
        notify_dedupe_ids=ns.notify_dedupe_ids,
        notify_dedupe_age=ns.notify_dedupe_age,
        landing_max_bytes=ns.landing_max_bytes,
        landing_max_age=ns.landing_max_age,
        landing_enabled=not ns.no_landing,
        landing_format=ns.landing_format,
        gateway_id=ns.gateway_id or socket.gethostname(),
        sweep_interval=ns.sweep_interval,
        onvif_cameras=list(ns.onvif_camera),
        onvif_config=ns.onvif_config,
    )


async def _run(cfg: Config) -> None:
    from gateway import app

    running = await app.start(cfg)
    print(f"wsn-gateway listening on {running.url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await running.stop()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    oplog.configure(str(args.log_level), args.log_format)
    cfg = config_from_args(args)
    try:
        asyncio.run(_run(cfg))
    except OSError as e:
        print(f"wsn-gateway: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # e.g. a bad topic namespace file
        print(f"wsn-gateway: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    return 0
