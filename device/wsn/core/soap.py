# The messages the device writes: SOAP envelopes (SOAP 1.2; SOAP 1.1 for a SOAP 1.1 client,
# wsn.core.compat), WS-Addressing 1.0 headers and endpoint references, xsd:dateTime, the reading
# payload. Every push uses it, so it stays loaded; reading requests is wsn.core.request, loaded
# per request.
# Namespace URIs used by more than one module are here; a URI only one module uses is a const()
# there. Literals, not concatenations: frozen into flash they cost no heap.
from micropython import const

SOAP11 = "http://schemas.xmlsoap.org/soap/envelope/"
SOAP12 = "http://www.w3.org/2003/05/soap-envelope"
WSA = "http://www.w3.org/2005/08/addressing"
WSNT = "http://docs.oasis-open.org/wsn/b-2"
SIMPLE = "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Simple"

# The prefixes every envelope declares (pushes use them); an element in another namespace
# declares it itself (wsn.core.request._NS lists them all). The topic namespace is declared by
# the element that holds topic QNames (TopicSet.decl), so a device in its own namespace names
# its topics in it (WS-Topics 1.3 §6, WS-BaseNotification 1.3 §3.1).
DECLS = (
    ' xmlns:wsa="http://www.w3.org/2005/08/addressing"'
    ' xmlns:wsnt="http://docs.oasis-open.org/wsn/b-2"'
    ' xmlns:edge="urn:wsn-edge"'
)

# (Parameter names reuse names the device has anyway, `name`, `text`, `url`, `key`, ...: a .mpy
# keeps each parameter's name, and MicroPython keeps every name it loads for good.)
V11 = const(11)
V12 = const(12)
_DAYS = const(730425)  # days from 0000-03-01 to 2000-01-01


def content_type(version):
    return "application/soap+xml; charset=utf-8" if version == V12 else "text/xml; charset=utf-8"


def wrap(name, text):
    # <name>text</name>: one format string instead of one per element
    return "<%s>%s</%s>" % (name, text, name)


def escape(s):
    # for text and attribute values alike (a '"' in text may be written as &quot; too)
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def epr(url, key, name):
    # An EndpointReference element <name> of address url; the resource id key also travels as
    # a reference parameter (design.md: every EPR carries <edge:ResourceId>).
    return "<%s><wsa:Address>%s</wsa:Address>%s</%s>" % (
        name, escape(url), "<wsa:ReferenceParameters><edge:ResourceId>%s</edge:ResourceId>"
        "</wsa:ReferenceParameters>" % key if key else "", name)


def headers(rp, at):
    # reference parameters as sent (wsn.core.request.read_epr) as header blocks: marked
    # wsa:IsReferenceParameter at the offsets `at` (WS-Addressing 1.0 SOAP binding §2.3)
    for k in reversed(at):
        rp = rp[:k] + ' wsa:IsReferenceParameter="true"' + rp[k:]
    return rp


def envelope(version, action, body, message_id, to, headers):
    # A complete envelope; message_id: of the request it answers (wsa:RelatesTo), or None.
    # body: the XML of the Body's content, a str (-> a str) or a list of
    # str (-> a list of str: large answers stay in pieces, so a small heap needs no big
    # contiguous block); headers: extra header XML (e.g. echoed reference parameters). The
    # prefixes of DECLS are declared on the Envelope, so body fragments may use them freely.
    head = '<s:Envelope xmlns:s="%s"%s><s:Header><wsa:Action>%s</wsa:Action>%s%s%s</s:Header><s:Body>' % (
        SOAP12 if version == V12 else SOAP11, DECLS, action,
        wrap("wsa:RelatesTo", escape(message_id)) if message_id else "",
        wrap("wsa:To", escape(to)) if to else "", headers)
    if isinstance(body, list):
        return [head] + body + ["</s:Body></s:Envelope>"]
    return head + body + "</s:Body></s:Envelope>"


def format_datetime(t):
    # xsd:dateTime (2026-11-21T05:00:00Z) of t, integer seconds since 2000-01-01T00:00:00Z (the
    # core's clock: a small int on 32-bit boards until 2034). H. Hinnant's civil_from_days.
    z = t // 86400 + _DAYS
    s = t % 86400
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    m = mp + 3 if mp < 10 else mp - 9
    return "%04d-%02d-%02dT%02d:%02d:%02dZ" % (
        yoe + era * 400 + (m <= 2), m, doy - (153 * mp + 2) // 5 + 1, s // 3600, s // 60 % 60,
        s % 60)


def reading(device_id, v, unit, t, decimals):
    # The reading payload (design.md): <rd:Reading xmlns:rd="urn:wsn-edge:reading" device="ID">
    # <rd:value>21.5</rd:value><rd:unit>Cel</rd:unit><rd:time>2026-11-21T05:00:00Z</rd:time>
    # </rd:Reading>. Boards have single-precision floats: a fixed number of decimals, never
    # repr(), trailing zeros dropped.
    if not isinstance(v, int):
        v = "%.*f" % (decimals, v) if decimals >= 0 else str(v)
        if "." in v:
            v = v.rstrip("0").rstrip(".")
        if v in ("-0", ""):
            v = "0"
    return '<rd:Reading xmlns:rd="urn:wsn-edge:reading" device="%s"><rd:value>%s</rd:value>' \
           '<rd:unit>%s</rd:unit><rd:time>%s</rd:time></rd:Reading>' % (
               escape(device_id), v, escape(unit), format_datetime(t))
