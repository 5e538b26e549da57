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

# namespaces and actions only this module uses: const(), no global in wsn.core.ns
_WSTOP = const("http://docs.oasis-open.org/wsn/t-1")


class TopicSet:
    def __init__(self, namespace, names):
        if len(names) > 30:
            raise ValueError("at most 30 topics")
        self.ns = namespace
        self.names = list(names)
        self.all = (1 << len(self.names)) - 1

    def index(self, name):
        return self.names.index(name) if name in self.names else -1

    def qname(self, i):
        # as written in documents the device produces (dt: is declared on every Envelope)
        return "dt:" + self.names[i] if self.ns == ns.DT else self.names[i]

    def resolve_simple(self, el, dialect=False):
        # Resolve the Simple TopicExpression held by element el, using the namespace
        # declarations in scope at el. -> topic index. Faults: with dialect, el's Dialect
        # attribute must be Simple (else TopicExpressionDialectUnknownFault);
        # InvalidTopicExpressionFault (not a QName, undeclared prefix) and
        # TopicNotSupportedFault (another namespace, or not one of our root topics).
        # An unprefixed name is in no namespace, whatever default namespace is in scope:
        # WS-Topics 1.3 §10, the ad-hoc Topic Namespace "is accessed by using
        # TopicExpressions which are unqualified". So `temperature` is one of our topics only
        # if our topic namespace is the ad-hoc one ("").
        if dialect:
            d = (el.get("Dialect") or "").strip()
            if d != ns.SIMPLE:
                raise Fault("TopicExpressionDialectUnknownFault", "dialect %s: use %s" % (d, ns.SIMPLE))
        expr = el.text.strip()
        p, _, local = expr.rpartition(":")
        F = "InvalidTopicExpressionFault"
        if not expr:
            raise Fault(F, "empty TopicExpression")
        if not X.is_name(local) or (p and not X.is_name(p)):
            raise Fault(F, "%s: Simple names a root topic" % expr)
        uri = el.scope.get(p) if p else ""
        if uri is None:
            raise Fault(F, "prefix %s undeclared" % p)
        if uri != self.ns:
            raise Fault("TopicNotSupportedFault", "namespace '%s': prefix it to %s" % (uri, self.ns))
        i = self.index(local)
        if i < 0:
            raise Fault("TopicNotSupportedFault", "no topic %s; topics: %s" % (
                local, " ".join(self.names)))
        return i

    def mask_names(self, mask):
        return [n for i, n in enumerate(self.names) if mask >> i & 1]

    def topic_set_xml(self):
        # WS-Topics 1.3 §7: a TopicSet lists topics as elements in their namespace
        return "<wstop:TopicSet>%s</wstop:TopicSet>" % "".join(
            ['<dt:%s wstop:topic="true"/>' % n for n in self.names])


def load_namespace(buf):
    # Parse a wstop:TopicNamespace document (WS-Topics 1.3 §6.1) of root topics ->
    # (targetNamespace, [names]). Child topics are refused: the Simple dialect cannot reach
    # them (§8.1: simple namespaces SHOULD be used).
    root = X.parse(buf, 8, 512)
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
