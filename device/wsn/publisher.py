# The device as a registered publisher of the gateway (design.md "Device <-> gateway"):
# the link's settings, RegisterPublisher and its renewal (WS-ResourceLifetime SetTerminationTime),
# shared by the awake link (wsn.gateway) and sleepy mode (wsn.sleepy). Loaded while it runs
# and dropped when the device is idle again (wsn.device.idle); the messages are
# wsn.core.registration. The device's `busy` count keeps the modules while a request is out.
import binascii
import time

from wsn.core import soap as S
from wsn.device import now
from wsn.gateway import Link


def setup(dev):
    # -> the Link of dev's config
    c = dev.conf.get
    ln = Link()
    ln.dev = dev
    ln.p = dev.producer
    ln.url = c("gateway")
    ln.version = S.V11 if c("gateway_soap") in ("1.1", 1.1) else S.V12
    ln.ttl = int(c("registration_ttl_s", 600))
    # Credentials for a gateway that protects its management operations (RegisterPublisher,
    # SetTerminationTime): gateway_token -> Bearer, else gateway_user + gateway_password ->
    # HTTP Basic. Sent on every request to the gateway (Notify is open there: no cost).
    a = c("gateway_token")
    u = c("gateway_user")
    a = "Bearer " + a if a else u and "Basic " + binascii.b2a_base64(
        ("%s:%s" % (u, c("gateway_password") or "")).encode()).decode().strip()
    ln.auth = "Authorization: %s\r\n" % a if a else ""
    ln.batch_max = max(1, int(c("batch_max", 16)))
    ln.renew = int(c("renew_period_s") or max(1, ln.ttl // 2)) * 1000
    ln.reg_rp = ""
    ln.expires = ln.seq = ln.requests = 0
    ln.registrations = ln.renewals = ln.delivered = ln.batches = 0
    ln.rejected = 0  # readings the gateway refused with a fault (not retried)
    return ln


async def keep(ln):
    # The awake link's registration (wsn.gateway.Link.run): register (Demand=true) when there
    # is none, else renew it; the next renewal is due renew_period_s later. -> 1 when the
    # gateway refused (the link backs off), 0 otherwise; raises when it is unreachable.
    ln.due = time.ticks_add(time.ticks_ms(), ln.renew)
    if ln.reg is None:
        err = await register(ln, True)
        if err:
            ln.last_error = err
            ln.dev.status_line("gateway refused registration: " + err)
            ln.set_state("unregistered")
            return 1
        ln.set_state("registered")
    elif await renew(ln):
        ln.set_state("registered")
    elif ln.reg is None:
        ln.set_state("unregistered")
    return 0


def forgotten(ln, text, status, body):
    # the gateway refused `text` (push, renew) with HTTP status and the whole answer body
    # (wsn.device.post): ResourceUnknownFault or 404 -> the registration is forgotten (-> True)
    from wsn.core import httpmsg as H
    from wsn.core.request import fault_name

    ln.dev.busy += 1
    try:
        name, reason = fault_name(H.body(body))
    except ValueError:  # a malformed chunked body: no fault we understand
        name = reason = None
    finally:
        ln.dev.busy -= 1
    ln.last_error = "%s: HTTP %d %s %s" % (text, status, name, reason)
    if name == "ResourceUnknownFault" or status == 404:
        ln.dev.log("registration %s forgotten: registering again" % ln.reg)
        ln.reg = None
        return True
    ln.dev.log(ln.last_error)


async def register(ln, demand):
    # -> None when registered, else why the gateway refused; raises when unreachable. One
    # br:Topic per sensor topic.
    dev = ln.dev
    dev.busy += 1
    try:
        from wsn.core import registration as R
        from wsn.core import httpmsg as H

        ts = dev.topicset
        names = []
        for s in dev.sensors:
            if ts.names[s[0]] not in names:
                names.append(ts.names[s[0]])
        st, body = await ln.post(ln.url, R.register_publisher(
            ln.version, ln.url, ln.p.addr, ln.p.device_id, ts, names, now() + ln.ttl,
            demand).encode(), None)
        try:
            ln.reg, ln.reg_rp, con, con_rp = R.read_registration(H.body(body))
        except Exception as e:  # noqa: BLE001 - a fault or garbage: refused
            return "register: HTTP %d %s" % (st, e)
    finally:
        dev.busy -= 1
    for s in R.set_gateway(ln.p, con, con_rp):
        dev.log("removed %s (old registration)" % s.id)
    ln.expires = now() + ln.ttl
    ln.registrations += 1
    dev.log("registered at %s (Demand=%s) consumer %s" % (
        ln.reg, ("false", "true")[bool(demand)], con))


async def renew(ln):
    # WS-ResourceLifetime SetTerminationTime on the registration -> True if accepted
    ln.dev.busy += 1
    try:
        from wsn.core.registration import set_termination_time

        st, body = await ln.post(ln.reg, set_termination_time(
            ln.version, ln.reg, ln.reg_rp, now() + ln.ttl).encode(), None)
        if 200 <= st < 300:
            ln.expires = now() + ln.ttl
            ln.renewals += 1
            return True
        forgotten(ln, "renew", st, body)
    finally:
        ln.dev.busy -= 1
