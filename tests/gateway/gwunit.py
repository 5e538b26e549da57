"""Builders for the tests that need no HTTP and no SQLite: the gateway's own objects
(subscriptions, registrations, a BrokerState with a recording observer, a Renderer, a
clock the test moves)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from gwtest import CONCRETE, WSNT
from lxml import etree

from gateway import filters, publishers, topics
from gateway.publishers import Registration
from gateway.render import Renderer
from gateway.state import BrokerState, Event
from gateway.subscriptions import Subscription
from gateway.wire.addressing import Epr

T0 = datetime(2030, 1, 1, tzinfo=UTC)
TNS = {"tns": "urn:test"}
DEV = {"dev": "urn:wsn-edge:devices"}
_ids = itertools.count(1)


@dataclass
class Clock:
    """A clock the test moves (`now`, `advance`)."""

    now: datetime = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kw: float) -> None:
        self.now += timedelta(**kw)


@dataclass
class Recorder:
    """A state observer keeping every event, in order."""

    events: list[Event] = field(default_factory=list)

    def __call__(self, e: Event) -> None:
        self.events.append(e)

    def take(self) -> list[Event]:
        out, self.events = self.events, []
        return out


def state(fixed: bool = False) -> tuple[BrokerState, Recorder, Clock]:
    clock = Clock()
    s = BrokerState(topics.TopicSet(fixed=fixed), clock)
    rec = Recorder()
    s.observe(rec)
    return s, rec, clock


def topic(text: str, nsmap: dict[str, str] | None = None) -> topics.ConcreteTopic:
    """The concrete topic of a Concrete expression (`tns:a/b`)."""
    t = topics.compile_expression(CONCRETE, text, dict(nsmap or TNS)).single_topic()
    assert t is not None
    return t


def subscription(
    expr: str | None = "tns:t",
    dialect: str = CONCRETE,
    *,
    nsmap: dict[str, str] | None = None,
    sid: str | None = None,
    raw: bool = False,
    paused: bool = False,
    pullpoint: str | None = None,
    termination: datetime | None = None,
    content: str | None = None,
    consumer: str = "http://127.0.0.1:9/consumer",
) -> Subscription:
    """A subscription as Subscribe makes it: `expr` in `dialect` (None: no topic filter),
    `content` a MessageContent XPath over the payload."""
    exprs = []
    if expr is not None:
        exprs = [topics.compile_expression(dialect, expr, dict(nsmap or TNS))]
    mc = []
    if content is not None:
        el = etree.fromstring(
            f'<wsnt:MessageContent xmlns:wsnt="{WSNT}" xmlns:rd="urn:wsn-edge:reading" '
            f'Dialect="http://www.w3.org/TR/1999/REC-xpath-19991116">{content}'
            "</wsnt:MessageContent>"
        )
        mc = [filters.compile_message_content(el)]
    return Subscription(
        id=sid or f"s{next(_ids):04d}",
        consumer=Epr(consumer),
        raw=raw,
        created=T0,
        termination=termination,
        paused=paused,
        pullpoint=pullpoint,
        topic_exprs=exprs,
        content=mc,
        dialect=dialect,
    )


def registration(
    *names: str,
    device: str = "esp-1",
    demand: bool = True,
    publisher: str = "http://127.0.0.1:9/producer",
    rid: str | None = None,
    termination: datetime | None = None,
) -> Registration:
    """A registration of a device publishing the Simple topics `dt:<name>` (mapped to
    `dev:<device>/<name>`)."""
    specs = [
        ("http://docs.oasis-open.org/wsn/t-1/TopicExpression/Simple", f"dt:{n}",
         {"dt": "urn:wsn-edge:device-topics"})
        for n in names
    ]  # fmt: skip
    reg = Registration(
        rid or f"r{next(_ids):04d}", Epr(publisher), specs, demand, T0, termination, device
    )
    publishers.compile_specs(reg)
    return reg


def renderer() -> Renderer:
    return Renderer("http://gw.test:8080", False, lambda: 0)


def reading(value: float, dev: str = "d1") -> etree._Element:
    return etree.fromstring(
        f'<rd:Reading xmlns:rd="urn:wsn-edge:reading" device="{dev}">'
        f"<rd:value>{value}</rd:value><rd:unit>Cel</rd:unit></rd:Reading>"
    )
