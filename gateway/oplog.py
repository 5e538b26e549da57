"""Operator logs: one line per lifecycle event, as text or JSON (`--log-format`).

Events (logger `gateway.events`, level INFO unless noted): `subscription_created`,
`subscription_ended` (Unsubscribe, Destroy, pull point destroyed, consumer dead),
`subscription_expired`, `registration_created`, `registration_restored` (reloaded at
start), `registration_ended`,
`demand_changed` (a registered topic gained or lost its last interested subscriber) and
`consumer_dead` (WARNING). Each carries its fields as `key=value` in text and as keys of
the object in JSON, so a log shipper needs no parsing rules. Client mistakes (faults, HTTP
4xx) are answered to the client and never logged with a traceback; tracebacks are kept for
bugs (an internal error answered with a BaseFault).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from gateway import topics
from gateway.publishers import Registration

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


class RegistrationLog:
    """A PublisherObserver (gateway.publishers) that logs registrations and demand changes;
    added by gateway.http.start, so the broker needs no logging code of its own for them."""

    def registration_created(self, reg: Registration) -> None:
        event(
            "registration_restored" if reg.restored else "registration_created",
            "publisher registration reloaded" if reg.restored else "publisher registered",
            registration=reg.id,
            device=reg.device_id,
            publisher=reg.publisher.address if reg.publisher else None,
            demand=reg.demand,
            topics=[text for _d, text, _n in reg.topic_specs],
        )

    def registration_destroyed(self, reg: Registration) -> None:
        event(
            "registration_ended",
            "publisher registration ended",
            registration=reg.id,
            device=reg.device_id,
        )

    def demand_changed(
        self, reg: Registration, topic: topics.ConcreteTopic, demanded: bool
    ) -> None:
        event(
            "demand_changed",
            "demand for a registered topic changed: " + ("resume" if demanded else "pause"),
            registration=reg.id,
            device=reg.device_id,
            topic=str(topic),
            demanded=demanded,
        )
