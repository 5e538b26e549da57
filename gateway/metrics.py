"""Prometheus metrics of the gateway (`GET /metrics`, prometheus-client).

Two kinds, so that the hot path pays for one counter increment or histogram observation
at most:

- **events** (`Metrics`): counters and histograms the code increments where things happen
  (a delivery answered, a Notify refused, an SQLite transaction committed, a request
  handled). Each gateway has its own `CollectorRegistry`, so several brokers in one
  process (the tests) never share counts.
- **state** (`StateCollector`): gauges read from the broker's own bookkeeping only when
  Prometheus scrapes (subscriptions, backlogs, pull points, registrations, landing lag),
  plus `wsn_notifications_accepted_total`, which the broker already counts.

Names follow the Prometheus conventions (`_total` counters, `_seconds` units). The full
list, with what each counts, is in docs/gateway.md "Metrics".
"""

from __future__ import annotations

import platform
from bisect import bisect_left
from collections import Counter as Tally
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    Info,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.quotas import KINDS as QUOTA_KINDS
from gateway.quotas import SCOPES as QUOTA_SCOPES
from gateway.quotas import Quotas

#: outcomes of `wsn_deliveries_total` (messages, not requests)
DELIVERY_OUTCOMES = ("ok", "retried", "failed", "dropped")
#: reasons of `wsn_requests_rejected_total`: refused before the operation was known, by the
#: HTTP binding (gateway.http: 415, 413, 400 not SOAP, a SOAP envelope fault) or by the
#: transport limits (gateway.http_limits: 408 head/body, 503 over the caps, a client gone)
REQUEST_REJECT_REASONS = (
    "media-type",
    "too-large",
    "not-soap",
    "soap-fault",
    "head-timeout",
    "body-timeout",
    "busy",
    "busy-client",
    "evicted",
    "disconnected",
    "malformed",  # refused by aiohttp's HTTP parser (400; gateway.http_limits.ServerLog)
)

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
#: request durations kept before they go into the histogram at once (Metrics.observe_request)
_REQUEST_BATCH = 256
_COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


def _version() -> str:
    try:
        return metadata.version("wsn-edge")
    except metadata.PackageNotFoundError:
        return "unknown"


@dataclass
class Counts:
    """What the broker counts as it works, plain integers on the hot path (no Prometheus
    call per Notify); the state collector reports them at scrape (`StateSample`)."""

    #: notifications accepted (committed before the answer; gateway.notify)
    accepted: int = 0
    #: Notify requests answered but not published: accepted before (gateway.dedupe)
    duplicates: int = 0
    #: Notify requests answered but not published again: a loop (gateway.loops)
    looped: int = 0
    #: notifications dropped because their topic does not admit them (WS-Topics 1.3 §6),
    #: by topic
    inadmissible: Tally[str] = field(default_factory=Tally)
    #: expiry sweeps done (gateway.upkeep)
    sweeps: int = 0
    #: (topic, what) warned about once already (gateway.notify.admitted)
    warned: set[tuple[object, str]] = field(default_factory=set)
    #: messages committed into a pull point, per subscription feeding it, and when the
    #: last was (epoch s): a pull-point subscription's deliveries (gateway.status)
    into_pullpoints: Tally[str] = field(default_factory=Tally)
    into_pullpoints_last: dict[str, float] = field(default_factory=dict)


class Metrics:
    """The event counters and histograms of one gateway, and its `Counts`."""

    def __init__(self) -> None:
        self.counts = Counts()
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        ProcessCollector(registry=r)  # process_cpu_seconds_total, process_open_fds, ...
        Info("wsn_build", "The gateway's version and Python", registry=r).info(
            {"version": _version(), "python": platform.python_version()}
        )
        self.rejected = Counter(
            "wsn_notifications_rejected",
            "Notify requests refused with a fault or an HTTP error, by reason (fault name)",
            ["reason"],
            registry=r,
        )
        self.requests_rejected = Counter(
            "wsn_requests_rejected",
            "Requests or connections refused before the operation was known, by reason "
            "(415 media-type, 413 too-large, 400 not-soap, soap-fault, 408 head-timeout and "
            "body-timeout, 503 busy, busy-client and evicted, disconnected mid-body)",
            ["reason"],
            registry=r,
        )
        for reason in REQUEST_REJECT_REASONS:
            self.requests_rejected.labels(reason)
        self.deliveries = Counter(
            "wsn_deliveries",
            "Messages for push consumers by outcome: ok (consumer answered 2xx), retried "
            "(in a failed attempt, sent again later), failed (ended with a dead consumer), "
            "dropped (backlog bound, oldest first)",
            ["outcome"],
            registry=r,
        )
        for o in DELIVERY_OUTCOMES:  # present at 0 from the start: rates need a first sample
            self.deliveries.labels(o)
        self.delivery_latency = Histogram(
            "wsn_delivery_latency_seconds",
            "From the commit of an accepted Notify to the consumer's 2xx answer",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.request_latency = Histogram(
            "wsn_request_duration_seconds",
            "SOAP requests handled, by operation (body element; 'invalid' if unparsable)",
            ["operation"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        #: operation -> request durations not yet in request_latency (observe_request)
        self._request_pending: dict[str, list[float]] = {}
        self.quota_refusals = Counter(
            "wsn_quota_refusals",
            "Requests refused at a quota (gateway.quotas), by quota (subscriptions, pull "
            "points, topics; pull-point bytes: a Notify whose pull point dropped its oldest "
            "to stay within the bound) and scope (client: the client address's own bound; "
            "total)",
            ["quota", "scope"],
            registry=r,
        )
        for q in QUOTA_KINDS:
            for scope in QUOTA_SCOPES:
                self.quota_refusals.labels(q, scope)
        self.commit_seconds = Histogram(
            "wsn_sqlite_commit_seconds",
            "Duration of one SQLite transaction (BEGIN IMMEDIATE .. COMMIT)",
            buckets=_COMMIT_BUCKETS,
            registry=r,
        )

    def request_rejected(self, reason: str) -> None:
        """One request refused before its operation was known (REQUEST_REJECT_REASONS)."""
        self.requests_rejected.labels(reason).inc()

    def delivered(self, outcome: str, n: int = 1) -> None:
        if n:
            self.deliveries.labels(outcome).inc(n)

    def observe_delivery_latencies(self, seconds: list[float]) -> None:
        """Many wsn_delivery_latency_seconds observations at once (one delivered batch):
        each bucket and the sum are incremented once, not once per message (at a fan-out
        of 100 a per-message observe() was 6 % of the gateway's main thread)."""
        _observe_many(self.delivery_latency, seconds)

    def observe_request(self, operation: str, seconds: float) -> None:
        """One wsn_request_duration_seconds observation. Kept in a list and put into the
        histogram in batches (`flush`, which `exposition` calls first, so a scrape sees
        every request answered before it): labels() and observe() per request were 3 %
        of the event loop at the single-message Notify rate. Event-loop thread only."""
        pending = self._request_pending.get(operation)
        if pending is None:
            self.request_latency.labels(operation)  # the series exists from its first request
            pending = self._request_pending[operation] = []
        pending.append(seconds)
        if len(pending) >= _REQUEST_BATCH:
            self._flush_requests(operation, pending)

    def _flush_requests(self, operation: str, pending: list[float]) -> None:
        _observe_many(self.request_latency.labels(operation), pending)
        pending.clear()

    def flush(self) -> None:
        """Put the observations kept by `observe_request` into their histograms."""
        for operation, pending in self._request_pending.items():
            if pending:
                self._flush_requests(operation, pending)

    def observe_commit(self, seconds: float) -> None:
        """Called by Storage from its writer thread (prometheus-client is thread-safe)."""
        self.commit_seconds.observe(seconds)

    def exposition(self) -> bytes:
        self.flush()
        return generate_latest(self.registry)


@dataclass
class StateSample:
    """What the state collector reports; refreshed by the /metrics handler before each
    scrape (some of it needs an SQLite query, which a collector must not await)."""

    accepted: int = 0
    inadmissible: int = 0
    duplicates: int = 0
    subscriptions_active: int = 0
    subscriptions_paused: int = 0
    backlog_total: int = 0
    backlog_max: int = 0
    pullpoints: int = 0
    pullpoint_messages: int = 0
    registrations: int = 0
    landing_lag_rows: int = 0
    landing_lag_seconds: float = 0.0
    uptime_seconds: float = 0.0
    #: free bytes on the data directory's file system
    data_dir_free_bytes: int = 0
    #: (device id, epoch s of its registration's last Notify) of registered devices
    devices_last_seen: list[tuple[str, float]] = field(default_factory=list)


class QuotaCollector(Collector):
    """What the quotas with names hold, read at scrape: per kind in all, the most one
    client address holds, and the bounds (docs/gateway.md "Quotas"); no label per client,
    so the series stay bounded."""

    def __init__(self, quotas: Quotas) -> None:
        self.quotas = quotas

    def describe(self) -> list[Metric]:
        return []  # read at scrape

    def collect(self) -> Iterator[Metric]:
        q = self.quotas
        held = GaugeMetricFamily(
            "wsn_quota_held", "What all clients hold of each quota's kind", labels=["quota"]
        )
        most = GaugeMetricFamily(
            "wsn_quota_client_held_max",
            "The most one client address holds of each quota's kind",
            labels=["quota"],
        )
        bound = GaugeMetricFamily(
            "wsn_quota_bound", "Each quota's bound (absent: none)", labels=["quota", "scope"]
        )
        for kind, quota in q.quotas.items():
            held.add_metric([kind], float(q.held(kind)))
            most.add_metric([kind], float(q.most_held(kind)))
            for scope, b in (("client", quota.per_client), ("total", quota.total)):
                if b is not None:
                    bound.add_metric([kind, scope], float(b))
        yield from (held, most, bound)


class StateCollector(Collector):
    """Gauges from a `StateSample` produced by `sample()` at scrape time."""

    def __init__(self, sample: Callable[[], StateSample]) -> None:
        self._sample = sample

    def describe(self) -> list[Metric]:
        return []  # dynamic: nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        s = self._sample()
        yield CounterMetricFamily(
            "wsn_notifications_accepted",
            "Notifications accepted (committed to SQLite before the answer)",
            value=s.accepted,
        )
        yield CounterMetricFamily(
            "wsn_notifications_inadmissible",
            "Notifications dropped because their topic's messageTypes or MessagePattern do "
            "not admit them (WS-Topics 1.3 §6); their Notify was still answered 202",
            value=s.inadmissible,
        )
        yield CounterMetricFamily(
            "wsn_notify_duplicates",
            "Notify requests whose wsa:MessageID the broker had accepted before: answered "
            "202 again, not published again (gateway.dedupe)",
            value=s.duplicates,
        )
        subs = GaugeMetricFamily(
            "wsn_subscriptions", "Subscriptions at the broker by state", labels=["state"]
        )
        subs.add_metric(["active"], s.subscriptions_active)
        subs.add_metric(["paused"], s.subscriptions_paused)
        yield subs
        yield GaugeMetricFamily(
            "wsn_backlog_messages",
            "Messages waiting for push consumers, over all subscriptions",
            value=s.backlog_total,
        )
        yield GaugeMetricFamily(
            "wsn_backlog_max_messages",
            "The largest backlog of one subscription",
            value=s.backlog_max,
        )
        yield GaugeMetricFamily("wsn_pullpoints", "Pull points", value=s.pullpoints)
        yield GaugeMetricFamily(
            "wsn_pullpoint_messages",
            "Messages waiting in pull points, over all pull points",
            value=s.pullpoint_messages,
        )
        yield GaugeMetricFamily(
            "wsn_registrations", "Publisher registrations", value=s.registrations
        )
        yield GaugeMetricFamily(
            "wsn_landing_lag_rows",
            "Accepted notifications not yet written to the landing zone",
            value=s.landing_lag_rows,
        )
        yield GaugeMetricFamily(
            "wsn_landing_lag_seconds",
            "Age of the oldest accepted notification not yet in the landing zone (0 = none)",
            value=s.landing_lag_seconds,
        )
        yield GaugeMetricFamily(
            "wsn_uptime_seconds", "Seconds since the gateway started", value=s.uptime_seconds
        )
        yield GaugeMetricFamily(
            "wsn_data_dir_free_bytes",
            "Free bytes on the file system of --data-dir",
            value=s.data_dir_free_bytes,
        )
        seen = GaugeMetricFamily(
            "wsn_device_last_seen_timestamp_seconds",
            "When a registered device was last heard from (a message attributed to it, its "
            "registration or renewal; Unix time): "
            "alert on time() minus it for a silent sensor",
            labels=["device"],
        )
        for device, t in s.devices_last_seen:
            seen.add_metric([device], t)
        yield seen


def _observe_many(h: Histogram, seconds: list[float]) -> None:
    """`h.observe(s)` for each of `seconds`, with each bucket and the sum incremented once.
    Relies on prometheus-client's Histogram internals; without them, one observe() each."""
    if not seconds:
        return
    bounds = getattr(h, "_upper_bounds", None)
    buckets = getattr(h, "_buckets", None)
    total = getattr(h, "_sum", None)
    if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
        for s in seconds:
            h.observe(s)
        return
    counts = [0] * len(bounds)
    for s in seconds:
        counts[bisect_left(bounds, s)] += 1  # the first bucket with s <= bound
    for i, n in enumerate(counts):
        if n:
            buckets[i].inc(n)
    total.inc(sum(seconds))
