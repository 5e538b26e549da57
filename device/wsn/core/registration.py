# Messages of the device <-> gateway link (design.md "Device <-> gateway"; the 1.3 form of
# WS-BrokeredNotification's RegisterPublisher, see specs/README.md) and WS-ResourceLifetime
# SetTerminationTime for renewing the registration.
from micropython import const

from wsn.core import ns
from wsn.core import xml as X
from wsn.core.soap import envelope, fault_name, parse_request, read_epr, wrap

# namespaces and actions only this module uses: const(), no global in wsn.core.ns
_BR = const("http://docs.oasis-open.org/wsn/br-2")
# the request actions (WS-Addressing 1.0 Metadata §4.4.4 defaults of brw-2 and rlw-2), composed
# where used: the common part stored once
_ACTION = const("http://docs.oasis-open.org/%sRequest")


def register_publisher(version, gateway_url, producer_addr, device_id, topics, expires,
                       demand=True):
    # -> envelope str. Demand=true: the gateway pauses our subscriptions while nobody wants
    # the topic (WS-BrokeredNotification demand-based publishing). Demand=false (sleepy
    # mode): the device serves no Subscribe and simply publishes to the ConsumerReference.
    t = ""
    for i in range(len(topics.names)):
        t += '<br:Topic Dialect="%s">%s</br:Topic>' % (ns.SIMPLE, topics.qname(i))
    body = "<br:RegisterPublisher><br:PublisherReference><wsa:Address>%s</wsa:Address>" \
           "<wsa:Metadata><edge:DeviceId>%s</edge:DeviceId></wsa:Metadata>" \
           "</br:PublisherReference>%s<br:Demand>%s</br:Demand>" \
           "<br:InitialTerminationTime>%s</br:InitialTerminationTime></br:RegisterPublisher>" % (
               X.escape(producer_addr), X.escape(device_id), t, "true" if demand else "false",
               X.format_datetime(expires))
    return envelope(version, _ACTION % "wsn/brw-2/RegisterPublisher/RegisterPublisher", body,
                    None, gateway_url)


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
        a, rp = read_epr(e, buf) if e is not None else (None, "")
        if not a:
            if not r:
                raise ValueError("no PublisherRegistrationReference")
            a, rp = r
        r.append(a)
        r.append(rp)
    return tuple(r)


def set_termination_time(version, reg_addr, reg_rp, expires):
    # WS-ResourceLifetime 1.2 §5.1 SetTerminationTime on the registration (design.md step 3)
    body = wrap("wsrf-rl:SetTerminationTime",
                wrap("wsrf-rl:RequestedTerminationTime", X.format_datetime(expires)))
    return envelope(version, _ACTION % "wsrf/rlw-2/ScheduledResourceTermination/SetTerminationTime",
                    body, None, reg_addr, reg_rp)
