# PullPoints (WS-BaseNotification 1.3 §5): a fixed number of them, each a fixed-size ring that
# drops the oldest message when full and counts the drops.
#
# A ring item is either a string (the content of a wsnt:NotificationMessage received by Notify)
# or a tuple (subscription, topic index, payload, time) delivered in memory by one of the
# device's own subscriptions; the NotificationMessage is rendered only when fetched, to keep
# 32 messages small on a 64 KiB heap.
#
# And the producer's rarely used operations, imported on first use (issue 16: installed as .mpy
# files, the bytecode of these stays out of the heap until a client asks for them):
# GetCurrentMessage (WS-BaseNotification 1.3 §4.3), CreatePullPoint (§5.2) and the PullPoint's
# operations (§5.1), GetResourceProperty of the producer (§4.1) and of a subscription (§6.4).
# Each function takes the Producer `p` as its first argument and answers like its methods do:
# the Body content to send back, or a Fault.
from wsn.core import ns
from wsn.core import xml as X
from wsn.core.soap import Fault, dialect_fault, epr, unknown_fault, wrap
from wsn.core.subscriptions import Ring, new_id
from wsn.core.times import format_datetime


class PullPoint:
    def __init__(self, pid, size, now):
        self.id = pid
        self.ring = Ring(size)
        self.touched = now
        self.active = True


class PullPointTable:
    def __init__(self, count, size):
        self.slots = [None] * count
        self.size = size

    def __iter__(self):
        for p in self.slots:
            if p is not None:
                yield p

    def __len__(self):
        return sum(1 for p in self.slots if p is not None)

    def create(self, rand, now, idle_s=None):
        # -> PullPoint, or None when all slots are taken (after reclaiming idle ones)
        if idle_s:
            self.expire_idle(now, idle_s)
        for i in range(len(self.slots)):
            if self.slots[i] is None:
                p = PullPoint(new_id(rand, "p"), self.size, now)
                self.slots[i] = p
                return p
        return None

    def get(self, pid):
        for p in self.slots:
            if p is not None and p.id == pid:
                return p
        return None

    def remove(self, pid):
        for i in range(len(self.slots)):
            p = self.slots[i]
            if p is not None and p.id == pid:
                p.active = False
                self.slots[i] = None
                return p
        return None

    def expire_idle(self, now, idle_s):
        gone = []
        for p in list(self):
            if now - p.touched >= idle_s:
                self.remove(p.id)
                gone.append(p)
        return gone


_PATH_PPS = "/wsn/pullpoints/"
_GRPR = "wsrf-rp:GetResourcePropertyResponse"


def _exprs(t, mask):
    # one wsnt:TopicExpression (Simple dialect) per topic in the mask
    return "".join(['<wsnt:TopicExpression Dialect="%s">%s</wsnt:TopicExpression>' % (
        ns.SIMPLE, t.qname(i)) for i in range(len(t.names)) if mask & (1 << i)])


def _no_rp(uri, local):
    # WS-ResourceProperties 1.2 §5.2.3: the QName names no property of this resource
    return Fault("InvalidResourcePropertyQNameFault", "no property {%s}%s here" % (uri, local),
                 fns=ns.WSRF_RP)


def get_current(p, el):
    # WS-BaseNotification 1.3 §4.3
    topics = el.findall(ns.WSNT, "Topic")
    if not topics:
        raise Fault("InvalidTopicExpressionFault", "no wsnt:Topic")
    if len(topics) > 1:
        raise Fault("MultipleTopicsSpecifiedFault",
                    "%d topics: name one" % len(topics))
    te = topics[0]
    dialect = (te.get("Dialect") or "").strip()
    if dialect != ns.SIMPLE:
        raise dialect_fault(dialect)
    i = p.topics.resolve_simple(te)
    cur = p.current[i]
    if cur is None:
        raise Fault("NoCurrentMessageOnTopicFault",
                    "no reading on %s yet" % p.topics.names[i])
    return wrap("wsnt:GetCurrentMessageResponse", cur)


def create_pullpoint(p, now, actions):
    # WS-BaseNotification 1.3 §5.2
    pp = p.pullpoints().create(p.rand, now, p.L["pullpoint_idle_s"])
    if pp is None:
        raise Fault("UnableToCreatePullPointFault",
                    "all %d in use: destroy one" % len(p.pps.slots),
                    code="Receiver")
    actions.append(("pullpoint", pp))
    return wrap("wsnt:CreatePullPointResponse",
                epr(p.base + _PATH_PPS + pp.id, pp.id, "wsnt:PullPoint"))


def get_rp(p, el):
    # WS-ResourceProperties 1.2 GetResourceProperty; properties of WS-BaseNotification
    # 1.3 §4.1 plus edge:Status (drop counters).
    try:
        uri, local = el.resolve(el.value())
    except X.XMLError as e:
        raise Fault("InvalidResourcePropertyQNameFault", str(e), fns=ns.WSRF_RP)
    t = p.topics
    if uri == ns.WSNT and local == "TopicExpression":
        out = _exprs(t, t.all)
    elif uri == ns.WSNT and local == "TopicExpressionDialect":
        out = wrap("wsnt:TopicExpressionDialect", ns.SIMPLE)
    elif uri == ns.WSNT and local == "FixedTopicSet":
        out = wrap("wsnt:FixedTopicSet", "true")
    elif uri == ns.WSTOP and local == "TopicSet":
        out = t.topic_set_xml()
    elif uri == ns.EDGE and local == "Status":
        out = wrap("edge:Status", "".join([wrap("edge:" + k, v) for k, v in p.counters()]))
    else:
        raise _no_rp(uri, local)
    return wrap(_GRPR, out)


def sub_rp(p, el, sub, now, actions):
    # WS-BaseNotification 1.3 §6.4: a Subscription's resource properties
    try:
        uri, local = el.resolve(el.value())
    except X.XMLError as e:
        raise Fault("InvalidResourcePropertyQNameFault", str(e), fns=ns.WSRF_RP)
    if uri == ns.WSNT and local == "ConsumerReference":
        out = epr(sub.consumer, None, "wsnt:ConsumerReference")
    elif uri == ns.WSNT and local == "Filter":
        out = "" if sub.mask == p.topics.all else wrap("wsnt:Filter", _exprs(p.topics, sub.mask))
    elif uri == ns.WSNT and local == "SubscriptionPolicy":
        out = wrap("wsnt:SubscriptionPolicy", "<wsnt:UseRaw/>" if sub.raw else "")
    elif uri == ns.WSNT and local == "CreationTime":
        out = wrap("wsnt:CreationTime", format_datetime(sub.created))
    elif uri == ns.WSRF_RL and local == "CurrentTime":
        out = wrap("wsrf-rl:CurrentTime", format_datetime(now))
    elif uri == ns.WSRF_RL and local == "TerminationTime":
        if sub.expires is None:
            out = '<wsrf-rl:TerminationTime xmlns:xsi="%s" xsi:nil="true"/>' % ns.XSI
        else:
            out = wrap("wsrf-rl:TerminationTime", format_datetime(sub.expires))
    else:
        raise _no_rp(uri, local)
    return wrap(_GRPR, out)


def pullpoint(p, req, pid, now, actions):
    # WS-BaseNotification 1.3 §5.1
    el = req.body
    pp = p._pps.get(pid) if p._pps is not None else None
    if pp is None:
        raise unknown_fault(pid)
    pp.touched = now
    if el.ns == ns.WSNT and el.name == "GetMessages":
        mx = el.find(ns.WSNT, "MaximumNumber")
        n = None
        if mx is not None:
            v = mx.value()
            if not v.isdigit():
                raise Fault("UnableToGetMessagesFault", "MaximumNumber %s: want an int >= 0" % v)
            n = int(v)
        items = pp.ring.take(n)
        out = ["<wsnt:GetMessagesResponse>"]
        for it in items:
            out.append(wrap("wsnt:NotificationMessage",
                            it if isinstance(it, str) else p._nm_content(it)))
        out.append("</wsnt:GetMessagesResponse>")
        # in pieces: one per message
        return "http://docs.oasis-open.org/wsn/bw-2/PullPoint/GetMessagesResponse", out
    if el.ns == ns.WSNT and el.name == "DestroyPullPoint":
        p.pps.remove(pid)
        # subscriptions delivering into it would have nowhere to go: they end with it
        for s in list(p.subs):
            if s.pullpoint is pp:
                p.subs.remove(s.id)
                actions.append(("unsubscribed", s))
        actions.append(("destroyed", pp))
        return ("http://docs.oasis-open.org/wsn/bw-2/PullPoint/DestroyPullPointResponse",
                "<wsnt:DestroyPullPointResponse/>")
    # Notify into the pull point (§5.1.1): each NotificationMessage's content is kept as
    # received; any other body is a raw notification, kept as the Message.
    if el.ns == ns.WSNT and el.name == "Notify":
        for nm in el.findall(ns.WSNT, "NotificationMessage"):
            pp.ring.push(X.inner_xml(nm, req.buf))
    else:
        pp.ring.push(wrap("wsnt:Message", X.outer_xml(el, req.buf)))
    return None, None
