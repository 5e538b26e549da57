"""MessageContent and ProducerProperties filters (WS-BaseNotification 1.3 §4.2), XPath 1.0.

Both are compiled once, at Subscribe, with the in-scope namespaces of the filter element;
an expression that does not compile or cannot be evaluated (syntax error, undeclared
prefix, unknown function) is refused right there, so it never fails at delivery time.
"""

from __future__ import annotations

from collections.abc import Mapping

from lxml import etree

from gateway.topics import xpath_guard
from gateway.wire import faults, ns
from gateway.wire.xmlutil import Element, parse_xml

_PROBE = etree.fromstring(b"<probe/>")
MAX_EXPRESSION_CHARS = 4096


class XPathFilter:
    """A compiled boolean XPath 1.0 expression."""

    def __init__(self, text: str, nsmap: Mapping[str | None, str]) -> None:
        if len(text) > MAX_EXPRESSION_CHARS:
            raise ValueError(f"longer than {MAX_EXPRESSION_CHARS} characters")
        # evaluated on every notification: nothing that grows faster than the message
        refused = xpath_guard.check(text)
        if refused:
            raise ValueError(refused)
        self.text = text
        self.nsmap = {k: v for k, v in nsmap.items() if k}
        # regexp=False: no EXSLT regular expressions (a subscriber could otherwise bind the
        # EXSLT namespace and make every Notify run a catastrophic regex). XPath 1.0 itself
        # has no function that reaches outside the document.
        self._xpath = etree.XPath(text, namespaces=self.nsmap, regexp=False, smart_strings=False)
        # Undeclared prefixes and unknown functions only show at evaluation in libxml2:
        # evaluate once on a probe document so they fault at Subscribe time.
        self._xpath(_PROBE)

    def evaluate(self, context: Element) -> bool:
        """XPath 1.0 boolean() of the result (§4.1: number != 0 and not NaN, non-empty
        string, non-empty node-set)."""
        try:
            r = self._xpath(context)
        except etree.XPathError:
            return False
        if isinstance(r, bool):
            return r
        if isinstance(r, float | int):
            return r == r and r != 0
        if isinstance(r, str | bytes):
            return len(r) > 0
        if isinstance(r, list):
            return len(r) > 0
        return bool(r)


def _compile(el: Element, fault_name: str, what: str) -> XPathFilter:
    dialect = (el.get("Dialect") or "").strip()
    if dialect != ns.XPATH_DIALECT:
        raise faults.wsnt(
            fault_name,
            f"{what} dialect {dialect!r} is not supported; use XPath 1.0 ({ns.XPATH_DIALECT})",
        )
    text = "".join(str(t) for t in el.itertext()).strip()
    if not text:
        raise faults.wsnt(fault_name, f"{what} expression is empty")
    try:
        return XPathFilter(text, el.nsmap)
    except (etree.XPathError, TypeError, ValueError) as e:
        raise faults.wsnt(
            fault_name, f"{what} expression {text!r} is not valid XPath 1.0: {e}"
        ) from None


def compile_message_content(el: Element) -> XPathFilter:
    return _compile(el, "InvalidMessageContentExpressionFault", "MessageContent")


def compile_producer_properties(el: Element) -> XPathFilter:
    return _compile(el, "InvalidProducerPropertiesExpressionFault", "ProducerProperties")


def payload_document(payload_xml: str) -> Element:
    """The payload (serialized by wire.xmlutil.serialize) as the root of its own document:
    the evaluation context of a MessageContent expression is the Notification payload
    (§4.2), so `/` is the payload."""
    return parse_xml(payload_xml.encode())
