# The PullPoint (WS-BaseNotification 1.3 §5.1): CreatePullPoint at the producer (§5.2), and the
# pull point's GetMessages (§5.1.2), DestroyPullPoint (§5.1.4) and the Notify it keeps (§5.1.1).
# In the default package, but not in wsn.core.ops: a request for a pull point loads it (the
# operation table names it as it names an optional package) and the device drops it when idle
# again, so a device whose subscribers take pushes never loads it, nor keeps its names.
# Publishing into a pull point and reclaiming idle ones is wsn.core.producer (duck-typed: it
# needs no class of this module).
from wsn.core import soap as S
from wsn.core import xml as X
from wsn.core.ops import new_id
from wsn.core.producer import Ring
from wsn.core.request import Fault


class PullPoint(Ring):
    # §5.1: a ring of messages. An item is a str (the content of a wsnt:NotificationMessage
    # received by Notify) or a tuple (subscription, topic index, payload, time) delivered in
    # memory by one of our own subscriptions, rendered only when fetched (32 of them stay small
    # on a 64 KiB heap). id, touched (when last used: pullpoint_idle_s): create_pullpoint.
    active = True


def create_pullpoint(p, req, _, now, actions):
    # §5.2; pull points unused for pullpoint_idle_s are reclaimed first
    p.expire(now)
    n = p.L["max_pullpoints"]
    if len(p.pps) >= n:
        raise Fault("UnableToCreatePullPointFault", "all %d in use" % n, code="Receiver")
    pp = PullPoint(p.L["pullpoint_size"])
    pp.id = new_id(p.rand, "p")
    pp.touched = now
    p.pps.append(pp)
    actions.append(("pullpoint", pp))
    return S.wrap("wsnt:CreatePullPointResponse",
                  S.epr(p.base + "/wsn/pullpoints/" + pp.id, pp.id, "wsnt:PullPoint"))


def get_messages(p, req, pp, now, actions):
    # §5.1.2: the answer in pieces, one per message
    mx = req.body.find(S.WSNT, "MaximumNumber")
    n = None
    if mx is not None:
        n = mx.value()
        if not n.isdigit():
            raise Fault("UnableToGetMessagesFault", "MaximumNumber %s: want an int >= 0" % n)
        n = int(n)
    out = ["<wsnt:GetMessagesResponse%s>" % p.topics.decl]
    while len(pp) and (n is None or len(out) <= n):
        it = pp.pop()
        out.append(S.wrap("wsnt:NotificationMessage",
                          it if isinstance(it, str) else p.nm_content(it)))
    out.append("</wsnt:GetMessagesResponse>")
    return out


def destroy_pullpoint(p, req, pp, now, actions):
    # §5.1.4; subscriptions delivering into it would have nowhere to go: they end with it
    pp.active = False
    p.pps.remove(pp)
    for s in [s for s in p.subs if s.pullpoint is pp]:
        p.drop(s, actions)
    actions.append(("destroyed", pp))
    return "<wsnt:DestroyPullPointResponse/>"


def notify(p, req, pp, now, actions):
    # Notify into the pull point (§5.1.1): each NotificationMessage's content is kept as received
    # (with the declarations it inherits added to each child; text re-escaped); a raw
    # notification is kept as the Message. -> None: no answer but HTTP 202
    el = req.body
    if el.name == "Notify" and el.ns == S.WSNT:
        for nm in el.findall(S.WSNT, "NotificationMessage"):
            m = S.escape(nm.text.strip())
            for c in nm.children:
                m += X.outer_xml(c, req.buf)
            pp.push(m)
    else:
        pp.push(S.wrap("wsnt:Message", X.outer_xml(el, req.buf)))
