# Namespace URIs used by more than one core module, the prefixes the device writes, SOAP
# versions. A URI or action only one module uses is a const() there (no global here, no
# qstr for its name in two .mpy files): soap (SOAP 1.2, WS-Addressing 2004/08, edge:, the fault
# actions), producer (xsi:, wsrf-r, the Notify action), topics (wstop:), registration
# (br:, RegisterPublisher, SetTerminationTime). Literals, not concatenations: frozen into
# flash they cost no heap.
from micropython import const

SOAP11 = "http://schemas.xmlsoap.org/soap/envelope/"
WSA = "http://www.w3.org/2005/08/addressing"
WSNT = "http://docs.oasis-open.org/wsn/b-2"
WSRF_RP = "http://docs.oasis-open.org/wsrf/rp-2"
DT = "urn:wsn-edge:device-topics"  # the default topic namespace (wsn.device)

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

# WS-Addressing 1.0 SOAP binding §6: the action of its faults (wsa:ActionNotSupported, MustUnderstand)
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
