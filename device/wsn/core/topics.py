# The device's topic namespace document (WS-Topics 1.3 §6) and the Simple TopicExpression
# dialect (WS-Topics 1.3 §8.1): a TopicExpression is the QName of a root topic. Loaded for a
# request (and at boot for the document) and dropped when the device is idle again; the topic
# set itself is wsn.core.producer.TopicSet.
from micropython import const

from wsn.core import soap as S
from wsn.core import xml as X
from wsn.core.request import Fault

# namespaces and actions only this module uses: const(), no global in wsn.core.soap
_WSTOP = const("http://docs.oasis-open.org/wsn/t-1")


class TopicSet:
    # The device's topics (made by topic_set): root topics of one namespace (WS-Topics 1.3 §6),
    # ns, names; a topic is identified by its index (a set of topics is an int bit mask, `all`
    # the whole set: at most 30 keep it a small int on 32-bit boards). Documents write them as
    # dt:<name>, dt declared by `decl` on the element that holds them, whatever the namespace
    # is. (No method: the class of the device's one instance stays in the heap, this module
    # does not.)
    pass


def topic_set(ns, names):
    # -> the TopicSet of the root topics names in namespace ns
    if len(names) > 30:
        raise ValueError("at most 30 topics")
    ts = TopicSet()
    ts.ns = ns
    ts.names = list(names)
    ts.all = (1 << len(names)) - 1
    ts.decl = ' xmlns:dt="%s"' % S.escape(ns)
    return ts


def resolve(topics, el, dialect):
    # Resolve the Simple TopicExpression held by element el against the TopicSet topics, using
    # the namespace declarations in scope at el. -> topic index. Faults: with dialect, el's
    # Dialect attribute must be Simple (else TopicExpressionDialectUnknownFault);
    # InvalidTopicExpressionFault (not a QName, undeclared prefix) and TopicNotSupportedFault
    # (another namespace, or not one of our root topics). An unprefixed name is in no
    # namespace, whatever default namespace is in scope: WS-Topics 1.3 §10, the ad-hoc Topic
    # Namespace "is accessed by using TopicExpressions which are unqualified". So `temperature`
    # is one of our topics only if our topic namespace is the ad-hoc one ("").
    if dialect:
        d = (el.get("Dialect") or "").strip()
        if d != S.SIMPLE:
            raise Fault("TopicExpressionDialectUnknownFault", "dialect %s: use %s" % (d, S.SIMPLE))
    expr = el.text.strip()
    p, _, local = expr.rpartition(":")
    F = "InvalidTopicExpressionFault"
    if not X.is_name(local) or (p and not X.is_name(p)):
        raise Fault(F, "'%s': Simple names a root topic" % expr)
    uri = el.scope.get(p) if p else ""
    if uri is None:
        raise Fault(F, "prefix %s undeclared" % p)
    if uri != topics.ns or local not in topics.names:
        raise Fault("TopicNotSupportedFault", "{%s}%s: the topics are %s in %s" % (
            uri, local, " ".join(topics.names), topics.ns))
    return topics.names.index(local)


def load_namespace(buf):
    # Parse a wstop:TopicNamespace document (WS-Topics 1.3 §6.1) of root topics ->
    # (targetNamespace, [names]). Child topics are refused: the Simple dialect cannot reach
    # them (§8.1: simple namespaces SHOULD be used).
    root = X.parse(buf, 8, 512, 16)
    if root.ns != _WSTOP or root.name != "TopicNamespace":
        raise ValueError("not a wstop:TopicNamespace")
    tns = root.get("targetNamespace")
    if not tns:
        raise ValueError("no targetNamespace")
    names = []
    for t in root.findall(_WSTOP, "Topic"):
        n = t.get("name")
        if not n or not X.is_name(n) or ":" in n or n in names:
            raise ValueError("bad or duplicate topic name %r" % n)
        if t.find(_WSTOP, "Topic") is not None:
            raise ValueError("topic %s: no child topics" % n)
        names.append(n)
    return tns, names
