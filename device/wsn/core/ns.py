# Namespace URIs, prefixes and action URIs (WS-BaseNotification 1.3, WS-Topics 1.3,
# WS-BrokeredNotification 1.3, WSRF, WS-Addressing 1.0, SOAP 1.1/1.2).
from micropython import const

SOAP11 = "http://schemas.xmlsoap.org/soap/envelope/"
SOAP12 = "http://www.w3.org/2003/05/soap-envelope"
WSA = "http://www.w3.org/2005/08/addressing"
WSA_2004 = "http://schemas.xmlsoap.org/ws/2004/08/addressing"
WSNT = "http://docs.oasis-open.org/wsn/b-2"
WSTOP = "http://docs.oasis-open.org/wsn/t-1"
BR = "http://docs.oasis-open.org/wsn/br-2"
WSRF_R = "http://docs.oasis-open.org/wsrf/r-2"
WSRF_RP = "http://docs.oasis-open.org/wsrf/rp-2"
WSRF_RL = "http://docs.oasis-open.org/wsrf/rl-2"
XSI = "http://www.w3.org/2001/XMLSchema-instance"
EDGE = "urn:wsn-edge"
DT = "urn:wsn-edge:device-topics"

SIMPLE = "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Simple"

# The prefixes used in everything the device writes, declared once on each Envelope (prefix()
# looks them up here). A literal, not computed: frozen into flash it costs no heap.
DECLS = (
    ' xmlns:wsa="http://www.w3.org/2005/08/addressing"'
    ' xmlns:wsnt="http://docs.oasis-open.org/wsn/b-2"'
    ' xmlns:wstop="http://docs.oasis-open.org/wsn/t-1"'
    ' xmlns:br="http://docs.oasis-open.org/wsn/br-2"'
    ' xmlns:wsrf-bf="http://docs.oasis-open.org/wsrf/bf-2"'
    ' xmlns:wsrf-r="http://docs.oasis-open.org/wsrf/r-2"'
    ' xmlns:wsrf-rp="http://docs.oasis-open.org/wsrf/rp-2"'
    ' xmlns:wsrf-rl="http://docs.oasis-open.org/wsrf/rl-2"'
    ' xmlns:edge="urn:wsn-edge"'
    ' xmlns:dt="urn:wsn-edge:device-topics"'
)

# literals, not concatenations: frozen into flash they cost no heap. The actions of the
# operations the device answers are literals where they are answered (wsn.core.producer, rare).
NOTIFY = "http://docs.oasis-open.org/wsn/bw-2/NotificationConsumer/Notify"
SET_TT = "http://docs.oasis-open.org/wsrf/rlw-2/ScheduledResourceTermination/SetTerminationTime"
REGISTER = "http://docs.oasis-open.org/wsn/brw-2/RegisterPublisher/RegisterPublisher"
# One fault-action rule for the device and the gateway (gateway/wire/faults.py): faults of the WSRF
# specifications (r-2, rp-2, rl-2) use the WSRF fault action, every other WS-N fault the
# WS-N one.
WSN_FAULT = "http://docs.oasis-open.org/wsn/fault"
WSRF_FAULT = "http://docs.oasis-open.org/wsrf/fault"
WSA_FAULT = "http://www.w3.org/2005/08/addressing/fault"

V11 = const(11)
V12 = const(12)


def prefix(uri):
    # the prefix DECLS binds to uri, or None
    k = DECLS.find('="%s"' % uri)
    return DECLS[DECLS.rfind(":", 0, k) + 1:k] if k > 0 else None


def content_type(version):
    if version == V12:
        return "application/soap+xml; charset=utf-8"
    return "text/xml; charset=utf-8"
