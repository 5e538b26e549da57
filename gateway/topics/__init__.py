"""WS-Topics 1.3 engine: topic namespaces, topic sets, the four dialects,
validation, aliases and subscription matching. Pure Python + lxml, no I/O.

The names below are the contract the broker codes against
(docs/topics-api.md); see each module's docstring for what it guarantees.
"""

from .admission import inadmissible, unjudgeable
from .aliases import require_single_topic, resolve_expression, resolve_topic
from .compile import (
    compile_expression,
    parse_topic_expression_element,
    render_topic,
    topic_text,
)
from .dialects import (
    ACCEPTED_DIALECTS,
    CONCRETE,
    DIALECTS,
    FULL,
    SIMPLE,
    XPATH,
    canonical_dialect,
    concrete_of,
)
from .errors import (
    InvalidTopicExpression,
    InvalidTopicNamespace,
    MultipleTopicsSpecified,
    TopicError,
    TopicExpressionDialectUnknown,
    TopicNotInFixedSet,
    TopicNotPermitted,
    TopicNotSupported,
)
from .expression import TopicExpression
from .index import SubscriptionIndex
from .model import AD_HOC, WSTOP, ConcreteTopic, MessagePattern, Topic, TopicNamespace
from .namespace import hardened_parser, load_topic_namespace
from .path import PathExpression
from .prefixes import CONVENTIONAL, ONVIF_TOPICS, PrefixBook
from .topicset import TopicSet
from .xpath import XPathExpression

__all__ = [
    "ACCEPTED_DIALECTS",
    "AD_HOC",
    "CONCRETE",
    "CONVENTIONAL",
    "DIALECTS",
    "FULL",
    "ONVIF_TOPICS",
    "SIMPLE",
    "WSTOP",
    "XPATH",
    "ConcreteTopic",
    "InvalidTopicExpression",
    "InvalidTopicNamespace",
    "MessagePattern",
    "MultipleTopicsSpecified",
    "PathExpression",
    "PrefixBook",
    "SubscriptionIndex",
    "Topic",
    "TopicError",
    "TopicExpression",
    "TopicExpressionDialectUnknown",
    "TopicNamespace",
    "TopicNotInFixedSet",
    "TopicNotPermitted",
    "TopicNotSupported",
    "TopicSet",
    "XPathExpression",
    "canonical_dialect",
    "compile_expression",
    "concrete_of",
    "hardened_parser",
    "inadmissible",
    "load_topic_namespace",
    "parse_topic_expression_element",
    "render_topic",
    "require_single_topic",
    "resolve_expression",
    "resolve_topic",
    "topic_text",
    "unjudgeable",
]
