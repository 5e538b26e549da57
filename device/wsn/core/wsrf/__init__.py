# Optional package: the device's resources as WS-Resources. GetResourceProperty
# (WS-ResourceProperties 1.2) of the producer (WS-BaseNotification 1.3 §4.1, plus edge:Status,
# the drop counters), of a subscription (§6.4.1: what Subscribe sent) and of a pull point (none
# of its own), and wsrf-rl:Destroy, the immediate termination (WS-ResourceLifetime 1.2) that
# subscriptions (§6.4) and pull points (§5.1) exposed as WS-Resources must support. Without
# it, these requests get wsa:ActionNotSupported (wsn.core.ops).
from micropython import const

from wsn.core import soap as S
from wsn.core import xml as X
from wsn.core.ops import counters, time_el
from wsn.core.pullpoint import destroy_pullpoint
from wsn.core.request import Fault, prefix, xmlns

_WSRF_RP = const("http://docs.oasis-open.org/wsrf/rp-2")


def _exprs(ts, idx):
    # one wsnt:TopicExpression (Simple dialect) per topic index
    return "".join(['<wsnt:TopicExpression Dialect="%s">dt:%s</wsnt:TopicExpression>' % (
        S.SIMPLE, ts.names[i]) for i in idx])


def get_rp(p, req, r, now, actions):
    # r: None (the producer), a subscription or a pull point. A QName naming no property of
    # the resource: InvalidResourcePropertyQNameFault (WS-ResourceProperties 1.2 §5.2.3). A
    # property the subscription does not have (no Filter or SubscriptionPolicy was sent:
    # minOccurs 0, §6.4.1) is an empty answer.
    el = req.body
    try:
        uri, local = el.resolve(el.value())
    except X.XMLError as e:
        raise Fault("InvalidResourcePropertyQNameFault", str(e), _WSRF_RP)
    k = "%s:%s" % (prefix(uri), local)
    ts = p.topics
    out = None
    if r is None:
        if k == "wsnt:TopicExpression":
            out = _exprs(ts, range(len(ts.names)))
        elif k == "wsnt:TopicExpressionDialect":
            out = S.wrap(k, S.SIMPLE)
        elif k == "wsnt:FixedTopicSet":
            out = S.wrap(k, "true")
        elif k == "wstop:TopicSet":
            # WS-Topics 1.3 §7: a TopicSet lists topics as elements in their namespace
            out = S.wrap(k, "".join(['<dt:%s wstop:topic="true"/>' % n for n in ts.names]))
        elif k == "edge:Status":
            out = S.wrap(k, "".join([S.wrap("edge:" + n, v) for n, v in counters(p)]))
    elif r.id[0] == "p":
        pass  # a pull point has no resource properties
    elif k == "wsnt:ConsumerReference":
        out = "<%s><wsa:Address>%s</wsa:Address>%s</%s>" % (
            k, S.escape(r.consumer), S.wrap("wsa:ReferenceParameters", r.rp) if r.rp else "", k)
    elif k == "wsnt:Filter":
        out = "" if r.filt is None else S.wrap(k, _exprs(ts, r.filt))
    elif k == "wsnt:SubscriptionPolicy":
        out = S.wrap(k, "<wsnt:UseRaw/>" if r.raw else "") if r.pol else ""
    elif k == "wsnt:CreationTime":
        out = time_el(k, r.created)
    elif k == "wsrf-rl:CurrentTime":
        out = time_el(k, now)
    elif k == "wsrf-rl:TerminationTime":
        out = time_el(k, r.expires)
    if out is None:
        raise Fault("InvalidResourcePropertyQNameFault", "no property {%s}%s here" % (
            uri, local), _WSRF_RP)
    return "<wsrf-rp:GetResourcePropertyResponse%s%s%s%s>%s</wsrf-rp:GetResourcePropertyResponse>" % (
        ts.decl, xmlns("wsrf-rp"), xmlns("wsrf-rl"), xmlns("wstop"), out)


def destroy(p, req, r, now, actions):
    # WS-ResourceLifetime 1.2 immediate termination: gone once answered; a pull point ends as
    # with DestroyPullPoint, with the subscriptions delivering into it
    if r.id[0] == "p":
        destroy_pullpoint(p, req, r, now, actions)
    else:
        p.drop(r, actions)
    return "<wsrf-rl:DestroyResponse%s/>" % xmlns("wsrf-rl")
