"""Loading ``wstop:TopicNamespace`` documents (WS-Topics 1.3 §5, §6, §6.1).

A caller may rely on:

* documents are parsed with a hardened parser: no entity expansion, no DTD
  loading, no network, no huge trees, at most 16 MiB, 100 000 topics and 64
  levels; anything malformed, or breaking a rule of
  §5/§6, raises :class:`InvalidTopicNamespace` with the reason;
* ``name``, ``targetNamespace`` (required, non-empty: "" is the ad-hoc
  namespace of §10 and cannot be declared), ``final``; per Topic ``name``
  (NCName, unique among siblings), ``messageTypes`` (QNames resolved through
  the Topic element's in-scope namespaces, duplicates dropped), ``final``,
  ``MessagePattern`` and child Topics; ``@parent`` (a Concrete expression) only
  on root topics (§6.1 rule 1), naming a topic of another namespace (rule 2).
  Rules 3 and 4 need the parent's namespace and are checked when the namespace
  is added to a :class:`~gateway.topics.TopicSet`;
* the 2004 drafts' form (``wstop:topicSpace``/``wstop:topic`` in the IBM
  namespace) is read too, and ``wstop:AliasRef`` children (either namespace,
  ``@Dialect`` or ``@dialect``) make alias topics (see :mod:`.aliases`).
"""

from __future__ import annotations

from lxml import etree

from .compile import compile_expression
from .errors import InvalidTopicExpression, InvalidTopicNamespace, TopicError
from .model import (
    WSTOP,
    WSTOP_2004,
    MessagePattern,
    Topic,
    TopicNamespace,
    is_ncname,
)

#: at most this many Topic elements in one document (hostile sizes)
MAX_TOPICS = 100_000
#: at most this nesting depth of Topic elements
MAX_DEPTH = 64
#: at most this many bytes in one document
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024

_NAMESPACES = (WSTOP, WSTOP_2004)


def hardened_parser() -> etree.XMLParser:
    """The parser used for namespace documents: no entities, no DTD, no
    network, no huge trees, comments and PIs dropped."""
    return etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        huge_tree=False,
        dtd_validation=False,
        remove_comments=True,
        remove_pis=True,
    )


def _bool(el: etree._Element, attr: str) -> bool:
    # xsd:boolean (§5, §6 @final, default false)
    v = el.get(attr)
    if v is None:
        return False
    v = v.strip()
    if v in ("true", "1"):
        return True
    if v in ("false", "0"):
        return False
    raise InvalidTopicNamespace(f"@{attr}={v!r} on {_where(el)} is not an xsd:boolean")


def _where(el: etree._Element) -> str:
    name = el.get("name")
    return (
        f"{etree.QName(el).localname}"
        + (f" {name!r}" if name else "")
        + (f" (line {el.sourceline})" if el.sourceline else "")
    )


def _is(el: etree._Element, *locals_: str) -> bool:
    if not isinstance(el.tag, str):
        return False
    q = etree.QName(el)
    return q.namespace in _NAMESPACES and q.localname in locals_


def _qnames(el: etree._Element, value: str) -> tuple[str, ...]:
    out: dict[str, None] = {}
    for token in value.split():
        prefix, _, local = token.rpartition(":")
        ns = el.nsmap.get(prefix if prefix else None)
        if prefix and ns is None:
            raise InvalidTopicNamespace(
                f"messageTypes of {_where(el)}: prefix {prefix!r} is not declared"
            )
        if not is_ncname(local):
            raise InvalidTopicNamespace(f"messageTypes of {_where(el)}: {token!r} is not a QName")
        out["{" + (ns or "") + "}" + local] = None  # §6: repeats are not meaningful
    return tuple(out)


class _Loader:
    def __init__(self, tns: str) -> None:
        self.tns = tns
        self.count = 0

    def topic(self, el: etree._Element, depth: int, is_root: bool) -> Topic:
        self.count += 1
        if self.count > MAX_TOPICS:
            raise InvalidTopicNamespace(f"more than {MAX_TOPICS} topics in one document")
        if depth > MAX_DEPTH:
            raise InvalidTopicNamespace(f"topics nested deeper than {MAX_DEPTH} levels")
        name = (el.get("name") or "").strip()
        if not is_ncname(name):
            raise InvalidTopicNamespace(
                f"{_where(el)}: @name {name!r} is missing or not an NCName (WS-Topics 1.3 §6)"
            )
        topic = Topic(
            name=name,
            namespace=self.tns,
            message_types=_qnames(el, el.get("messageTypes") or ""),
            final=_bool(el, "final"),
        )
        parent = el.get("parent")
        if parent is not None:
            if not is_root:
                raise InvalidTopicNamespace(
                    f"{_where(el)}: @parent is only allowed on root topics "
                    "(WS-Topics 1.3 §6.1 rule 1)"
                )
            try:
                pexpr = compile_expression(
                    "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Concrete",
                    parent,
                    el.nsmap,
                )
            except TopicError as e:
                raise InvalidTopicNamespace(f"{_where(el)}: bad @parent: {e}") from e
            ptopic = pexpr.single_topic()
            assert ptopic is not None
            if ptopic.topic_namespace == self.tns:
                raise InvalidTopicNamespace(
                    f"{_where(el)}: @parent {parent!r} is in the same topic namespace; an "
                    "extension topic extends a topic of another namespace (WS-Topics 1.3 "
                    "§6.1 rules 2, 3)"
                )
            topic.parent = ptopic
        for child in el:
            if _is(child, "MessagePattern"):
                dialect = child.get("Dialect") or child.get("dialect")
                if not dialect:
                    raise InvalidTopicNamespace(f"MessagePattern of {_where(el)} has no Dialect")
                topic.message_pattern = MessagePattern(
                    dialect=dialect,
                    text=(child.text or "").strip(),
                    nsmap=tuple(sorted((p, u) for p, u in child.nsmap.items() if p)),
                )
            elif _is(child, "AliasRef"):
                dialect = child.get("Dialect") or child.get("dialect") or ""
                try:
                    topic.alias = compile_expression(dialect, child.text or "", child.nsmap)
                except TopicError as e:
                    raise InvalidTopicNamespace(f"AliasRef of {_where(el)}: {e}") from e
            elif _is(child, "Topic", "topic"):
                sub = self.topic(child, depth + 1, is_root=False)
                if sub.name in topic.children:
                    raise InvalidTopicNamespace(
                        f"{_where(child)}: duplicate child topic name under {name!r} "
                        "(WS-Topics 1.3 §6)"
                    )
                topic.children[sub.name] = sub
        return topic


def load_topic_namespace(data: bytes | str | etree._Element) -> TopicNamespace:
    """Parse a ``wstop:TopicNamespace`` document (bytes, text, or an element
    already parsed by the caller) into a :class:`TopicNamespace`."""
    if isinstance(data, etree._Element):
        root = data
    else:
        raw = data.encode("utf-8") if isinstance(data, str) else data
        if len(raw) > MAX_DOCUMENT_BYTES:
            raise InvalidTopicNamespace(
                f"topic namespace document of {len(raw)} bytes is larger than the "
                f"{MAX_DOCUMENT_BYTES} accepted"
            )
        try:
            root = etree.fromstring(raw, parser=hardened_parser())
        except etree.XMLSyntaxError as e:
            raise InvalidTopicNamespace(
                f"topic namespace document is not well-formed XML: {e}"
            ) from e
        if root.getroottree().docinfo.internalDTD is not None:
            raise InvalidTopicNamespace("topic namespace documents may not carry a DTD")
    if not _is(root, "TopicNamespace", "topicSpace"):
        raise InvalidTopicNamespace(f"expected wstop:TopicNamespace ({WSTOP}), found {root.tag!r}")
    tns = (root.get("targetNamespace") or "").strip()
    if not tns:
        raise InvalidTopicNamespace(
            "wstop:TopicNamespace needs a non-empty @targetNamespace (WS-Topics 1.3 §5; the "
            'ad-hoc namespace "" of §10 is built in)'
        )
    ns = TopicNamespace(target_namespace=tns, name=root.get("name"), final=_bool(root, "final"))
    loader = _Loader(tns)
    for child in root:
        if _is(child, "Topic", "topic"):
            try:
                topic = loader.topic(child, 1, is_root=True)
            except InvalidTopicExpression as e:
                raise InvalidTopicNamespace(str(e)) from e
            if topic.name in ns.topics:
                raise InvalidTopicNamespace(
                    f"{_where(child)}: duplicate root topic name (WS-Topics 1.3 §5)"
                )
            ns.topics[topic.name] = topic
    return ns
