# Reading SOAP messages (a request, or an answer of the gateway) and writing faults. Loaded for a
# request and dropped when the device is idle again (wsn.device).
#
# parse_request() takes SOAP 1.2 (SOAP 1.1 with wsn.core.compat) and any prefixes; WS-Addressing
# 1.0 headers are picked out (2004/08 ones with wsn.core.compat); a mustUnderstand header we do
# not know is a MustUnderstand fault (SOAP 1.2 §5.2.3).
from micropython import const

from wsn.core import soap as S
from wsn.core import xml as X

# namespaces and actions only this module uses: const(), no global in wsn.core.soap
_WSA04 = const("http://schemas.xmlsoap.org/ws/2004/08/addressing")
_EDGE = const("urn:wsn-edge")
_WSN_FAULT = const("http://docs.oasis-open.org/wsn/fault")
_WSRF_FAULT = const("http://docs.oasis-open.org/wsrf/fault")
WSA_FAULT = "http://www.w3.org/2005/08/addressing/fault"


class Fault(Exception):
    # A SOAP fault. name/fns: the QName of the fault detail element (e.g. wsnt:
    # InvalidFilterFault); code: 'Sender' or 'Receiver', or SOAP's own 'MustUnderstand',
    # 'VersionMismatch'; reason: human readable; extra: XML appended inside the detail element
    # after the WS-BaseFaults members; base: False for faults without a BaseFault detail
    # (WS-Addressing, SOAP's own); status: the HTTP status, if not the binding's (status()).
    def __init__(self, name, reason, fns=S.WSNT, code="Sender", extra="", base=True,
                 action=None, status=0):
        super().__init__(reason)
        self.name = name
        self.fns = fns
        self.code = code
        self.reason = reason
        self.extra = extra
        self.base = base
        self.status = status
        # the rule gateway/wire/faults.py follows too: faults of the WSRF specifications
        # (r-2, rp-2, rl-2) get the WSRF fault action, every other one the WS-N one
        self.action = action or (_WSRF_FAULT if "/wsrf/" in fns else _WSN_FAULT)


class NotSoap(ValueError):
    # The body is well-formed XML but not a SOAP envelope: plain HTTP 400.
    pass


# The prefixes of the namespaces the device reads operations in and writes faults in (the
# operations are looked up as "prefix:local", wsn.core.ops); soap.DECLS declares the first
# three on every envelope, an element in one of the others declares it itself (xmlns()).
_NS = const(
    ' wsa="http://www.w3.org/2005/08/addressing"'
    ' wsnt="http://docs.oasis-open.org/wsn/b-2"'
    ' edge="urn:wsn-edge"'
    ' wstop="http://docs.oasis-open.org/wsn/t-1"'
    ' br="http://docs.oasis-open.org/wsn/br-2"'
    ' wsrf-bf="http://docs.oasis-open.org/wsrf/bf-2"'
    ' wsrf-r="http://docs.oasis-open.org/wsrf/r-2"'
    ' wsrf-rp="http://docs.oasis-open.org/wsrf/rp-2"'
    ' wsrf-rl="http://docs.oasis-open.org/wsrf/rl-2" '
)


def prefix(ns):
    # the prefix _NS gives the namespace ns, or None
    k = _NS.find('="%s"' % ns)
    return _NS[_NS.rfind(" ", 0, k) + 1:k] if k > 0 else None


def xmlns(p):
    # the declaration of prefix p (one of _NS) for an element that uses it, '' if every
    # envelope declares it
    k = _NS.find(" %s=" % p)
    return "" if S.DECLS.find(":%s=" % p) > 0 else " xmlns:" + _NS[k + 1:_NS.find(" ", k + 1)]


def compat():
    # wsn.core.compat (SOAP 1.1, WS-Addressing 2004/08), or None when it is not installed
    try:
        from wsn.core import compat
        return compat
    except ImportError:
        return None


def parse_request(buf, depth, count):
    # -> the request: the Envelope element with the SOAP parts picked out as attributes
    # (no class of its own): version, header, body (the first child element of soap:Body,
    # or None), buf, and the headers action, message_id, to, resource_id (edge:ResourceId),
    # each None if absent. Raises xml.XMLError (malformed), NotSoap, or Fault
    # (VersionMismatch, MustUnderstand, no Body).
    r = X.parse(buf, depth, count, 16)
    sns = r.ns
    if r.name != "Envelope":
        raise NotSoap("not a SOAP Envelope: {%s}%s" % (sns, r.name))
    if sns != S.SOAP12 and (sns != S.SOAP11 or not compat()):
        # SOAP 1.2 §5.4.7: an Envelope in a namespace this node does not support
        raise Fault("VersionMismatch", "envelope namespace %s: use %s%s" % (
            sns, S.SOAP12, " (SOAP 1.1 needs the package wsn/core/compat)"
            if sns == S.SOAP11 else ""), S.SOAP12, "VersionMismatch", base=False)
    r.version = S.V12 if sns == S.SOAP12 else S.V11
    r.header = r.find(sns, "Header")
    body = r.find(sns, "Body")
    if body is None:
        raise Fault("Body", "no SOAP Body", sns, base=False)
    r.body = body.children[0] if body.children else None
    r.buf = buf
    r.action = r.message_id = r.to = r.resource_id = None
    for h in r.header.children if r.header else ():
        n = h.name
        if h.ns == S.WSA or (h.ns == _WSA04 and compat()):
            if n in ("Action", "MessageID", "To"):
                setattr(r, "message_id" if n == "MessageID" else n.lower(), h.value())
        elif h.ns == _EDGE and n == "ResourceId":
            r.resource_id = h.value()
        elif h.get("{%s}mustUnderstand" % sns) in ("1", "true"):
            raise Fault("MustUnderstand", "header {%s}%s not understood" % (h.ns, n),
                        sns, "MustUnderstand", base=False, action=WSA_FAULT)
    return r


def fault_envelope(version, f, now, message_id):
    # The soap:Fault element (SOAP 1.2 §5.4; SOAP 1.1 in wsn.core.compat) with a WS-BaseFaults
    # detail (WS-BaseFaults 1.2: Timestamp, Description), in an envelope.
    reason = S.escape(f.reason)
    p = prefix(f.fns)
    decl = xmlns(p) if p else ' xmlns:f="%s"' % S.escape(f.fns)
    fq = (p or "f") + ":" + f.name
    detail = f.extra
    if f.base:
        detail = "<%s%s%s><wsrf-bf:Timestamp>%s</wsrf-bf:Timestamp>" \
                 "<wsrf-bf:Description>%s</wsrf-bf:Description>%s</%s>" % (
                     fq, decl, ' xmlns:wsrf-bf="http://docs.oasis-open.org/wsrf/bf-2"',
                     S.format_datetime(now), reason, f.extra, fq)
    if version == S.V11:
        body = compat().fault(f, fq, reason, detail)
    else:
        sub = ""
        if f.base or f.fns == S.WSA:
            sub = "<s:Subcode><s:Value%s>%s</s:Value></s:Subcode>" % (decl, fq)
        body = '<s:Fault><s:Code><s:Value>s:%s</s:Value>%s</s:Code><s:Reason><s:Text xml:lang="en">' \
               '%s</s:Text></s:Reason>%s</s:Fault>' % (
                   f.code, sub, reason, "<s:Detail>%s</s:Detail>" % detail if detail else "")
    return S.envelope(version, f.action, body, message_id, None, "")


def fault_status(version, f):
    # SOAP 1.2 HTTP binding §7.5.2: Sender faults are 400, others 500; SOAP 1.1: always 500.
    return f.status or (400 if version == S.V12 and f.code == "Sender" else 500)


def read_epr(el, buf):
    # (address, reference parameters as sent, where to mark them) of an EndpointReferenceType
    # element: echoed as header blocks, each top-level one is marked wsa:IsReferenceParameter
    # (WS-Addressing 1.0 SOAP binding §2.3) at those offsets (soap.headers), unless marked.
    a = rp = None
    for c in el.children:
        if c.ns == S.WSA or c.ns == _WSA04:
            if c.name == "Address" and a is None:
                a = c.value()
            elif c.name == "ReferenceParameters" and rp is None:
                rp = c
    sent = ""
    at = ()
    for c in rp.children if rp else ():
        if c.get("{%s}IsReferenceParameter" % S.WSA) is None:
            at += (len(sent) + 1 + len(c.prefix) + (1 if c.prefix else 0) + len(c.name),)
        sent += X.outer_xml(c, buf)
    return a, sent, at


def fault_name(buf):
    # For answers we receive (gateway link): the local name of the first element inside the
    # fault detail (e.g. 'ResourceUnknownFault'), the reason, or (None, None) if no fault.
    try:
        b = parse_request(buf, 24, 512).body
    except Exception:  # noqa: BLE001 - anything unreadable is "not a fault we understand"
        return None, None
    if b is None or b.name != "Fault":
        return None, None
    reason = ""
    det = None
    for c in b.children:
        if c.name in ("Detail", "detail") and c.children:
            det = c.children[0].name
        elif c.name == "faultstring":
            reason = c.value()
        elif c.name == "Reason" and c.children:
            reason = c.children[0].value()
    return det or "Fault", reason
