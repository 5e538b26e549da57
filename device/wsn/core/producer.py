# The device's NotificationProducer, SubscriptionManager and PullPoint as one sans-I/O object.
#
#   p = Producer(device_id, topicset, "http://host:port", rand, limits)
#   r = p.handle("POST", "/wsn/producer", body_bytes, now, content_type)
#       -> Response(status, content_type, body bytes, actions)
#   kick, gw = p.publish(topic_index, payload_xml, now)   # a new reading
#   url, body, ctype = p.render(item, gateway)            # one push, rendered when sent
#   gone = p.expire(now)                                  # scheduled termination
#
# `now` is int seconds since 2000-01-01 (wsn.core.xml, format_datetime); `rand(n)` returns n random bytes.
# Nothing here blocks, sleeps or touches the network: pushes are queued on the subscription
# (or in the gateway outbox, or delivered in memory into one of our own pull points) and the
# I/O layer sends them. Subscriptions live in a list of at most max_subscriptions (ids are 64
# random bits: the id in an address is the capability to manage it, and no counter exists
# that could wrap and reuse one).
from binascii import hexlify

from micropython import const

from wsn.core import ns
from wsn.core import xml as X
from wsn.core.httpmsg import split_url
from wsn.core.soap import Fault, NotSoap, envelope, epr, fault_envelope, fault_status, parse_request, read_epr, wrap

# namespaces and actions only this module uses: const(), no global in wsn.core.ns
_XSI = const("http://www.w3.org/2001/XMLSchema-instance")
_WSRF_R = const("http://docs.oasis-open.org/wsrf/r-2")
_NOTIFY = const("http://docs.oasis-open.org/wsn/bw-2/NotificationConsumer/Notify")

_SUBS = const("/wsn/subscriptions/")
_PPS = const("/wsn/pullpoints/")
PRODUCER_PATH = "/wsn/producer"

# The operations, as data: one row per line, "<kind> <Body element> <handler> <portType>".
# kind: "-" producer, "s" subscription, "p" pull point; the Body element as "prefix:local" with
# the prefixes of ns.DECLS; handler: "_x" a method here, else a function of wsn.core.rare,
# imported on first use; portType: index into _PORTS of the WSDL portType whose output action
# answers it: "http://docs.oasis-open.org/<portType>/<element>Response", the WS-Addressing 1.0
# Metadata §4.4.4 default action of bw-2.wsdl (Pause/Resume: the PausableSubscriptionManager
# portType), rpw-2 and rlw-2. One string, not a tuple of tuples: mpy-cross stores each string
# of a constant tuple on its own, and a .mpy install makes each of them an object on the heap
# (the rows as tuples took 768 B more heap there).
# WS-BaseNotification 1.3 §4.2 Subscribe, §4.3 GetCurrentMessage, §5.2 CreatePullPoint, §4.1
# and §6.4 GetResourceProperty, §6.1.1 Renew, §6.1.2 Unsubscribe, §6.2.1 PauseSubscription,
# §6.3 ResumeSubscription, §6.4 +
# WS-ResourceLifetime 1.2 §4.1 Destroy (immediate termination), WS-BaseNotification 1.3 §5.1
# the PullPoint's.
_PORTS = const(("wsn/bw-2/NotificationProducer", "wsn/bw-2/CreatePullPoint",
                "wsrf/rpw-2/GetResourceProperty", "wsn/bw-2/SubscriptionManager",
                "wsn/bw-2/PausableSubscriptionManager", "wsrf/rlw-2/ImmediateResourceTermination",
                "wsn/bw-2/PullPoint"))
_OPS = const(
    "\n- wsnt:Subscribe _subscribe 0"
    "\n- wsnt:GetCurrentMessage get_current 0"
    "\n- wsnt:CreatePullPoint create_pullpoint 1"
    "\n- wsrf-rp:GetResourceProperty get_rp 2"
    "\ns wsnt:Renew _renew 3"
    "\ns wsnt:Unsubscribe _state 3"
    "\ns wsnt:PauseSubscription _state 4"
    "\ns wsnt:ResumeSubscription _state 4"
    "\ns wsrf-rl:Destroy _state 5"
    "\ns wsrf-rp:GetResourceProperty get_rp 2"
    "\np wsnt:GetMessages get_messages 6"
    "\np wsnt:DestroyPullPoint destroy_pullpoint 6"
    "\n"
)


class Response:
    # body: bytes, or a list of bytes chunks (large answers, written one after the other)
    def __init__(self, status, ctype, body, actions):
        self.status = status
        self.ctype = ctype
        self.body = body
        self.actions = actions


class Ring:
    # A fixed-size FIFO that drops the oldest item when full and counts what it dropped: the
    # pull point (WS-BaseNotification 1.3 §5.1.1 lets a full PullPoint "dispose of previously
    # accumulated Notification Messages"), a subscription's push queue, the gateway buffer.
    # counters start as class attributes: an instance stores only those that moved; the
    # slots are allocated by the first push (a gateway buffer nobody uses costs no heap)
    head = count = dropped = total = 0
    slots = ()

    def __init__(self, size):
        if size < 1:
            raise ValueError("ring size must be >= 1")
        self.size = size

    def __len__(self):
        return self.count

    def push(self, item):
        # -> True if the oldest item had to be dropped to make room
        n = self.size
        if not self.slots:
            self.slots = [None] * n
        self.total += 1
        full = self.count == n
        self.slots[(self.head + self.count) % n] = item
        if full:
            self.head = (self.head + 1) % n
            self.dropped += 1
        else:
            self.count += 1
        return full

    def peek(self):
        return self.slots[self.head] if self.count else None

    def pop(self):
        item = self.peek()
        if self.count:
            self.slots[self.head] = None
            self.head = (self.head + 1) % self.size
            self.count -= 1
        return item

    def take(self, n):
        # remove and return up to n oldest items (all if n is None), oldest first
        out = []
        while self.count and (n is None or len(out) < n):
            out.append(self.pop())
        return out

    def clear(self):
        self.take(None)


def new_id(rand, prefix):
    return prefix + hexlify(rand(8)).decode()


class Subscription:
    # defaults as class attributes: each subscription's own dict holds only what differs
    # from them (a smaller dict per subscription on a small heap)
    pullpoint = None  # PullPoint if the consumer is one of ours (in-memory delivery)
    paused = sending = False  # the I/O layer runs one sender per subscription
    active = True
    delivered = failed = 0

    def __init__(self, p, consumer, refparams, mask, raw, expires, version, created, qlen):
        self.id = new_id(p.rand, "s")
        self.consumer = consumer  # ConsumerReference address
        self.refparams = refparams  # its reference parameters, as header XML to echo
        self.mask = mask  # topic bit mask (TopicSet indices); all topics if no filter
        self.raw = raw  # wsnt:UseRaw
        self.expires = expires  # int seconds since 2000, or None (no scheduled termination)
        self.version = version  # SOAP version of the Subscribe: pushes use the same
        self.created = created
        self.queue = Ring(qlen) if qlen else None  # pending pushes


def _text(status, msg):
    return Response(status, "text/plain; charset=utf-8", msg.encode() + b"\n", ())


def time_el(tag, t):
    # <tag>xsd:dateTime of t</tag> (every time element the device writes), or xsi:nil for
    # t None: no scheduled termination
    if t is None:
        return '<%s xmlns:xsi="%s" xsi:nil="true"/>' % (tag, _XSI)
    return wrap(tag, X.format_datetime(t))


def _unknown_children(parent, keep, fault, what, tag):
    # WS-BaseNotification 1.3 §4.2: the fault names every child it did not understand
    bad = ""
    first = None
    for c in parent.children:
        if c.ns != ns.WSNT or c.name != keep:
            first = first or c
            bad += '<%s xmlns:q="%s">q:%s</%s>' % (tag, X.escape(c.ns), c.name, tag) if c.ns \
                else wrap(tag, c.name)
    if first:
        raise Fault(fault, "only %s, not %s" % (what, "{%s}%s" % (first.ns, first.name)), extra=bad)
    return len(parent.children)


class Producer:
    def __init__(self, device_id, topics, base_url, rand, limits):
        # the caller's dict, completed with the defaults (one dict on the heap, not a copy)
        # (a dict made here, not a constant tuple of pairs: its keys are the same string
        # objects as the L["..."] lookups below, stored once in the .mpy; it is garbage after)
        L = limits if limits is not None else {}
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
        self.L = L
        self.device_id = device_id
        self.topics = topics
        self.base = base_url
        self.addr = base_url + PRODUCER_PATH
        self.rand = rand
        self.subs = []  # at most max_subscriptions
        self._pps = []  # pull points (wsn.core.rare), at most max_pullpoints
        self.current = [None] * len(topics.names)  # last payload per topic
        self.gateway = None  # the gateway's ConsumerReference address (registration)
        self.gateway_rp = ""  # its reference parameters (header XML)
        self.outbox = Ring(L["gateway_buffer"])
        self.consumer_allow = None  # list of allowed consumer address prefixes, or None
        self.queue_dropped = self.push_failed = self.published = 0

    def get(self, rid, kind):
        # the subscription (kind "s") or pull point ("p") of that id, or None
        for x in self.subs if kind == "s" else self._pps:
            if x.id == rid:
                return x

    def _drop(self, s, actions):
        s.active = False
        self.subs.remove(s)
        if actions is not None:
            actions.append(("unsubscribed", s))

    # ------------------------------------------------------------------ HTTP entry point
    def handle(self, method, path, body, now, ctype):
        L = self.L
        kind = None
        rid = ""
        if path.startswith(_SUBS):
            kind, rid = "s", path[19:]
        elif path.startswith(_PPS):
            kind, rid = "p", path[16:]
        elif path != PRODUCER_PATH:
            return _text(404, "no endpoint %s" % path)
        if method != "POST":
            return _text(405, "POST a SOAP envelope")
        if len(body) > L["max_request_bytes"]:
            return _text(413, "body over the %d-byte limit" % L["max_request_bytes"])
        version = ns.V12 if "soap+xml" in ctype else ns.V11
        actions = []
        mid = None
        try:
            try:
                req = parse_request(body, L["max_xml_depth"], L["max_xml_elements"])
            except X.XMLError as e:
                raise Fault("Client", "malformed XML: %s" % e, ns.SOAP11, base=False, status=400)
            version = req.version
            mid = req.message_id
            r = req.resource_id
            if kind is None:
                # design.md: an EPR's edge:ResourceId reference parameter also selects it
                kind = ""
                if r and r[0] in "sp":
                    kind, rid = r[0], r
            el = req.body
            if el is None:
                raise Fault("Client", "empty SOAP Body", ns.SOAP11, base=False)
            # the operation's row in _OPS -> [handler, portType index], or None
            key = "\n%s %s:%s " % (kind or "-", ns.prefix(el.ns), el.name)
            op = _OPS.find(key)
            op = _OPS[op + len(key):_OPS.find("\n", op + 1)].split() if op >= 0 else None
            target = None
            if kind == "s":
                self.expire(now)
            if kind == "p" or (op and kind):
                target = self.get(rid, kind)
                if target is None:
                    # WS-Resource 1.2 §4: ended, expired or never made
                    raise Fault("ResourceUnknownFault", "no resource %s" % rid,
                                _WSRF_R)
            if op is None:
                if kind == "p":  # Notify into a pull point (§5.1.1): HTTP 202, no envelope
                    from wsn.core import rare
                    rare.notify_pp(self, req, target)
                    return Response(202, ns.content_type(version), b"", actions)
                raise Fault("ActionNotSupported", "no operation {%s}%s here" % (el.ns, el.name),
                            ns.WSA, base=False, action=ns.WSA_FAULT,
                            extra="<wsa:ProblemAction><wsa:Action>%s</wsa:Action></wsa:ProblemAction>"
                            % X.escape(req.action or ""))
            if kind == "p":
                target.touched = now
            h = op[0]
            if h[0] == "_":
                out = getattr(self, h)(req, target, now, actions)
            else:
                # the rarely used operations, imported on first use (then in sys.modules)
                from wsn.core import rare
                out = getattr(rare, h)(self, req, target, now, actions)
        except NotSoap as e:
            return _text(400, str(e))
        except Fault as f:
            return Response(f.status or fault_status(version, f), ns.content_type(version),
                            fault_envelope(version, f, now, mid).encode(), actions)
        env = envelope(version, "http://docs.oasis-open.org/%s/%sResponse" % (
            _PORTS[int(op[1])], el.name), out, mid)
        return Response(200, ns.content_type(version),
                        [p.encode() for p in env] if isinstance(env, list) else env.encode(),
                        actions)

    # ------------------------------------------------------------------ operations
    def _term(self, el, now, fault):
        # InitialTerminationTime / TerminationTime -> absolute int seconds or None (none
        # scheduled). WS-BaseNotification 1.3 §4.2 and §6.1.1.
        L = self.L
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
                    why = "%s is past" % X.format_datetime(t)
                elif mx and t - now > mx:
                    why = "%s is over %d s ahead" % (X.format_datetime(t), mx)
            except X.XMLError as e:
                why = str(e)
        if why:
            raise Fault(fault, why, extra=time_el("wsnt:MinimumTime", now + 1) + (
                time_el("wsnt:MaximumTime", now + mx) if mx else ""))
        return t

    def _subscribe(self, req, _, now, actions):
        # WS-BaseNotification 1.3 §4.2
        el = req.body
        W = ns.WSNT
        F = "SubscribeCreationFailedFault"
        cr = el.find(W, "ConsumerReference")
        if cr is None:
            raise Fault(F, "no ConsumerReference")
        addr, rp = read_epr(cr, req.buf)
        if not addr:
            raise Fault(F, "no wsa:Address")
        t = self.topics
        mask = t.all
        f = el.find(W, "Filter")
        if f is not None:
            _unknown_children(f, "TopicExpression", "InvalidFilterFault", "TopicExpression filters",
                              "wsnt:UnknownFilter")
            for te in f.children:  # several TopicExpressions must all match
                mask &= 1 << t.resolve_simple(te, True)
        pol = el.find(W, "SubscriptionPolicy")
        raw = pol is not None and _unknown_children(
            pol, "UseRaw", "UnrecognizedPolicyRequestFault", "wsnt:UseRaw",
            "wsnt:UnrecognizedPolicy") > 0
        expires = self._term(el.find(W, "InitialTerminationTime"), now,
                             "UnacceptableInitialTerminationTimeFault")
        # a consumer address naming one of our pull points is delivered in memory (no HTTP);
        # host spellings differ (127.0.0.1, localhost, the advertised name): compare the port
        # and the path
        k = addr.find(_PPS)
        pp = None
        if k > 0 and addr[:7] == "http://" and \
                addr[7:k].rpartition(":")[2] == self.base[7:].rpartition(":")[2]:
            pp = self.get(addr[k + 16:], "p")
        if pp is None:
            try:
                split_url(addr)
            except ValueError:
                raise Fault(F, "not http://host[:port]/path: %s" % addr)
            for a in self.consumer_allow or ():
                if addr.startswith(a):
                    break
            else:
                if self.consumer_allow is not None:
                    raise Fault(F, "not in consumer_allow: %s" % addr)
        mx = self.L["max_subscriptions"]
        if len(self.subs) >= mx:
            self.expire(now)  # reclaim the expired first
            if len(self.subs) >= mx:
                raise Fault(F, "table full (%d)" % mx, code="Receiver")
        s = Subscription(self, addr, rp, mask, raw, expires, req.version, now,
                         0 if pp else self.L["queue_len"])
        if pp:
            s.pullpoint = pp
        self.subs.append(s)
        actions.append(("subscribed", s))
        return "<wsnt:SubscribeResponse>%s%s%s</wsnt:SubscribeResponse>" % (
            epr(self.base + _SUBS + s.id, s.id, "wsnt:SubscriptionReference"),
            time_el("wsnt:CurrentTime", now),
            "" if expires is None else time_el("wsnt:TerminationTime", expires))

    def _renew(self, req, s, now, actions):
        tt = req.body.find(ns.WSNT, "TerminationTime")
        F = "UnacceptableTerminationTimeFault"
        if tt is None:
            raise Fault(F, "no TerminationTime", extra=time_el("wsnt:MinimumTime", now + 1))
        s.expires = self._term(tt, now, F)
        return wrap("wsnt:RenewResponse", time_el("wsnt:TerminationTime", s.expires) +
                    time_el("wsnt:CurrentTime", now))

    def _state(self, req, s, now, actions):
        # Unsubscribe and wsrf-rl:Destroy (WS-ResourceLifetime 1.2 §4.1: gone once answered);
        # Pause/Resume (§6.2.1: while paused nothing is produced for it; on resume only new
        # readings, option 3; pushes already queued stay queued)
        n = req.body.name
        if n[0] in "UD":
            self._drop(s, actions)
        else:
            s.paused = n[0] == "P"
            actions.append(("paused" if s.paused else "resumed", s))
        return "<%s:%sResponse/>" % (ns.prefix(req.body.ns), n)

    # ------------------------------------------------------------------ publishing
    def publish(self, ti, payload, now):
        # A new reading on topic index ti. -> (subscriptions whose queue got a push: the I/O
        # layer starts their sender; True if the gateway outbox got one).
        self.current[ti] = payload
        self.published += 1
        kick = []
        gw = False
        for s in self.subs:
            if s.paused or not (s.mask >> ti) & 1 or (s.expires is not None and s.expires <= now):
                continue
            item = (s, ti, payload, now)
            pp = s.pullpoint
            if pp is not None:
                if pp.active:
                    pp.ring.push(item)
                    s.delivered += 1
            elif self.gateway is not None and s.consumer == self.gateway:
                self.outbox.push(item)
                gw = True
            else:
                if s.queue.push(item):
                    self.queue_dropped += 1
                kick.append(s)
        return kick, gw

    def nm_content(self, item):
        # content of a wsnt:NotificationMessage (WS-BaseNotification 1.3 §3.2). s is None for
        # a reading published without a subscription (sleepy mode: straight to the gateway):
        # no SubscriptionReference then (it is optional, §3.2).
        s, ti, payload, _ = item
        if s is not None and s.raw:
            return wrap("wsnt:Message", payload)
        return '%s<wsnt:Topic Dialect="%s">%s</wsnt:Topic>%s<wsnt:Message>%s</wsnt:Message>' % (
            epr(self.base + _SUBS + s.id, s.id, "wsnt:SubscriptionReference") if s else "",
            ns.SIMPLE, self.topics.qname(ti), epr(self.addr, None, "wsnt:ProducerReference"),
            payload)

    def render(self, item, gateway=False):
        # -> (url, envelope bytes, content type) of one push. Raw (wsnt:UseRaw): the payload is
        # the Body, Notify action (§3.1: SHOULD use it); otherwise the wsnt:Notify wrapper.
        # Gateway pushes go to the current gateway consumer address (it may have changed since
        # the reading was buffered: re-registration).
        s = item[0]
        url, hdr = (self.gateway, self.gateway_rp) if gateway else (s.consumer, s.refparams)
        env = envelope(s.version, _NOTIFY, item[2] if s.raw else wrap(
            "wsnt:Notify", wrap("wsnt:NotificationMessage", self.nm_content(item))), None, url, hdr)
        return url, env.encode(), ns.content_type(s.version)

    def gateway_batch(self, batch_max, version, mid):
        # The next push to the gateway: up to batch_max buffered readings, oldest first, as one
        # wsnt:Notify with one NotificationMessage each (§3.2: a Notify carries one or more),
        # with wsa:MessageID mid (the same for a resend: the gateway publishes it once).
        # A raw item (a UseRaw subscription aimed at the gateway) cannot share a Notify and
        # goes alone. -> (items, url, [envelope chunks as bytes], content type); items () if
        # nothing is buffered. The items stay buffered until the caller pops them (sent).
        ob = self.outbox
        items = []
        for i in range(min(len(ob), batch_max)):
            it = ob.slots[(ob.head + i) % ob.size]
            raw = it[0] is not None and it[0].raw
            if raw and items:
                break
            items.append(it)
            if raw:
                break
        if not items:
            return (), None, None, None
        s = items[0][0]
        if s is not None:
            version = s.version
        head, tail = envelope(version, _NOTIFY, [], None, self.gateway,
                              self.gateway_rp + wrap("wsa:MessageID", mid))
        out = [head.encode()]
        head = None
        if s is not None and s.raw:
            out.append(items[0][2].encode())
        else:
            # each piece is encoded as it is made: one message's str at a time, not the batch's
            out.append(b"<wsnt:Notify>")
            for it in items:
                out.append(wrap("wsnt:NotificationMessage", self.nm_content(it)).encode())
            out.append(b"</wsnt:Notify>")
        out.append(tail.encode())
        return items, self.gateway, out, ns.content_type(version)

    def buffer_for_gateway(self, ti, payload, now):
        # sleepy mode: a reading for the gateway without a subscription (Demand=false)
        self.current[ti] = payload
        self.published += 1
        self.outbox.push((None, ti, payload, now))

    def set_gateway(self, consumer, refparams):
        # The gateway's ConsumerReference from RegisterPublisherResponse. After a
        # re-registration under a new address, subscriptions made for the old registration are
        # orphans (the gateway subscribes again): they are removed -> list of them.
        old = self.gateway
        self.gateway = consumer
        self.gateway_rp = refparams or ""
        gone = []
        for s in self.subs[:]:
            if old and consumer != old and s.consumer == old:
                self._drop(s, None)
                gone.append(s)
        return gone

    def expire(self, now):
        # Scheduled termination (WS-BaseNotification 1.3 §6.4 / WS-ResourceLifetime): expired
        # subscriptions are destroyed; idle pull points reclaimed, with the subscriptions
        # delivering into them. -> list of the subscriptions that went.
        idle = self.L["pullpoint_idle_s"]
        for pp in self._pps[:]:
            if idle and now - pp.touched >= idle:
                pp.active = False
                self._pps.remove(pp)
        gone = []
        for s in self.subs[:]:
            if (s.expires is not None and s.expires <= now) or (s.pullpoint and not s.pullpoint.active):
                self._drop(s, None)
                gone.append(s)
        return gone

    def counters(self):
        pd = 0
        for pp in self._pps:
            pd += pp.ring.dropped
        return [("subscriptions", len(self.subs)), ("pullpoints", len(self._pps)),
                ("published", self.published), ("queueDropped", self.queue_dropped),
                ("pushFailed", self.push_failed), ("pullpointDropped", pd),
                ("gatewayBuffered", len(self.outbox)), ("gatewayDropped", self.outbox.dropped)]
