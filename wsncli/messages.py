"""What `wsn` prints for a received notification.

A wrapped notification is a wsnt:NotificationMessage (WS-BaseNotification 1.3 §3.2): its
wsnt:Topic, wsnt:ProducerReference and wsnt:Message. A raw one (UseRaw, §4.2) is the
payload element alone: no topic, no producer.

- line (default): `TOPIC PAYLOAD`, the payload's XML on one line (like `mosquitto_sub -v`);
- `--json`: one object per line with `topic` (as the broker wrote it), `topic_namespace`
  (the namespace its prefix stands for), `producer` (address), `message` (the payload XML
  as a string), `subscription` (address) and `received` (UTC, the client's clock).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lxml import etree

from wsncli.wsp import WSA, WSNT, Element, q

_BETWEEN_TAGS = re.compile(rb">\s+<")


@dataclass
class Notification:
    topic: str | None
    topic_namespace: str | None
    producer: str | None
    subscription: str | None
    message: str
    received: str

    def line(self) -> str:
        return f"{self.topic or '-'} {self.message}"

    def json(self) -> str:
        d: dict[str, Any] = {
            "topic": self.topic,
            "topic_namespace": self.topic_namespace,
            "producer": self.producer,
            "subscription": self.subscription,
            "message": self.message,
            "received": self.received,
        }
        return json.dumps(d, ensure_ascii=False)


def _one_line(el: Element) -> str:
    """The element on one line, without the declarations it inherited from the envelope
    and does not use."""
    copy = etree.fromstring(etree.tostring(el, with_tail=False))
    etree.cleanup_namespaces(copy)
    raw = etree.tostring(copy, encoding="utf-8")
    return _BETWEEN_TAGS.sub(b"><", raw).decode("utf-8").replace("\n", " ")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse(el: Element) -> Notification:
    """A NotificationMessage, or a raw payload, as a Notification."""
    if el.tag != q(WSNT, "NotificationMessage"):
        return Notification(None, None, None, None, _one_line(el), _now())
    topic = tns = None
    t = el.find(q(WSNT, "Topic"))
    if t is not None and t.text:
        topic = t.text.strip()
        prefix, sep, _rest = topic.partition(":")
        if sep and "/" not in prefix and "*" not in prefix:
            tns = t.nsmap.get(prefix)
    producer = el.findtext(f"{q(WSNT, 'ProducerReference')}/{q(WSA, 'Address')}")
    sub = el.findtext(f"{q(WSNT, 'SubscriptionReference')}/{q(WSA, 'Address')}")
    m = el.find(q(WSNT, "Message"))
    kids = [c for c in m if isinstance(c.tag, str)] if m is not None else []
    message = _one_line(kids[0]) if kids else ""
    return Notification(
        topic,
        tns,
        producer.strip() if producer else None,
        sub.strip() if sub else None,
        message,
        _now(),
    )


def notifications(container: Element) -> list[Notification]:
    """The notifications in a wsnt:Notify or wsnt:GetMessagesResponse, in order."""
    return [parse(c) for c in container if isinstance(c.tag, str)]
