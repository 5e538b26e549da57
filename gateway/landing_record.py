"""One landing line per accepted notification (docs/design.md "Landing zone"): what is in
it, what it costs, and where it is built.

A caller may rely on:

- **Linear, bounded cost.** The `fields` walk reads attributes lazily (lxml's
  `attrib.items()` looks every value up again from the start of the attribute list, which
  made a payload element with 100,000 attributes cost minutes) and stops at
  `MAX_FIELD_NODES` attributes and elements examined, `MAX_FIELDS` fields or
  `MAX_FIELD_CHARS` characters of names and values. A record cut short says so:
  `"fields_truncated": true`. A payload longer than `MAX_PAYLOAD_CHARS` characters is not
  copied into the line: `"payload": null, "payload_omitted": <its length>` (the request
  size limit, 1 MiB by default, keeps this from happening with the defaults). Nothing is
  cut without one of those two keys saying so. (A payload already serialized in at most
  `INLINE_CHARS` characters, what the broker hands over for a reading, is read with
  `items()` after counting its attributes: at most `INLINE_NODES` values, so the quadratic
  lookup stays small.)
- **Off the event loop when big.** `RecordBuilder.lines()` builds a record on the calling
  (event-loop) thread only when its payload is small (at most `INLINE_NODES` nodes and
  `INLINE_CHARS` characters of text; every reading is). A bigger one is built on the
  builder's own single worker thread, so one hostile Notify delays only itself: the event
  loop goes on answering other requests meanwhile.
- **A payload with only the namespace declarations it uses.** lxml serializes a
  sub-element with every declaration in scope (the SOAP envelope's `s`, `wsa`, `wsnt`, ...).
  The payload is written by `wire.xmlutil.serialize` (the broker stores and delivers the
  same text): a declaration is kept only when `prefix:` occurs in the payload (an element
  or attribute name, or a QName in text or an attribute value, such as a topic
  expression), and the default namespace only when an unprefixed element uses it; the
  document's meaning is unchanged. The root's declarations come first, then its other
  attributes (attribute order carries no meaning in XML).
- **Identity.** `device_id` (the registered device's id, else null), `gateway_id`
  (`--gateway-id`, default the host name) and `event_time` (the payload's `time`, a leaf
  element or attribute such as the reading's `rd:time`, parsed as ISO 8601, UTC when it
  has no offset; null when absent or unparseable) are keys of every line.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, NamedTuple

import orjson
from lxml import etree

from gateway.publishers import Registration
from gateway.wire import ns
from gateway.wire.xmlutil import Element, minimal_namespaces, serialize

__all__ = ["Item", "RecordBuilder", "items_for", "minimal_namespaces", "record"]

#: caps of the `fields` object (see the module docstring)
MAX_FIELD_NODES = 10_000
MAX_FIELDS = 1_000
MAX_FIELD_CHARS = 64 * 1024
#: a longer payload is left out of the line (payload_omitted says how long it was)
MAX_PAYLOAD_CHARS = 1024 * 1024
#: a record whose payload stays within both is built on the event loop
INLINE_NODES = 256
INLINE_CHARS = 16 * 1024

_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
_ELEMENT = etree.Element  # as a tag filter, iter() yields elements only


class _TooBig(Exception):
    """The inline budget is exceeded: build the record on the worker thread."""


class Item(NamedTuple):
    """What a landing line is made of, besides the time it was received (a tuple: one is
    made per landed message, and a frozen dataclass costs several times as much to
    build)."""

    msg_id: str
    producer: str | None
    topic_namespace: str | None
    topic_path: str | None
    payload: Element
    device_id: str | None = None
    #: `payload` as wire.xmlutil.serialize writes it, when the caller serialized it already
    #: (the broker does, for storage and delivery)
    payload_xml: str | None = None


def _fields(payload: Element, inline: bool) -> tuple[dict[str, str], bool]:
    """(fields, truncated): the payload's attributes and leaf elements' text by local
    name, the first occurrence of each name winning. With `inline`, raise _TooBig as soon
    as the payload exceeds the inline budget."""
    fields: dict[str, str] = {}
    nodes = 0
    chars = 0
    seen_chars = 0
    max_nodes = INLINE_NODES if inline else MAX_FIELD_NODES
    for el in payload.iter(_ELEMENT):
        text = el.text
        if inline:
            # text the walk below does not see still ends up in the serialized payload
            tail = el.tail
            if text is not None:
                seen_chars += len(text)
            if tail is not None:
                seen_chars += len(tail)
            if seen_chars > INLINE_CHARS:
                raise _TooBig
        attrib = el.attrib
        if attrib:
            # lazily: attrib.items() would look every value up again from the first one
            key: str
            for key in attrib.iterkeys():  # type: ignore[assignment]
                nodes += 1
                if nodes > max_nodes:
                    if inline:
                        raise _TooBig
                    return fields, True
                name = key[key.rfind("}") + 1 :]
                value = el.get(key) or ""
                if inline:
                    seen_chars += len(value)
                    if seen_chars > INLINE_CHARS:
                        raise _TooBig
                if name in fields:
                    continue
                chars += len(name) + len(value)
                if len(fields) >= MAX_FIELDS or chars > MAX_FIELD_CHARS:
                    return fields, True
                fields[name] = value
        if el is not payload and len(el) == 0:
            nodes += 1
            if nodes > max_nodes:
                if inline:
                    raise _TooBig
                return fields, True
            tag = el.tag
            name = tag[tag.rfind("}") + 1 :]
            if name in fields:
                continue
            value = text.strip() if text else ""
            chars += len(name) + len(value)
            if len(fields) >= MAX_FIELDS or chars > MAX_FIELD_CHARS:
                return fields, True
            fields[name] = value
    if len(payload) == 0:
        text = (payload.text or "").strip()
        if text:
            tag = payload.tag
            name = tag[tag.rfind("}") + 1 :]
            if name not in fields:
                if len(fields) >= MAX_FIELDS or chars + len(name) + len(text) > MAX_FIELD_CHARS:
                    return fields, True
                fields[name] = text
    return fields, False


def _small_fields(payload: Element) -> dict[str, str]:
    """`_fields(payload, inline=True)`'s fields for a payload whose serialized form is at
    most INLINE_CHARS long (so its text is within the inline budget, and so within
    MAX_FIELD_CHARS and below MAX_FIELDS: never truncated): raises _TooBig past
    INLINE_NODES attributes and leaf elements like `_fields`. Fewer calls into lxml per
    element: a reading is a handful of leaves, and this runs once per landed message."""
    fields: dict[str, str] = {}
    nodes = 0
    for el in payload.iter(_ELEMENT):
        keys = el.keys()
        if keys:
            nodes += len(keys)
            if nodes > INLINE_NODES:
                raise _TooBig
            # items() looks each value up from the first attribute: bounded by the check
            key: str
            value: str
            for key, value in el.items():  # type: ignore[assignment]
                name = key[key.rfind("}") + 1 :]
                if name not in fields:
                    fields[name] = value
        if len(el) == 0 and el is not payload:
            nodes += 1
            if nodes > INLINE_NODES:
                raise _TooBig
            tag = el.tag
            name = tag[tag.rfind("}") + 1 :]
            if name not in fields:
                text = el.text
                fields[name] = text.strip() if text else ""
    if len(payload) == 0:
        text = payload.text
        if text and (text := text.strip()):
            tag = payload.tag
            name = tag[tag.rfind("}") + 1 :]
            if name not in fields:
                fields[name] = text
    return fields


# the common form (what the device writes), formatted without a datetime round trip
_UTC_Z = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?Z")


def _event_time(fields: dict[str, str]) -> str | None:
    raw = fields.get("time")
    if not raw:
        return None
    raw = raw.strip()
    try:
        t = datetime.fromisoformat(raw)  # validates (month 13 is refused) in all forms
        m = _UTC_Z.fullmatch(raw)
        if m is not None:
            return f"{m.group(1)}.{(m.group(2) or '').ljust(6, '0')}Z"
        if t.tzinfo is None:
            t = t.replace(tzinfo=UTC)
        return t.astimezone(UTC).strftime(_TIME_FORMAT)
    except (ValueError, OverflowError):
        return None


def _line(item: Item, received_at: str, gateway_id: str | None, inline: bool) -> str:
    payload: str | None = item.payload_xml
    if inline and payload is not None and len(payload) <= INLINE_CHARS:
        fields, truncated = _small_fields(item.payload), False
    else:
        fields, truncated = _fields(item.payload, inline)
    if payload is None:
        payload = serialize(item.payload)
    omitted = 0
    if len(payload) > MAX_PAYLOAD_CHARS:
        omitted = len(payload)
        payload = None
    tag = item.payload.tag
    # the keys in the contract's order (dicts keep it); orjson writes the same bytes as
    # json.dumps(ensure_ascii=False, separators=(",", ":")) for these str/None/bool/int
    # values, several times faster (tests/bench/landing_bench.py)
    rec: dict[str, object] = {
        "id": item.msg_id,
        "received_at": received_at,
        "event_time": _event_time(fields),
        "producer": item.producer,
        "device_id": item.device_id,
        "gateway_id": gateway_id,
        "topic_namespace": item.topic_namespace,
        "topic_path": item.topic_path,
        "message_type": tag if isinstance(tag, str) else None,
        "fields": fields,
        "payload": payload,
    }
    if truncated:
        rec["fields_truncated"] = True
    if omitted:
        rec["payload_omitted"] = omitted
    return orjson.dumps(rec).decode()


def format_received_at(t: datetime) -> str:
    """UTC, ISO 8601 with microseconds and `Z` (the landing contract's form)."""
    return t.astimezone(UTC).isoformat(timespec="microseconds")[:-6] + "Z"


def record(
    msg_id: str,
    received_at: datetime,
    producer: str | None,
    topic_ns: str | None,
    topic_path: str | None,
    payload: Element,
    *,
    device_id: str | None = None,
    gateway_id: str | None = None,
) -> str:
    """One landing line (design.md table), without the trailing newline, built on the
    calling thread whatever its size (the caps still apply)."""
    item = Item(msg_id, producer, topic_ns, topic_path, payload, device_id)
    return _line(item, format_received_at(received_at), gateway_id, False)


def items_for(
    notifications: Iterable[tuple[Any, Any, Element, Element]],
    devices: RecordBuilder,
    new_id: Callable[[], str],
    payload_xmls: Sequence[str] | None = None,
) -> list[Item]:
    """Items for the broker's parsed notifications (topics.ConcreteTopic | None,
    addressing.Epr | None, payload, NotificationMessage), device ids from the registrations
    `devices` follows (RecordBuilder.device_id); each gets a new message id.
    `payload_xmls`, if given, are the payloads already serialized (Item.payload_xml), in
    order."""
    out = []
    # (topic namespace, path, producer address, device) per distinct (topic, producer):
    # the messages of one Notify mostly share them
    ident: dict[tuple[Any, str | None], tuple[str | None, str | None, str | None, str | None]] = {}
    for i, (topic, producer, payload, _nm) in enumerate(notifications):
        address = producer.address if producer is not None else None
        key = (topic, address)
        got = ident.get(key)
        if got is None:
            tns = topic.namespace if topic is not None else None
            path = "/".join(topic.path) if topic is not None else None
            got = ident[key] = (tns, path, address, devices.device_id(tns, path, address))
        tns, path, address, device = got
        xml = payload_xmls[i] if payload_xmls is not None else None
        out.append(Item(new_id(), address, tns, path, payload, device, xml))
    return out


class RecordBuilder:
    """Builds the landing lines of one Notify (see the module docstring for where), and
    knows the registered devices: it is a publishers.PublisherObserver, told of every
    registration that appears or goes away, so finding a line's device id costs a dict
    lookup, not a pass over every registration per Notify."""

    def __init__(self, gateway_id: str | None) -> None:
        self.gateway_id = gateway_id
        self._pool: ThreadPoolExecutor | None = None
        #: records built on the worker thread (for tests and status)
        self.offloaded = 0
        self._regs: dict[str, tuple[str | None, str | None]] = {}  # id -> (address, device)
        self._index: tuple[dict[str, str], set[str]] | None = None  # rebuilt on change

    # ---- publishers.PublisherObserver ----
    def registration_created(self, reg: Registration) -> None:
        self._regs[reg.id] = (reg.publisher.address if reg.publisher else None, reg.device_id)
        self._index = None

    def registration_destroyed(self, reg: Registration) -> None:
        self._regs.pop(reg.id, None)
        self._index = None

    def demand_changed(self, reg: Registration, topic: Any, demanded: bool) -> None:
        pass

    def device_id(
        self, topic_namespace: str | None, topic_path: str | None, producer: str | None
    ) -> str | None:
        """The registered device a notification comes from: the registration whose
        publisher address is `producer`, else the registration whose device id roots the
        topic (`dev:<id>/...`, design.md), else None."""
        if self._index is None:
            by_address = {a: d for a, d in self._regs.values() if a is not None and d}
            self._index = (by_address, {d for _, d in self._regs.values() if d})
        by_address, ids = self._index
        if producer is not None:
            found = by_address.get(producer)
            if found is not None:
                return found
        if topic_namespace == ns.DEVICES_NS and topic_path:
            root = topic_path.split("/", 1)[0]
            if root in ids:
                return root
        return None

    async def lines(self, received_at: datetime, items: Sequence[Item]) -> list[tuple[str, str]]:
        """(message id, line) per item, in order."""
        when = format_received_at(received_at)
        out = []
        for item in items:
            try:
                out.append((item.msg_id, _line(item, when, self.gateway_id, True)))
            except _TooBig:
                if self._pool is None:
                    # one thread: hostile payloads queue behind each other, not in front
                    # of the event loop or the landing writer's file appends
                    self._pool = ThreadPoolExecutor(1, thread_name_prefix="landing-record")
                self.offloaded += 1
                line = await asyncio.get_running_loop().run_in_executor(
                    self._pool, _line, item, when, self.gateway_id, False
                )
                out.append((item.msg_id, line))
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
