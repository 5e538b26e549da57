# Messages of the device <-> gateway link (design.md "Device <-> gateway"; the 1.3 form of
# WS-BrokeredNotification's RegisterPublisher, see specs/README.md) and WS-ResourceLifetime
# SetTerminationTime for renewing the registration, and what a registration's answer does to the
# producer (set_gateway). Loaded while registering or renewing and dropped when the device is
# idle again (wsn.device).
from micropython import const

from wsn.core import soap as S
from wsn.core.request import fault_name, parse_request, read_epr, xmlns

# namespaces and actions only this module uses: const(), no global in wsn.core.soap
_BR = const("http://docs.oasis-open.org/wsn/br-2")
# the request actions (WS-Addressing 1.0 Metadata §4.4.4 defaults of brw-2 and rlw-2), composed
# where used: the common part stored once
_ACTION = const("http://docs.oasis-open.org/%sRequest")



def register_publisher(version, url, addr, device_id, topics, names, expires, demand):
    # -> envelope str to the gateway at url, from the producer at addr: one br:Topic per name
    # of the TopicSet topics. Demand=true: the gateway pauses
    # our subscriptions while nobody wants the topic (WS-BrokeredNotification demand-based
    # publishing). Demand=false (sleepy mode): the device serves no Subscribe and simply
    # publishes to the ConsumerReference. The PublisherReference's metadata names the device
    # (edge:DeviceId) and its topic namespace (edge:TopicNamespace): the gateway names the
    # device's topics dev:<id>/<topic> (design.md), whatever namespace they are in.
    t = ""
    for n in names:
        t += '<br:Topic Dialect="%s">dt:%s</br:Topic>' % (S.SIMPLE, n)
    body = "<br:RegisterPublisher%s%s><br:PublisherReference><wsa:Address>%s</wsa:Address>" \
           "<wsa:Metadata><edge:DeviceId>%s</edge:DeviceId><edge:TopicNamespace>%s" \
           "</edge:TopicNamespace></wsa:Metadata></br:PublisherReference>%s<br:Demand>%s" \
           "</br:Demand><br:InitialTerminationTime>%s</br:InitialTerminationTime>" \
           "</br:RegisterPublisher>" % (
               xmlns("br"), topics.decl, S.escape(addr), S.escape(device_id), S.escape(topics.ns), t,
               ("false", "true")[bool(demand)], S.format_datetime(expires))
    return S.envelope(version, _ACTION % "wsn/brw-2/RegisterPublisher/RegisterPublisher", body,
                      None, url, "")


def read_registration(buf):
    # RegisterPublisherResponse -> (registration address, its ref-param headers,
    # consumer address, its ref-param headers). The ConsumerReference defaults to the
    # registration address (design.md: both are /wsn/registrations/<id>).
    # Raises ValueError with the fault name/reason if the answer is a fault or unreadable.
    name, reason = fault_name(buf)
    if name:
        raise ValueError("%s: %s" % (name, reason))
    b = parse_request(buf, 24, 512).body
    if b is None or b.ns != _BR or b.name != "RegisterPublisherResponse":
        raise ValueError("not a RegisterPublisherResponse")
    r = []
    for tag in ("PublisherRegistrationReference", "ConsumerReference"):
        e = b.find(_BR, tag)
        a, rp, at = read_epr(e, buf) if e is not None else (None, "", ())
        rp = S.headers(rp, at)
        if not a:
            if not r:
                raise ValueError("no PublisherRegistrationReference")
            a, rp = r
        r.append(a)
        r.append(rp)
    return tuple(r)


def set_termination_time(version, url, reg_rp, expires):
    # WS-ResourceLifetime 1.2 SetTerminationTime on the registration at url, with its reference
    # parameters reg_rp (design.md step 3)
    body = "<wsrf-rl:SetTerminationTime%s>%s</wsrf-rl:SetTerminationTime>" % (
        xmlns("wsrf-rl"), S.wrap("wsrf-rl:RequestedTerminationTime", S.format_datetime(expires)))
    return S.envelope(version, _ACTION % "wsrf/rlw-2/ScheduledResourceTermination/SetTerminationTime",
                      body, None, url, reg_rp)


def set_gateway(p, consumer, rp):
    # The gateway's ConsumerReference from RegisterPublisherResponse. After a re-registration
    # under a new address, subscriptions made for the old registration are orphans (the gateway
    # subscribes again): they are removed -> list of them.
    old = p.gateway
    p.gateway = consumer
    p.gateway_rp = rp or ""
    gone = []
    for s in p.subs[:]:
        if old and consumer != old and s.consumer == old:
            p.drop(s, None)
            gone.append(s)
    return gone
