# The link to the gateway (design.md "Device <-> gateway", demand-based publishing):
# - register: br:RegisterPublisher (Demand=true, PublisherReference = our producer address with
#   edge:DeviceId, one br:Topic per sensor, InitialTerminationTime) until it succeeds;
# - renew: wsrf-rl:SetTerminationTime on the registration address every renew_period_s;
#   a ResourceUnknownFault (registration forgotten, e.g. a gateway restart without state)
#   means register again; so does a push answered with ResourceUnknownFault;
# - after the gateway was unreachable, the first success triggers an immediate renew (which
#   detects a restarted gateway);
# - the sender drains the producer's gateway outbox in order, up to batch_max readings per
#   Notify (one NotificationMessage each); while the gateway is unreachable the readings wait
#   there (bounded, oldest dropped and counted), retried every retry_s.
import asyncio
import binascii

from wsn import http
from wsn.core import ns
from wsn.core.registration import read_registration, register_publisher, set_termination_time
from wsn.core.soap import fault_name


def auth_header(conf):
    # Credentials for a gateway that protects its management operations (RegisterPublisher,
    # SetTerminationTime on the registration): `gateway_token` -> Bearer, else
    # `gateway_user` + `gateway_password` -> HTTP Basic; "" when none is configured. Sent on
    # every request to the gateway (Notify is open there, so it costs nothing).
    tok = conf.get("gateway_token")
    if tok:
        return "Authorization: Bearer %s\r\n" % tok
    user = conf.get("gateway_user")
    if user:
        raw = ("%s:%s" % (user, conf.get("gateway_password") or "")).encode()
        return "Authorization: Basic %s\r\n" % binascii.b2a_base64(raw).decode().strip()
    return ""


def forgotten(status, body):
    # -> (fault name, reason, True if the gateway no longer knows the registration: a
    # ResourceUnknownFault or a 404 means register again)
    name, reason = fault_name(body)
    return name, reason, name == "ResourceUnknownFault" or status == 404


class Link:
    # what awake (GatewayLink) and sleepy mode (wsn.sleepy) share: the link's settings and
    # the registration messages
    def __init__(self, dev, conf):
        self.dev = dev
        self.p = dev.producer
        self.url = conf["gateway"]
        self.version = ns.V11 if str(conf.get("gateway_soap", "1.2")) == "1.1" else ns.V12
        self.ttl = int(conf.get("registration_ttl_s", 600))
        self.timeout = float(conf.get("gateway_timeout_s", 5))
        self.auth = auth_header(conf)
        # batching (issue 16): up to batch_max buffered readings go out as one Notify
        self.batch_max = max(1, int(conf.get("batch_max", 16)))

    def register_env(self, now, demand=True):
        return register_publisher(self.version, self.url, self.p.addr, self.p.device_id,
                                  self.dev.registered_topics, now + self.ttl, demand)

    def renew_env(self, reg, reg_rp, now):
        return set_termination_time(self.version, reg, reg_rp, now + self.ttl)


class GatewayLink(Link):
    def __init__(self, dev, conf):
        super().__init__(dev, conf)
        self.renew_s = int(conf.get("renew_period_s") or max(1, self.ttl // 2))
        self.retry_s = float(conf.get("gateway_retry_s", 2))
        self.retry_max_s = float(conf.get("gateway_retry_max_s", 30))
        # batch_wait_s > 0 buffers by choice (that long after the first reading waits)
        self.batch_wait_s = float(conf.get("batch_wait_s", 0))
        self.batches = 0
        self.reg = None  # registration address
        self.reg_rp = ""
        self.state = "unregistered"  # unregistered | registered | down
        self.registrations = 0
        self.renewals = 0
        self.delivered = 0
        self.rejected = 0  # pushes the gateway refused with a fault (not retried)
        self.last_error = ""
        self.wake = asyncio.Event()  # main loop: register/renew now
        self.out = asyncio.Event()  # sender: something to send

    def status(self):
        return {"state": self.state, "registration": self.reg, "consumer": self.p.gateway,
                "registrations": self.registrations, "renewals": self.renewals,
                "delivered": self.delivered, "batches": self.batches,
                "rejected": self.rejected,
                "buffered": len(self.p.outbox), "dropped": self.p.outbox.dropped,
                "last_error": self.last_error}

    def _set_state(self, st):
        if st != self.state:
            self.state = st
            self.dev.status_line("gateway " + st)
            if st == "registered":
                self.out.set()  # reachable again: the sender retries now, not after its backoff

    def _down(self, err):
        self.last_error = err
        if self.state != "down":
            self._set_state("down")

    async def _post(self, url, env):
        return await http.post(url, env.encode() if isinstance(env, str) else env,
                               ns.content_type(self.version), self.timeout, self.auth)

    async def register(self):
        env = self.register_env(self.dev.now())
        try:
            status, body = await self._post(self.url, env)
        except Exception as e:  # noqa: BLE001 - unreachable: retry later
            self._down("register: %r" % e)
            return False
        try:
            reg, reg_rp, con, con_rp = read_registration(body)
        except Exception as e:  # noqa: BLE001
            self.last_error = "register: HTTP %d %s" % (status, e)
            self.dev.status_line("gateway refused registration: " + self.last_error)
            self._set_state("unregistered")
            return False
        self.reg, self.reg_rp = reg, reg_rp
        gone = self.p.set_gateway(con, con_rp)
        for s in gone:
            self.dev.log("removed %s (old registration)" % s.id)
        self.registrations += 1
        self._set_state("registered")
        self.dev.log("registered at %s (consumer %s)" % (reg, con))
        self.out.set()
        return True

    async def renew(self):
        env = self.renew_env(self.reg, self.reg_rp, self.dev.now())
        try:
            status, body = await self._post(self.reg, env)
        except Exception as e:  # noqa: BLE001
            self._down("renew: %r" % e)
            return
        if 200 <= status < 300:
            self.renewals += 1
            self._set_state("registered")
            return
        name, reason, gone = forgotten(status, body)
        self.last_error = "renew: HTTP %d %s %s" % (status, name, reason)
        if gone:
            self.dev.log("registration %s forgotten: registering again" % self.reg)
            self.reg = None
            self._set_state("unregistered")
        else:
            self.dev.log(self.last_error)

    async def _sleep(self, ev, seconds):
        try:
            await asyncio.wait_for(ev.wait(), seconds)
        except asyncio.TimeoutError:
            pass
        ev.clear()

    async def run(self):
        asyncio.create_task(self._sender())
        delay = self.retry_s
        while True:
            if self.reg is None:
                if not await self.register():
                    # refused or unreachable: try again, less and less often
                    await self._sleep(self.wake, delay)
                    delay = min(delay * 2, max(self.retry_s, self.retry_max_s))
                    continue
                delay = self.retry_s
                await self._sleep(self.wake, self.renew_s)
            else:
                await self._sleep(self.wake, self.renew_s if self.state == "registered"
                                  else self.retry_s)
            if self.reg is not None:
                await self.renew()

    async def _sender(self):
        ob = self.p.outbox
        delay = self.retry_s
        while True:
            if not ob.count or self.reg is None or self.p.gateway is None:
                await self._sleep(self.out, 1)
                continue
            if self.batch_wait_s and ob.count < self.batch_max:
                # buffering by choice: let readings gather into one Notify (or the buffer fill)
                await asyncio.sleep_ms(int(self.batch_wait_s * 1000))
            items, url, body, ctype = self.p.gateway_batch(self.batch_max, self.version)
            try:
                status, resp = await http.post(url, body, ctype, self.timeout, self.auth)
            except Exception as e:  # noqa: BLE001 - unreachable: keep them, retry with backoff
                self._down("push: %r" % e)
                body = None
                await self._sleep(self.out, delay)
                delay = min(delay * 2, max(self.retry_s, self.retry_max_s))
                continue
            body = None
            delay = self.retry_s
            was_down = self.state == "down"
            if 200 <= status < 300:
                self._pop(items)
                self.delivered += len(items)
                self.batches += 1
                if was_down:
                    self._set_state("registered")
                    self.wake.set()  # back after an outage: renew now (restart check)
                continue
            name, reason, gone = forgotten(status, resp)
            if gone:
                # the gateway forgot the registration: register again, keep the buffer
                self.last_error = "push: %s %s" % (name, reason)
                self.reg = None
                self._set_state("unregistered")
                self.wake.set()
                continue
            # any other refusal is about these messages: drop them (counted), go on
            self.rejected += len(items)
            self.p.push_failed += len(items)
            self.last_error = "push: HTTP %d %s %s" % (status, name, reason)
            self.dev.log(self.last_error)
            self._pop(items)

    def _pop(self, items):
        # remove the sent items; any the full buffer dropped meanwhile are already gone
        ob = self.p.outbox
        for it in items:
            if ob.peek() is it:
                ob.pop()
