# Messages of the device <-> gateway link (design.md "Device <-> gateway"; the 1.3 form of
# WS-BrokeredNotification's RegisterPublisher, see specs/README.md) and WS-ResourceLifetime
# SetTerminationTime for renewing the registration.
from wsn.core import ns
from wsn.core import xml as X
from wsn.core.soap import envelope, fault_name, parse_request, read_epr, wrap
from wsn.core.times import format_datetime


def register_publisher(version, gateway_url, producer_addr, device_id, topics, expires,
                       demand=True):
    # -> envelope str. Demand=true: the gateway pauses our subscriptions while nobody wants
    # the topic (WS-BrokeredNotification demand-based publishing). Demand=false (sleepy
    # mode): the device serves no Subscribe and simply publishes to the ConsumerReference.
    t = "".join(['<br:Topic Dialect="%s">%s</br:Topic>' % (ns.SIMPLE, topics.qname(i))
                 for i in range(len(topics.names))])
    body = "<br:RegisterPublisher><br:PublisherReference><wsa:Address>%s</wsa:Address>" \
           "<wsa:Metadata><edge:DeviceId>%s</edge:DeviceId></wsa:Metadata>" \
           "</br:PublisherReference>%s<br:Demand>%s</br:Demand>" \
           "<br:InitialTerminationTime>%s</br:InitialTerminationTime></br:RegisterPublisher>" % (
               X.escape(producer_addr), X.escape(device_id), t, "true" if demand else "false",
               format_datetime(expires))
    return envelope(version, ns.REGISTER + "Request", body, None, gateway_url)


def read_registration(buf):
    # RegisterPublisherResponse -> (registration address, its ref-param headers,
    # consumer address, its ref-param headers). The ConsumerReference defaults to the
    # registration address (design.md: both are /wsn/registrations/<id>).
    # Raises ValueError with the fault name/reason if the answer is a fault or unreadable.
    name, reason = fault_name(buf)
    if name:
        raise ValueError("%s: %s" % (name, reason))
    req = parse_request(buf, 24, 512)
    b = req.body
    if b is None or b.ns != ns.BR or b.name != "RegisterPublisherResponse":
        raise ValueError("not a RegisterPublisherResponse")
    prr = b.find(ns.BR, "PublisherRegistrationReference")
    if prr is None:
        raise ValueError("no PublisherRegistrationReference")
    reg, reg_rp = read_epr(prr, buf)
    if not reg:
        raise ValueError("no registration address")
    cr = b.find(ns.BR, "ConsumerReference")
    con, con_rp = (reg, reg_rp)
    if cr is not None:
        a, r = read_epr(cr, buf)
        if a:
            con, con_rp = a, r
    return reg, reg_rp, con, con_rp


def set_termination_time(version, reg_addr, reg_rp, expires):
    # WS-ResourceLifetime 1.2 §5.1 SetTerminationTime on the registration (design.md step 3)
    body = wrap("wsrf-rl:SetTerminationTime",
                wrap("wsrf-rl:RequestedTerminationTime", format_datetime(expires)))
    return envelope(version, ns.SET_TT + "Request", body, None, reg_addr, reg_rp)
