"""Which notifications a topic admits (WS-Topics 1.3 §6 ``@messageTypes`` and
``MessagePattern``).

A caller may rely on:

* :func:`inadmissible` returns None when a notification payload may be published on a
  topic and otherwise the reason, naming the topic and the constraint it breaks;
* ``@messageTypes`` (§6 line 379): "If the list is present then a Publisher using a given
  Topic MUST NOT generate a Notification with root element whose QName is not included in
  this list"; an empty or absent list admits any root element
  (:meth:`Topic.accepts_message`);
* ``MessagePattern`` (§6 line 398) in the XPath 1.0 dialect: "the object of a boolean()
  expression, evaluated against a Notification", which is "guaranteed to evaluate to
  true" for every Notification of the topic. It is evaluated with the payload as the root
  of its own document (as a MessageContent filter, WS-BaseNotification 1.3 §4.2) and the
  namespace declarations in scope of the MessagePattern element. A pattern in another
  dialect, or one that does not compile, cannot be judged: it admits everything, and
  :func:`unjudgeable` says why so the caller can log it;
* only the topic's own definition counts (§6 defines no inheritance from ancestors); a
  topic grown at run time (WS-Topics 1.3 §10) has no constraints.
"""

from __future__ import annotations

from functools import lru_cache

from lxml import etree

from .dialects import XPATH
from .model import MessagePattern, Topic


@lru_cache(maxsize=256)
def _compiled(pattern: MessagePattern) -> etree.XPath | str:
    """The compiled pattern, or why it cannot be evaluated."""
    if pattern.dialect.strip() != XPATH:
        return f"MessagePattern dialect {pattern.dialect!r} is not XPath 1.0 ({XPATH})"
    try:
        # regexp=False: no EXSLT regular expressions; XPath 1.0 reaches nothing outside
        xp = etree.XPath(f"boolean({pattern.text})", namespaces=dict(pattern.nsmap), regexp=False)
        xp(etree.fromstring(b"<probe/>"))  # undeclared prefixes show only when evaluated
        return xp
    except etree.XPathError as e:
        return f"MessagePattern {pattern.text!r} is not valid XPath 1.0: {e}"


def unjudgeable(definition: Topic | None) -> str | None:
    """Why the topic's MessagePattern cannot be evaluated (then it admits everything)."""
    if definition is None or definition.message_pattern is None:
        return None
    c = _compiled(definition.message_pattern)
    return c if isinstance(c, str) else None


def inadmissible(definition: Topic | None, topic: str, payload: etree._Element) -> str | None:
    """None if ``payload`` may be published on the topic ``definition`` describes, else
    the reason (``topic`` is its printable name)."""
    if definition is None:
        return None
    qn = payload.tag if isinstance(payload.tag, str) else ""
    if not definition.accepts_message(qn):
        return (
            f"root element {qn} is not among the messageTypes of topic {topic} "
            f"({' '.join(definition.message_types)}) (WS-Topics 1.3 §6)"
        )
    if definition.message_pattern is not None:
        c = _compiled(definition.message_pattern)
        if isinstance(c, str):
            return None
        doc = etree.fromstring(etree.tostring(payload))
        try:
            ok = bool(c(doc))
        except etree.XPathError:
            ok = False
        if not ok:
            return (
                f"payload {qn} does not match the MessagePattern "
                f"{definition.message_pattern.text!r} of topic {topic} (WS-Topics 1.3 §6)"
            )
    return None
