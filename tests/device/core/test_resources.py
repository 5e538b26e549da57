# ruff: noqa: UP031, RUF059 - MicroPython-compatible test code (%-formatting runs on every port)
# The device's resources as WS-Resources (wsn.core.wsrf): a pull point answers wsrf-rl:Destroy
# and GetResourceProperty as a WS-Resource must (WS-BaseNotification 1.3 §5.1) and never keeps
# a request as a notification; a subscription's properties are what Subscribe sent (§6.4.1).
from test_support import (
    BASE,
    DT,
    EDGE,
    NOTIFY,
    NOW,
    WSNT,
    WSRF_RL,
    body_of,
    call,
    env,
    fault_of,
    make_producer,
    subscribe_xml,
)
from wsn.core import xml as X
from wsn.core.xml import parse_datetime

P = "/wsn/producer"
RP = "http://docs.oasis-open.org/wsrf/rp-2"
DESTROY = '<wsrf-rl:Destroy xmlns:wsrf-rl="%s"/>' % WSRF_RL
GRP = (
    '<wsrf-rp:GetResourceProperty xmlns:wsrf-rp="%s" xmlns:wsrf-rl="%s">%%s'
    "</wsrf-rp:GetResourceProperty>" % (RP, WSRF_RL)
)


def _pullpoint(p):
    st, root, _ = call(p, P, "<wsnt:CreatePullPoint/>")
    assert st == 200
    return body_of(root).find(WSNT, "PullPoint").children[0].value()[len(BASE) :]


def _messages(p, path):
    st, root, _ = call(p, path, "<wsnt:GetMessages/>")
    assert st == 200, fault_of(root)
    return body_of(root).findall(WSNT, "NotificationMessage")


def test_destroy_ends_a_pull_point():
    p = make_producer()
    path = _pullpoint(p)
    subscribe_into = subscribe_xml(consumer="http://127.0.0.1:8081" + path)
    call(p, P, subscribe_into)
    assert len(p.subs) == 1
    st, root, r = call(p, path, DESTROY)
    assert st == 200 and body_of(root).name == "DestroyResponse", fault_of(root)
    assert body_of(root).ns == WSRF_RL
    assert len(p.pps) == 0 and len(p.subs) == 0  # its subscription ended with it
    assert [a for a, _ in r.actions] == ["unsubscribed", "destroyed"]
    st, root, _ = call(p, path, "<wsnt:GetMessages/>")
    assert fault_of(root) == "ResourceUnknownFault"


def test_get_resource_property_of_a_pull_point_is_no_notification():
    p = make_producer()
    path = _pullpoint(p)
    for q in ("wsrf-rl:CurrentTime", "wsnt:Filter"):
        st, root, _ = call(p, path, GRP % q)
        assert st == 400 and fault_of(root) == "InvalidResourcePropertyQNameFault"
    assert _messages(p, path) == []


def test_a_pull_point_keeps_only_notifications():
    # §5.1.1: Notify (and a raw notification, sent with the Notify action, §3.1); any other
    # body is an action it does not support, never kept as a message
    p = make_producer()
    path = _pullpoint(p)
    for body in ("<wsnt:Subscribe/>", "<wsnt:Renew/>", '<x:Raw xmlns:x="urn:x"/>'):
        st, root, _ = call(p, path, body)
        assert st == 400 and fault_of(root) == "ActionNotSupported", body
    st, _, _ = call(p, path, env('<x:Raw xmlns:x="urn:x">1</x:Raw>', 12, NOTIFY))
    assert st == 202
    msgs = _messages(p, path)
    assert len(msgs) == 1 and msgs[0].find(WSNT, "Message").children[0].name == "Raw"


def _prop(p, path, q):
    st, root, _ = call(p, path, GRP % q)
    assert st == 200, fault_of(root)
    return body_of(root).children


def test_subscription_properties_are_what_subscribe_sent():
    p = make_producer()
    rp = '<x:Key xmlns:x="urn:x" a="1">k<x:Sub/></x:Key><edge:ResourceId>r7</edge:ResourceId>'
    body = subscribe_xml(topic=None).replace(
        "</wsa:Address>",
        "</wsa:Address><wsa:ReferenceParameters>%s</wsa:ReferenceParameters>"
        % rp.replace("<edge:ResourceId>", '<edge:ResourceId xmlns:edge="%s">' % EDGE),
    )
    st, root, _ = call(p, P, body)
    path = body_of(root).find(WSNT, "SubscriptionReference").children[0].value()[len(BASE) :]
    cr = _prop(p, path, "wsnt:ConsumerReference")[0]
    params = cr.children[1].children
    assert [(c.ns, c.name) for c in params] == [("urn:x", "Key"), (EDGE, "ResourceId")]
    assert params[0].get("a") == "1" and params[0].value() == "k" and params[0].children
    assert params[0].get("{http://www.w3.org/2005/08/addressing}IsReferenceParameter") is None
    # no wsnt:Filter, no wsnt:SubscriptionPolicy sent: none there (minOccurs 0, §6.4.1)
    assert _prop(p, path, "wsnt:Filter") == []
    assert _prop(p, path, "wsnt:SubscriptionPolicy") == []
    assert parse_datetime(_prop(p, path, "wsnt:CreationTime")[0].value()) == NOW
    # the pushes echo the reference parameters as headers (WS-Addressing 1.0 SOAP binding §2.3)
    kick, _ = p.publish(0, "<v/>", NOW)
    _, push, _ = p.render(kick[0].queue.peek(), False)
    hdr = X.parse(push).children[0]
    key = hdr.find("urn:x", "Key")
    assert key.get("{http://www.w3.org/2005/08/addressing}IsReferenceParameter") == "true"
    assert key.get("a") == "1" and hdr.find(EDGE, "ResourceId").value() == "r7"


def test_filter_and_policy_echoed_as_sent():
    p = make_producer()
    body = subscribe_xml(topic="dt:humidity", raw=True).replace(
        "</wsnt:Filter>",
        '<wsnt:TopicExpression Dialect="http://docs.oasis-open.org/wsn/t-1/TopicExpression/'
        'Simple">dt:heartbeat</wsnt:TopicExpression></wsnt:Filter>',
    )
    st, root, _ = call(p, P, body)
    path = body_of(root).find(WSNT, "SubscriptionReference").children[0].value()[len(BASE) :]
    f = _prop(p, path, "wsnt:Filter")
    tes = f[0].findall(WSNT, "TopicExpression")
    assert [t.resolve(t.value()) for t in tes] == [(DT, "humidity"), (DT, "heartbeat")]
    pol = _prop(p, path, "wsnt:SubscriptionPolicy")
    assert [c.name for c in pol[0].children] == ["UseRaw"]
    # an empty policy element sent is an empty one echoed
    st, root, _ = call(
        p,
        P,
        subscribe_xml().replace("</wsnt:Subscribe>", "<wsnt:SubscriptionPolicy/></wsnt:Subscribe>"),
    )
    path = body_of(root).find(WSNT, "SubscriptionReference").children[0].value()[len(BASE) :]
    pol = _prop(p, path, "wsnt:SubscriptionPolicy")
    assert len(pol) == 1 and pol[0].children == []
