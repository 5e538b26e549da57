# SOAP 1.1 / 1.2 envelopes, WS-Addressing 1.0 headers and faults (with WS-BaseFaults detail).
#
# Reading: parse_request() accepts either SOAP version (the envelope namespace decides) and any
# prefixes; WS-Addressing 1.0 headers (and the 2004/08 submission namespace, read the same
# way) are picked out; a mustUnderstand header we do not know is a MustUnderstand fault
# (SOAP 1.2 §5.2.3, SOAP 1.1 §4.2.3).
# Writing: envelope() and fault_envelope() build strings; the caller encodes.
from micropython import const

from wsn.core import ns
from wsn.core import xml as X

# namespaces and actions only this module uses: const(), no global in wsn.core.ns
_SOAP12 = const("http://www.w3.org/2003/05/soap-envelope")
_WSA_2004 = const("http://schemas.xmlsoap.org/ws/2004/08/addressing")
_EDGE = const("urn:wsn-edge")
_WSN_FAULT = const("http://docs.oasis-open.org/wsn/fault")
_WSRF_FAULT = const("http://docs.oasis-open.org/wsrf/fault")


class Fault(Exception):
    # A SOAP fault. name/fns: the QName of the fault detail element (e.g. wsnt:
    # InvalidFilterFault); code: 'Sender' or 'Receiver' (SOAP 1.1: Client/Server), or
    # 'MustUnderstand', 'VersionMismatch' (SOAP's own); reason: human readable; extra: XML
    # appended inside the detail element after the WS-BaseFaults members; base: False for
    # faults without a BaseFault detail (WS-Addressing, SOAP's own); status: the HTTP status,
    # if not the binding's (fault_status).
    def __init__(self, name, reason, fns=ns.WSNT, code="Sender", extra="", base=True,
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


def wrap(tag, content):
    # <tag>content</tag>: one format string instead of one per element
    return "<%s>%s</%s>" % (tag, content, tag)


class NotSoap(ValueError):
    # The body is well-formed XML but not a SOAP envelope: plain HTTP 400.
    pass


def parse_request(buf, max_depth=16, max_elements=256):
    # -> the request: the Envelope element with the SOAP parts picked out as attributes
    # (no class of its own): version, header, body (the first child element of soap:Body,
    # or None), buf, and the headers action, message_id, to, resource_id (edge:ResourceId),
    # each None if absent. Raises xml.XMLError (malformed), NotSoap, or Fault
    # (VersionMismatch, MustUnderstand, no Body).
    root = X.parse(buf, max_depth, max_elements)
    sns = root.ns
    if root.name != "Envelope":
        raise NotSoap("not a SOAP Envelope: {%s}%s" % (sns, root.name))
    if sns not in (ns.SOAP11, _SOAP12):
        # SOAP 1.2 §5.4.7 / SOAP 1.1 §4.4.1: an Envelope in another namespace
        raise Fault("VersionMismatch", "unknown envelope namespace %s" % sns,
                    ns.SOAP11, "VersionMismatch", base=False)
    r = root
    r.version = ns.V12 if sns == _SOAP12 else ns.V11
    r.header = root.find(sns, "Header")
    body = root.find(sns, "Body")
    if body is None:
        raise Fault("Body", "no SOAP Body", sns, base=False)
    r.body = body.children[0] if body.children else None
    r.buf = buf
    r.action = r.message_id = r.to = r.resource_id = None
    for h in r.header.children if r.header else ():
        if h.ns in (ns.WSA, _WSA_2004) and h.name in ("Action", "MessageID", "To"):
            setattr(r, "message_id" if h.name == "MessageID" else h.name.lower(), h.value())
        elif h.ns == _EDGE and h.name == "ResourceId":
            r.resource_id = h.value()
        elif h.ns not in (ns.WSA, _WSA_2004) and h.get("{%s}mustUnderstand" % sns) in ("1", "true"):
            raise Fault("MustUnderstand", "header {%s}%s not understood" % (h.ns, h.name),
                        sns, "MustUnderstand", base=False, action=ns.WSA_FAULT)
    return r


def envelope(version, action, body, relates_to=None, to=None, headers=""):
    # A complete envelope. body: the XML of the Body's content, a str (-> a str) or a list of
    # str (-> a list of str: large answers stay in pieces, so a small heap needs no big
    # contiguous block); headers: extra header XML (e.g. echoed reference parameters). The
    # device's prefixes (ns.DECLS) are declared on the Envelope, so body fragments may use
    # wsnt:, wsa:, dt:, ... freely.
    head = '<s:Envelope xmlns:s="%s"%s><s:Header><wsa:Action>%s</wsa:Action>%s%s%s</s:Header><s:Body>' % (
        _SOAP12 if version == ns.V12 else ns.SOAP11, ns.DECLS, action,
        wrap("wsa:RelatesTo", X.escape(relates_to)) if relates_to else "",
        wrap("wsa:To", X.escape(to)) if to else "", headers)
    tail = "</s:Body></s:Envelope>"
    if isinstance(body, list):
        return [head] + body + [tail]
    return head + body + tail


def fault_envelope(version, f, now, relates_to=None):
    # The soap:Fault element (SOAP 1.2 §5.4 / SOAP 1.1 §4.4) with a WS-BaseFaults detail
    # (WS-BaseFaults 1.2: Timestamp, Description), in an envelope.
    reason = X.escape(f.reason)
    p = ns.prefix(f.fns)
    decl = "" if p else ' xmlns:f="%s"' % X.escape(f.fns)
    fq = "%s:%s" % (p or "f", f.name)
    detail = f.extra
    if f.base:
        detail = "<%s%s><wsrf-bf:Timestamp>%s</wsrf-bf:Timestamp>" \
                 "<wsrf-bf:Description>%s</wsrf-bf:Description>%s</%s>" % (
                     fq, decl, X.format_datetime(now), reason, f.extra, fq)
    code = f.code
    if version == ns.V12:
        # code is one of SOAP 1.2's Sender, Receiver, MustUnderstand, VersionMismatch (Fault)
        sub = ""
        if f.base or f.fns == ns.WSA:
            sub = "<s:Subcode><s:Value%s>%s</s:Value></s:Subcode>" % (decl, fq)
        code = "<s:Code><s:Value>s:%s</s:Value>%s</s:Code>" % (code, sub)
        body = "<s:Fault>%s<s:Reason><s:Text xml:lang=\"en\">%s</s:Text></s:Reason>%s</s:Fault>" % (
            code, reason, wrap("s:Detail", detail) if detail else "")
    else:
        if not f.base and f.fns == ns.WSA:
            code = fq  # WS-Addressing 1.0 SOAP binding §6: the subcode is the 1.1 faultcode
        else:
            code = "s:" + ("Client" if code == "Sender" else "Server" if code == "Receiver" else code)
        body = "<s:Fault><faultcode>%s</faultcode><faultstring>%s</faultstring>%s</s:Fault>" % (
            code, reason, wrap("detail", detail) if detail else "")
    return envelope(version, f.action, body, relates_to)


def fault_status(version, f):
    # SOAP 1.2 HTTP binding §7.5.2: Sender faults are 400, others 500; SOAP 1.1: always 500.
    return 400 if version == ns.V12 and f.code == "Sender" else 500


def epr(address, resource_id, tag):
    # An EndpointReference element; the resource id also travels as a reference parameter
    # (design.md: every EPR carries <edge:ResourceId>).
    return "<%s><wsa:Address>%s</wsa:Address>%s</%s>" % (
        tag, X.escape(address), "<wsa:ReferenceParameters><edge:ResourceId>%s</edge:ResourceId>"
        "</wsa:ReferenceParameters>" % resource_id if resource_id else "", tag)


def read_epr(el, buf):
    # (address, reference-parameter header XML) of an EndpointReferenceType element; the
    # reference parameters come back as header blocks marked wsa:IsReferenceParameter
    # (WS-Addressing 1.0 SOAP binding §2.3), ready to be echoed.
    a = rp = None
    for c in el.children:
        if c.ns in (ns.WSA, _WSA_2004):
            if c.name == "Address" and a is None:
                a = c.value()
            elif c.name == "ReferenceParameters" and rp is None:
                rp = c
    if a is None:
        return None, ""
    out = []
    for c in rp.children if rp else ():
        x = X.outer_xml(c, buf)
        if c.get("{%s}IsReferenceParameter" % ns.WSA) is None:
            k = 1 + len(c.prefix) + (1 if c.prefix else 0) + len(c.name)
            x = x[:k] + ' wsa:IsReferenceParameter="true"' + x[k:]
        out.append(x)
    return a, "".join(out)


def fault_name(buf):
    # For responses we receive (gateway link): the local name of the first element inside the
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
