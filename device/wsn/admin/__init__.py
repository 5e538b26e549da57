# Optional package: the management pages (wsn.device routes them here; without the package
# they answer 404). GET /status: JSON with the counters, the subscriptions, the pull points, the
# gateway link and the heap (mem_alloc now, mem_idle between requests, mem_peak; ?reset_peak=1);
# POST /admin/sample?topic=T&count=N: N readings now (all sensors, or topic T). Both need the
# management secret ("secret") when one is set.
import binascii
import gc
import json

from wsn.device import ms_since, now


def check_auth(header, secret):
    # The management secret, as `Authorization: Bearer <secret>` or HTTP Basic with any user
    # name and the secret as password. -> True if allowed (always, when no secret is set).
    if not secret:
        return True
    scheme, _, cred = (header or "").partition(" ")
    scheme = scheme.lower()
    cred = cred.strip()
    if scheme == "basic":
        try:
            cred = binascii.a2b_base64(cred).decode().partition(":")[2]
        except Exception:  # noqa: BLE001 - bad base64 is just "not authorised"
            return False
    elif scheme != "bearer":
        return False
    # constant time: no early exit on the first difference; on the UTF-8 bytes (indexing a str
    # would intern each character sent: wsn.core.xml.is_name)
    cred = cred.encode()
    secret = secret.encode()
    r = len(cred) ^ len(secret)
    for i in range(min(len(cred), len(secret))):
        r |= cred[i] ^ secret[i]
    return r == 0


def handle(dev, method, path, query, hd):
    # -> (status, content type, body bytes)
    if (path, method) not in (("/status", "GET"), ("/admin/sample", "POST")):
        return 405, "text/plain", b"GET /status, POST /admin/sample\n"
    if not check_auth(hd.get("authorization"), dev.conf.get("secret")):
        return 401, "text/plain", b"management secret required (Bearer or Basic)\n"
    p = dev.producer
    if path == "/status":
        if "reset_peak" in query:
            gc.collect()
            dev.mem_peak = 0
        peak = dev.mem_peak
        gc.collect()
        a = gc.mem_alloc()  # before this answer is built
        from wsn.core.ops import counters

        d = dict(counters(p))
        ts = dev.topicset
        ln = dev.link
        ob = p.outbox
        d.update({"device_id": dev.device_id, "producer": p.addr, "uptime_s": (
            dev.uptime_ms + ms_since(dev.started)) // 1000, "time": now(),
            "requests": dev.requests, "mem_alloc": a, "mem_idle": dev.mem_idle,
            "mem_free": gc.mem_free() + gc.mem_alloc() - a, "mem_peak": peak,
            "topic_namespace": ts.ns,
            "gateway": {"state": ln.state, "registration": ln.reg, "consumer": p.gateway,
                        "registrations": ln.registrations, "renewals": ln.renewals,
                        "delivered": ln.delivered, "batches": ln.batches,
                        "rejected": ln.rejected, "buffered": len(ob), "dropped": ob.dropped,
                        "last_error": ln.last_error} if ln else None,
            "subscription_list": [{
                "id": s.id, "consumer": s.consumer, "paused": s.paused, "raw": s.raw,
                "topics": [n for i, n in enumerate(ts.names) if s.mask >> i & 1],
                "expires": s.expires, "delivered": s.delivered, "failed": s.failed,
                "queued": len(s.queue) if s.queue else 0} for s in p.subs],
            "pullpoint_list": [{"id": q.id, "queued": len(q), "dropped": q.dropped}
                               for q in p.pps]})
        return 200, "application/json", json.dumps(d).encode()
    topic = ""
    count = 1
    for kv in query.split("&"):
        k, _, v = kv.partition("=")
        if k == "topic":
            topic = v
        elif k == "count" and v.isdigit():
            count = min(int(v), 1000)
    n = 0
    for _ in range(count):
        for s in dev.sensors:
            if topic in ("", dev.topicset.names[s[0]]):
                dev.sample(s)
                n += 1
    return 200, "application/json", ('{"published": %d}' % n).encode()
