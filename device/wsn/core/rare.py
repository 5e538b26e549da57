# The producer's rarely used operations, imported on first use (installed as .mpy files, their
# bytecode stays out of the heap until a client asks for them): GetCurrentMessage
# (WS-BaseNotification 1.3 §4.3), CreatePullPoint (§5.2) and the PullPoint's operations (§5.1),
# GetResourceProperty of the producer (§4.1) and of a subscription (§6.4).
# Each is called by wsn.core.producer's dispatch table as f(p, req, target, now, actions) and
# answers the Body content to send back, or raises a Fault.
#
# A pull point is a fixed-size ring that drops the oldest message when full and counts the
# drops. A ring item is either a string (the content of a wsnt:NotificationMessage received by
# Notify) or a tuple (subscription, topic index, payload, time) delivered in memory by one of
# the device's own subscriptions; the NotificationMessage is rendered only when fetched, to keep
# 32 messages small on a 64 KiB heap.
from wsn.core import ns
from wsn.core import xml as X
from wsn.core.producer import Ring, new_id, time_el
from wsn.core.soap import Fault, epr, wrap


class PullPoint:
    def __init__(self, pid, size, now):
        self.id = pid
        self.ring = Ring(size)
        self.touched = now
        self.active = True


def get_current(p, req, _, now, actions):
    # WS-BaseNotification 1.3 §4.3. A Simple expression names one topic.
    topics = req.body.findall(ns.WSNT, "Topic")
    if len(topics) != 1:
        raise Fault("MultipleTopicsSpecifiedFault", "%d topics: name one" % len(topics)) if topics \
            else Fault("InvalidTopicExpressionFault", "no wsnt:Topic")
    i = p.topics.resolve_simple(topics[0], True)
    if p.current[i] is None:
        raise Fault("NoCurrentMessageOnTopicFault", "no reading on %s yet" % p.topics.names[i])
    return wrap("wsnt:GetCurrentMessageResponse", p.current[i])


def create_pullpoint(p, req, _, now, actions):
    # WS-BaseNotification 1.3 §5.2; pull points unused for pullpoint_idle_s are reclaimed first
    p.expire(now)
    n = p.L["max_pullpoints"]
    if len(p._pps) >= n:
        raise Fault("UnableToCreatePullPointFault", "all %d in use" % n,
                    code="Receiver")
    pp = PullPoint(new_id(p.rand, "p"), p.L["pullpoint_size"], now)
    p._pps.append(pp)
    actions.append(("pullpoint", pp))
    return wrap("wsnt:CreatePullPointResponse",
                epr(p.base + "/wsn/pullpoints/" + pp.id, pp.id, "wsnt:PullPoint"))


def _exprs(t, mask):
    # one wsnt:TopicExpression (Simple dialect) per topic in the mask
    return "".join(['<wsnt:TopicExpression Dialect="%s">%s</wsnt:TopicExpression>' % (
        ns.SIMPLE, t.qname(i)) for i in range(len(t.names)) if mask >> i & 1])


def get_rp(p, req, s, now, actions):
    # WS-ResourceProperties 1.2 GetResourceProperty: of the producer (s None; the properties of
    # WS-BaseNotification 1.3 §4.1 plus edge:Status, the drop counters) or of a subscription
    # (s; §6.4). A QName naming no property of the resource: InvalidResourcePropertyQNameFault
    # (WS-ResourceProperties 1.2 §5.2.3).
    el = req.body
    try:
        uri, local = el.resolve(el.value())
        k = "%s:%s" % (ns.prefix(uri), local)
    except X.XMLError as e:
        raise Fault("InvalidResourcePropertyQNameFault", str(e), ns.WSRF_RP)
    t = p.topics
    out = None
    if s is None:
        if k == "wsnt:TopicExpression":
            out = _exprs(t, t.all)
        elif k == "wsnt:TopicExpressionDialect":
            out = wrap(k, ns.SIMPLE)
        elif k == "wsnt:FixedTopicSet":
            out = wrap(k, "true")
        elif k == "wstop:TopicSet":
            out = t.topic_set_xml()
        elif k == "edge:Status":
            out = wrap(k, "".join([wrap("edge:" + n, v) for n, v in p.counters()]))
    elif k == "wsnt:ConsumerReference":
        out = epr(s.consumer, None, k)
    elif k == "wsnt:Filter":
        out = "" if s.mask == t.all else wrap(k, _exprs(t, s.mask))
    elif k == "wsnt:SubscriptionPolicy":
        out = wrap(k, "<wsnt:UseRaw/>" if s.raw else "")
    elif k == "wsnt:CreationTime":
        out = time_el(k, s.created)
    elif k == "wsrf-rl:CurrentTime":
        out = time_el(k, now)
    elif k == "wsrf-rl:TerminationTime":
        out = time_el(k, s.expires)
    if out is None:
        raise Fault("InvalidResourcePropertyQNameFault", "no property {%s}%s here" % (uri, local),
                    ns.WSRF_RP)
    return wrap("wsrf-rp:GetResourcePropertyResponse", out)


def get_messages(p, req, pp, now, actions):
    # WS-BaseNotification 1.3 §5.1.2: the answer in pieces, one per message
    mx = req.body.find(ns.WSNT, "MaximumNumber")
    n = None
    if mx is not None:
        n = mx.value()
        if not n.isdigit():
            raise Fault("UnableToGetMessagesFault", "MaximumNumber %s: want an int >= 0" % n)
        n = int(n)
    out = ["<wsnt:GetMessagesResponse>"]
    for it in pp.ring.take(n):
        out.append(wrap("wsnt:NotificationMessage",
                        it if isinstance(it, str) else p.nm_content(it)))
    out.append("</wsnt:GetMessagesResponse>")
    return out


def destroy_pullpoint(p, req, pp, now, actions):
    # subscriptions delivering into it would have nowhere to go: they end with it
    pp.active = False
    p._pps.remove(pp)
    for s in [s for s in p.subs if s.pullpoint is pp]:
        p._drop(s, actions)
    actions.append(("destroyed", pp))
    return "<wsnt:DestroyPullPointResponse/>"


def notify_pp(p, req, pp):
    # Notify into the pull point (§5.1.1): each NotificationMessage's content is kept as
    # received; any other body is a raw notification, kept as the Message.
    el = req.body
    if el.ns == ns.WSNT and el.name == "Notify":
        for nm in el.findall(ns.WSNT, "NotificationMessage"):
            # the content as received, with the declarations it inherits added to each child;
            # text is re-escaped
            m = X.escape(nm.text.strip())
            for c in nm.children:
                m += X.outer_xml(c, req.buf)
            pp.ring.push(m)
    else:
        pp.ring.push(wrap("wsnt:Message", X.outer_xml(el, req.buf)))
