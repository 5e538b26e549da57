# SOAP 1.1 / 1.2 envelopes, WS-Addressing 1.0 headers and faults (with WS-BaseFaults detail).
#
# Reading: parse_request() accepts either SOAP version (the envelope namespace decides) and any
# prefixes; WS-Addressing 1.0 headers (and the 2004/08 submission namespace, read the same
# way) are picked out; a mustUnderstand header we do not know is a MustUnderstand fault
# (SOAP 1.2 §5.2.3, SOAP 1.1 §4.2.3).
# Writing: envelope() and fault_envelope() build strings; the caller encodes.
from wsn.core import ns
from wsn.core import xml as X
from wsn.core.times import format_datetime


class Fault(Exception):
    # A SOAP fault. name/fns: the QName of the fault detail element (e.g. wsnt:
    # InvalidFilterFault); code: 'Sender' or 'Receiver' (SOAP 1.1: Client/Server);
    # reason: human readable; extra: XML appended inside the detail element after the
    # WS-BaseFaults members; base: False for faults without a BaseFault detail (WS-Addressing,
    # SOAP's own).
    def __init__(self, name, reason, fns=ns.WSNT, code="Sender", extra="", base=True,
                 action=None):
        super().__init__(reason)
        self.name = name
        self.fns = fns
        self.code = code
        self.reason = reason
        self.extra = extra
        self.base = base
        if action is None:
            # the rule gateway/wire/faults.py follows too: WSRF faults get the WSRF fault action
            action = ns.WSRF_FAULT if fns in (ns.WSRF_R, ns.WSRF_RP, ns.WSRF_RL) else ns.WSN_FAULT
        self.action = action


def wrap(tag, content):
    # <tag>content</tag>: one format string instead of one per element
    return "<%s>%s</%s>" % (tag, content, tag)


def dialect_fault(dialect):
    return Fault("TopicExpressionDialectUnknownFault", "dialect %s: use %s" % (dialect, ns.SIMPLE))


def unknown_fault(rid):
    # WS-Resource 1.2 §4: no such subscription or pull point (ended, expired or never made)
    return Fault("ResourceUnknownFault", "no resource %s (ended or expired)" % rid,
                 fns=ns.WSRF_R)


class NotSoap(ValueError):
    # The body is well-formed XML but not a SOAP envelope: plain HTTP 400.
    pass


class Request:
    def __init__(self, version, header, body, buf):
        self.version = version
        self.header = header
        self.body = body  # first child element of soap:Body (None if empty)
        self.buf = buf
        self.action = None
        self.message_id = None
        self.to = None
        self.resource_id = None


_WSA_NS = (ns.WSA, ns.WSA_2004)


def parse_request(buf, max_depth=16, max_elements=256):
    # -> Request. Raises xml.XMLError (malformed), NotSoap, or Fault (VersionMismatch,
    # MustUnderstand, a body that is not one element).
    root = X.parse(buf, max_depth, max_elements)
    if root.name != "Envelope":
        raise NotSoap("not a SOAP Envelope: {%s}%s" % (root.ns, root.name))
    if root.ns == ns.SOAP12:
        version = ns.V12
    elif root.ns == ns.SOAP11:
        version = ns.V11
    else:
        # SOAP 1.2 §5.4.7 / SOAP 1.1 §4.4.1: an Envelope in another namespace
        raise Fault("VersionMismatch", "unknown envelope namespace %s" % root.ns,
                    fns=ns.SOAP11, code="VersionMismatch", base=False)
    sns = root.ns
    header = root.find(sns, "Header")
    body = root.find(sns, "Body")
    if body is None:
        raise Fault("Body", "no SOAP Body", fns=sns, base=False)
    el = body.children[0] if body.children else None
    req = Request(version, header, el, buf)
    if header is not None:
        for h in header.children:
            if h.ns in _WSA_NS:
                if h.name == "Action":
                    req.action = h.value()
                elif h.name == "MessageID":
                    req.message_id = h.value()
                elif h.name == "To":
                    req.to = h.value()
                continue
            if h.ns == ns.EDGE and h.name == "ResourceId":
                req.resource_id = h.value()
                continue
            mu = h.get("{%s}mustUnderstand" % sns)
            if mu in ("1", "true"):
                raise Fault("MustUnderstand",
                            "header {%s}%s not understood" % (h.ns, h.name),
                            fns=sns, code="MustUnderstand", base=False, action=ns.WSA_FAULT)
    return req


def envelope(version, action, body, relates_to=None, to=None, headers=""):
    # A complete envelope. body: the XML of the Body's content, a str (-> a str) or a list of
    # str (-> a list of str: large answers stay in pieces, so a small heap needs no big
    # contiguous block); headers: extra header XML (e.g. echoed reference parameters). The
    # device's prefixes (ns.DECLS) are declared on the Envelope, so body fragments may use
    # wsnt:, wsa:, dt:, ... freely.
    parts = ['<s:Envelope xmlns:s="', ns.soap_ns(version), '"', ns.DECLS, "><s:Header><wsa:Action>",
             action, "</wsa:Action>"]
    if relates_to:
        parts.append(wrap("wsa:RelatesTo", X.escape(relates_to)))
    if to:
        parts.append(wrap("wsa:To", X.escape(to)))
    if headers:
        parts.append(headers)
    parts.append("</s:Header><s:Body>")
    head = "".join(parts)
    tail = "</s:Body></s:Envelope>"
    if isinstance(body, list):
        return [head] + body + [tail]
    return head + body + tail


def _qname(uri, local):
    p = ns.prefix(uri)
    if p:
        return "", "%s:%s" % (p, local)
    return ' xmlns:f="%s"' % X.escape_attr(uri), "f:" + local


def fault_body(version, f, now):
    # The soap:Fault element (SOAP 1.2 §5.4 / SOAP 1.1 §4.4) with a WS-BaseFaults detail
    # (WS-BaseFaults 1.2: Timestamp, Description).
    reason = X.escape(f.reason)
    decl, fq = _qname(f.fns, f.name)
    if f.base:
        detail = "<%s%s><wsrf-bf:Timestamp>%s</wsrf-bf:Timestamp>" \
                 "<wsrf-bf:Description>%s</wsrf-bf:Description>%s</%s>" % (
                     fq, decl, format_datetime(now), reason, f.extra, fq)
    else:
        detail = f.extra
    code = f.code
    if version == ns.V12:
        if code in ("Sender", "Receiver", "MustUnderstand", "VersionMismatch"):
            sub = ""
            if f.base or f.fns == ns.WSA:
                sub = "<s:Subcode><s:Value%s>%s</s:Value></s:Subcode>" % (decl, fq)
            code = "<s:Code><s:Value>s:%s</s:Value>%s</s:Code>" % (code, sub)
        return "<s:Fault>%s<s:Reason><s:Text xml:lang=\"en\">%s</s:Text></s:Reason>%s</s:Fault>" % (
            code, reason, "<s:Detail>%s</s:Detail>" % detail if detail else "")
    code11 = "s:" + {"Sender": "Client", "Receiver": "Server"}.get(code, code)
    if not f.base and f.fns == ns.WSA:
        code11 = fq  # WS-Addressing 1.0 SOAP binding §6: the subcode is the 1.1 faultcode
    return "<s:Fault><faultcode>%s</faultcode><faultstring>%s</faultstring>%s</s:Fault>" % (
        code11, reason, "<detail>%s</detail>" % detail if detail else "")


def fault_envelope(version, f, now, relates_to=None):
    return envelope(version, f.action, fault_body(version, f, now), relates_to)


def fault_status(version, f):
    # SOAP 1.2 HTTP binding §7.5.2: Sender faults are 400, others 500; SOAP 1.1: always 500.
    if version == ns.V12 and f.code in ("Sender", "VersionMismatch"):
        return 400 if f.code == "Sender" else 500
    return 500


def epr(address, resource_id=None, tag="wsa:EndpointReference", extra=""):
    # An EndpointReference element; the resource id also travels as a reference parameter
    # (design.md: every EPR carries <edge:ResourceId>).
    rp = ""
    if resource_id:
        rp = "<wsa:ReferenceParameters><edge:ResourceId>%s</edge:ResourceId>" \
             "</wsa:ReferenceParameters>" % resource_id
    return "<%s><wsa:Address>%s</wsa:Address>%s%s</%s>" % (tag, X.escape(address), rp, extra, tag)


def read_epr(el, buf):
    # (address, reference-parameter header XML) of an EndpointReferenceType element; the
    # reference parameters come back as header blocks marked wsa:IsReferenceParameter
    # (WS-Addressing 1.0 SOAP binding §2.3), ready to be echoed.
    a = None
    for w in _WSA_NS:
        a = el.find(w, "Address")
        if a is not None:
            break
    if a is None:
        return None, ""
    rp = None
    for w in _WSA_NS:
        rp = el.find(w, "ReferenceParameters")
        if rp is not None:
            break
    hdr = ""
    if rp is not None and rp.children:
        out = []
        for c in rp.children:
            x = X.outer_xml(c, buf)
            k = 1 + len(c.prefix) + (1 if c.prefix else 0) + len(c.name)
            if c.get("{%s}IsReferenceParameter" % ns.WSA) is None:
                x = x[:k] + ' wsa:IsReferenceParameter="true"' + x[k:]
            out.append(x)
        hdr = "".join(out)
    return a.value(), hdr


def fault_name(buf):
    # For responses we receive (gateway link): the local name of the first element inside the
    # fault detail (e.g. 'ResourceUnknownFault'), the reason, or (None, None) if no fault.
    try:
        req = parse_request(buf, 24, 512)
    except Exception:  # noqa: BLE001 - anything unreadable is "not a fault we understand"
        return None, None
    b = req.body
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
