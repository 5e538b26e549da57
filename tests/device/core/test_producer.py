# ruff: noqa: UP031, RUF059 - MicroPython-compatible test code (%-formatting runs on every port)
# Every operation and fault of the producer core, through handle() (no network).
from test_support import (
    BASE,
    DT,
    EDGE,
    NOTIFY,
    NOW,
    S12,
    SIMPLE,
    WSNT,
    WSRF_RL,
    body_of,
    call,
    data,
    env,
    fault_of,
    make_producer,
    subscribe,
    subscribe_xml,
)
from wsn.core import ops
from wsn.core import soap as S
from wsn.core import xml as X
from wsn.core.registration import set_gateway
from wsn.core.soap import format_datetime
from wsn.core.xml import parse_datetime

P = "/wsn/producer"
PAYLOAD = (
    '<rd:Reading xmlns:rd="urn:wsn-edge:reading" device="dev-1"><rd:value>1</rd:value></rd:Reading>'
)


def _fault(p, body, path=P, now=NOW, version=12):
    st, root, _ = call(p, path, body, now, version)
    assert st in (400, 500), st
    return fault_of(root)


def test_subscribe_response_and_soap11():
    p = make_producer()
    for v in (11, 12):
        st, root, r = call(p, P, subscribe_xml(itt="PT1M"), NOW, v)
        assert st == 200
        assert r.ctype.startswith("application/soap+xml" if v == 12 else "text/xml")
        b = body_of(root)
        assert b.name == "SubscribeResponse"
        addr = b.find(WSNT, "SubscriptionReference").children[0].value()
        assert addr.startswith(BASE + "/wsn/subscriptions/s")
        assert b.find(WSNT, "TerminationTime").value() == format_datetime(NOW + 60)
        assert b.find(WSNT, "CurrentTime").value() == format_datetime(NOW)
        assert "SubscribeResponse" in root.children[0].children[0].value()
    assert len(p.subs) == 2


def test_subscription_ids_are_unique_and_unguessable():
    p = make_producer(max_subscriptions=8)
    ids = [subscribe(p) for _ in range(8)]
    assert len(set(ids)) == 8
    for i in ids:
        assert len(i.rpartition("/")[2]) == 17  # 's' + 16 hex digits (64 random bits)


def test_subscribe_filter_faults():
    p = make_producer()
    mc = '<wsnt:MessageContent Dialect="http://www.w3.org/TR/1999/REC-xpath-19991116">1</wsnt:MessageContent>'
    pp = '<wsnt:ProducerProperties Dialect="x">1</wsnt:ProducerProperties>'
    st, root, r = call(p, P, subscribe_xml(extra_filter=mc + pp + '<o:F xmlns:o="urn:o"/>'))
    assert fault_of(root) == "InvalidFilterFault"
    det = body_of(root).find(S12, "Detail").children[0]
    unknown = [c.resolve(c.value()) for c in det.findall(WSNT, "UnknownFilter")]
    assert unknown == [(WSNT, "MessageContent"), (WSNT, "ProducerProperties"), ("urn:o", "F")]
    conc = '<wsnt:Filter><wsnt:TopicExpression Dialect="http://docs.oasis-open.org/wsn/t-1/TopicExpression/Concrete">dt:temperature</wsnt:TopicExpression></wsnt:Filter>'
    body = subscribe_xml(topic=None).replace(
        "</wsnt:ConsumerReference>", "</wsnt:ConsumerReference>" + conc
    )
    assert _fault(p, body) == "TopicExpressionDialectUnknownFault"
    assert _fault(p, subscribe_xml(topic="dt:pressure")) == "TopicNotSupportedFault"
    assert _fault(p, subscribe_xml(topic="zz:temperature")) == "InvalidTopicExpressionFault"
    assert _fault(p, subscribe_xml(topic="dt:temperature/x")) == "InvalidTopicExpressionFault"
    assert len(p.subs) == 0


def test_subscribe_policy_and_time_faults():
    p = make_producer(max_ttl_s=3600)
    st, root, _ = call(p, P, subscribe_xml(policy='<o:Rate xmlns:o="urn:o">3</o:Rate>'))
    assert fault_of(root) == "UnrecognizedPolicyRequestFault"
    det = body_of(root).find(S12, "Detail").children[0]
    assert [c.resolve(c.value()) for c in det.findall(WSNT, "UnrecognizedPolicy")] == [
        ("urn:o", "Rate")
    ]
    assert _fault(p, subscribe_xml(itt="-PT1M")) == "UnacceptableInitialTerminationTimeFault"
    assert (
        _fault(p, subscribe_xml(itt=format_datetime(NOW - 1)))
        == "UnacceptableInitialTerminationTimeFault"
    )
    assert _fault(p, subscribe_xml(itt="PT2H")) == "UnacceptableInitialTerminationTimeFault"
    assert _fault(p, subscribe_xml(itt="tomorrow")) == "UnacceptableInitialTerminationTimeFault"
    nil = subscribe_xml().replace(
        "</wsnt:Subscribe>",
        '<wsnt:InitialTerminationTime xmlns:xsi="http://www.w3.org/2001/'
        'XMLSchema-instance" xsi:nil="true"/></wsnt:Subscribe>',
    )
    assert _fault(p, nil) == "UnacceptableInitialTerminationTimeFault"
    # dateTime form, and no limit -> nil accepted
    subscribe(p, itt=format_datetime(NOW + 100))
    q = make_producer(max_ttl_s=0)
    st, root, _ = call(q, P, nil)
    assert st == 200 and body_of(root).find(WSNT, "TerminationTime") is None


def test_subscribe_consumer_faults_and_policy():
    p = make_producer()
    assert _fault(p, subscribe_xml(consumer="https://x/")) == "SubscribeCreationFailedFault"
    assert _fault(p, subscribe_xml(consumer="http://x:port/")) == "SubscribeCreationFailedFault"
    assert _fault(p, subscribe_xml(consumer="")) == "SubscribeCreationFailedFault"
    assert _fault(p, "<wsnt:Subscribe/>") == "SubscribeCreationFailedFault"
    p.consumer_allow = ["http://10.0.0.5:"]
    assert _fault(p, subscribe_xml()) == "SubscribeCreationFailedFault"
    subscribe(p, consumer="http://10.0.0.5:80/c")


def test_table_full_and_expired_reclaimed():
    p = make_producer(max_subscriptions=2)
    subscribe(p, itt="PT10S")
    subscribe(p, itt="PT100S")
    st, root, _ = call(p, P, subscribe_xml())
    assert st == 500 and fault_of(root) == "SubscribeCreationFailedFault"
    subscribe(p, now=NOW + 11)  # the first one expired: its slot is reclaimed
    assert len(p.subs) == 2


def test_publish_raw_and_wrapped_render():
    p = make_producer()
    subscribe(p, raw=True, consumer="http://127.0.0.1:9/raw")
    subscribe(p, consumer="http://127.0.0.1:9/wrapped", topic=None)
    subscribe(p, topic="dt:humidity")
    kick, gw = p.publish(0, PAYLOAD, NOW)
    assert len(kick) == 2 and not gw
    bodies = {}
    for s in kick:
        url, body, ctype = p.render(s.queue.peek(), False)
        root = X.parse(body)
        assert root.children[0].children[0].value() == NOTIFY
        bodies[url] = body_of(root)
    raw = bodies["http://127.0.0.1:9/raw"]
    assert raw.name == "Reading" and raw.ns == "urn:wsn-edge:reading"
    n = bodies["http://127.0.0.1:9/wrapped"]
    assert n.name == "Notify"
    nm = n.find(WSNT, "NotificationMessage")
    assert nm.find(WSNT, "SubscriptionReference") is not None
    assert nm.find(WSNT, "ProducerReference").children[0].value() == BASE + "/wsn/producer"
    t = nm.find(WSNT, "Topic")
    assert t.get("Dialect") == SIMPLE and t.resolve(t.value()) == (DT, "temperature")
    assert nm.find(WSNT, "Message").children[0].name == "Reading"


def test_pause_resume_renew_unsubscribe():
    p = make_producer()
    path = subscribe(p, itt="PT60S")
    st, root, _ = call(p, path, "<wsnt:PauseSubscription/>")
    assert st == 200 and body_of(root).name == "PauseSubscriptionResponse"
    assert p.publish(0, PAYLOAD, NOW) == ([], False)
    st, root, _ = call(p, path, "<wsnt:ResumeSubscription/>")
    assert st == 200 and body_of(root).name == "ResumeSubscriptionResponse"
    assert len(p.publish(0, PAYLOAD, NOW)[0]) == 1
    st, root, _ = call(
        p, path, "<wsnt:Renew><wsnt:TerminationTime>PT1H</wsnt:TerminationTime></wsnt:Renew>"
    )
    assert st == 200
    tt = body_of(root).find(WSNT, "TerminationTime").value()
    assert parse_datetime(tt) == NOW + 3600
    assert (
        _fault(
            p, "<wsnt:Renew><wsnt:TerminationTime>-PT1S</wsnt:TerminationTime></wsnt:Renew>", path
        )
        == "UnacceptableTerminationTimeFault"
    )
    assert _fault(p, "<wsnt:Renew/>", path) == "UnacceptableTerminationTimeFault"
    st, root, _ = call(p, path, "<wsnt:Unsubscribe/>")
    assert st == 200 and body_of(root).name == "UnsubscribeResponse"
    for op in (
        "<wsnt:Unsubscribe/>",
        "<wsnt:PauseSubscription/>",
        "<wsnt:ResumeSubscription/>",
        "<wsnt:Renew><wsnt:TerminationTime>PT1H</wsnt:TerminationTime></wsnt:Renew>",
    ):
        assert _fault(p, op, path) == "ResourceUnknownFault"


PAUSE_OLD = "http://docs.oasis-open.org/wsn/bw-2/SubscriptionManager/PauseSubscriptionRequest"
RESUME_OLD = "http://docs.oasis-open.org/wsn/bw-2/SubscriptionManager/ResumeSubscriptionRequest"
PSM = "http://docs.oasis-open.org/wsn/bw-2/PausableSubscriptionManager/"


def _action(root):
    return root.children[0].find(S.WSA, "Action").value()


def test_pause_resume_answer_with_pausable_subscription_manager_actions():
    # bw-2.wsdl: PauseSubscription/ResumeSubscription are operations of the
    # PausableSubscriptionManager portType; the old SubscriptionManager request actions are
    # still accepted (the Body decides).
    p = make_producer()
    path = subscribe(p)
    for op, old, new in (
        ("PauseSubscription", PAUSE_OLD, PSM + "PauseSubscriptionRequest"),
        ("ResumeSubscription", RESUME_OLD, PSM + "ResumeSubscriptionRequest"),
    ):
        for action in (old, new):
            st, root, _ = call(p, path, env("<wsnt:%s/>" % op, 12, action))
            assert st == 200 and body_of(root).name == op + "Response"
            assert _action(root) == PSM + op + "Response", _action(root)


def test_destroy_terminates_a_subscription():
    # WS-ResourceLifetime 1.2 ImmediateResourceTermination (WS-BaseNotification 1.3 §6.4)
    p = make_producer()
    path = subscribe(p)
    d = '<wsrf-rl:Destroy xmlns:wsrf-rl="http://docs.oasis-open.org/wsrf/rl-2"/>'
    st, root, r = call(
        p,
        path,
        env(
            d,
            12,
            "http://docs.oasis-open.org/wsrf/rlw-2/ImmediateResourceTermination/DestroyRequest",
        ),
    )
    assert st == 200 and body_of(root).name == "DestroyResponse" and body_of(root).ns == WSRF_RL
    assert (
        _action(root)
        == "http://docs.oasis-open.org/wsrf/rlw-2/ImmediateResourceTermination/DestroyResponse"
    )
    assert [a for a, _ in r.actions] == ["unsubscribed"]
    assert len(p.subs) == 0 and p.publish(0, PAYLOAD, NOW) == ([], False)
    st, root, _ = call(p, path, d)
    assert fault_of(root) == "ResourceUnknownFault"
    # the same rule as the gateway (gateway/wire/faults.py): a WSRF fault, the WSRF fault action
    assert _action(root) == "http://docs.oasis-open.org/wsrf/fault"
    assert _fault(p, "<wsnt:Notify/>", path) == "ActionNotSupported"


def test_expiry_destroys():
    p = make_producer()
    path = subscribe(p, itt="PT5S")
    assert len(p.expire(NOW + 4)) == 0
    gone = p.expire(NOW + 5)
    assert len(gone) == 1 and len(p.subs) == 0
    assert _fault(p, "<wsnt:Unsubscribe/>", path) == "ResourceUnknownFault"


def test_resource_id_header_routes_to_subscription():
    p = make_producer()
    path = subscribe(p)
    sid = path.rpartition("/")[2]
    h = '<edge:ResourceId xmlns:edge="urn:wsn-edge">%s</edge:ResourceId>' % sid
    st, root, _ = call(p, P, env("<wsnt:PauseSubscription/>", 12, None, h))
    assert st == 200 and ops.get(p, sid, "s").paused


def test_get_current_message():
    p = make_producer()
    gcm = (
        '<wsnt:GetCurrentMessage><wsnt:Topic Dialect="%s">%s</wsnt:Topic></wsnt:GetCurrentMessage>'
    )
    assert _fault(p, gcm % (SIMPLE, "dt:temperature")) == "NoCurrentMessageOnTopicFault"
    p.publish(0, PAYLOAD, NOW)
    st, root, _ = call(p, P, gcm % (SIMPLE, "dt:temperature"))
    assert st == 200
    b = body_of(root)
    assert b.name == "GetCurrentMessageResponse" and b.children[0].name == "Reading"
    assert _fault(p, gcm % ("urn:other", "dt:temperature")) == "TopicExpressionDialectUnknownFault"
    assert _fault(p, gcm % (SIMPLE, "dt:nothing")) == "TopicNotSupportedFault"
    assert _fault(p, gcm % (SIMPLE, "q:x")) == "InvalidTopicExpressionFault"
    two = (
        '<wsnt:GetCurrentMessage><wsnt:Topic Dialect="%s">dt:temperature</wsnt:Topic>'
        '<wsnt:Topic Dialect="%s">dt:humidity</wsnt:Topic></wsnt:GetCurrentMessage>'
        % (SIMPLE, SIMPLE)
    )
    assert _fault(p, two) == "MultipleTopicsSpecifiedFault"
    assert _fault(p, "<wsnt:GetCurrentMessage/>") == "InvalidTopicExpressionFault"


def test_get_resource_property():
    p = make_producer()
    grp = (
        '<wsrf-rp:GetResourceProperty xmlns:wsrf-rp="http://docs.oasis-open.org/wsrf/rp-2" '
        'xmlns:wstop="http://docs.oasis-open.org/wsn/t-1" xmlns:edge="urn:wsn-edge">%s'
        "</wsrf-rp:GetResourceProperty>"
    )
    st, root, _ = call(p, P, grp % "wsnt:TopicExpression")
    tes = body_of(root).findall(WSNT, "TopicExpression")
    assert [t.resolve(t.value()) for t in tes] == [
        (DT, "temperature"),
        (DT, "humidity"),
        (DT, "heartbeat"),
    ]
    assert all([t.get("Dialect") == SIMPLE for t in tes])
    st, root, _ = call(p, P, grp % "wsnt:TopicExpressionDialect")
    assert body_of(root).children[0].value() == SIMPLE
    st, root, _ = call(p, P, grp % "wsnt:FixedTopicSet")
    assert body_of(root).children[0].value() == "true"
    st, root, _ = call(p, P, grp % "wstop:TopicSet")
    assert body_of(root).children[0].name == "TopicSet"
    st, root, _ = call(p, P, grp % "edge:Status")
    assert body_of(root).children[0].find(EDGE, "gatewayDropped").value() == "0"
    assert _fault(p, grp % "wsnt:Nothing") == "InvalidResourcePropertyQNameFault"
    assert _fault(p, grp % "nope:Nothing") == "InvalidResourcePropertyQNameFault"


def test_pullpoint_lifecycle_and_ring_overflow():
    p = make_producer(pullpoint_size=4, max_pullpoints=1)
    st, root, _ = call(p, P, "<wsnt:CreatePullPoint/>")
    assert st == 200
    addr = body_of(root).find(WSNT, "PullPoint").children[0].value()
    path = addr[len(BASE) :]
    assert path.startswith("/wsn/pullpoints/p")
    st, root, _ = call(p, P, "<wsnt:CreatePullPoint/>")
    assert fault_of(root) == "UnableToCreatePullPointFault"
    # a subscription whose consumer is the pull point is delivered in memory
    subscribe(p, consumer="http://localhost:8081" + path, topic=None)
    for i in range(6):
        kick, _gw = p.publish(i % 3, PAYLOAD.replace(">1<", ">%d<" % i), NOW)
        assert kick == []
    pp = ops.get(p, path.rpartition("/")[2], "p")
    assert len(pp) == 4 and pp.dropped == 2
    st, root, _ = call(
        p, path, "<wsnt:GetMessages><wsnt:MaximumNumber>3</wsnt:MaximumNumber></wsnt:GetMessages>"
    )
    msgs = body_of(root).findall(WSNT, "NotificationMessage")
    assert len(msgs) == 3
    vals = [m.find(WSNT, "Message").children[0].children[0].value() for m in msgs]
    assert vals == ["2", "3", "4"]  # the two oldest were dropped
    assert msgs[0].find(WSNT, "Topic").value() == "dt:heartbeat"
    st, root, _ = call(p, path, "<wsnt:GetMessages/>")
    assert len(body_of(root).findall(WSNT, "NotificationMessage")) == 1
    assert (
        _fault(
            p,
            "<wsnt:GetMessages><wsnt:MaximumNumber>-1</wsnt:MaximumNumber></wsnt:GetMessages>",
            path,
        )
        == "UnableToGetMessagesFault"
    )
    # Notify into it (wrapped and raw)
    note = (
        '<wsnt:Notify><wsnt:NotificationMessage><wsnt:Message><x:V xmlns:x="urn:x">9</x:V>'
        "</wsnt:Message></wsnt:NotificationMessage></wsnt:Notify>"
    )
    st, root, r = call(p, path, note)
    assert st == 202 and data(r) == b""
    # a raw notification: §3.1, the producer SHOULD send it with the Notify action
    st, root, r = call(p, path, env('<x:Raw xmlns:x="urn:x">r</x:Raw>', 12, NOTIFY))
    assert st == 202
    st, root, _ = call(p, path, "<wsnt:GetMessages/>")
    msgs = body_of(root).findall(WSNT, "NotificationMessage")
    assert [m.find(WSNT, "Message").children[0].name for m in msgs] == ["V", "Raw"]
    st, root, _ = call(p, path, "<wsnt:DestroyPullPoint/>")
    assert st == 200 and body_of(root).name == "DestroyPullPointResponse"
    assert len(p.subs) == 0  # its subscription ended with it
    assert _fault(p, "<wsnt:GetMessages/>", path) == "ResourceUnknownFault"
    assert _fault(p, "<wsnt:DestroyPullPoint/>", path) == "ResourceUnknownFault"


def test_gateway_outbox_and_reregistration():
    p = make_producer(gateway_buffer=3)
    gwa = "http://127.0.0.1:8080/wsn/registrations/r1"
    set_gateway(p, gwa, "")
    subscribe(p, consumer=gwa)
    for _ in range(5):
        kick, gw = p.publish(0, PAYLOAD, NOW)
        assert kick == [] and gw
    assert len(p.outbox) == 3 and p.outbox.dropped == 2
    url, body, _ = p.render(p.outbox.peek(), True)
    assert url == gwa
    gone = set_gateway(p, "http://127.0.0.1:8080/wsn/registrations/r2", "")
    assert len(gone) == 1 and len(p.subs) == 0
    url, body, _ = p.render(p.outbox.peek(), True)
    assert url.endswith("/r2")  # buffered readings follow the new registration


def test_malformed_and_wrong_requests():
    p = make_producer(max_request_bytes=2000)
    st, root, r = call(p, P, b"<s:Envelope")
    assert st == 400 and b"malformed XML" in data(r)
    st, root, r = call(p, P, b'<!DOCTYPE x [<!ENTITY a "b">]><x>&a;</x>')
    assert st == 400 and b"DOCTYPE" in data(r)
    r = ops.handle(p, "POST", P, b"<html><body/></html>", NOW, "text/xml")
    assert r.status == 400 and r.ctype.startswith("text/plain")
    r = ops.handle(p, "POST", P, b"x" * 2001, NOW, "text/xml")
    assert r.status == 413
    r = ops.handle(p, "GET", P, b"", NOW, "")
    assert r.status == 405
    r = ops.handle(p, "POST", "/nope", b"", NOW, "")
    assert r.status == 404
    st, root, r = call(p, P, b'<e:Envelope xmlns:e="urn:v"><e:Body/></e:Envelope>')
    assert st == 500 and fault_of(root) == "VersionMismatch"
    st, root, r = call(p, P, "<wsnt:Renew/>")
    assert fault_of(root) == "ActionNotSupported"
    st, root, r = call(p, P, env("", 12))
    assert st == 400
    full = subscribe_xml(topic="dt:temperature" + " " * 1990)
    assert ops.handle(p, "POST", P, env(full), NOW, "").status == 413
    # accepted state stays intact after all that
    assert len(p.subs) == 0 and len(p.pps) == 0


def test_subscription_resource_properties():
    p = make_producer()
    path = subscribe(p, raw=True, topic="dt:humidity", itt="PT1M")
    grp = (
        '<wsrf-rp:GetResourceProperty xmlns:wsrf-rp="http://docs.oasis-open.org/wsrf/rp-2" '
        'xmlns:wsrf-rl="http://docs.oasis-open.org/wsrf/rl-2">%s</wsrf-rp:GetResourceProperty>'
    )
    st, root, _ = call(p, path, grp % "wsnt:ConsumerReference")
    assert st == 200
    assert body_of(root).children[0].children[0].value() == "http://127.0.0.1:9999/c"
    st, root, _ = call(p, path, grp % "wsnt:Filter")
    te = body_of(root).children[0].children[0]
    assert te.resolve(te.value()) == (DT, "humidity")
    st, root, _ = call(p, path, grp % "wsnt:SubscriptionPolicy")
    assert body_of(root).children[0].children[0].name == "UseRaw"
    st, root, _ = call(p, path, grp % "wsnt:CreationTime")
    assert parse_datetime(body_of(root).children[0].value()) == NOW
    st, root, _ = call(p, path, grp % "wsrf-rl:TerminationTime")
    assert parse_datetime(body_of(root).children[0].value()) == NOW + 60
    assert _fault(p, grp % "wsnt:Nope", path) == "InvalidResourcePropertyQNameFault"
    assert _fault(p, grp % "zz:Nope", path) == "InvalidResourcePropertyQNameFault"


def test_gateway_batch_packs_buffered_readings_into_one_notify():
    # issue 16: up to batch_max buffered readings, oldest first, one NotificationMessage each
    p = make_producer(gateway_buffer=32)
    set_gateway(p, "http://127.0.0.1:9/wsn/registrations/r1", "")
    subscribe(p, consumer="http://127.0.0.1:9/wsn/registrations/r1", topic=None)
    for i in range(7):
        p.publish(i % 3, PAYLOAD.replace(">1<", ">%d<" % i), NOW)
    items, url, body, ctype = p.gateway_batch(5, 12, "urn:x:1")
    assert len(items) == 5 and url.endswith("/r1") and ctype.startswith("application/soap+xml")
    root = X.parse(b"".join(body))
    # the batch's wsa:MessageID (WS-Addressing 1.0 Core §3.2; the same for a resend)
    assert root.children[0].find(S.WSA, "MessageID").value() == "urn:x:1"
    nms = body_of(root).findall(WSNT, "NotificationMessage")
    assert len(nms) == 5
    assert [nm.find(WSNT, "Message").children[0].children[0].value() for nm in nms] == [
        str(i) for i in range(5)
    ]
    root = nms = body = None
    assert len(p.outbox) == 7  # the caller pops what was accepted
    for _ in items:
        p.outbox.pop()
    items, _, body, _ = p.gateway_batch(5, 12, "urn:x:2")
    assert len(items) == 2
    # sleepy mode: readings without a subscription, no SubscriptionReference
    q = make_producer()
    set_gateway(q, "http://127.0.0.1:9/wsn/registrations/r2", "")
    q.outbox.push((None, 1, PAYLOAD, NOW))
    items, _, body, _ = q.gateway_batch(16, 11, "urn:x:3")
    nm = body_of(X.parse(b"".join(body))).find(WSNT, "NotificationMessage")
    assert nm.find(WSNT, "SubscriptionReference") is None
    assert nm.find(WSNT, "Topic").value() == "dt:humidity"


def test_gateway_batch_sends_a_raw_item_alone():
    p = make_producer()
    gw = "http://127.0.0.1:9/wsn/registrations/r1"
    set_gateway(p, gw, "")
    subscribe(p, consumer=gw, topic="dt:temperature")
    subscribe(p, consumer=gw, topic="dt:humidity", raw=True)
    p.publish(0, PAYLOAD, NOW)
    p.publish(1, PAYLOAD, NOW)
    p.publish(0, PAYLOAD, NOW)
    sizes = []
    while len(p.outbox):
        items, _, _, _ = p.gateway_batch(16, 12, "urn:x:4")
        sizes.append(len(items))
        for _ in items:
            p.outbox.pop()
    assert sizes == [1, 1, 1]
