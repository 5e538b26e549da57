# The device's NotificationProducer, SubscriptionManager and PullPoint as one sans-I/O object.
#
#   p = Producer(device_id, topicset, "http://host:port", rand, limits)
#   r = p.handle("POST", "/wsn/producer", body_bytes, now, content_type)
#       -> Response(status, content_type, body bytes, actions)
#   kick, gw = p.publish(topic_index, payload_xml, now)   # a new reading
#   url, body, ctype = p.render(item, gateway)            # one push, rendered when sent
#   gone = p.expire(now)                                  # scheduled termination
#
# `now` is int seconds since 2000-01-01 (wsn.core.times); `rand(n)` returns n random bytes.
# Nothing here blocks, sleeps or touches the network: pushes are queued on the subscription
# (or in the gateway outbox, or delivered in memory into one of our own pull points) and the
# I/O layer sends them.
from micropython import const

from wsn.core import ns
from wsn.core import xml as X
from wsn.core.httpmsg import split_url
from wsn.core.soap import (Fault, NotSoap, dialect_fault, envelope, epr, fault_envelope,
                           fault_status, parse_request, read_epr, unknown_fault, wrap)
from wsn.core.subscriptions import Ring, Subscription, SubscriptionTable, new_id
from wsn.core.times import TimeError, format_datetime, parse_time

# (name, default) pairs: a constant tuple, frozen into flash it costs no heap (a dict would)
DEFAULTS = (
    ("max_subscriptions", 8),  # fixed table size
    ("max_pullpoints", 2),
    ("pullpoint_size", 32),  # messages per pull point (ring, drops the oldest)
    ("pullpoint_idle_s", 3600),  # a pull point not used for this long may be reclaimed
    ("max_request_bytes", 8192),  # larger bodies: HTTP 413
    ("max_xml_depth", 16),
    ("max_xml_elements", 128),  # ~133 B each on a 32-bit board
    ("default_ttl_s", 3600),  # subscription lifetime when Subscribe names none (0: unlimited)
    ("max_ttl_s", 604800),  # longest accepted lifetime (0: unlimited, xsi:nil accepted)
    ("queue_len", 4),  # pushes waiting per subscription (drops the oldest)
    ("gateway_buffer", 64),  # pushes waiting for the gateway (drops the oldest, counted)
)

_PATH_SUBS = "/wsn/subscriptions/"
_PATH_PPS = "/wsn/pullpoints/"
PRODUCER_PATH = "/wsn/producer"
# const: replaced by the literal (no name stored), so _MANAGER_OPS is a constant in flash
_WSNT = const("http://docs.oasis-open.org/wsn/b-2")
_GET_RP = const(
    "http://docs.oasis-open.org/wsrf/rpw-2/GetResourceProperty/GetResourcePropertyResponse")


class Response:
    # body: bytes, or a list of bytes chunks (large answers, written one after the other)
    def __init__(self, status, ctype, body, actions=None):
        self.status = status
        self.ctype = ctype
        self.body = body
        self.actions = actions or []

    def data(self):
        # the whole body as one bytes object (tests; small answers)
        return self.body if isinstance(self.body, bytes) else b"".join(self.body)


def _text_response(status, msg):
    return Response(status, "text/plain; charset=utf-8", msg.encode() + b"\n")


def _qn_el(tag, el):
    # <tag xmlns:q="uri">q:local</tag> naming element el's QName (for UnknownFilter etc.)
    if el.ns:
        return '<%s xmlns:q="%s">q:%s</%s>' % (tag, X.escape_attr(el.ns), el.name, tag)
    return "<%s>%s</%s>" % (tag, el.name, tag)


def _rare():
    # the rarely used operations, imported on first use (then cached in sys.modules)
    from wsn.core import rare
    return rare


class Producer:
    def __init__(self, device_id, topics, base_url, rand, limits=None):
        # the caller's dict, completed with the defaults (one dict on the heap, not a copy)
        L = limits if limits is not None else {}
        for k, v in DEFAULTS:
            if k not in L:
                L[k] = v
        self.L = L
        self.device_id = device_id
        self.topics = topics
        self.base = base_url
        self.addr = base_url + PRODUCER_PATH
        self.rand = rand
        self.subs = SubscriptionTable(L["max_subscriptions"])
        self._pps = None  # PullPointTable, made on the first CreatePullPoint (wsn.core.rare)
        self.current = [None] * len(topics.names)  # last payload per topic
        self.gateway = None  # the gateway's ConsumerReference address (registration)
        self.gateway_rp = ""  # its reference parameters (header XML)
        self.outbox = Ring(L["gateway_buffer"])
        self.consumer_allow = None  # list of allowed consumer address prefixes, or None
        self.queue_dropped = 0  # pushes dropped from full per-subscription queues
        self.push_failed = 0  # pushes given up after the retries (I/O layer counts)
        self.published = 0

    def pullpoints(self):
        # the pull point table, made when first needed
        if self._pps is None:
            from wsn.core.rare import PullPointTable
            self._pps = PullPointTable(self.L["max_pullpoints"], self.L["pullpoint_size"])
        return self._pps

    pps = property(pullpoints)

    # ------------------------------------------------------------------ HTTP entry point
    def handle(self, method, path, body, now, ctype=""):
        sub_id = pp_id = None
        if path.startswith(_PATH_SUBS):
            sub_id = path[len(_PATH_SUBS):]
        elif path.startswith(_PATH_PPS):
            pp_id = path[len(_PATH_PPS):]
        elif path != PRODUCER_PATH:
            return _text_response(404, "no endpoint %s" % path)
        if method != "POST":
            return _text_response(405, "POST a SOAP envelope")
        if len(body) > self.L["max_request_bytes"]:
            return _text_response(413, "body over the %d-byte limit" % self.L["max_request_bytes"])
        version = ns.V12 if "soap+xml" in ctype else ns.V11
        try:
            req = parse_request(body, self.L["max_xml_depth"], self.L["max_xml_elements"])
        except X.XMLError as e:
            f = Fault("Client", "malformed XML: %s" % e, fns=ns.SOAP11, base=False)
            return Response(400, ns.content_type(version), fault_envelope(version, f, now).encode())
        except NotSoap as e:
            return _text_response(400, str(e))
        except Fault as f:
            return Response(fault_status(version, f), ns.content_type(version),
                            fault_envelope(version, f, now).encode())
        version = req.version
        if req.resource_id and path == PRODUCER_PATH:
            # design.md: an EPR's edge:ResourceId reference parameter also selects the resource
            if req.resource_id[:1] == "s":
                sub_id = req.resource_id
            elif req.resource_id[:1] == "p":
                pp_id = req.resource_id
        actions = []
        try:
            if req.body is None:
                raise Fault("Client", "empty SOAP Body", fns=ns.SOAP11, base=False)
            if sub_id is not None:
                action, out = self._manager(req, sub_id, now, actions)
            elif pp_id is not None:
                action, out = _rare().pullpoint(self, req, pp_id, now, actions)
            else:
                action, out = self._producer(req, now, actions)
        except Fault as f:
            return Response(fault_status(version, f), ns.content_type(version),
                            fault_envelope(version, f, now, req.message_id).encode(), actions)
        if action is None:  # one-way message (Notify): HTTP 202, no envelope
            return Response(202, ns.content_type(version), b"", actions)
        env = envelope(version, action, out, req.message_id)
        if isinstance(env, list):
            body = [p.encode() for p in env]
        else:
            body = env.encode()
        return Response(200, ns.content_type(version), body, actions)

    def _unknown(self, req):
        el = req.body
        return Fault("ActionNotSupported",
                     "no operation {%s}%s here" % (el.ns, el.name), fns=ns.WSA, base=False,
                     extra="<wsa:ProblemAction><wsa:Action>%s</wsa:Action></wsa:ProblemAction>"
                     % X.escape(req.action or ""), action=ns.WSA_FAULT)

    # ------------------------------------------------------------------ NotificationProducer
    def _producer(self, req, now, actions):
        el = req.body
        if el.ns == ns.WSNT:
            if el.name == "Subscribe":
                return "http://docs.oasis-open.org/wsn/bw-2/NotificationProducer/SubscribeResponse", self._subscribe(
                    req, now, actions)
            if el.name == "GetCurrentMessage":
                return ("http://docs.oasis-open.org/wsn/bw-2/NotificationProducer/GetCurrentMessageResponse",
                        _rare().get_current(self, el))
            if el.name == "CreatePullPoint":
                return ("http://docs.oasis-open.org/wsn/bw-2/CreatePullPoint/CreatePullPointResponse",
                        _rare().create_pullpoint(self, now, actions))
        if el.ns == ns.WSRF_RP and el.name == "GetResourceProperty":
            return _GET_RP, _rare().get_rp(self, el)
        raise self._unknown(req)

    def _termination(self, el, now, fault):
        # InitialTerminationTime / TerminationTime -> absolute int seconds or None (none
        # scheduled). WS-BaseNotification 1.3 §4.2 and §6.1.1.
        L = self.L
        maxttl = L["max_ttl_s"]
        hint = wrap("wsnt:MinimumTime", format_datetime(now + 1))
        if maxttl:
            hint += wrap("wsnt:MaximumTime", format_datetime(now + maxttl))
        if el is None:
            return now + L["default_ttl_s"] if L["default_ttl_s"] else None
        if el.get("{%s}nil" % ns.XSI) in ("true", "1"):
            if maxttl:
                raise Fault(fault, "nil: at most %d s ahead" % maxttl,
                            extra=hint)
            return None
        try:
            t = parse_time(el.text, now)
        except TimeError as e:
            raise Fault(fault, str(e), extra=hint)
        if t <= now:
            raise Fault(fault, "%s is past" % format_datetime(t), extra=hint)
        if maxttl and t - now > maxttl:
            raise Fault(fault, "%s is over %d s ahead" % (format_datetime(t), maxttl), extra=hint)
        return t

    def _subscribe(self, req, now, actions):
        # WS-BaseNotification 1.3 §4.2
        el = req.body
        cr = el.find(ns.WSNT, "ConsumerReference")
        if cr is None:
            raise Fault("SubscribeCreationFailedFault", "no ConsumerReference")
        addr, rp = read_epr(cr, req.buf)
        if not addr:
            raise Fault("SubscribeCreationFailedFault", "no wsa:Address")
        mask = self.topics.all
        f = el.find(ns.WSNT, "Filter")
        if f is not None:
            unknown = [c for c in f.children if not (c.ns == ns.WSNT and c.name == "TopicExpression")]
            if unknown:
                # §4.2: "The fault MUST include the filter QNames for the filters it did not
                # understand"; only TopicExpression (Simple) is supported here.
                raise Fault("InvalidFilterFault",
                            "only TopicExpression filters, not %s" % unknown[0].qname(),
                            extra="".join([_qn_el("wsnt:UnknownFilter", c) for c in unknown]))
            for te in f.children:
                dialect = (te.get("Dialect") or "").strip()
                if dialect != ns.SIMPLE:
                    raise dialect_fault(dialect)
                mask &= 1 << self.topics.resolve_simple(te)
        raw = False
        pol = el.find(ns.WSNT, "SubscriptionPolicy")
        if pol is not None:
            unrec = []
            for c in pol.children:
                if c.ns == ns.WSNT and c.name == "UseRaw":
                    raw = True
                else:
                    unrec.append(c)
            if unrec:
                raise Fault("UnrecognizedPolicyRequestFault",
                            "only wsnt:UseRaw, not %s" % unrec[0].qname(),
                            extra="".join([_qn_el("wsnt:UnrecognizedPolicy", c) for c in unrec]))
        expires = self._termination(el.find(ns.WSNT, "InitialTerminationTime"), now,
                                    "UnacceptableInitialTerminationTimeFault")
        pp = self._own_pullpoint(addr)
        if pp is None:
            try:
                split_url(addr)
            except ValueError:
                raise Fault("SubscribeCreationFailedFault", "address not http://host[:port]/path: %s" % addr)
            allow = self.consumer_allow
            if allow is not None and not [a for a in allow if addr.startswith(a)]:
                raise Fault("SubscribeCreationFailedFault", "address not allowed (consumer_allow): %s" % addr)
        sub = Subscription(new_id(self.rand, "s"), addr, rp, mask, raw, expires, req.version, now,
                           0 if pp is not None else self.L["queue_len"])
        sub.pullpoint = pp
        if not self.subs.add(sub, now):
            raise Fault("SubscribeCreationFailedFault", "table full (%d): unsubscribe one" % len(self.subs.slots),
                        code="Receiver")
        actions.append(("subscribed", sub))
        out = ["<wsnt:SubscribeResponse>",
               epr(self.base + _PATH_SUBS + sub.id, sub.id, "wsnt:SubscriptionReference"),
               wrap("wsnt:CurrentTime", format_datetime(now))]
        if expires is not None:
            out.append(wrap("wsnt:TerminationTime", format_datetime(expires)))
        out.append("</wsnt:SubscribeResponse>")
        return "".join(out)

    def _own_pullpoint(self, addr):
        # A consumer address naming one of our pull points is delivered in memory (no HTTP).
        # Host spellings differ (127.0.0.1, localhost, the advertised name), so compare the
        # port and the path.
        k = addr.find(_PATH_PPS)
        if k < 0 or addr[:7] != "http://":
            return None
        port_a = addr[7:k].rpartition(":")[2]
        port_b = self.base[7:].rpartition(":")[2]
        if port_a != port_b:
            return None
        return self._pps.get(addr[k + len(_PATH_PPS):]) if self._pps is not None else None

    # ------------------------------------------------------------------ SubscriptionManager
    # The operations a subscription answers: (namespace, Body element) -> (handler name,
    # response action). WS-BaseNotification 1.3 §6.1 (Renew, Unsubscribe), §6.2 (Pause/Resume),
    # §6.4 + WS-ResourceLifetime 1.2 §4.1 (Destroy: a subscription exposed as a WS-Resource
    # MUST support immediate termination), WS-ResourceProperties 1.2 (GetResourceProperty).
    # The response actions are those of bw-2.wsdl (Pause/Resume: the
    # PausableSubscriptionManager portType, WS-Addressing 1.0 Metadata §4.4.4), rlw-2 and rpw-2.
    # A tuple of literals: a constant, frozen into flash it costs no heap.
    _MANAGER_OPS = (
        (_WSNT, "Renew", "_renew",
         "http://docs.oasis-open.org/wsn/bw-2/SubscriptionManager/RenewResponse"),
        (_WSNT, "Unsubscribe", "_unsubscribe",
         "http://docs.oasis-open.org/wsn/bw-2/SubscriptionManager/UnsubscribeResponse"),
        (_WSNT, "PauseSubscription", "_pause",
         "http://docs.oasis-open.org/wsn/bw-2/PausableSubscriptionManager/PauseSubscriptionResponse"),
        (_WSNT, "ResumeSubscription", "_resume",
         "http://docs.oasis-open.org/wsn/bw-2/PausableSubscriptionManager/ResumeSubscriptionResponse"),
        ("http://docs.oasis-open.org/wsrf/rl-2", "Destroy", "_destroy",
         "http://docs.oasis-open.org/wsrf/rlw-2/ImmediateResourceTermination/DestroyResponse"),
        ("http://docs.oasis-open.org/wsrf/rp-2", "GetResourceProperty", None, _GET_RP),
    )

    def _manager(self, req, sid, now, actions):
        self.expire(now)
        el = req.body
        for op in self._MANAGER_OPS:
            if op[1] == el.name and op[0] == el.ns:
                break
        else:
            raise self._unknown(req)
        sub = self.subs.get(sid)
        if sub is None:
            raise unknown_fault(sid)
        if op[2] is None:  # GetResourceProperty: wsn.core.rare.sub_rp
            return op[3], _rare().sub_rp(self, el, sub, now, actions)
        return op[3], getattr(self, op[2])(el, sub, now, actions)

    def _renew(self, el, sub, now, actions):
        tt = el.find(ns.WSNT, "TerminationTime")
        if tt is None:
            raise Fault("UnacceptableTerminationTimeFault", "no TerminationTime",
                        extra=wrap("wsnt:MinimumTime", format_datetime(now + 1)))
        sub.expires = self._termination(tt, now, "UnacceptableTerminationTimeFault")
        if sub.expires is None:
            term = '<wsnt:TerminationTime xmlns:xsi="%s" xsi:nil="true"/>' % ns.XSI
        else:
            term = wrap("wsnt:TerminationTime", format_datetime(sub.expires))
        return wrap("wsnt:RenewResponse", term + wrap("wsnt:CurrentTime", format_datetime(now)))

    def _unsubscribe(self, el, sub, now, actions):
        self.subs.remove(sub.id)
        actions.append(("unsubscribed", sub))
        return "<wsnt:UnsubscribeResponse/>"

    def _destroy(self, el, sub, now, actions):
        # WS-ResourceLifetime 1.2 §4.1: the resource is gone once DestroyResponse is sent
        self.subs.remove(sub.id)
        actions.append(("unsubscribed", sub))
        return "<wsrf-rl:DestroyResponse/>"

    def _pause(self, el, sub, now, actions):
        # §6.2.1: while paused nothing is produced for it; on resume only new readings
        # (option 3); pushes already queued stay queued.
        sub.paused = True
        actions.append(("paused", sub))
        return "<wsnt:PauseSubscriptionResponse/>"

    def _resume(self, el, sub, now, actions):
        sub.paused = False
        actions.append(("resumed", sub))
        return "<wsnt:ResumeSubscriptionResponse/>"

    # ------------------------------------------------------------------ PullPoint
    # ------------------------------------------------------------------ publishing
    def publish(self, ti, payload, now):
        # A new reading on topic index ti. -> (subscriptions whose queue got a push: the I/O
        # layer starts their sender; True if the gateway outbox got one).
        self.current[ti] = payload
        self.published += 1
        bit = 1 << ti
        kick = []
        gw = False
        for s in self.subs:
            if s.paused or not (s.mask & bit) or (s.expires is not None and s.expires <= now):
                continue
            item = (s, ti, payload, now)
            if s.pullpoint is not None:
                if s.pullpoint.active:
                    s.pullpoint.ring.push(item)
                    s.delivered += 1
            elif self.gateway is not None and s.consumer == self.gateway:
                self.outbox.push(item)
                gw = True
            else:
                if s.queue.push(item):
                    self.queue_dropped += 1
                kick.append(s)
        return kick, gw

    def _nm_content(self, item):
        # content of a wsnt:NotificationMessage (WS-BaseNotification 1.3 §3.2). s is None for
        # a reading published without a subscription (sleepy mode: straight to the gateway):
        # no SubscriptionReference then (it is optional, §3.2).
        s, ti, payload, _ = item
        if s is not None and s.raw:
            return wrap("wsnt:Message", payload)
        ref = epr(self.base + _PATH_SUBS + s.id, s.id, "wsnt:SubscriptionReference") if s else ""
        return "%s<wsnt:Topic Dialect=\"%s\">%s</wsnt:Topic>%s<wsnt:Message>%s</wsnt:Message>" % (
            ref, ns.SIMPLE, self.topics.qname(ti), epr(self.addr, None, "wsnt:ProducerReference"),
            payload)

    def render(self, item, gateway=False):
        # -> (url, envelope bytes, content type) of one push. Raw (wsnt:UseRaw): the payload is
        # the Body, Notify action (§3.1: SHOULD use it); otherwise the wsnt:Notify wrapper.
        # Gateway pushes go to the current gateway consumer address (it may have changed since
        # the reading was buffered: re-registration).
        s = item[0]
        if s.raw:
            body = item[2]
        else:
            body = wrap("wsnt:Notify", wrap("wsnt:NotificationMessage", self._nm_content(item)))
        if gateway:
            url, hdr = self.gateway, self.gateway_rp
        else:
            url, hdr = s.consumer, s.refparams
        env = envelope(s.version, ns.NOTIFY, body, None, url, hdr)
        return url, env.encode(), ns.content_type(s.version)

    def gateway_batch(self, batch_max, version):
        # The next push to the gateway: up to batch_max buffered readings, oldest first, as one
        # wsnt:Notify with one NotificationMessage each (§3.2: a Notify carries one or more).
        # A raw item (a UseRaw subscription aimed at the gateway) cannot share a Notify and
        # goes alone. -> (items, url, [envelope chunks as bytes], content type); items () if
        # nothing is buffered. The items stay buffered until the caller pops them (sent).
        ob = self.outbox
        items = []
        for i in range(min(len(ob), batch_max)):
            it = ob.slots[(ob.head + i) % len(ob.slots)]
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
        head, tail = envelope(version, ns.NOTIFY, [], None, self.gateway, self.gateway_rp)
        out = [head.encode()]
        head = None
        if s is not None and s.raw:
            out.append(items[0][2].encode())
        else:
            # each piece is encoded as it is made: one message's str at a time, not the batch's
            out.append(b"<wsnt:Notify>")
            for it in items:
                out.append(wrap("wsnt:NotificationMessage", self._nm_content(it)).encode())
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
        if old and consumer != old:
            for s in list(self.subs):
                if s.consumer == old:
                    self.subs.remove(s.id)
                    gone.append(s)
        return gone

    def expire(self, now):
        # Scheduled termination (WS-BaseNotification 1.3 §6.4 / WS-ResourceLifetime): expired
        # subscriptions are destroyed; idle pull points reclaimed. -> list of what went.
        gone = self.subs.expire(now)
        idle = self.L["pullpoint_idle_s"]
        if idle:
            for pp in (self._pps.expire_idle(now, idle) if self._pps is not None else ()):
                for s in list(self.subs):
                    if s.pullpoint is pp:
                        self.subs.remove(s.id)
                        gone.append(s)
        return gone

    def counters(self):
        pd = 0
        for p in self._pps or ():
            pd += p.ring.dropped
        return [("subscriptions", len(self.subs)), ("pullpoints", len(self._pps or ())),
                ("published", self.published), ("queueDropped", self.queue_dropped),
                ("pushFailed", self.push_failed), ("pullpointDropped", pd),
                ("gatewayBuffered", len(self.outbox)), ("gatewayDropped", self.outbox.dropped)]
