"""Hardened XML parsing and the XML Schema time types the protocol uses.

Parsing never resolves entities, never loads a DTD and never touches the network:
a document carrying a DOCTYPE is refused outright (billion laughs, XXE), because
no SOAP message may contain one (SOAP 1.1 §3, SOAP 1.2 part 1 §5).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from lxml import etree

Element = etree._Element
Clock = Callable[[], datetime]


class XmlRejected(ValueError):
    """The bytes are not acceptable XML; str(e) says why (for a human)."""


def _parser() -> etree.XMLParser:
    return etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=False,
        remove_blank_text=False,
        collect_ids=False,
    )


_local = threading.local()


def _thread_parser() -> etree.XMLParser:
    """This thread's hardened parser (an lxml parser may be reused for one document after
    another, but not by two threads at once): made once, not once per request."""
    p: etree.XMLParser | None = getattr(_local, "parser", None)
    if p is None:
        p = _local.parser = _parser()
    return p


def parse_xml(data: bytes) -> Element:
    """Parse `data` with the hardened parser; raise XmlRejected on any problem."""
    if b"<!DOCTYPE" in data[:8192]:
        raise XmlRejected("DOCTYPE/ENTITY declarations are not allowed in SOAP messages")
    try:
        root = etree.fromstring(data, _thread_parser())
    except etree.XMLSyntaxError as e:
        raise XmlRejected(f"malformed XML: {e}") from None
    docinfo: Any = root.getroottree().docinfo
    if docinfo.doctype or docinfo.internalDTD is not None:
        raise XmlRejected("DOCTYPE/ENTITY declarations are not allowed in SOAP messages")
    # an entity reference needs a "&"; the tag filter walks the tree in C, not Python
    if b"&" in data and next(root.iter(etree.Entity), None) is not None:
        raise XmlRejected("entity references are not allowed in SOAP messages")
    return root


def utcnow() -> datetime:
    return datetime.now(UTC)


def format_datetime(dt: datetime) -> str:
    """xsd:dateTime in UTC with a `Z` (microseconds kept when present)."""
    dt = dt.astimezone(UTC)
    if dt.microsecond:
        return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


_DT_RE = re.compile(r"^(-?\d{4,})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)?$")
_DUR_RE = re.compile(
    r"^(-)?P(?:(\d+)Y)?(?:(\d+)M)?(?:(\d+)D)?"
    r"(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$"
)


def parse_datetime(text: str) -> datetime:
    """xsd:dateTime -> aware datetime; no time zone means UTC (WS-BaseNotification 1.3 §4.2)."""
    m = _DT_RE.match(text.strip())
    if not m:
        raise ValueError(f"not an xsd:dateTime: {text!r}")
    y, mo, d, h, mi, s, frac, tz = m.groups()
    micro = int((frac[1:] + "000000")[:6]) if frac else 0
    hour = int(h)
    extra = timedelta()
    if hour == 24:  # xsd allows 24:00:00 = next day's midnight
        hour, extra = 0, timedelta(days=1)
    try:
        base = datetime(int(y), int(mo), int(d), hour, int(mi), int(s), micro, tzinfo=UTC)
    except ValueError as e:
        raise ValueError(f"not an xsd:dateTime: {text!r} ({e})") from None
    if tz and tz != "Z":
        sign = 1 if tz[0] == "+" else -1
        off = timedelta(hours=int(tz[1:3]), minutes=int(tz[4:6]))
        base -= sign * off
    return base + extra


def parse_duration(text: str) -> timedelta:
    """xsd:duration -> timedelta. Years count 365 days and months 30 days (the
    broker's clock is what counts, WS-BaseNotification 1.3 §4.2)."""
    t = text.strip()
    m = _DUR_RE.match(t)
    if not m or t in ("P", "-P") or t.endswith("T"):
        raise ValueError(f"not an xsd:duration: {text!r}")
    neg, y, mo, d, h, mi, s = m.groups()
    td = timedelta(
        days=int(y or 0) * 365 + int(mo or 0) * 30 + int(d or 0),
        hours=int(h or 0),
        minutes=int(mi or 0),
        seconds=float(s or 0),
    )
    return -td if neg else td


def format_duration(td: timedelta) -> str:
    secs = td.total_seconds()
    return f"PT{secs:g}S"


def is_nil(el: Element) -> bool:
    return el.get("{http://www.w3.org/2001/XMLSchema-instance}nil") in ("true", "1")


def parse_time_spec(text: str, now: datetime) -> datetime:
    """AbsoluteOrRelativeTimeType (xsd:dateTime | xsd:duration) -> absolute time."""
    t = text.strip()
    if t.startswith(("P", "-P")):
        return now + parse_duration(t)
    return parse_datetime(t)


def text_of(el: Element | None) -> str:
    """The element's text content (its descendants' text too), stripped; "" for None."""
    if el is None:
        return ""
    if len(el) == 0:  # no children (the common case): its own text is all of it
        t = el.text
        return t.strip() if t else ""
    return "".join(str(t) for t in el.itertext()).strip()


def to_string(el: Element) -> str:
    return etree.tostring(el, encoding="unicode")


def child(el: Element, tag: str) -> Element | None:
    for c in el:
        if c.tag == tag:
            return c
    return None


def children(el: Element, tag: str) -> list[Element]:
    return [c for c in el if c.tag == tag]


def elements(el: Element) -> list[Element]:
    """Element children only (no comments or processing instructions)."""
    return [c for c in el if isinstance(c.tag, str)]
