"""The topic model of WS-Topics 1.3: concrete topics, Topic definitions and
Topic Namespaces (§5, §6).

A caller may rely on:

* :class:`ConcreteTopic` is hashable, immutable and totally identifies one node
  of a Topic Set. ``namespace`` is the namespace of the *root* topic of the
  path (``""`` for the ad-hoc Topic Namespace of §10) and ``path`` the names
  from that root down. A step that enters an extension topic (§6.1) from
  another namespace is written in Clark notation, ``"{urn:ns2}t3"``; every other
  step is a bare NCName. So ``tns1:t1/tns2:t3`` is
  ``ConcreteTopic("urn:ns1", ("t1", "{urn:ns2}t3"))`` and ``str()`` of it is
  ``"{urn:ns1}t1/{urn:ns2}t3"``.
* :class:`Topic` and :class:`TopicNamespace` are the parsed definitions of a
  ``wstop:TopicNamespace`` document; they are not modified after loading.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .errors import InvalidTopicExpression

if TYPE_CHECKING:
    from .expression import TopicExpression

#: WS-Topics 1.3 namespace (the t-1 schema)
WSTOP = "http://docs.oasis-open.org/wsn/t-1"
#: WS-Topics 2004 (IBM "Topic Spaces" draft) namespace, accepted when loading
WSTOP_2004 = "http://www.ibm.com/xmlns/stdwip/web-services/WS-Topics"
#: the ad-hoc Topic Namespace (WS-Topics 1.3 §10) is the empty namespace
AD_HOC = ""

# XML 1.0 NCName, close enough for topic names: a letter or "_" first, then
# letters, digits, ".", "-", "_", combining marks (all matched by \w here).
_NCNAME = re.compile(r"[^\W\d][\w.\-\u00b7\u0300-\u036f\u203f-\u2040]*\Z")


def is_ncname(text: str) -> bool:
    """True if ``text`` is an XML NCName (no colon)."""
    return bool(_NCNAME.match(text))


def split_step(step: str) -> tuple[str | None, str]:
    """``"{ns}t3"`` -> ``("ns", "t3")``; ``"t3"`` -> ``(None, "t3")``."""
    if step.startswith("{"):
        ns, _, local = step[1:].partition("}")
        return ns, local
    return None, step


def make_step(namespace: str | None, local: str) -> str:
    """Inverse of :func:`split_step`."""
    return local if namespace is None else "{" + namespace + "}" + local


@dataclass(frozen=True, slots=True)
class ConcreteTopic:
    """One topic: the namespace of its root topic and its path from that root.

    See the module docstring for the notation of extension steps.
    """

    namespace: str
    path: tuple[str, ...]

    def __post_init__(self) -> None:
        # An empty path is allowed as a key meaning "no topic" (a Notify
        # without wsnt:Topic); it is never a member and cannot be grown.
        for i, step in enumerate(self.path):
            ns, local = split_step(step)
            if not is_ncname(local) or (ns is not None and i == 0):
                raise InvalidTopicExpression(
                    f"{step!r} is not a valid topic name at step {i + 1} of {self.path!r}"
                )

    def __str__(self) -> str:
        return "{" + self.namespace + "}" + "/".join(self.path)

    @classmethod
    def parse(cls, text: str) -> ConcreteTopic:
        """Inverse of ``str()``: ``"{urn:x}a/b"`` (or ``"a/b"`` for ad-hoc)."""
        ns = AD_HOC
        rest = text
        if text.startswith("{"):
            ns, sep, rest = text[1:].partition("}")
            if not sep:
                raise InvalidTopicExpression(f"unterminated namespace in {text!r}")
        return cls.from_path(ns, rest)

    @classmethod
    def from_path(cls, namespace: str, path_text: str) -> ConcreteTopic:
        """Inverse of :attr:`path_text`: splits on "/" outside ``{...}`` (the
        namespace URIs of extension steps contain slashes); "" -> empty path."""
        if not path_text:
            return cls(namespace, ())
        steps: list[str] = []
        buf: list[str] = []
        depth = 0
        for c in path_text:
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            if c == "/" and depth == 0:
                steps.append("".join(buf))
                buf = []
            else:
                buf.append(c)
        steps.append("".join(buf))
        return cls(namespace, tuple(steps))

    @property
    def path_text(self) -> str:
        """``"a/b"``, extension steps in Clark notation (for storage and the
        landing zone's ``topic_path``); :meth:`from_path` reads it back."""
        return "/".join(self.path)

    @property
    def name(self) -> str:
        """Local name of the topic (last step); "" for the empty path."""
        return split_step(self.path[-1])[1] if self.path else ""

    @property
    def topic_namespace(self) -> str:
        """Namespace the topic itself belongs to: that of the last extension
        step on its path, else that of its root (WS-Topics 1.3 §6, §6.1)."""
        for step in reversed(self.path):
            ns, _ = split_step(step)
            if ns is not None:
                return ns
        return self.namespace

    @property
    def is_root(self) -> bool:
        return len(self.path) == 1

    def parent(self) -> ConcreteTopic | None:
        return ConcreteTopic(self.namespace, self.path[:-1]) if len(self.path) > 1 else None

    def child(self, step: str) -> ConcreteTopic:
        return ConcreteTopic(self.namespace, (*self.path, step))

    def ancestors(self) -> Iterator[ConcreteTopic]:
        """Proper ancestors, root first."""
        for n in range(1, len(self.path)):
            yield ConcreteTopic(self.namespace, self.path[:n])

    def element_names(self) -> tuple[tuple[str, str], ...]:
        """(namespace, local) of each element from the root topic down, as the
        topic appears in the TopicSet document (§7): children are unqualified
        (namespace ``""``), extension steps carry their namespace."""
        if not self.path:
            return ()
        out = [(self.namespace, self.path[0])]
        for step in self.path[1:]:
            ns, local = split_step(step)
            out.append((ns or "", local))
        return tuple(out)


@dataclass(frozen=True, slots=True)
class MessagePattern:
    """``wstop:Topic/wstop:MessagePattern`` (§6): a QueryExpression."""

    dialect: str
    text: str
    nsmap: tuple[tuple[str, str], ...] = ()


@dataclass(eq=False)
class Topic:
    """A Topic definition from a Topic Namespace document (WS-Topics 1.3 §6).

    ``namespace`` is the targetNamespace of the defining document;
    ``message_types`` are Clark names ``"{ns}local"`` (duplicates dropped, §6);
    ``parent`` is the raw ``@parent`` of an extension topic (§6.1), already
    resolved to a :class:`ConcreteTopic`; ``alias`` is the compiled AliasRef
    expression of an alias topic (WS-Topics 2004 §8) or None.
    """

    name: str
    namespace: str
    message_types: tuple[str, ...] = ()
    final: bool = False
    message_pattern: MessagePattern | None = None
    children: dict[str, Topic] = field(default_factory=dict)
    parent: ConcreteTopic | None = None
    alias: TopicExpression | None = None

    @property
    def is_extension(self) -> bool:
        return self.parent is not None

    def accepts_message(self, qname: str) -> bool:
        """True if a Notification whose root element is ``qname`` (Clark
        notation) may be published on this topic (§6 @messageTypes: an empty
        or absent list allows any element)."""
        return not self.message_types or qname in self.message_types

    def walk(self, prefix: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Topic]]:
        """(path, topic) of this topic and its descendants, ``prefix`` being the
        path of this topic."""
        yield prefix, self
        for name, child in self.children.items():
            yield from child.walk((*prefix, name))


@dataclass(eq=False)
class TopicNamespace:
    """A ``wstop:TopicNamespace`` (WS-Topics 1.3 §5): its root topics by name
    (extension topics included, they are roots in their own namespace)."""

    target_namespace: str
    name: str | None = None
    final: bool = False
    topics: dict[str, Topic] = field(default_factory=dict)

    def root(self, name: str) -> Topic | None:
        return self.topics.get(name)
