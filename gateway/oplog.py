"""Operator logs: one line per lifecycle event, as text or JSON (`--log-format`).

Events (logger `gateway.events`, level INFO unless noted): the lifecycle steps of
subscriptions, pull points and registrations, keyed as gateway.lifecycle's table says
(`subscription_created`, `subscription_renewed`, `subscription_paused`,
`subscription_resumed`, `subscription_ended` with its reason, `subscription_expired`,
`pullpoint_created`, `pullpoint_destroyed`, `registration_created`,
`registration_restored`, `registration_renewed`, `registration_ended` with its reason,
`registration_expired`), all logged by `OperatorLog`, an observer of gateway.state; then
`demand_changed` (a registered topic gained or lost its last interested subscriber),
`request_unauthorized` (a request refused for lack of credentials, once per client address
per minute: `RefusalLog`) and `consumer_dead` (WARNING, gateway.delivery). Each carries its
fields as `key=value` in text and as keys of the object in JSON, so a log shipper needs no
parsing rules (docs/gateway.md "Lifecycle events" lists them). Client mistakes (faults,
HTTP 4xx) are answered to the client and never logged with a traceback; tracebacks are kept
for bugs (an internal error answered with a BaseFault).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gateway.state import (
    DemandChanged,
    Event,
    PullPointChanged,
    RegistrationChanged,
    SubscriptionChanged,
)
from gateway.wire.xmlutil import format_datetime

EVENTS = logging.getLogger("gateway.events")
FORMATS = ("text", "json")


def event(name: str, message: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log one lifecycle event `name` with its fields (values must be JSON-serialisable)."""
    if EVENTS.isEnabledFor(level):
        EVENTS.log(level, message, extra={"wsn_event": name, "wsn_fields": fields})


class TextFormatter(logging.Formatter):
    """`2026-11-24T05:00:00.123Z INFO gateway.events: message event=... key=value`."""

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        line = f"{ts.replace('+00:00', 'Z')} {record.levelname} {record.name}: "
        line += record.getMessage()
        name = getattr(record, "wsn_event", None)
        if name:
            fields: dict[str, Any] = getattr(record, "wsn_fields", {})
            line += f" event={name}" + "".join(f" {k}={_text(v)}" for k, v in fields.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, event and its fields;
    `exception` holds a traceback (bugs only, see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        name = getattr(record, "wsn_event", None)
        if name:
            out["event"] = name
            for k, v in getattr(record, "wsn_fields", {}).items():
                out.setdefault(k, v)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def _text(v: Any) -> str:
    s = "" if v is None else str(v)
    return json.dumps(s) if (not s or any(c in s for c in ' "=')) else s


def configure(level: str, fmt: str) -> None:
    """Root logging for `wsn-gateway`: `level` name, `fmt` text|json, to stderr."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper(), logging.INFO))


class OperatorLog:
    """Logs every lifecycle step the broker's state takes (an observer of gateway.state)
    under the step's `event` key (gateway.lifecycle), with the fields of docs/gateway.md
    "Lifecycle events"; and demand changes. The one place a resource's end is logged."""

    def __call__(self, e: Event) -> None:
        if isinstance(e, DemandChanged):
            event(
                "demand_changed",
                "demand for a registered topic changed: " + ("resume" if e.demanded else "pause"),
                registration=e.registration.id,
                device=e.registration.device_id,
                topic=str(e.topic),
                demanded=e.demanded,
            )
            return
        if not isinstance(e, SubscriptionChanged | PullPointChanged | RegistrationChanged):
            return
        key = e.step.event
        if key is None or not EVENTS.isEnabledFor(logging.INFO):
            return
        fields: dict[str, Any]
        if isinstance(e, SubscriptionChanged):
            s = e.subscription
            fields = {"subscription": s.id}
            if e.step.name == "create":
                fields.update(
                    consumer=f"pullpoint {s.pullpoint}" if s.pullpoint else s.consumer.address,
                    dialect=s.dialect.rsplit("/", 1)[-1],
                    expression=s.topic_exprs[0].text if s.topic_exprs else None,
                    raw=s.raw,
                )
            elif e.step.name == "renew":
                fields["termination"] = _time(s.termination)
        elif isinstance(e, PullPointChanged):
            fields = {"pullpoint": e.pullpoint.id}
        else:
            r = e.registration
            fields = {"registration": r.id, "device": r.device_id}
            if e.step.name in ("create", "restore"):
                fields.update(
                    publisher=r.publisher.address if r.publisher else None,
                    demand=r.demand,
                    topics=[text for _d, text, _n in r.topic_specs],
                )
            elif e.step.name == "renew":
                fields["termination"] = _time(r.termination)
        if e.why is not None and e.step.name != "expire":
            fields["reason"] = e.why.value
        event(key, e.step.message, **fields)


def _time(t: datetime | None) -> str | None:
    return format_datetime(t) if t is not None else None


class RefusalLog:
    """Logs requests refused for lack of credentials (401) as `request_unauthorized`, at
    most once per client address per `interval` seconds: the line counts the refusals
    from that address since its previous line (`refused`), so a client retrying without
    credentials costs one line a minute, not one per request."""

    def __init__(
        self,
        interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = 10_000,
    ) -> None:
        self.interval = interval
        self._clock = clock
        self._max = max_clients
        #: client -> (time of its last line, refusals since)
        self._last: dict[str | None, tuple[float, int]] = {}

    def refused(self, client: str | None, what: str) -> None:
        now = self._clock()
        last = self._last.get(client)
        if last is not None and now - last[0] < self.interval:
            self._last[client] = (last[0], last[1] + 1)
            return
        if len(self._last) >= self._max:
            self._last.clear()  # bounded; at worst a client is logged again early
        self._last[client] = (now, 0)
        event(
            "request_unauthorized",
            "request refused: no valid credentials",
            client=client,
            operation=what,
            refused=1 + (last[1] if last is not None else 0),
        )
