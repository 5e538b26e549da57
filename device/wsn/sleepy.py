# Sleepy-sensor mode (config "mode": "sleepy"; issue 16). Each cycle the device wakes, samples
# every sensor once, sends the readings gathered since the last successful send to its
# registration's ConsumerReference as one batched wsnt:Notify (up to batch_max
# NotificationMessages, in order), and sleeps sample_period_s: machine.deepsleep or
# lightsleep on a board ("sleep": "deep" | "light"), time.sleep on the unix port.
#
# It registers with Demand=false (WS-BrokeredNotification: the publisher just publishes; the
# broker does all subscription work), serves no Subscribe and keeps no subscriptions, and
# opens no HTTP server.
#
# What must survive deep sleep is a small JSON file (state_file): registration and consumer
# addresses with their reference parameters, the registration's termination time, the
# readings not yet sent, the wake counter. It is written to FILE.tmp and renamed over FILE
# (atomic on LittleFS, the ESP32/Pico W default): a power cut mid-write leaves the previous
# state, so it loses at most the readings of that wake. Readings are removed from it only
# after the gateway answered 2xx to the Notify carrying them.
import gc
import json
import os
import time

from wsn import http
from wsn.core import ns
from wsn.core.registration import read_registration
from wsn.gateway import Link, forgotten

_FIELDS = ("reg", "reg_rp", "con", "con_rp", "expires", "seq", "pending", "dropped")


class State:
    def __init__(self, path):
        self.path = path
        self.reg = None  # registration address (None: register first)
        self.reg_rp = ""
        self.con = None  # ConsumerReference address the Notify goes to
        self.con_rp = ""
        self.expires = 0  # registration termination time (s since 2000)
        self.seq = 0  # wakes so far (the heartbeat sensor reports it)
        self.pending = []  # [topic index, payload, time] not yet accepted by the gateway
        self.dropped = 0  # readings dropped because pending was full

    def load(self):
        # the file, or its .tmp if a rename over it was cut short (FAT renames in two steps)
        for p in (self.path, self.path + ".tmp"):
            try:
                with open(p) as f:
                    d = json.load(f)
            except (OSError, ValueError):
                continue
            for k in _FIELDS:
                if k in d:
                    setattr(self, k, d[k])
            return True
        return False

    def save(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(dict([(k, getattr(self, k)) for k in _FIELDS]), f)
        sync = getattr(os, "sync", None)
        if sync:
            sync()
        os.rename(tmp, self.path)


class Sleepy(Link):
    def __init__(self, dev):
        c = dev.conf
        super().__init__(dev, c)
        self.period = float(c.get("sample_period_s", 10))
        self.cap = int(dev.limits["gateway_buffer"])
        self.how = c.get("sleep", "deep")
        self.state = State(c.get("state_file", "wsn_state.json"))
        self.state.load()
        self.requests = 0  # HTTP requests this cycle

    async def _post(self, url, body, ctype=None):
        self.requests += 1
        return await http.post(url, body, ctype or ns.content_type(self.version), self.timeout,
                               self.auth)

    async def _register(self, now):
        st = self.state
        status, body = await self._post(self.url, self.register_env(now, False).encode())
        st.reg, st.reg_rp, st.con, st.con_rp = read_registration(body)
        st.expires = now + self.ttl
        st.save()
        self.dev.log("registered at %s (Demand=false)" % st.reg)

    async def _renew(self, now):
        # WS-ResourceLifetime SetTerminationTime when the registration would lapse before the
        # next wake after this one; a forgotten registration means register again
        st = self.state
        status, body = await self._post(st.reg, self.renew_env(st.reg, st.reg_rp, now).encode())
        if 200 <= status < 300:
            st.expires = now + self.ttl
            st.save()
        elif forgotten(status, body)[2]:
            st.reg = None

    def sample(self, now):
        st = self.state
        st.seq += 1
        for ti, sensor, spec in self.dev.sensors:
            if hasattr(sensor, "n") and spec.get("kind") == "heartbeat":
                sensor.n = st.seq - 1  # the heartbeat counts wakes across deep sleeps
            payload = self.dev.reading_for(ti, sensor, spec, now)
            if payload is None:
                continue
            st.pending.append([ti, payload, now])
            if len(st.pending) > self.cap:
                st.pending.pop(0)
                st.dropped += 1
        st.save()

    async def send(self, now):
        # -> readings the gateway accepted. Network errors end the attempt (next wake retries).
        st = self.state
        sent = 0
        try:
            if st.reg is not None and st.expires - now < 2 * self.period + 5:
                await self._renew(now)
            if st.reg is None or st.expires <= now:
                await self._register(now)
            ob = self.p.outbox
            while st.pending:
                self.p.gateway, self.p.gateway_rp = st.con, st.con_rp
                ob.clear()
                for ti, payload, t in st.pending[:self.batch_max]:
                    ob.push((None, ti, payload, t))
                items, url, body, ctype = self.p.gateway_batch(self.batch_max, self.version)
                status, resp = await self._post(url, body, ctype)
                body = None
                if 200 <= status < 300:
                    del st.pending[:len(items)]
                    sent += len(items)
                    st.save()
                    continue
                name, reason, gone = forgotten(status, resp)
                if gone:
                    await self._register(now)  # forgotten (expired, gateway reset): again
                    continue
                # refused for what the messages are: they would be refused forever
                self.dev.log("gateway refused %d readings: HTTP %d %s %s" % (
                    len(items), status, name, reason))
                self.p.push_failed += len(items)
                del st.pending[:len(items)]
                st.save()
        except Exception as e:  # noqa: BLE001 - unreachable or refused: keep them, next wake
            self.dev.log("gateway: %r" % e)
        self.p.outbox.clear()
        return sent

    async def cycle(self):
        t0 = time.ticks_ms()
        self.requests = 0
        now = self.dev.now()
        self.sample(now)
        taken = len(self.dev.sensors)
        sent = await self.send(now)
        ms = time.ticks_diff(time.ticks_ms(), t0)
        print("cycle %d awake_ms=%d readings=%d sent=%d pending=%d dropped=%d requests=%d "
              "mem=%d" % (self.state.seq, ms, taken, sent, len(self.state.pending),
                          self.state.dropped, self.requests, gc.mem_alloc()))

    def sleep(self):
        ms = int(self.period * 1000)
        try:
            import machine
        except ImportError:
            machine = None
        # the unix port has a machine module too, without the sleeps
        f = getattr(machine, self.how + "sleep", None) if self.how in ("deep", "light") else None
        if f is not None:
            f(ms)  # deepsleep is a reset: main.py runs again and loads the state file
        else:
            time.sleep(ms / 1000)

    async def run(self):
        print("sleepy %s gateway %s period %s s" % (self.p.device_id, self.url, self.period))
        while True:
            await self.cycle()
            gc.collect()  # lightsleep and the unix port keep the heap: start each wake clean
            self.sleep()
