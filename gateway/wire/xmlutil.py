"""Hardened XML parsing, serialization of a message's payload, and the XML Schema time
types the protocol uses.

Parsing never resolves entities, never loads a DTD and never touches the network:
a document carrying a DOCTYPE is refused outright (billion laughs, XXE), because
no SOAP message may contain one (SOAP 1.1 §3, SOAP 1.2 part 1 §5). A document with more
than MAX_NAMESPACES_IN_SCOPE namespace declarations in scope at one element is refused
too: lxml's serializer and every `nsmap` read cost that many steps per element, so 5,000
prefixes on an Envelope made each of its payloads cost tens of milliseconds.

`serialize` writes an element (a payload) with only the namespace declarations it uses, in
time linear in its size, whatever its ancestors declare (`etree.tostring` of a sub-element
copies every declaration in scope onto it, one by one, each checked against the ones before:
quadratic in the number of declarations).
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
    """The bytes are not acceptable XML; str(e) says why (for a human). `well_formed`: the
    bytes are XML, refused by a rule of this parser (a DOCTYPE, an entity, too many
    namespace declarations): a SOAP client gets a SOAP fault, not a bare 400."""

    def __init__(self, reason: str, well_formed: bool = False) -> None:
        super().__init__(reason)
        self.well_formed = well_formed


#: the most namespace declarations in scope at one element of a parsed document (a SOAP
#: stack that declares its whole namespace table on the Envelope writes about 60)
MAX_NAMESPACES_IN_SCOPE = 256


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
        raise XmlRejected("DOCTYPE/ENTITY declarations are not allowed in SOAP messages", True)
    try:
        root = etree.fromstring(data, _thread_parser())
    except etree.XMLSyntaxError as e:
        raise XmlRejected(f"malformed XML: {e}") from None
    docinfo: Any = root.getroottree().docinfo
    if docinfo.doctype or docinfo.internalDTD is not None:
        raise XmlRejected("DOCTYPE/ENTITY declarations are not allowed in SOAP messages", True)
    # an entity reference needs a "&"; the tag filter walks the tree in C, not Python
    if b"&" in data and next(root.iter(etree.Entity), None) is not None:
        raise XmlRejected("entity references are not allowed in SOAP messages", True)
    # counted only when the text could hold that many (a count of bytes, in C)
    if data.count(b"xmlns") > MAX_NAMESPACES_IN_SCOPE:
        _check_namespaces_in_scope(root)
    return root


def _check_namespaces_in_scope(root: Element) -> None:
    """XmlRejected when more than MAX_NAMESPACES_IN_SCOPE declarations are in scope at one
    element (a prefix declared again counts again: an upper bound)."""
    depth = 0
    for event, _ns in etree.iterwalk(root, events=("start-ns", "end-ns")):
        if event == "start-ns":
            depth += 1
            if depth > MAX_NAMESPACES_IN_SCOPE:
                raise XmlRejected(
                    f"more than {MAX_NAMESPACES_IN_SCOPE} namespace declarations are in scope "
                    "at one element (declare the prefixes a message uses, not a whole table)",
                    True,
                )
        else:
            depth -= 1


# ---- serialization with the declarations an element uses ----

#: "p:" followed by the start of a local name: where a QName in text or in an attribute
#: value may use prefix p (a topic expression, xsi:type="p:T"). A match starts only where
#: a name can (the lookbehind), so a long run of name characters is scanned once, not once
#: per position
_QNAME_PREFIX = re.compile(r"(?<![\w.\-])([^\W\d][\w.\-]*):(?=[^\W\d])")
_DECLARED = re.compile(r'\sxmlns:([^\s=]+)="')
#: a colon before the start of a name: a QName may be near (a fast literal-led search)
_COLON_NAME = re.compile(r":[^\W\d]")
#: an attribute value with a colon, not a namespace declaration's (lxml writes '"' quoted,
#: escaped values, and '>' in none of them)
_VALUE_WITH_COLON = re.compile(r'\s(?!xmlns[:=])[^\s="<>]+="([^"]*:[^"]*)"')
#: lxml's deep copy of an element (what copy.deepcopy calls, without its memo)
_copy: Callable[[Element], Element] = etree._Element.__copy__  # type: ignore[attr-defined]


class NamespaceScopes:
    """The namespace declarations in scope at elements of one document, each ancestor's own
    declarations read once (lxml's `nsmap` walks all of them on every read)."""

    __slots__ = ("_own",)

    def __init__(self) -> None:
        self._own: dict[Element, dict[str | None, str]] = {}

    def lookup(self, el: Element, prefix: str) -> str | None:
        """The namespace `prefix` stands for at `el`, None when it is not declared."""
        node: Element | None = el
        while node is not None:
            own = self._own.get(node)
            if own is None:
                own = self._own[node] = _own_declarations(node)
            uri = own.get(prefix)
            if uri is not None:
                return uri
            node = node.getparent()
        return None


def prefix_bindings(el: Element, text: str) -> tuple[tuple[str, str], ...]:
    """(prefix, namespace) at `el` for each name followed by ":" in `text` (every prefix a
    QName or a name test in it may use; "" for one not declared), sorted: with `text`,
    what an expression's meaning depends on. A cache key that holds the prefixes used, not
    every declaration in scope (reading those costs at most MAX_NAMESPACES_IN_SCOPE)."""
    if ":" not in text:
        return ()
    names = _PREFIX_USE.findall(text)
    if not names:
        return ()
    nsmap = el.nsmap
    return tuple((p, nsmap.get(p) or "") for p in sorted(set(names)))


_PREFIX_USE = re.compile(r"(?<![\w.\-])([^\W\d][\w.\-]*):")


def _own_declarations(el: Element) -> dict[str | None, str]:
    """The declarations written on `el` itself (iterwalk reports them before its start)."""
    out: dict[str | None, str] = {}
    for event, value in etree.iterwalk(el, events=("start-ns", "start")):
        if event == "start":
            break
        prefix, uri = value
        out[prefix or None] = uri
    return out


def serialize(el: Element, scopes: NamespaceScopes | None = None) -> str:
    """`el` as `etree.tostring(el, encoding="unicode", with_tail=False)` writes it, but with
    only the namespace declarations it uses: those its element and attribute names use
    (a copy declares exactly those), and those whose `prefix:` occurs in a text or an
    attribute value (a QName there, such as a topic expression; a false positive keeps one
    declaration too many), bound as they are at `el`. The default namespace is declared
    only when an unprefixed element uses it. The meaning is unchanged; the cost is linear in
    the element's size whatever its ancestors declare. `scopes`: shared by the calls for
    elements of one document, so each ancestor's declarations are read once."""
    c: Element = _copy(el)  # a deep copy (lxml), without copy.deepcopy's memo
    xml: str = etree.tostring(c, encoding="unicode", with_tail=False)
    end = xml.find(">")
    if end < 0:
        return xml
    # a QName's prefix in a text or an attribute value (names are declared by the copy);
    # the cheap searches first: most payloads have none
    candidates: set[str] = set()
    text: str = etree.tostring(c, method="text", encoding="unicode", with_tail=False)
    if _COLON_NAME.search(text):
        candidates.update(_QNAME_PREFIX.findall(text))
    if _COLON_NAME.search(xml):
        for value in _VALUE_WITH_COLON.findall(xml):
            candidates.update(_QNAME_PREFIX.findall(value))
    if candidates:
        candidates -= set(_DECLARED.findall(xml, 0, end))
        candidates.discard("xmlns")
        candidates.discard("xml")
    if candidates:
        lookup = (scopes or NamespaceScopes()).lookup
        decls = []
        for p in sorted(candidates):
            uri = lookup(el, p)
            if uri is not None:
                value = uri.replace("&", "&amp;").replace("<", "&lt;").replace('"', "&quot;")
                decls.append(f' xmlns:{p}="{value}"')
        if decls:
            name_end = _name_end(xml)
            xml = xml[:name_end] + "".join(decls) + xml[name_end:]
    return minimal_namespaces(xml)


def serialize_all(els: list[Element]) -> list[str]:
    """`serialize` of each of `els` (elements of one document, such as the payloads of one
    Notify), sharing what is read of their ancestors."""
    scopes = NamespaceScopes()
    return [serialize(el, scopes) for el in els]


def _name_end(xml: str) -> int:
    i = 1
    while i < len(xml) and not xml[i].isspace() and xml[i] not in "/>":
        i += 1
    return i


# the start tag's attributes, in order: name="value" (lxml always writes double quotes
# and escapes '"', '<' and '>' in values, so the first '>' ends the start tag)
_ATTR = re.compile(r'\s([^\s=]+)="([^"]*)"')
_UNPREFIXED_TAG = re.compile(r"<[^\s/>:!?]+[\s/>]")


#: (`<name`, the declarations as (`p:` for prefix p or "" for the default namespace,
#: ' xmlns:p="uri"', whether the start tag's name or other attributes use it), the other
#: attributes' text, "/" or "")
_Head = tuple[str, tuple[tuple[str, str, bool], ...], str, str]
_heads: dict[str, _Head] = {}
_HEADS_MAX = 1024


def _split_head(head: str) -> _Head:
    """`head` (a start tag without its '>') taken apart as _Head says; cached, since the
    same start tags recur."""
    got = _heads.get(head)
    if got is not None:
        return got
    name_end = _name_end(head)
    decls = []
    others = []
    for name, value in _ATTR.findall(head, name_end):
        if name == "xmlns":
            decls.append(("", f' {name}="{value}"'))
        elif name.startswith("xmlns:"):
            decls.append((name[6:] + ":", f' {name}="{value}"'))
        else:
            others.append(f' {name}="{value}"')
    start, other = head[:name_end], "".join(others)
    got = (
        start,
        tuple((n, text, bool(n) and (n in start or n in other)) for n, text in decls),
        other,
        "/" if head.endswith("/") else "",
    )
    if len(head) <= 4096:  # a hostile start tag is not kept
        if len(_heads) >= _HEADS_MAX:
            _heads.clear()
        _heads[head] = got
    return got


def minimal_namespaces(xml: str) -> str:
    """`xml` (an element lxml serialized) with the root's namespace declarations that
    nothing in it uses removed: a declaration stays when `prefix:` occurs in the element
    (a name, or a QName in a text or an attribute value), the default namespace when an
    unprefixed element uses it. The root's declarations come first, then its other
    attributes (attribute order carries no meaning in XML)."""
    end = xml.find(">")
    if end < 0 or xml.find("xmlns", 0, end) < 0:
        return xml
    start, decls, others, slash = _split_head(xml[:end])
    # everything but the declarations: "p:" anywhere in it may be a use of prefix p (a
    # false positive only keeps one declaration too many); the start tag's own part is
    # judged once per distinct start tag (_split_head), the rest here
    body = xml[end:]
    kept = [start]
    for needle, text, in_head in decls:
        if needle:
            if in_head or needle in body:
                kept.append(text)
        elif _UNPREFIXED_TAG.search(start + others + body) is not None:
            kept.append(text)
    kept.append(others)
    kept.append(slash)
    kept.append(body)
    return "".join(kept)


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
