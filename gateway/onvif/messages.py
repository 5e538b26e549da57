"""Reading what a camera sends: the NotificationMessages of a PullMessagesResponse or a
Notify (WS-BaseNotification 1.3 §3.2, ONVIF Core "Notification structure") and the topic
set of a GetEventPropertiesResponse (WS-Topics 1.3 §7). Pure: lxml elements in, model
objects out; what cannot be used is returned as a reason, never raised.

Tolerated camera quirks (each seen in the field; docs/gateway.md "Cameras"):

* the wsnt:Topic text of a notification may end in ``//.``, ``/.`` or ``/`` (a Full
  expression where a concrete path is meant); the suffix is dropped;
* its Dialect is ONVIF's ``.../tev/topicExpression/ConcreteSet``, WS-Topics Concrete or
  missing: all are read as one concrete path (WS-Topics 1.3 §8.2);
* the prefix ``tns1`` used without a declaration means the ONVIF topic namespace (the
  ONVIF Core specification binds it so in every example);
* children in a topic set written qualified with their root's namespace
  (``<tns1:VideoSource><tns1:MotionAlarm>``) are the same topics as unqualified ones
  (WS-Topics 1.3 §7 writes them unqualified);
* a topic set without any ``wstop:topic="true"``: its leaves are the topics.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from copy import deepcopy
from typing import Any

from lxml import etree

from gateway import topics
from gateway.wire.xmlutil import Element

from .model import CameraEvent, CameraTopic

WSNT = "http://docs.oasis-open.org/wsn/b-2"
WSA = "http://www.w3.org/2005/08/addressing"
WSTOP = "http://docs.oasis-open.org/wsn/t-1"
TT = "http://www.onvif.org/ver10/schema"
_TOPIC_ATTR = f"{{{WSTOP}}}topic"
_MESSAGE_DESCRIPTION = f"{{{TT}}}MessageDescription"

#: deepest topic and most topics read from one camera's topic set (the Topic Set's own
#: depth limit, gateway/topics/topicset.py, is 64)
MAX_DEPTH = 64
MAX_TOPICS = 10_000

_PREFIX_USE = re.compile(r"([^\W\d][\w.\-]*):")
_SUFFIXES = ("//.", "/.", "/")


def detach(el: Element) -> Element:
    """A copy of `el` that stands alone: the namespace declarations it uses, also those
    whose prefix only occurs in its text or attribute values (QName values such as
    ``Type="xs:boolean"``), which a plain copy would lose."""
    copy = deepcopy(el)
    in_scope = {p: u for p, u in el.nsmap.items() if p}
    wanted: dict[str, str] = {}
    for node in copy.iter():
        chunks: list[str] = [str(v) for v in node.attrib.values()]
        if isinstance(node.text, str):
            chunks.append(node.text)
        for chunk in chunks:
            for m in _PREFIX_USE.finditer(chunk):
                p = m.group(1)
                if p in in_scope and copy.nsmap.get(p) != in_scope[p]:
                    wanted[p] = in_scope[p]
    if not wanted:
        return copy
    nsmap: dict[Any, str] = dict(copy.nsmap)
    nsmap.update(wanted)
    attrib: dict[str, str] = {str(k): str(v) for k, v in copy.attrib.items()}
    out = etree.Element(copy.tag, attrib=attrib, nsmap=nsmap)
    out.text = copy.text
    out.extend(list(copy))
    return out


def read_topic(
    text: str | None, nsmap: dict[str | None, str]
) -> tuple[topics.ConcreteTopic, dict[str, str]] | str:
    """The concrete topic a notification's wsnt:Topic names and the prefixes it wrote, or
    why it names none."""
    t = (text or "").strip()
    if not t:
        return "the notification has no topic"
    changed = True
    while changed:  # quirk: a Full suffix on a concrete topic
        changed = False
        for suffix in _SUFFIXES:
            if t.endswith(suffix) and len(t) > len(suffix):
                t = t[: -len(suffix)]
                changed = True
    scope: dict[str | None, str] = {p: u for p, u in nsmap.items() if p}
    if t.startswith("tns1:") and "tns1" not in scope:  # quirk: tns1 undeclared
        scope["tns1"] = topics.ONVIF_TOPICS
    try:
        expr = topics.compile_expression(topics.CONCRETE, t, scope)
    except topics.TopicError as e:
        return f"topic {t!r} is not a concrete topic: {e}"
    one = expr.single_topic()
    if one is None:
        return f"topic {t!r} names more than one topic"
    return one, expr.prefixes_used()


def read_notification(nm: Element, camera_id: str, fallback_producer: str) -> CameraEvent | str:
    """One wsnt:NotificationMessage -> CameraEvent, or why it cannot be used."""
    tel = nm.find(f"{{{WSNT}}}Topic")
    if tel is None:
        return "a NotificationMessage without wsnt:Topic"
    got = read_topic(tel.text, dict(tel.nsmap))
    if isinstance(got, str):
        return got
    mel = nm.find(f"{{{WSNT}}}Message")
    kids = [c for c in mel if isinstance(c.tag, str)] if mel is not None else []
    if len(kids) != 1:
        return "a NotificationMessage whose wsnt:Message does not hold exactly one element"
    pel = nm.find(f"{{{WSNT}}}ProducerReference")
    producer = (pel.findtext(f"{{{WSA}}}Address") or "").strip() if pel is not None else ""
    return CameraEvent(
        camera_id,
        got[0],
        got[1],
        detach(kids[0]),
        producer or fallback_producer,
        detach(pel) if pel is not None and producer else None,
    )


def notification_messages(container: Element) -> list[Element]:
    """The wsnt:NotificationMessage children of a PullMessagesResponse or wsnt:Notify."""
    return [c for c in container if c.tag == f"{{{WSNT}}}NotificationMessage"]


def read_topic_set(topic_set: Element | None) -> tuple[list[CameraTopic], list[str]]:
    """The topics of a camera's wstop:TopicSet (WS-Topics 1.3 §7), and what was skipped."""
    if topic_set is None:
        return [], []
    found: list[CameraTopic] = []
    skipped: list[str] = []
    leaves: list[CameraTopic] = []
    marked = False
    for el, topic, prefixes in _walk(topic_set, skipped):
        if len(found) >= MAX_TOPICS:
            skipped.append(f"more than {MAX_TOPICS} topics: the rest are not read")
            break
        desc = el.find(_MESSAGE_DESCRIPTION)
        ct = CameraTopic(
            topic,
            prefixes,
            detach(desc) if desc is not None else None,
            desc is not None and desc.get("IsProperty") in ("true", "1"),
        )
        if el.get(_TOPIC_ATTR) in ("true", "1"):
            marked = True
            found.append(ct)
        elif not any(_is_topic_element(c) for c in el):
            leaves.append(ct)
    return (found if marked else leaves), skipped


def _is_topic_element(el: Element) -> bool:
    if not isinstance(el.tag, str):
        return False
    ns = etree.QName(el).namespace
    return ns not in (TT, WSTOP)


def _walk(
    topic_set: Element, skipped: list[str]
) -> Iterator[tuple[Element, topics.ConcreteTopic, dict[str, str]]]:
    """(element, its topic, prefixes) of every topic element, depth first."""
    stack: list[tuple[Element, topics.ConcreteTopic | None, dict[str, str]]] = [
        (c, None, {}) for c in reversed(list(topic_set)) if _is_topic_element(c)
    ]
    while stack:
        el, parent, prefixes = stack.pop()
        q = etree.QName(el)
        ns, local = q.namespace or "", q.localname
        try:
            if parent is None:
                topic = topics.ConcreteTopic(ns, (local,))
                root_ns = ns
            else:
                root_ns = parent.namespace
                step = local if ns in ("", root_ns) else "{" + ns + "}" + local
                topic = parent.child(step)
        except topics.TopicError as e:
            skipped.append(str(e))
            continue
        if len(topic.path) > MAX_DEPTH:
            skipped.append(f"topic deeper than {MAX_DEPTH} levels: {topic}")
            continue
        mine = dict(prefixes)
        if ns and el.prefix and ns not in mine and (parent is None or ns != root_ns):
            mine[ns] = el.prefix
        yield el, topic, mine
        kids = [c for c in el if _is_topic_element(c)]
        stack.extend((c, topic, mine) for c in reversed(kids))
