"""Broker configuration (every CLI option of `wsn-gateway` has a field here)."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path


@dataclass
class Config:
    data_dir: Path = Path("./var")
    host: str = "127.0.0.1"
    port: int = 8080
    #: base URL used in EPRs; default http://<host>:<bound port>
    public_url: str | None = None
    topic_namespace_files: list[Path] = field(default_factory=list)
    fixed_topic_set: bool = False
    requires_registration: bool = False
    # -- limits --
    max_request_bytes: int = 1024 * 1024
    max_subscriptions: int = 10_000
    max_pullpoints: int = 1_000
    max_registrations: int = 10_000
    pullpoint_max_messages: int = 10_000
    #: quotas with names (gateway/quotas.py): per client address, and the bounds in all
    max_client_subscriptions: int = 1_000
    max_client_pullpoints: int = 100
    #: the bytes of the messages one pull point holds (the oldest dropped beyond)
    pullpoint_max_bytes: int = 16 * 1024 * 1024
    #: the bytes of the messages all pull points hold, and those one client address's hold
    #: (gateway.pullpoint_bytes: the oldest of the pull point added to are dropped beyond)
    max_pullpoint_bytes: int = 512 * 1024 * 1024
    max_client_pullpoint_bytes: int = 128 * 1024 * 1024
    #: topics the Topic Set may grow by (WS-Topics 1.3 §9), in all and per client address
    max_topics: int = 10_000
    max_client_topics: int = 1_000
    #: one GetMessages answers at most this many messages and (past its first) bytes
    max_getmessages: int = 1_000
    max_getmessages_bytes: int = 4 * 1024 * 1024
    #: a pull point nobody has read (GetMessages) for this long is destroyed; 0: never
    pullpoint_idle_expiry: float = 86_400.0
    #: a quota refusal is logged at most once per client and kind in this many seconds
    quota_log_interval: float = 60.0
    max_backlog: int = 1_000  # per subscription, drop-oldest beyond
    default_termination: timedelta | None = timedelta(hours=1)
    max_termination: timedelta | None = timedelta(days=1)
    min_termination: timedelta = timedelta(seconds=1)
    registration_default_termination: timedelta | None = timedelta(hours=1)
    max_wait: float = 60.0  # cap of edge:Wait on GetMessages
    request_timeout: float = 10.0  # a request head or body must arrive within (408)
    max_connections: int = 512  # concurrent HTTP connections (503 beyond; http_limits.py)
    max_client_connections: int = 128  # of them from one client address
    #: the most of a consumer's answer body the delivery reads (and discards); past it the
    #: connection is closed (gateway/delivery_http.py)
    max_consumer_answer_bytes: int = 64 * 1024
    #: one evaluation of an XPath filter or topic expression not proven linear, in the
    #: worker process (gateway/topics/xpath_budget.py): seconds, and its memory in MiB
    filter_timeout: float = 0.25
    filter_max_memory_mb: int = 512
    #: outgoing delivery connections, in all and per consumer host (gateway/delivery_http.py)
    max_delivery_connections: int = 256
    max_consumer_connections: int = 8
    # -- delivery --
    delivery_timeout: float = 10.0
    delivery_batch: int = 100
    delivery_linger_max: float = 0.05  # cap of the pacing between requests to one endpoint
    backoff_initial: float = 0.5
    backoff_max: float = 60.0
    consumer_dead_after: float = 3600.0  # seconds of continuous failure -> subscription ends
    raw_delivery: bool = True
    wrapped_delivery: bool = True
    # -- consumer address policy (rules of gateway/consumer_policy.py) --
    consumer_allow: list[str] = field(default_factory=list)
    allow_loopback: bool = True
    # -- credentials for management operations --
    auth_user: str | None = None
    auth_password: str | None = None
    auth_token: str | None = None
    #: serve /status, /status.json and /metrics to any client when no credentials are set
    #: (default: loopback clients only; gateway.status)
    status_public: bool = False
    # -- storage / landing --
    sqlite_synchronous: str = "FULL"
    sqlite_busy_timeout_ms: int = 5000
    #: the Notify seen-set (gateway.dedupe): at most this many ids (0: off) ...
    notify_dedupe_ids: int = 100_000
    #: ... none older than this (seconds)
    notify_dedupe_age: float = 86_400.0
    landing_max_bytes: int = 64 * 1024 * 1024
    landing_max_age: float = 60.0
    landing_enabled: bool = True
    landing_format: str = "jsonl"  # jsonl | parquet | both (parquet needs pyarrow)
    #: names this gateway in every landing line (fleets of gateways, docs/design.md) and
    #: in its status; --gateway-id, default the host name
    gateway_id: str = field(default_factory=socket.gethostname)
    sweep_interval: float = 1.0
    # -- ONVIF cameras (gateway.cameras, docs/gateway.md "Cameras") --
    #: --onvif-camera ID=URL, one per camera
    onvif_cameras: list[str] = field(default_factory=list)
    #: --onvif-config: a JSON file of cameras (gateway/onvif/config.py)
    onvif_config: Path | None = None

    @property
    def auth_enabled(self) -> bool:
        return bool(self.auth_token or (self.auth_user and self.auth_password is not None))
