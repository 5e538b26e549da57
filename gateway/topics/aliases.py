"""Topic aliases: AliasRef resolution (WS-Topics 2004 "Topic Spaces" §8).

WS-Topics 1.3 dropped aliases; topic namespace documents written for the
2004 drafts still carry ``wstop:AliasRef`` and we honour them. A Topic whose
definition has an AliasRef is an *alias topic*; publishing or subscribing on it
means the non-alias topics it resolves to.

A caller may rely on, for an expression used as a parameter (2004 §8):

1. a concrete path naming a non-alias topic resolves to that topic (member of
   the Topic Set or not: the caller may be about to grow it);
2. a concrete path naming an alias topic resolves recursively through that
   alias's AliasRef;
3. a wildcard expression (Full with ``*``/``//``, or XPath) resolves to the
   non-alias topics it selects, without looking deeper into aliases;
4. each operand of ``|`` is resolved on its own by rules 1-3 and the results
   are united;
5. a branch that comes back to an alias already being resolved (a cycle)
   contributes nothing.

:func:`require_single_topic` is for operations that need one concrete topic
(Notify's wsnt:Topic, GetCurrentMessage): it raises
:class:`MultipleTopicsSpecified` when the expression selects several topics
(wildcards are fine when they select one), and :class:`TopicNotSupported`
when it selects none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import MultipleTopicsSpecified, TopicNotSupported
from .model import ConcreteTopic

if TYPE_CHECKING:
    from .expression import TopicExpression
    from .topicset import TopicSet


def _resolve(
    expr: TopicExpression, ts: TopicSet, visiting: frozenset[ConcreteTopic]
) -> set[ConcreteTopic]:
    out: set[ConcreteTopic] = set()
    for part in expr.parts():  # rule 4
        topic = part.single_topic()
        if topic is None:  # rule 3
            aliases = ts.alias_topics()
            out.update(t for t in part.select(ts) if t not in aliases)
            continue
        d = ts.definition(topic)
        if d is None or d.alias is None:  # rule 1
            out.add(topic)
        elif topic in visiting:  # rule 5
            continue
        else:  # rule 2
            out |= _resolve(d.alias, ts, visiting | {topic})
    return out


def resolve_expression(expr: TopicExpression, ts: TopicSet) -> frozenset[ConcreteTopic]:
    """The non-alias topics ``expr`` stands for (rules 1-5 above)."""
    return frozenset(_resolve(expr, ts, frozenset()))


def resolve_topic(topic: ConcreteTopic, ts: TopicSet) -> frozenset[ConcreteTopic]:
    """The non-alias topics a notification on ``topic`` is published to:
    ``{topic}`` unless it is an alias topic (rule 2)."""
    d = ts.definition(topic)
    if d is None or d.alias is None:
        return frozenset((topic,))
    return frozenset(_resolve(d.alias, ts, frozenset((topic,))))


def require_single_topic(expr: TopicExpression, ts: TopicSet) -> ConcreteTopic:
    """The one concrete topic ``expr`` identifies after alias resolution.

    WS-BaseNotification 1.3 §4.3: MultipleTopicsSpecifiedFault when "the
    GetCurrentMessage message referenced more than one topic". So the expression
    is evaluated against the Topic Set and judged by what it selects, not by its
    syntax: ``/wstop:TopicSet/tns:g1/a`` (XPath) or ``tns:*/a`` (Full) that
    select one topic are that topic.
    """
    topics = resolve_expression(expr, ts)
    if len(topics) > 1:
        raise MultipleTopicsSpecified(
            f"topic expression {expr.text!r} identifies {len(topics)} topics "
            f"({', '.join(sorted(map(str, topics)))}); this operation needs exactly one"
        )
    if not topics:
        raise TopicNotSupported(
            f"topic expression {expr.text!r} identifies no topic of the topic set (its "
            "wildcards or aliases select nothing, or its aliases form a cycle)"
        )
    return next(iter(topics))
