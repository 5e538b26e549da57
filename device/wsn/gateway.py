# The link to the gateway (design.md "Device <-> gateway"), imported only when one is configured.
# Both modes share the registration, the renewal and the batched Notify; the readings for the
# gateway wait in the producer's outbox (bounded, oldest dropped and counted) until it answers 2xx.
#
# Awake (run, one task): demand-based publishing.
# - register: br:RegisterPublisher (Demand=true, PublisherReference = our producer address with
#   edge:DeviceId, one br:Topic per sensor, InitialTerminationTime) until it succeeds;
# - renew: wsrf-rl:SetTerminationTime on the registration address every renew_period_s;
#   a ResourceUnknownFault or 404 (registration forgotten, e.g. a gateway restart without
#   state) means register again; so does a push answered that way;
# - send: the outbox in order, up to batch_max readings per Notify (one NotificationMessage
#   each), with a wsa:MessageID that a resend of the same readings repeats (_batch);
# - while the gateway is unreachable, retry every gateway_retry_s (doubling up to
#   gateway_retry_max_s) with a renewal first: the first success after an outage is a renewal,
#   which detects a restarted gateway.
#
# Sleepy (sleepy; config "mode": "sleepy"): each cycle the device wakes, samples every sensor
# once, sends the readings gathered since the last accepted send in batched Notifys, and sleeps
# sample_period_s: machine.deepsleep or lightsleep on a board ("sleep": "deep" | "light"),
# time.sleep on the unix port. It registers with Demand=false (WS-BrokeredNotification: the
# publisher just publishes, the broker does all subscription work), serves no Subscribe and
# opens no HTTP server. What must survive deep sleep is a small JSON file (state_file):
# registration and consumer addresses with their reference parameters, termination time, the
# readings not yet accepted, the wake counter, drops, the batch not answered yet (_batch). It is
# written to FILE.tmp and renamed over FILE (atomic on LittleFS, the ESP32/Pico W default): a
# power cut mid-write leaves the previous state, so it loses at most the readings of that wake.
import asyncio
import binascii
import gc
import json
import os
import time

from wsn.core import ns
from wsn.core.registration import read_registration, register_publisher, set_termination_time
from wsn.core.soap import fault_name
from wsn.core.topics import TopicSet
from wsn.device import ms_since, now, post


class Link:
    def __init__(self, dev):
        c = dev.conf.get
        self.dev = dev
        self.p = dev.producer
        self.url = c("gateway")
        self.version = ns.V11 if str(c("gateway_soap", "1.2")) == "1.1" else ns.V12
        self.ttl = int(c("registration_ttl_s", 600))
        # Credentials for a gateway that protects its management operations (RegisterPublisher,
        # SetTerminationTime): gateway_token -> Bearer, else gateway_user + gateway_password ->
        # HTTP Basic. Sent on every request to the gateway (Notify is open there: no cost).
        a = c("gateway_token")
        u = c("gateway_user")
        a = "Bearer " + a if a else u and "Basic " + binascii.b2a_base64(
            ("%s:%s" % (u, c("gateway_password") or "")).encode()).decode().strip()
        self.auth = "Authorization: %s\r\n" % a if a else ""
        self.batch_max = max(1, int(c("batch_max", 16)))
        self.reg = self.mid = None  # registration address (None: register first)
        self.reg_rp = ""
        self.expires = self.seq = self.requests = 0
        self.registrations = self.renewals = self.delivered = self.batches = 0
        self.rejected = 0  # readings the gateway refused with a fault (not retried)
        self.state = "unregistered"  # unregistered | registered | down
        self.last_error = ""
        self.out = asyncio.Event()  # something to send

    def status(self):
        ob = self.p.outbox
        return {"state": self.state, "registration": self.reg, "consumer": self.p.gateway,
                "registrations": self.registrations, "renewals": self.renewals,
                "delivered": self.delivered, "batches": self.batches, "rejected": self.rejected,
                "buffered": len(ob), "dropped": ob.dropped, "last_error": self.last_error}

    def _set_state(self, st):
        if st != self.state:
            self.state = st
            self.dev.status_line("gateway " + st)

    async def _post(self, url, body, ctype):
        self.requests += 1
        return await post(url, body, ctype or ns.content_type(self.version),
                          float(self.dev.conf.get("gateway_timeout_s", 5)), self.auth)

    def _forgotten(self, what, st, resp):
        # a refusal: ResourceUnknownFault or 404 -> the registration is forgotten (-> True)
        name, reason = fault_name(resp)
        self.last_error = "%s: HTTP %d %s %s" % (what, st, name, reason)
        if name == "ResourceUnknownFault" or st == 404:
            self.dev.log("registration %s forgotten: registering again" % self.reg)
            self.reg = None
            return True
        self.dev.log(self.last_error)

    async def _register(self, demand):
        # -> None when registered, else why the gateway refused; raises when unreachable.
        # One br:Topic per sensor topic.
        ts = self.dev.topicset
        reg = []
        for s in self.dev.sensors:
            if ts.names[s[0]] not in reg:
                reg.append(ts.names[s[0]])
        st, body = await self._post(self.url, register_publisher(
            self.version, self.url, self.p.addr, self.p.device_id, TopicSet(ts.ns, reg),
            now() + self.ttl, demand).encode(), None)
        try:
            self.reg, self.reg_rp, con, con_rp = read_registration(body)
        except Exception as e:  # noqa: BLE001 - a fault or garbage: refused
            return "register: HTTP %d %s" % (st, e)
        for s in self.p.set_gateway(con, con_rp):
            self.dev.log("removed %s (old registration)" % s.id)
        self.expires = now() + self.ttl
        self.registrations += 1
        self.dev.log("registered at %s (Demand=%s) consumer %s" % (
            self.reg, "true" if demand else "false", con))

    async def _renew(self):
        # WS-ResourceLifetime SetTerminationTime on the registration -> True if accepted
        st, body = await self._post(self.reg, set_termination_time(
            self.version, self.reg, self.reg_rp, now() + self.ttl).encode(), None)
        if 200 <= st < 300:
            self.expires = now() + self.ttl
            self.renewals += 1
            return True
        self._forgotten("renew", st, body)

    def _batch(self):
        # The batch not answered yet: [wsa:MessageID, its readings, the buffer's drops then],
        # made when there is none. Until the gateway answers, a resend is the same readings with
        # the same MessageID (WS-Addressing 1.0 Core §3.2), so a Notify whose answer was lost
        # is published once (docs/device.md); in sleepy mode _save keeps it before it is sent.
        # The full buffer drops its oldest readings: those of this batch, first.
        ob = self.p.outbox
        m = self.mid
        if len(ob) and not (m and m[1] + m[2] > ob.dropped):
            m = self.mid = ["urn:wsn-edge:" + binascii.hexlify(os.urandom(8)).decode(),
                            min(len(ob), self.batch_max), ob.dropped]
        return m

    async def _send(self):
        # One batched Notify: the readings of _batch, oldest first -> readings the gateway
        # accepted, -1 if it forgot the registration. A refusal for what the messages are would
        # be answered forever: they are dropped (counted). Raises when the gateway is unreachable
        # (they stay, and so does the batch).
        ob = self.p.outbox
        m = self._batch()
        items, url, body, ctype = self.p.gateway_batch(m[1] + m[2] - ob.dropped, self.version, m[0])
        self.mid = [m[0], len(items), ob.dropped]
        st, resp = await self._post(url, body, ctype)
        body = None
        n = len(items)
        if 200 <= st < 300:
            self.delivered += n
            self.batches += 1
        elif self._forgotten("push", st, resp):
            return -1
        else:
            self.rejected += n
            self.p.push_failed += n
            n = 0
        for it in items:  # the full buffer may have dropped some meanwhile: those are gone
            if ob.peek() is it:
                ob.pop()
        self.mid = None
        return n

    # ------------------------------------------------------------------ awake
    async def run(self):
        c = self.dev.conf.get
        renew = int(c("renew_period_s") or max(1, self.ttl // 2)) * 1000
        retry = delay = float(c("gateway_retry_s", 2))
        retry_max = max(retry, float(c("gateway_retry_max_s", 30)))
        # batch_wait_s > 0 buffers by choice: that long after a reading, more join its Notify
        wait = int(float(c("batch_wait_s", 0)) * 1000)
        ob = self.p.outbox
        due = time.ticks_ms()  # of the next renewal
        while True:
            pause = back = 0
            try:
                if self.reg is None:
                    err = await self._register(True)
                    if err:
                        self.last_error = err
                        self.dev.status_line("gateway refused registration: " + err)
                        self._set_state("unregistered")
                        back = 1
                    else:
                        self._set_state("registered")
                        due = time.ticks_add(time.ticks_ms(), renew)
                elif ms_since(due) >= 0:
                    due = time.ticks_add(time.ticks_ms(), renew)
                    if await self._renew():
                        self._set_state("registered")
                    elif self.reg is None:
                        self._set_state("unregistered")
                elif len(ob):
                    if wait and len(ob) < self.batch_max:
                        await asyncio.sleep_ms(wait)
                    if await self._send() < 0:
                        self._set_state("unregistered")
                else:
                    pause = min(1, -ms_since(due) / 1000)
            except Exception as e:  # noqa: BLE001 - unreachable: retry, renewing first
                self.last_error = repr(e)
                self._set_state("down")
                due = time.ticks_ms()
                back = 1
            if back:  # refused or unreachable: again, less and less often
                pause = delay
                delay = min(delay * 2, retry_max)
            elif not pause:
                delay = retry
            if pause:
                try:
                    await asyncio.wait_for(self.out.wait(), pause)
                except asyncio.TimeoutError:
                    pass
                self.out.clear()

    # ------------------------------------------------------------------ sleepy
    def _save(self):
        self._batch()  # saved before it is sent
        p = self.p
        ob = p.outbox
        pend = []
        for _ in range(len(ob)):  # a full turn of the ring: same order afterwards
            it = ob.pop()
            pend.append(it[1:])
            ob.push(it)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"reg": self.reg, "reg_rp": self.reg_rp, "con": p.gateway,
                       "con_rp": p.gateway_rp, "expires": self.expires, "seq": self.seq,
                       "pending": pend, "dropped": ob.dropped, "mid": self.mid}, f)
        if hasattr(os, "sync"):
            os.sync()
        os.rename(tmp, self.path)

    async def sleepy(self):
        c = self.dev.conf.get
        period = float(c("sample_period_s", 10))
        self.path = c("state_file", "wsn_state.json")
        p = self.p
        ob = p.outbox
        # the file, or its .tmp if a rename over it was cut short (FAT renames in two steps)
        for fn in (self.path, self.path + ".tmp"):
            try:
                with open(fn) as f:
                    d = json.load(f)
                self.reg, self.reg_rp, self.expires, self.seq, con, con_rp, pend, dropped = (
                    d["reg"], d["reg_rp"], d["expires"], d["seq"], d["con"], d["con_rp"],
                    d["pending"], d["dropped"])
            except (OSError, ValueError, KeyError, TypeError):  # none, or not ours: start afresh
                continue
            p.set_gateway(con, con_rp)
            for ti, payload, t in pend:
                ob.push((None, ti, payload, t))
            ob.dropped += dropped  # plus what a smaller buffer dropped above: the batch shrinks
            self.mid = d.get("mid")  # (absent in the file of an older version: a new batch)
            break
        print("sleepy %s gateway %s period %s s" % (p.device_id, self.url, period))
        how = c("sleep", "deep")
        try:
            import machine
            f = how in ("deep", "light") and getattr(machine, how + "sleep")
        except (ImportError, AttributeError):  # the unix port's machine has no sleeps
            f = None
        while True:
            t0 = time.ticks_ms()
            self.requests = sent = 0
            t = now()
            self.seq += 1
            for s in self.dev.sensors:
                if s[1] == "heartbeat":
                    s[3] = self.seq - 1  # the heartbeat counts wakes across deep sleeps
                payload = self.dev.reading(s, t)
                if payload:
                    p.buffer_for_gateway(s[0], payload, t)
            self._save()
            try:
                # renew when the registration would lapse before the wake after next
                if self.reg is not None and self.expires - t < 2 * period + 5:
                    await self._renew()
                while len(ob):
                    if self.reg is None or self.expires <= t:
                        # (again after a ResourceUnknownFault: expired, gateway reset)
                        err = await self._register(False)
                        if err:
                            raise ValueError(err)
                        self._save()
                    n = await self._send()
                    if n >= 0:
                        sent += n
                        self._save()
            except Exception as e:  # noqa: BLE001 - unreachable or refused: keep them, next wake
                self.dev.log("gateway: %r" % e)
            print("cycle %d awake_ms=%d readings=%d sent=%d pending=%d dropped=%d requests=%d "
                  "mem=%d" % (self.seq, ms_since(t0), len(self.dev.sensors), sent, len(ob),
                              ob.dropped, self.requests, gc.mem_alloc()))
            gc.collect()  # lightsleep and the unix port keep the heap: start each wake clean
            if f:
                f(int(period * 1000))  # deepsleep is a reset: main.py runs again, loads the file
            else:
                time.sleep(period)
