# ruff: noqa: UP031 - MicroPython-compatible test code (%-formatting runs on every port)
# Shared helpers for the core tests (a test_* module so the QEMU build freezes it with them).
# MicroPython-compatible; no files, no time, no sockets.
from wsn.core import ops, soap
from wsn.core import xml as X
from wsn.core.topics import load_namespace, topic_set

TOPICS_XML = b"""<?xml version="1.0" encoding="UTF-8"?>
<wstop:TopicNamespace name="DeviceTopics" targetNamespace="urn:wsn-edge:device-topics"
    xmlns:wstop="http://docs.oasis-open.org/wsn/t-1">
  <wstop:Topic name="temperature"/>
  <wstop:Topic name="humidity"/>
  <wstop:Topic name="heartbeat"/>
</wstop:TopicNamespace>"""

S11 = "http://schemas.xmlsoap.org/soap/envelope/"
S12 = "http://www.w3.org/2003/05/soap-envelope"
WSNT = "http://docs.oasis-open.org/wsn/b-2"
SIMPLE = "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Simple"
# URIs the core keeps private (a const() in the one module that uses them), spelled out here
DT = "urn:wsn-edge:device-topics"
EDGE = "urn:wsn-edge"
BR = "http://docs.oasis-open.org/wsn/br-2"
WSRF_RL = "http://docs.oasis-open.org/wsrf/rl-2"
NOTIFY = "http://docs.oasis-open.org/wsn/bw-2/NotificationConsumer/Notify"
REGISTER = "http://docs.oasis-open.org/wsn/brw-2/RegisterPublisher/RegisterPublisher"
SET_TT = "http://docs.oasis-open.org/wsrf/rlw-2/ScheduledResourceTermination/SetTerminationTime"
WSN_FAULT = "http://docs.oasis-open.org/wsn/fault"
BASE = "http://127.0.0.1:8081"
NOW = 848550000  # 2026-11-21T04:20:00Z in seconds since 2000

_state = [12345]


def rand(n):
    # deterministic xorshift bytes (the device uses os.urandom)
    out = bytearray(n)
    x = _state[0]
    for i in range(n):
        x ^= (x << 13) & 0x3FFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0x3FFFFFFF
        out[i] = x & 255
    _state[0] = x
    return bytes(out)


def topicset():
    tns, names = load_namespace(TOPICS_XML)
    return topic_set(tns, names)


def make_producer(**limits):
    return ops.new_producer("dev-1", topicset(), BASE, rand, limits)


def env(body, version=12, action=None, headers=""):
    sns = S12 if version == 12 else S11
    h = ""
    if action:
        h = "<wsa:Action>%s</wsa:Action><wsa:MessageID>urn:uuid:m1</wsa:MessageID>" % action
    return (
        '<?xml version="1.0"?><s:Envelope xmlns:s="%s" '
        'xmlns:wsa="http://www.w3.org/2005/08/addressing" xmlns:wsnt="%s" '
        'xmlns:dt="urn:wsn-edge:device-topics"><s:Header>%s%s</s:Header><s:Body>%s</s:Body>'
        "</s:Envelope>" % (sns, WSNT, h, headers, body)
    ).encode()


def subscribe_xml(
    consumer="http://127.0.0.1:9999/c",
    topic="dt:temperature",
    raw=False,
    itt=None,
    extra_filter="",
    policy="",
):
    f = ""
    if topic is not None:
        f = (
            '<wsnt:Filter><wsnt:TopicExpression Dialect="%s">%s</wsnt:TopicExpression>%s'
            "</wsnt:Filter>" % (SIMPLE, topic, extra_filter)
        )
    elif extra_filter:
        f = "<wsnt:Filter>%s</wsnt:Filter>" % extra_filter
    pol = ""
    if raw or policy:
        pol = "<wsnt:SubscriptionPolicy>%s%s</wsnt:SubscriptionPolicy>" % (
            "<wsnt:UseRaw/>" if raw else "",
            policy,
        )
    t = "<wsnt:InitialTerminationTime>%s</wsnt:InitialTerminationTime>" % itt if itt else ""
    return (
        "<wsnt:Subscribe><wsnt:ConsumerReference><wsa:Address>%s</wsa:Address>"
        "</wsnt:ConsumerReference>%s%s%s</wsnt:Subscribe>" % (consumer, f, t, pol)
    )


def req(buf):
    # parse_request with the device's default limits
    from wsn.core.request import parse_request

    return parse_request(buf, 16, 128)


def data(r):
    # a Response's whole body as one bytes object (the device writes a list of chunks as is)
    return r.body if isinstance(r.body, bytes) else b"".join(r.body)


def call(p, path, body, now=NOW, version=12):
    # -> (status, response root Element or None, raw response)
    if isinstance(body, str):
        body = env(body, version)
    r = ops.handle(
        p, "POST", path, body, now, "application/soap+xml" if version == 12 else "text/xml"
    )
    raw = data(r)
    root = X.parse(raw) if raw and r.ctype.find("xml") >= 0 else None
    return r.status, root, r


def body_of(root):
    b = root.children[-1]
    assert b.name == "Body", b.name
    return b.children[0] if b.children else None


def fault_of(root):
    # -> local name of the fault: SOAP 1.2 Subcode (or Code), SOAP 1.1 the BaseFault detail
    # element (or faultcode)
    f = body_of(root)
    assert f.name == "Fault", f.name
    for c in f.children:
        if c.name == "Code":
            sub = c.find(c.ns, "Subcode")
            v = (sub if sub is not None else c).children[0].value()
            return v.rpartition(":")[2]
    code = None
    for c in f.children:
        if c.name == "faultcode":
            code = c.value().rpartition(":")[2]
        if (
            c.name == "detail"
            and c.children
            and c.children[0].children
            and c.children[0].children[0].name == "Timestamp"
        ):
            return c.children[0].name
    return code


def subscribe(p, now=NOW, **kw):
    st, root, _ = call(p, "/wsn/producer", subscribe_xml(**kw), now)
    assert st == 200, (st, root and fault_of(root))
    ref = body_of(root).find(WSNT, "SubscriptionReference")
    addr = ref.children[0].value()
    return addr[len(BASE) :]


def test_support_rand_is_deterministic_and_varied():
    a = rand(8)
    b = rand(8)
    assert len(a) == 8 and a != b
    assert soap.SIMPLE == SIMPLE
