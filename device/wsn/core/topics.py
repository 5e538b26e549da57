# The device's topic namespace (WS-Topics 1.3 §6) and the Simple TopicExpression dialect
# (WS-Topics 1.3 §8.1): a TopicExpression is the QName of a root topic.
#
# The device publishes only root topics of one namespace (design.md: urn:wsn-edge:device-
# topics), so a topic is identified by its index in TopicSet.names; a set of topics is an
# int bit mask (at most 30 topics keep it a small int on 32-bit boards).
from micropython import const

from wsn.core import ns
from wsn.core import xml as X
from wsn.core.soap import Fault

_MAX_TOPICS = const(30)
_ITE = "InvalidTopicExpressionFault"


class TopicSet:
    def __init__(self, namespace, names):
        if len(names) > _MAX_TOPICS:
            raise ValueError("at most %d topics" % _MAX_TOPICS)
        self.ns = namespace
        self.names = list(names)
        self.all = (1 << len(self.names)) - 1

    def index(self, name):
        try:
            return self.names.index(name)
        except ValueError:
            return -1

    def qname(self, i):
        # as written in documents the device produces (dt: is declared on every Envelope)
        return "dt:" + self.names[i] if self.ns == ns.DT else self.names[i]

    def resolve_simple(self, el, text=None):
        # Resolve a Simple TopicExpression held by element el (its text, or `text`), using the
        # namespace declarations in scope at el. -> topic index. Faults:
        # InvalidTopicExpressionFault (not a QName, undeclared prefix) and
        # TopicNotSupportedFault (another namespace, or not one of our root topics).
        # An unprefixed name is in no namespace, whatever default namespace is in scope:
        # WS-Topics 1.3 §10, the ad-hoc Topic Namespace "is accessed by using
        # TopicExpressions which are unqualified". So `temperature` is one of our topics only
        # if our topic namespace is the ad-hoc one ("").
        expr = (el.text if text is None else text).strip()
        if not expr:
            raise Fault(_ITE, "empty TopicExpression")
        p, _, local = expr.rpartition(":")
        if not X._is_name(local) or (p and not X._is_name(p)):
            raise Fault(_ITE, "%s: Simple names one root topic by QName" % expr)
        uri = el.scope.get(p) if p else ""
        if uri is None:
            raise Fault(_ITE, "prefix %s undeclared" % p)
        if uri != self.ns:
            raise Fault("TopicNotSupportedFault", "namespace '%s': prefix it to %s" % (uri, self.ns))
        i = self.index(local)
        if i < 0:
            raise Fault("TopicNotSupportedFault", "no topic %s; topics: %s" % (
                local, " ".join(self.names)))
        return i

    def mask_names(self, mask):
        return [self.names[i] for i in range(len(self.names)) if mask & (1 << i)]

    def namespace_xml(self):
        # the wstop:TopicNamespace document content (also the wstop:TopicSet property)
        return "".join(['<wstop:Topic name="%s"/>' % n for n in self.names])

    def topic_set_xml(self):
        # WS-Topics 1.3 §7: a TopicSet lists topics as elements in their namespace
        return "<wstop:TopicSet>%s</wstop:TopicSet>" % "".join(
            ['<dt:%s wstop:topic="true"/>' % n for n in self.names])


def load_namespace(buf):
    # Parse a wstop:TopicNamespace document (WS-Topics 1.3 §6.1) of root topics ->
    # (targetNamespace, [names]). Child topics are refused: the Simple dialect cannot reach
    # them (§8.1: simple namespaces SHOULD be used).
    root = X.parse(buf, 8, 512)
    if root.ns != ns.WSTOP or root.name != "TopicNamespace":
        raise ValueError("not a wstop:TopicNamespace document")
    tns = root.get("targetNamespace")
    if not tns:
        raise ValueError("no targetNamespace")
    names = []
    for t in root.findall(ns.WSTOP, "Topic"):
        n = t.get("name")
        if not n or not X._is_name(n) or ":" in n:
            raise ValueError("bad topic name %r" % n)
        if t.find(ns.WSTOP, "Topic") is not None:
            raise ValueError("topic %s: child topics unsupported" % n)
        if n in names:
            raise ValueError("duplicate topic '%s'" % n)
        names.append(n)
    return tns, names
