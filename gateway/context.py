"""What a request handler works with (gateway.dispatch hands it over with each request):
never the whole broker, only these parts, built and wired once by gateway.app.

Every handler has one signature, `handler(ctx, req, resource) -> Reply`: the context, the
parsed SOAP request and the resource the request addresses (a Subscription, PullPoint or
Registration; None for the broker itself). A handler raises a WsnFault for a fault and
follows one pattern: plan (pure, from the state and the request) -> persist (one storage
transaction) -> apply (the state's transition, gateway.state).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config import Config
from gateway.consumer_policy import ConsumerPolicy
from gateway.dedupe import Dedupe
from gateway.delivery import DeliveryManager
from gateway.landing import LandingWriter
from gateway.landing_parquet import ParquetLandingWriter
from gateway.landing_record import RecordBuilder
from gateway.longpoll import LongPolls
from gateway.metrics import Counts, Metrics
from gateway.quotas import Quotas
from gateway.render import Renderer
from gateway.state import BrokerState
from gateway.storage import Storage
from gateway.topics.xpath_budget import XPathBudget
from gateway.wire.xmlutil import Clock, Element

#: what a handler returns: (response action, body children); action None = one-way (202)
Reply = tuple[str | None, list[Element]]


@dataclass(frozen=True)
class Landing:
    """The landing zone's writers (None when that format is off) and the builder of its
    lines (gateway.landing_record)."""

    jsonl: LandingWriter | None
    parquet: ParquetLandingWriter | None
    records: RecordBuilder


@dataclass(frozen=True)
class Context:
    cfg: Config
    #: subscriptions, pull points, registrations, Topic Set, current messages, demand
    state: BrokerState
    #: durable state (SQLite)
    storage: Storage
    #: push delivery queues (they follow the state's subscriptions: gateway.followers)
    delivery: DeliveryManager
    #: addresses, EPRs and rendered messages
    render: Renderer
    #: what the broker counts (gateway.metrics.Counts) and its Prometheus metrics
    counts: Counts
    metrics: Metrics
    #: the Notify seen-set and the accepts running now (gateway.dedupe)
    dedupe: Dedupe
    #: clients long-polling pull points
    polls: LongPolls
    landing: Landing
    #: who may be a consumer (and who is this broker itself)
    policy: ConsumerPolicy
    #: this process's id in edge:Via (gateway.loops)
    loop_id: str
    #: the broker's time: the state's clock (a field, not a property: read per request)
    clock: Clock
    #: evaluates XPath not proven linear in a worker process, with a deadline
    xpath: XPathBudget
    #: what each client address holds, against the quotas with names (gateway.quotas)
    quotas: Quotas
