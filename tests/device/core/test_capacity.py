# ruff: noqa: UP031, RUF059 - MicroPython-compatible test code (%-formatting runs on every port)
# The capacity a small board must hold (it runs at a 64 KiB heap on QEMU): a full table of 8
# subscriptions and a 32-slot pull point, filled past capacity and drained, repeatedly.
import gc

from test_support import NOW, WSNT, body_of, call, env, make_producer, subscribe
from wsn.core import ops

PAYLOAD = (
    '<rd:Reading xmlns:rd="urn:wsn-edge:reading" device="dev-1"><rd:value>%d</rd:value>'
    "<rd:unit>Cel</rd:unit><rd:time>2026-11-21T05:00:00Z</rd:time></rd:Reading>"
)


def test_eight_subscriptions_and_a_32_slot_pullpoint():
    p = make_producer(max_subscriptions=8, pullpoint_size=32, max_pullpoints=1)
    st, root, _ = call(p, "/wsn/producer", "<wsnt:CreatePullPoint/>")
    path = body_of(root).find(WSNT, "PullPoint").children[0].value()[len("http://127.0.0.1:8081") :]
    del root
    subscribe(p, consumer="http://127.0.0.1:8081" + path, topic=None)
    for i in range(7):
        subscribe(p, consumer="http://127.0.0.1:9/c%d" % i, raw=bool(i & 1))
    assert len(p.subs) == 8
    st, root, _ = call(p, "/wsn/producer", "<wsnt:Subscribe/>")
    assert st in (400, 500)
    gc.collect()
    for rnd in range(3):
        for i in range(40):
            kick, gw = p.publish(0, PAYLOAD % i, NOW + i)
            assert len(kick) == 7
            for s in kick:
                url, body, ctype = p.render(s.queue.peek(), False)
                assert url.startswith("http://127.0.0.1:9/c")
                s.queue.pop()
        pp = p.pps[0]
        assert len(pp) == 32 and pp.dropped == 8 * (rnd + 1)
        got = 0
        req = env("<wsnt:GetMessages><wsnt:MaximumNumber>8</wsnt:MaximumNumber></wsnt:GetMessages>")
        while True:
            # the answer comes in pieces (one per message), never joined: a 64 KiB heap need
            # not find one large block for it
            r = ops.handle(p, "POST", path, req, NOW, "application/soap+xml")
            assert r.status == 200 and isinstance(r.body, list)
            n = 0
            for chunk in r.body:
                if chunk.startswith(b"<wsnt:NotificationMessage><wsnt:SubscriptionReference>"):
                    assert chunk.endswith(b"</wsnt:NotificationMessage>")
                    n += 1
            del r
            gc.collect()
            if not n:
                break
            got += n
        assert got == 32
