# The producer's requests (WS-BaseNotification 1.3): dispatch, Subscribe (§4.2), Renew
# (§6.1.1), Unsubscribe (§6.1.2), PauseSubscription (§6.2.1) and ResumeSubscription (§6.3).
# wsn.server loads it for a request (handle); the device drops it when it is idle again. The pull
# point's operations (wsn.core.pullpoint) and the optional ones (packages of their own:
# wsn.core.current, wsn.core.wsrf) are imported on first use: a request for one that is not
# installed gets wsa:ActionNotSupported, the fault for an action a node does not support
# (WS-Addressing 1.0 SOAP Binding §6.4.4).
from binascii import hexlify

from micropython import const

from wsn.core import request as R
from wsn.core import soap as S
from wsn.core import xml as X
from wsn.core.httpc import split_url
from wsn.core.producer import Producer, Ring, Subscription
from wsn.core.request import Fault
from wsn.core.topics import resolve

# namespaces and actions only this module uses: const(), no global in wsn.core.soap
_XSI = const("http://www.w3.org/2001/XMLSchema-instance")
_NOTIFY = const("http://docs.oasis-open.org/wsn/bw-2/NotificationConsumer/Notify")

# The operations, as data: one row per line, "<kind> <Body element> <handler> <portType>".
# kind: "-" producer, "s" subscription, "p" pull point; the Body element as "prefix:local" with
# the prefixes of soap.DECLS; handler: a function here, or "module.function" of a module of
# wsn.core imported on first use (the pull point, an optional package; a handler answering None
# kept a notification: HTTP 202); portType: index into _PORTS of the WSDL portType whose output
# action answers it: "http://docs.oasis-open.org/<portType>/<element>Response", the
# WS-Addressing 1.0 Metadata §4.4.4 default action of bw-2.wsdl (Pause/Resume: the
# PausableSubscriptionManager portType), rpw-2 and rlw-2. One string, not a tuple of tuples:
# mpy-cross stores each string of a constant tuple on its own, and a .mpy install makes each of
# them an object on the heap.
_PORTS = const(("wsn/bw-2/NotificationProducer", "wsn/bw-2/CreatePullPoint",
                "wsrf/rpw-2/GetResourceProperty", "wsn/bw-2/SubscriptionManager",
                "wsn/bw-2/PausableSubscriptionManager", "wsrf/rlw-2/ImmediateResourceTermination",
                "wsn/bw-2/PullPoint"))
_OPS = const(
    "\n- wsnt:Subscribe subscribe 0"
    "\n- wsnt:GetCurrentMessage current.get_current 0"
    "\n- wsnt:CreatePullPoint pullpoint.create_pullpoint 1"
    "\n- wsrf-rp:GetResourceProperty wsrf.get_rp 2"
    "\ns wsnt:Renew renew 3"
    "\ns wsnt:Unsubscribe state 3"
    "\ns wsnt:PauseSubscription state 4"
    "\ns wsnt:ResumeSubscription state 4"
    "\ns wsrf-rl:Destroy wsrf.destroy 5"
    "\ns wsrf-rp:GetResourceProperty wsrf.get_rp 2"
    "\np wsnt:GetMessages pullpoint.get_messages 6"
    "\np wsnt:DestroyPullPoint pullpoint.destroy_pullpoint 6"
    "\np wsnt:Notify pullpoint.notify 6"
    "\np wsrf-rl:Destroy wsrf.destroy 5"
    "\np wsrf-rp:GetResourceProperty wsrf.get_rp 2"
    "\n"
)


class Response:
    # body: bytes, or a list of bytes chunks (large answers, written one after the other)
    def __init__(self, status, ctype, body, actions):
        self.status = status
        self.ctype = ctype
        self.body = body
        self.actions = actions


def new_producer(device_id, topics, url, rand, limits):
    # The device's Producer (wsn.core.producer) of that id, TopicSet (wsn.core.topics) and base
    # URL; rand(n) returns n random bytes; limits: a dict (or None), completed with defaults().
    p = Producer()
    p.L = defaults(limits)
    p.device_id = device_id
    p.topics = topics
    p.base = url
    p.addr = url + "/wsn/producer"
    p.rand = rand
    p.subs = []
    p.pps = []
    p.current = [None] * len(topics.names)
    p.gateway = None
    p.gateway_rp = ""
    p.outbox = Ring(p.L["gateway_buffer"])
    p.consumer_allow = None
    p.queue_dropped = p.push_failed = p.published = 0
    return p


def defaults(L):
    # a Producer's limits: the caller's dict (or a new one), completed with the defaults (one
    # dict on the heap, not a copy)
    L = L if L is not None else {}
    for k, v in {
        "max_subscriptions": 8,  # table size
        "max_pullpoints": 2,
        "pullpoint_size": 32,  # messages per pull point (ring, drops the oldest)
        "pullpoint_idle_s": 3600,  # a pull point not used for this long may be reclaimed
        "max_request_bytes": 8192,  # larger bodies: HTTP 413
        "max_xml_depth": 16,
        "max_xml_elements": 128,  # ~133 B each on a 32-bit board
        "default_ttl_s": 3600,  # lifetime when Subscribe names none (0: unlimited)
        "max_ttl_s": 604800,  # longest accepted lifetime (0: unlimited, xsi:nil accepted)
        "queue_len": 4,  # pushes waiting per subscription (drops the oldest)
        "gateway_buffer": 64,  # pushes waiting for the gateway (drops the oldest, counted)
    }.items():
        if k not in L:
            L[k] = v
    return L


def new_id(rand, prefix):
    # ids are 64 random bits: the id in an address is the capability to manage it, and no
    # counter exists that could wrap and reuse one
    return prefix + hexlify(rand(8)).decode()


def get(p, key, kind):
    # the subscription (kind "s") or pull point ("p") of the id key, or None
    for x in p.subs if kind == "s" else p.pps:
        if x.id == key:
            return x


def counters(p):
    # the drop counters and sizes (edge:Status, /status)
    pd = 0
    for pp in p.pps:
        pd += pp.dropped
    return [("subscriptions", len(p.subs)), ("pullpoints", len(p.pps)),
            ("published", p.published), ("queueDropped", p.queue_dropped),
            ("pushFailed", p.push_failed), ("pullpointDropped", pd),
            ("gatewayBuffered", len(p.outbox)), ("gatewayDropped", p.outbox.dropped)]


def _text(status, text):
    return Response(status, "text/plain; charset=utf-8", text.encode() + b"\n", ())


def handle(p, method, path, body, now, ctype):
    # One HTTP request to the Producer p, its subscriptions or its pull points -> Response
    L = p.L
    kind = "-"
    rid = ""
    if path.startswith("/wsn/subscriptions/"):
        kind, rid = "s", path[19:]
    elif path.startswith("/wsn/pullpoints/"):
        kind, rid = "p", path[16:]
    elif path != "/wsn/producer":
        return _text(404, "no endpoint %s" % path)
    if method != "POST":
        return _text(405, "POST a SOAP envelope")
    if len(body) > L["max_request_bytes"]:
        return _text(413, "body over the %d-byte limit" % L["max_request_bytes"])
    actions = []
    req = None
    try:
        try:
            req = R.parse_request(body, L["max_xml_depth"], L["max_xml_elements"])
        except X.XMLError as e:
            raise Fault("", "malformed XML: %s" % e, S.SOAP12, base=False, status=400)
        r = req.resource_id
        if kind == "-" and r and r[:1] in ("s", "p"):
            # design.md: an EPR's edge:ResourceId reference parameter also selects it (its
            # first letter sliced, not indexed: wsn.core.xml.is_name says why)
            kind, rid = r[:1], r
        el = req.body
        if el is None:
            raise Fault("", "empty SOAP Body", S.SOAP12, base=False)
        # the operation's row in _OPS -> [handler, portType index], or None
        key = "\n%s %s:%s " % (kind, R.prefix(el.ns), el.name)
        op = _OPS.find(key)
        op = _OPS[op + len(key):_OPS.find("\n", op + 1)].split() if op >= 0 else None
        target = None
        if kind == "s":
            p.expire(now)
        if kind == "p" or (op and kind == "s"):
            target = get(p, rid, kind)
            if target is None:
                # WS-Resource 1.2 §4: ended, expired or never made
                raise Fault("ResourceUnknownFault", "no resource %s" % rid,
                            "http://docs.oasis-open.org/wsrf/r-2")
        if kind == "p":
            target.touched = now
            if op is None and req.action == _NOTIFY:
                # a raw notification: what §3.1 says a producer SHOULD send it with is the
                # Notify action; the pull point keeps it as it keeps a Notify (§5.1.1)
                op = ("pullpoint.notify", "6")
        why = "no operation {%s}%s here" % (el.ns, el.name)
        f = None
        if op:
            m, _, h = op[0].rpartition(".")
            if not m:
                f = globals()[h]
            else:
                # the pull point, or an optional package, imported on first use (then in
                # sys.modules until the device is idle again)
                try:
                    f = getattr(__import__("wsn.core." + m, None, None, (h,)), h)
                except ImportError:
                    why = "{%s}%s needs the package wsn/core/%s" % (el.ns, el.name, m)
        if f is None:
            raise Fault("ActionNotSupported", why, S.WSA, base=False, action=R.WSA_FAULT,
                        extra="<wsa:ProblemAction><wsa:Action>%s</wsa:Action></wsa:ProblemAction>"
                        % S.escape(req.action or ""))
        out = f(p, req, target, now, actions)
        if out is None:  # a notification kept: HTTP 202, no envelope
            return Response(202, S.content_type(req.version), b"", actions)
    except R.NotSoap as e:
        return _text(400, str(e))
    except Fault as f:
        v = req.version if req else (
            S.V11 if "soap+xml" not in ctype and R.compat() else S.V12)
        return Response(R.fault_status(v, f), S.content_type(v), R.fault_envelope(
            v, f, now, req and req.message_id).encode(), actions)
    env = S.envelope(req.version, "http://docs.oasis-open.org/%s/%sResponse" % (
        _PORTS[int(op[1])], el.name), out, req.message_id, None, "")
    return Response(200, S.content_type(req.version),
                    [c.encode() for c in env] if isinstance(env, list) else env.encode(), actions)


def time_el(name, t):
    # <name>xsd:dateTime of t</name> (every time element the device writes), or xsi:nil for
    # t None: no scheduled termination
    if t is None:
        return '<%s xmlns:xsi="%s" xsi:nil="true"/>' % (name, _XSI)
    return S.wrap(name, S.format_datetime(t))


def _unknown_children(el, keep, fault, text, name):
    # WS-BaseNotification 1.3 §4.2: the fault names every child it did not understand
    bad = ""
    first = None
    for c in el.children:
        if c.ns != S.WSNT or c.name != keep:
            first = first or c
            bad += '<%s xmlns:q="%s">q:%s</%s>' % (name, S.escape(c.ns), c.name, name) if c.ns \
                else S.wrap(name, c.name)
    if first:
        raise Fault(fault, "only %s, not {%s}%s" % (text, first.ns, first.name), extra=bad)
    return len(el.children)


def _term(p, el, now, fault):
    # InitialTerminationTime / TerminationTime -> absolute int seconds or None (none
    # scheduled). WS-BaseNotification 1.3 §4.2 and §6.1.1.
    L = p.L
    mx = L["max_ttl_s"]
    if el is None:
        return now + L["default_ttl_s"] if L["default_ttl_s"] else None
    why = t = None
    if el.get("{%s}nil" % _XSI) in ("true", "1"):
        if mx:
            why = "nil: at most %d s ahead" % mx
    else:
        try:
            t = X.parse_time(el.text, now)
            if t <= now:
                why = "%s is in the past" % S.format_datetime(t)
            elif mx and t - now > mx:
                why = "%s is over %d s ahead" % (S.format_datetime(t), mx)
        except X.XMLError as e:
            why = str(e)
    if why:
        raise Fault(fault, why, extra=time_el("wsnt:MinimumTime", now + 1) + (
            time_el("wsnt:MaximumTime", now + mx) if mx else ""))
    return t


def subscribe(p, req, _, now, actions):
    # WS-BaseNotification 1.3 §4.2
    el = req.body
    W = S.WSNT
    F = "SubscribeCreationFailedFault"
    cr = el.find(W, "ConsumerReference")
    addr, rp, at = R.read_epr(cr, req.buf) if cr is not None else (None, "", ())
    if not addr:
        raise Fault(F, "no ConsumerReference/wsa:Address")
    ts = p.topics
    mask = ts.all
    filt = None
    f = el.find(W, "Filter")
    if f is not None:
        _unknown_children(f, "TopicExpression", "InvalidFilterFault", "TopicExpression filters",
                          "wsnt:UnknownFilter")
        # several TopicExpressions must all match
        filt = bytes([resolve(ts, te, True) for te in f.children])
        for i in filt:
            mask &= 1 << i
    pol = el.find(W, "SubscriptionPolicy")
    raw = pol is not None and _unknown_children(
        pol, "UseRaw", "UnrecognizedPolicyRequestFault", "wsnt:UseRaw",
        "wsnt:UnrecognizedPolicy") > 0
    expires = _term(p, el.find(W, "InitialTerminationTime"), now,
                    "UnacceptableInitialTerminationTimeFault")
    # a consumer address naming one of our pull points is delivered in memory (no HTTP);
    # host spellings differ (127.0.0.1, localhost, the advertised name): compare the port
    # and the path
    k = addr.find("/wsn/pullpoints/")
    pp = None
    if k > 0 and addr[:7] == "http://" and \
            addr[7:k].rpartition(":")[2] == p.base[7:].rpartition(":")[2]:
        pp = get(p, addr[k + 16:], "p")
    if pp is None:
        try:
            split_url(addr)
        except ValueError:
            raise Fault(F, "not http://host[:port]/path: %s" % addr)
        for a in p.consumer_allow or ():
            if addr.startswith(a):
                break
        else:
            if p.consumer_allow is not None:
                raise Fault(F, "not in consumer_allow: %s" % addr)
    mx = p.L["max_subscriptions"]
    if len(p.subs) >= mx:
        p.expire(now)  # reclaim the expired first
        if len(p.subs) >= mx:
            raise Fault(F, "table full (%d)" % mx, code="Receiver")
    for o in p.subs:  # the gateway subscribes once per topic: share its strings
        if o.consumer == addr:
            addr = o.consumer
        if o.rp == rp:
            rp = o.rp
    s = Subscription()
    s.id = new_id(p.rand, "s")
    s.consumer = addr
    s.mask = mask
    s.expires = expires
    s.created = now
    # only what differs from the class defaults
    if rp:
        s.rp = rp
        s.at = at
    if filt is not None:
        s.filt = filt
    if pol is not None:
        s.pol = True
    if raw:
        s.raw = True
    if req.version != S.V12:
        s.version = req.version
    if pp is not None:
        s.pullpoint = pp
    p.subs.append(s)
    actions.append(("subscribed", s))
    return "<wsnt:SubscribeResponse>%s%s%s</wsnt:SubscribeResponse>" % (
        S.epr(p.base + "/wsn/subscriptions/" + s.id, s.id, "wsnt:SubscriptionReference"),
        time_el("wsnt:CurrentTime", now),
        "" if expires is None else time_el("wsnt:TerminationTime", expires))


def renew(p, req, s, now, actions):
    # §6.1.1
    tt = req.body.find(S.WSNT, "TerminationTime")
    F = "UnacceptableTerminationTimeFault"
    if tt is None:
        raise Fault(F, "no TerminationTime", extra=time_el("wsnt:MinimumTime", now + 1))
    s.expires = _term(p, tt, now, F)
    return S.wrap("wsnt:RenewResponse", time_el("wsnt:TerminationTime", s.expires) +
                  time_el("wsnt:CurrentTime", now))


def state(p, req, s, now, actions):
    # Unsubscribe (§6.1.2: gone once answered); Pause/Resume (§6.2.1: while paused nothing is
    # produced for it; on resume only new readings, option 3; pushes already queued stay)
    n = req.body.name
    if n == "Unsubscribe":
        p.drop(s, actions)
    else:
        s.paused = n[0] == "P"
        actions.append(("paused" if s.paused else "resumed", s))
    return "<wsnt:%sResponse/>" % n
