# Optional package for older clients: SOAP 1.1 (requests, answers and faults in SOAP 1.1, pushes
# to a SOAP 1.1 subscriber, "gateway_soap": "1.1") and WS-Addressing 2004/08 headers, read like
# WS-Addressing 1.0. wsn.core.request imports it when it meets either; without it a SOAP 1.1
# envelope gets a VersionMismatch fault (SOAP 1.2 §5.4.7) and a 2004/08 header is one the
# device does not understand.
from wsn.core import soap as S


def fault(f, fq, reason, detail):
    # the soap:Fault of SOAP 1.1 §4.4 (wsn.core.request.fault_envelope)
    if not f.base and f.fns == S.WSA:
        code = fq  # WS-Addressing 1.0 SOAP binding §6: the subcode is the 1.1 faultcode
    else:
        code = "s:" + ("Client" if f.code == "Sender" else "Server" if f.code == "Receiver" else f.code)
    return "<s:Fault><faultcode>%s</faultcode><faultstring>%s</faultstring>%s</s:Fault>" % (
        code, reason, S.wrap("detail", detail) if detail else "")
