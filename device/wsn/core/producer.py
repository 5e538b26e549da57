# The device's NotificationProducer, SubscriptionManager and PullPoints: the state and the
# publishing side, which stay loaded. Requests are handled by wsn.core.ops (and a pull point's by
# wsn.core.pullpoint), loaded for a request and dropped when the device is idle again
# (wsn.device), so the heap holds their bytecode only while a request is served.
#
#   p = wsn.core.ops.new_producer(device_id, topic_set(ns, names), "http://host:port", rand,
#                                 limits)   # limits: a dict, completed with the defaults
#   r = wsn.core.ops.handle(p, "POST", "/wsn/producer", body_bytes, now, content_type)
#       -> Response(status, content_type, body bytes or list of chunks, actions)
#   kick, gw = p.publish(topic_index, payload_xml, now)   # a new reading
#   url, body, ctype = p.render(item, False)              # one push, rendered when sent
#   gone = p.expire(now)                                  # scheduled termination
#
# `now` is int seconds since 2000-01-01 (wsn.core.soap.format_datetime); `rand(n)` returns n
# random bytes. Nothing here blocks, sleeps or touches the network: pushes are queued on the
# subscription (or in the gateway outbox, or delivered in memory into one of our own pull
# points) and the I/O layer sends them.
from micropython import const

from wsn.core import soap as S

_NOTIFY = const("http://docs.oasis-open.org/wsn/bw-2/NotificationConsumer/Notify")


class Ring:
    # A fixed-size FIFO that drops the oldest item when full and counts what it dropped: a
    # subscription's push queue, the gateway buffer, and a pull point (WS-BaseNotification 1.3
    # §5.1.1 lets a full PullPoint "dispose of previously accumulated Notification Messages").
    # counters start as class attributes: an instance stores only those that moved; the
    # slots are allocated by the first push (a gateway buffer nobody uses costs no heap)
    head = count = dropped = 0
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


class Subscription:
    # Made by wsn.core.ops (Subscribe). Defaults as class attributes: each subscription's own
    # dict holds only what differs from them (a smaller dict per subscription on a small heap).
    #   id, consumer (address), rp and at (its reference parameters as sent, and where they
    #   are marked as header blocks: soap.headers), mask (topic bit mask), raw (wsnt:UseRaw),
    #   expires (int seconds since 2000, or None: no scheduled termination), version (of the
    #   Subscribe: pushes use the same), created, queue (a Ring of pending pushes, made by the
    #   first push that needs it)
    # and, for the subscription's resource properties (§6.4.1), what else Subscribe sent:
    #   filt (the filter's topic indices, bytes; None: no wsnt:Filter), pol (True: a
    #   wsnt:SubscriptionPolicy was sent)
    pullpoint = filt = queue = None  # pullpoint: the PullPoint if the consumer is one of ours
    paused = sending = pol = raw = False  # the I/O layer runs one sender per subscription
    active = True
    version = S.V12
    delivered = failed = 0
    rp = ""
    at = ()


class Producer:
    # Made by wsn.core.ops.new_producer (start-up code: not in what stays loaded), which sets
    # L (the limits), device_id, topics (wsn.core.topics.TopicSet), base (the device's URL), addr
    # (the producer's), rand, subs (at most max_subscriptions), pps (pull points, at most
    # max_pullpoints), current (the last payload per topic, for GetCurrentMessage; None when
    # wsn.core.current is not installed), gateway and gateway_rp (the gateway's
    # ConsumerReference address and its reference parameters' header XML, from the
    # registration), outbox (the gateway buffer), consumer_allow (allowed consumer address
    # prefixes, or None), and the counters queue_dropped, push_failed, published.

    def drop(self, s, actions):
        s.active = False
        self.subs.remove(s)
        if actions is not None:
            actions.append(("unsubscribed", s))

    # ------------------------------------------------------------------ publishing
    def publish(self, index, data, now):
        # A new reading (the payload XML data) on the topic of that index. -> (subscriptions
        # whose queue got a push: the I/O layer starts their sender; True if the gateway outbox
        # got one).
        if self.current:
            self.current[index] = data
        self.published += 1
        kick = []
        gw = False
        for s in self.subs:
            if s.paused or not (s.mask >> index) & 1 or (s.expires is not None and s.expires <= now):
                continue
            item = (s, index, data, now)
            pp = s.pullpoint
            if pp is not None:
                if pp.active:
                    pp.push(item)
                    s.delivered += 1
            elif self.gateway is not None and s.consumer == self.gateway:
                self.outbox.push(item)
                gw = True
            else:
                q = s.queue
                if q is None:  # made by the first push (a subscription of the gateway has none)
                    q = s.queue = Ring(self.L["queue_len"])
                if q.push(item):
                    self.queue_dropped += 1
                kick.append(s)
        return kick, gw

    def nm_content(self, item):
        # content of a wsnt:NotificationMessage (WS-BaseNotification 1.3 §3.2); dt: must be
        # declared around it (TopicSet.decl). s is None for a reading published without a
        # subscription (sleepy mode: straight to the gateway): no SubscriptionReference then
        # (it is optional, §3.2).
        s, ti, payload, _ = item
        if s is not None and s.raw:
            return S.wrap("wsnt:Message", payload)
        return '%s<wsnt:Topic Dialect="%s">dt:%s</wsnt:Topic>%s<wsnt:Message>%s</wsnt:Message>' % (
            S.epr(self.base + "/wsn/subscriptions/" + s.id, s.id, "wsnt:SubscriptionReference")
            if s else "", S.SIMPLE, self.topics.names[ti],
            S.epr(self.addr, None, "wsnt:ProducerReference"), payload)

    def render(self, item, gateway):
        # -> (url, envelope bytes, content type) of one push. Raw (wsnt:UseRaw): the payload is
        # the Body, Notify action (§3.1: SHOULD use it); otherwise the wsnt:Notify wrapper.
        # Gateway pushes go to the current gateway consumer address (it may have changed since
        # the reading was buffered: re-registration).
        s = item[0]
        url, hdr = (self.gateway, self.gateway_rp) if gateway else (s.consumer, S.headers(s.rp, s.at))
        env = S.envelope(s.version, _NOTIFY, item[2] if s.raw else "<wsnt:Notify%s>%s</wsnt:Notify>" % (
            self.topics.decl, S.wrap("wsnt:NotificationMessage", self.nm_content(item))), None, url, hdr)
        return url, env.encode(), S.content_type(s.version)

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
        head, tail = S.envelope(version, _NOTIFY, [], None, self.gateway,
                                self.gateway_rp + S.wrap("wsa:MessageID", mid))
        out = [head.encode()]
        head = None
        if s is not None and s.raw:
            out.append(items[0][2].encode())
        else:
            # each piece is encoded as it is made: one message's str at a time, not the batch's
            out.append(("<wsnt:Notify%s>" % self.topics.decl).encode())
            for it in items:
                out.append(S.wrap("wsnt:NotificationMessage", self.nm_content(it)).encode())
            out.append(b"</wsnt:Notify>")
        out.append(tail.encode())
        return items, self.gateway, out, S.content_type(version)

    def expire(self, now):
        # Scheduled termination (WS-BaseNotification 1.3 §6.4): expired subscriptions are
        # destroyed; idle pull points reclaimed, with the subscriptions delivering into them.
        # -> list of the subscriptions that went.
        idle = self.L["pullpoint_idle_s"]
        for pp in self.pps[:]:
            if idle and now - pp.touched >= idle:
                pp.active = False
                self.pps.remove(pp)
        gone = []
        for s in self.subs[:]:
            if (s.expires is not None and s.expires <= now) or (s.pullpoint is not None and not s.pullpoint.active):
                self.drop(s, None)
                gone.append(s)
        return gone
