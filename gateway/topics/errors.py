"""Errors of the topic engine; each maps 1:1 onto a WS-Notification fault.

A caller may rely on: every error raised by :mod:`gateway.topics` is a
:class:`TopicError`; ``str(error)`` is a reason a human can act on (it names
the offending expression or topic and says what is wrong with it).
"""

from __future__ import annotations


class TopicError(Exception):
    """Base class of every error raised by the topic engine."""

    #: local name of the WS-BaseNotification 1.3 fault the broker answers with
    fault: str = "TopicError"


class TopicExpressionDialectUnknown(TopicError):
    """The Dialect URI is none of the dialects this engine implements.

    -> ``wsnt:TopicExpressionDialectUnknownFault``.
    """

    fault = "TopicExpressionDialectUnknownFault"


class InvalidTopicExpression(TopicError):
    """The expression text does not conform to its dialect's grammar, or uses a
    namespace prefix with no in-scope declaration (WS-Topics 1.3 §8).

    -> ``wsnt:InvalidTopicExpressionFault``.
    """

    fault = "InvalidTopicExpressionFault"


class TopicNotSupported(TopicError):
    """The expression refers to a topic its Topic Namespace does not permit, the
    expression has no intersection with a fixed Topic Set (WS-Topics 1.3 §8.5),
    or a topic cannot be added to the Topic Set (§9).

    -> ``wsnt:TopicNotSupportedFault``.
    """

    fault = "TopicNotSupportedFault"


class TopicNotPermitted(TopicNotSupported):
    """§8.5 first rule / §9: a final Topic Namespace or a final Topic does not
    permit the topic. -> ``wsnt:TopicNotSupportedFault``."""


class TopicNotInFixedSet(TopicNotSupported):
    """§8.5 second rule: the producer's Topic Set is fixed and the expression
    selects none of its topics (or a new topic would have to be added).
    -> ``wsnt:TopicNotSupportedFault``."""


class MultipleTopicsSpecified(TopicError):
    """An operation needs exactly one concrete topic and the expression (after
    alias resolution, WS-Topics 2004 §8) identifies several or uses wildcards.

    -> ``wsnt:MultipleTopicsSpecifiedFault``.
    """

    fault = "MultipleTopicsSpecifiedFault"


class InvalidTopicNamespace(TopicError):
    """A ``wstop:TopicNamespace`` document is malformed or breaks a rule of
    WS-Topics 1.3 §5, §6 or §6.1 (raised when it is loaded or added)."""

    fault = "InvalidTopicNamespace"
