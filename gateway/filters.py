"""MessageContent and ProducerProperties filters (WS-BaseNotification 1.3 §4.2), XPath 1.0.

Both are compiled once, at Subscribe, with the in-scope namespaces of the filter element;
an expression that does not compile or cannot be evaluated (syntax error, undeclared
prefix, unknown function) is refused right there, so it never fails at delivery time.
Every valid XPath 1.0 expression is accepted (§4.1). Where it is evaluated depends on
what gateway/topics/xpath_guard.py proves about its cost: a linear one on the event loop, on
each message; any other one in the worker process of gateway/topics/xpath_budget.py within
`--filter-timeout`, so it can delay no other request (a message it could not judge in time
is not delivered on it, counted and logged).

A caller may rely on: `Judge` answers, for the messages of one Notify, whether a
subscription's MessageContent filters all match (`matches`), once `prepare` has had the
filters that are not linear evaluated; `producer_matches` answers the same for
ProducerProperties filters over the producer's properties document, judged once per
version of that document (`prepare_producer`, `producer_matches`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from lxml import etree

from gateway.topics import xpath_guard
from gateway.topics.xpath_budget import Job, XPathBudget
from gateway.wire import faults, ns
from gateway.wire.xmlutil import Element, parse_xml

_PROBE = etree.fromstring(b"<probe/>")
MAX_EXPRESSION_CHARS = 4096


class XPathFilter:
    """A compiled boolean XPath 1.0 expression; `linear` says where it may be evaluated
    (`reason`: why not on the event loop)."""

    def __init__(self, text: str, nsmap: Mapping[str | None, str], what: str = "filter") -> None:
        if len(text) > MAX_EXPRESSION_CHARS:
            raise ValueError(f"longer than {MAX_EXPRESSION_CHARS} characters")
        self.text = text
        self.what = what
        self.nsmap = {k: v for k, v in nsmap.items() if k}
        analysis = xpath_guard.analyze(text)
        self.linear = analysis.linear
        self.reason = analysis.reason
        # regexp=False: no EXSLT regular expressions (a subscriber could otherwise bind the
        # EXSLT namespace and make every Notify run a catastrophic regex). XPath 1.0 itself
        # has no function that reaches outside the document.
        self._xpath = etree.XPath(text, namespaces=self.nsmap, regexp=False, smart_strings=False)
        # Undeclared prefixes and unknown functions only show at evaluation in libxml2:
        # evaluate once on a probe document so they fault at Subscribe time (one element:
        # cheap whatever the expression)
        self._xpath(_PROBE)
        #: the verdict over the producer's properties, per version of that document
        self._rp_verdict: tuple[object, bool] | None = None

    def evaluate(self, context: Element) -> bool:
        """XPath 1.0 boolean() of the result (§4.1: number != 0 and not NaN, non-empty
        string, non-empty node-set), here and now: for a linear filter, or a document the
        broker itself controls."""
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

    def job(self, doc_key: str, doc: str) -> Job:
        return Job(self.text, self.nsmap, doc_key, doc, "bool", f"{self.what} filter")


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
        return XPathFilter(text, el.nsmap, what)
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


class Judge:
    """MessageContent verdicts for the messages of one Notify (`payload_xmls`, in order)."""

    _serial = 0

    def __init__(self, payload_xmls: list[str], budget: XPathBudget | None) -> None:
        self.payload_xmls = payload_xmls
        self.budget = budget
        self._docs: dict[int, Element] = {}
        self._verdicts: dict[tuple[int, int], bool] = {}
        #: the subscriptions that want each topic (filled by prejudge, for the plan)
        self.wanting: dict[Any, Any] = {}
        Judge._serial += 1
        self._id = f"n{Judge._serial}"

    async def prepare(self, pairs: Iterable[tuple[int, XPathFilter]]) -> None:
        """Have the filters that are not linear evaluated on message i of each (i, filter),
        off the event loop (xpath_budget); without a budget they are evaluated here."""
        todo: dict[tuple[int, int], tuple[int, XPathFilter]] = {}
        for i, f in pairs:
            if not f.linear:
                todo.setdefault((i, id(f)), (i, f))
        if not todo:
            return
        if self.budget is None:
            for key, (i, f) in todo.items():
                self._verdicts[key] = f.evaluate(self._doc(i))
            return
        items = sorted(todo.items(), key=lambda kv: kv[0][0])  # one document after another
        jobs = [f.job(f"{self._id}:{i}", self.payload_xmls[i]) for _k, (i, f) in items]
        outcomes = await self.budget.evaluate(jobs)
        for (key, _v), out in zip(items, outcomes, strict=True):
            self._verdicts[key] = out is True

    def _doc(self, i: int) -> Element:
        doc = self._docs.get(i)
        if doc is None:
            doc = self._docs[i] = payload_document(self.payload_xmls[i])
        return doc

    def matches(self, i: int, content: list[XPathFilter]) -> bool:
        """Whether every filter of `content` matches message i (a filter that is not linear:
        its verdict from `prepare`, no match without one)."""
        for f in content:
            if f.linear:
                if not f.evaluate(self._doc(i)):
                    return False
            elif not self._verdicts.get((i, id(f)), False):
                return False
        return True

    async def prepare_producer(
        self, filters: Iterable[XPathFilter], rp: Element, version: object
    ) -> None:
        """Judge ProducerProperties `filters` over the producer's properties document `rp`
        (`version` identifies it: a filter is judged once per version), those that are not
        linear off the event loop."""
        doc: str | None = None
        for f in filters:
            cached = f._rp_verdict
            if cached is not None and cached[0] == version:
                continue
            if f.linear or self.budget is None:
                ok = f.evaluate(rp)
            else:
                if doc is None:
                    doc = etree.tostring(rp, encoding="unicode")
                (out,) = await self.budget.evaluate([f.job(f"rp:{version}", doc)])
                ok = out is True
            f._rp_verdict = (version, ok)

    @staticmethod
    def producer_matches(filters: list[XPathFilter], rp: Element, version: object) -> bool:
        """Whether every ProducerProperties filter matches: its verdict for this `version`
        (from `prepare_producer`), else judged here if linear, else no match."""
        for f in filters:
            cached = f._rp_verdict
            if cached is None or cached[0] != version:
                ok = f.evaluate(rp) if f.linear else False
                f._rp_verdict = cached = (version, ok)
            if not cached[1]:
                return False
        return True


class _Filtered(Protocol):
    """What a subscription offers a Judge: its MessageContent and ProducerProperties
    filters."""

    content: list[XPathFilter]
    producer: list[XPathFilter]


T = TypeVar("T", bound=Hashable)


async def prejudge(
    topics: Sequence[T],
    wanting: Callable[[T], Sequence[_Filtered]],
    payload_xmls: list[str],
    budget: XPathBudget | None,
    producer_document: Callable[[], tuple[Element, object]],
) -> Judge:
    """A Judge for the messages of one Notify (message i on `topics[i]`), with the filters
    that are not linear of every subscription `wanting` each topic already evaluated (off
    the event loop). `judge.wanting` keeps what `wanting` answered, per topic, for the
    caller's plan."""
    judge = Judge(payload_xmls, budget)
    pairs: list[tuple[int, XPathFilter]] = []
    producer: dict[int, XPathFilter] = {}
    for i, topic in enumerate(topics):
        subs = judge.wanting.get(topic)
        if subs is None:
            subs = judge.wanting[topic] = wanting(topic)
        for sub in subs:
            pairs.extend((i, f) for f in sub.content if not f.linear)
            for f in sub.producer:
                producer[id(f)] = f
    await judge.prepare(pairs)
    if producer:
        rp, version = producer_document()
        await judge.prepare_producer(producer.values(), rp, version)
    return judge
