# The device application, all of the asyncio layer in one module (one set of names: issue 16):
# config -> producer core, sensors, the HTTP/1.1 server and client, push senders, housekeeping,
# Wi-Fi. The protocol is in wsn.core; the gateway link (awake and sleepy) is in wsn.gateway,
# imported only when a gateway is configured.
#
#   micropython device/main.py CONFIG.json        (unix port)
#   main.py on a board reads /config.json
#
# Once listening it prints one line `producer http://<host>:<port>/wsn/producer`.
import asyncio
import gc
import json
import math
import os
import sys
import time

from wsn.core import httpmsg as H
from wsn.core import ns as NS
from wsn.core.producer import PRODUCER_PATH, Producer
from wsn.core.reading import reading
from wsn.core.topics import TopicSet, load_namespace

# The clock: integer seconds since 2000-01-01T00:00:00Z for the core (its XML Schema times are in
# wsn.core.xml), ticks for intervals. Ports differ in their epoch (unix: 1970, most boards: 2000;
# time.gmtime(0) tells) and in time.time()'s type (float on the 64-bit unix port, int on boards);
# both are normalised here. Unix time (~1.76e9) is not a small int on 32-bit ports, seconds since
# 2000 (~8.5e8) are.
_OFFSET = 946684800 if time.gmtime(0)[0] == 1970 else 0


def now():
    return int(time.time()) - _OFFSET


def ms_since(t):
    return time.ticks_diff(time.ticks_ms(), t)


# ------------------------------------------------------------------------------- HTTP
# One request per connection (Connection: close), Content-Length bodies only, every read under
# a timeout, sizes bounded: a slow, truncated or oversized request gets 408/400/413 and never
# holds the device. Message parsing is in wsn.core.httpmsg.
async def _close(w):
    try:
        w.close()
        await w.wait_closed()
    except Exception:  # noqa: BLE001 - already reset by the peer: closed either way
        pass


async def _discard(r, left):
    # read and drop up to `left` bytes (until EOF, an error or the caller's alarm)
    try:
        while left > 0:
            c = await r.read(512)
            if not c:
                break
            left -= len(c)
    except Exception:  # noqa: BLE001 - reset: done either way
        pass


def _alarm(s):
    # The device's timeouts: a task that cancels the current one after s seconds (cancel() the
    # alarm when done in time). asyncio.wait_for would do, but its module (asyncio.funcs) takes
    # 0.5 KB of heap, and it makes two tasks per call; this is one per connection.
    async def ring(t):
        await asyncio.sleep_ms(int(s * 1000))
        t.cancel()
    return asyncio.create_task(ring(asyncio.current_task()))


async def post(url, body, ctype, timeout_s, extra):
    # POST body (bytes, or a list of bytes chunks: a batch written in pieces, no big contiguous
    # block) to url -> (status, response body). Raises OSError when the peer is unreachable or
    # slower than timeout_s, ValueError for a bad URL or a malformed answer.
    al = _alarm(timeout_s)
    try:
        return H.parse_response(await _exchange(url, body, ctype, extra))
    except asyncio.CancelledError:
        raise OSError("no answer within %s s" % timeout_s)
    finally:
        al.cancel()


async def _exchange(url, body, ctype, extra):
    host, port, path = H.split_url(url)
    if not isinstance(body, list):
        body = (body,)
    r, w = await asyncio.open_connection(host, port)
    try:
        w.write(H.request_head(host, port, path, ctype, sum([len(c) for c in body]), extra))
        for c in body:
            w.write(c)
            await w.drain()
        buf = b""
        while True:
            c = await r.read(512)  # answers to pushes are small: small reads, small heap
            if not c:
                return buf
            buf += c
            if len(buf) > 16384:
                raise ValueError("response over 16384 bytes")
    finally:
        await _close(w)


class Device:
    def __init__(self, path):
        with open(path) as f:
            conf = json.load(f)
        if not isinstance(conf, dict) or "device_id" not in conf or "http_port" not in conf:
            raise ValueError("config: a JSON object with device_id and http_port")
        self.conf = conf
        g = conf.get
        self.device_id = str(conf["device_id"])
        # conf["limits"] itself: the Producer completes it with its DEFAULTS (no second dict)
        lim = conf["limits"] = g("limits") or {}
        if "gateway_buffer" in conf:
            lim["gateway_buffer"] = int(conf["gateway_buffer"])
        self.limits = lim
        # pushes in flight at once (bounds the heap)
        self.slots = int(lim.get("push_concurrency", 2))
        # Collect after every gc_threshold bytes allocated (not only when the heap is full):
        # garbage between collections is what the peak is made of, and collecting a small heap
        # takes about a millisecond. Default: 2048 on heaps up to 256 KB (boards without
        # PSRAM), off on larger ones (a collection there costs more than the headroom is worth).
        th = lim.get("gc_threshold")
        if th is None:
            th = 2048 if gc.mem_free() + gc.mem_alloc() <= 262144 else 0
        if th and hasattr(gc, "threshold"):
            gc.threshold(int(th))
        # the topic namespace document: topics_file, else next to main.py, /topics.xml,
        # /lib/topics.xml, else the default topics
        tns, names = NS.DT, ["temperature", "humidity", "light", "heartbeat"]
        d = sys.argv[0].rpartition("/")[0] if sys.argv and sys.argv[0] else "."
        for fn in (g("topics_file"), d + "/topics.xml", "/topics.xml", "/lib/topics.xml"):
            try:
                with open(fn, "rb") as f:
                    tns, names = load_namespace(f.read())
                break
            except (OSError, TypeError):
                pass
        self.topicset = TopicSet(tns, names)
        self.sensors = []
        for sp in g("sensors") or [{"topic": "temperature"}]:
            t = sp.get("topic", "")
            ti = self.topicset.index(t)
            if ti < 0:
                raise ValueError("sensor topic %s not in topics.xml" % t)
            k = sp.get("kind", "sim")
            hw = None
            try:
                if k == "adc":
                    import machine
                    hw = machine.ADC(machine.Pin(sp["pin"]))
                elif k == "internal_temp":
                    try:
                        import esp32 as hw
                    except ImportError:
                        import machine
                        hw = machine.ADC(4)
                elif k not in ("sim", "heartbeat"):
                    raise ValueError("sensor kind %s: one of sim heartbeat internal_temp adc" % k)
            except (ImportError, AttributeError):
                # the unix port and the QEMU board have no `machine` (or one without ADC): a
                # board-only kind falls back to "sim" (and says so), so one config runs anywhere
                print("sensor %s: no %s hardware here, simulating" % (t, k))
                k = "sim"
            u = ["temperature", "Cel", "humidity", "%RH", "light", "lx", "heartbeat", "1"]
            self.sensors.append([ti, k, sp, 0, hw, sp.get("unit") or (
                u[u.index(t) + 1] if t in u else "")])
        # "awake" (default): serves Subscribe, pushes each reading; "sleepy": wsn.gateway
        if g("mode", "awake") not in ("awake", "sleepy") or g("mode") == "sleepy" and not g(
                "gateway"):
            raise ValueError("config: mode 'awake', or 'sleepy' with a 'gateway'")
        self.producer = self.link = None
        self.started = time.ticks_ms()  # ticks wrap (~12 days on boards): uptime is summed
        self.uptime_ms = self.mem_peak = self.requests = 0

    def log(self, msg):
        if self.conf.get("verbose", True):
            print(msg)

    def mem(self):
        a = gc.mem_alloc()
        if a > self.mem_peak:
            self.mem_peak = a

    def status_line(self, why):
        p = self.producer
        print("status %s gateway=%s buffered=%d dropped=%d subs=%d pullpoint_dropped=%d "
              "push_failed=%d" % (why and "[" + why + "]", self.link.state if self.link else "none",
                                  len(p.outbox), p.outbox.dropped, len(p.subs),
                                  dict(p.counters())["pullpointDropped"], p.push_failed))

    # ------------------------------------------------------------------ HTTP server
    async def _conn(self, r, w):
        st = 500
        ct = "text/plain"  # of the answers made here (a constant tuple would store it again)
        # the request must arrive, and the answer leave, within read_timeout_s
        al = _alarm(float(self.limits.get("read_timeout_s", 10)))
        try:
            try:
                st, ct, b = self.handle(*(await self._request(r, w)))
            except asyncio.CancelledError:
                st, b = 408, b"request too slow\n"
            except H.HTTPError as e:
                st, b = e.args[0], (e.args[1] + "\n").encode()
            except MemoryError:
                st, b = 503, b"out of memory: retry\n"
            if not isinstance(b, list):  # chunks of a large answer: no big contiguous block
                b = (b,)
            w.write(H.response_head(st, ct, sum([len(c) for c in b])))
            for c in b:
                w.write(c)
                await w.drain()
            b = None
            if st >= 400:
                # "lingering close" (RFC 9112 §9.6): read and discard what the client still
                # sends for a moment, so closing does not reset the connection before the
                # client has read the answer
                al.cancel()
                al = _alarm(0.2)
                await _discard(r, 65536)
        except Exception as e:  # noqa: BLE001 - a broken connection must not stop the server
            print("http: connection error:", repr(e))
        except asyncio.CancelledError:  # too slow writing, or the end of the lingering
            pass
        finally:
            al.cancel()
            await _close(w)
            self.after()

    async def _request(self, r, w):
        buf = b""
        while True:
            k = buf.find(b"\r\n\r\n")
            if 0 <= k <= 4096:
                break
            if len(buf) > 4096:
                raise H.HTTPError(431, "head over 4096 bytes")
            c = await r.read(512)
            if not c:
                raise H.HTTPError(400, "truncated head")
            buf += c
        method, path, query, hd = H.parse_head(buf[:k])
        body = buf[k + 4:]
        buf = None
        try:
            n = H.body_length(method, hd, self.limits["max_request_bytes"])
        except H.HTTPError as e:
            cl = hd.get("content-length", "")
            if e.args[0] == 413 and cl.isdigit() and int(cl) <= 65536:
                # read and discard it, so the client is reading when the 413 comes
                await _discard(r, int(cl) - len(body))
            raise
        if n > len(body):
            if not body and hd.get("expect", "").lower() == "100-continue":
                # RFC 9110 §10.1.1: curl and .NET clients wait for this before the body
                w.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                await w.drain()
            try:
                body += await r.readexactly(n - len(body))
            except EOFError:
                raise H.HTTPError(400, "truncated body (of %d bytes)" % n)
        return method, path, query, hd, body[:n]

    def handle(self, method, path, query, hd, body):
        # -> (status, content type, body bytes or list of chunks)
        self.requests += 1
        self.mem()
        p = self.producer
        if (path, method) in (("/status", "GET"), ("/admin/sample", "POST")):
            if not H.check_auth(hd.get("authorization"), self.conf.get("secret")):
                return 401, "text/plain", b"management secret required (Bearer or Basic)\n"
            if path == "/status":
                if "reset_peak" in query:
                    gc.collect()
                    self.mem_peak = 0
                peak = self.mem_peak
                gc.collect()
                a = gc.mem_alloc()  # before this answer is built
                d = dict(p.counters())
                d.update({"device_id": self.device_id, "producer": p.addr, "uptime_s": (
                    self.uptime_ms + ms_since(self.started)) // 1000, "time": now(),
                    "requests": self.requests, "mem_alloc": a,
                    "mem_free": gc.mem_free() + gc.mem_alloc() - a, "mem_peak": peak,
                    "gateway": self.link.status() if self.link else None,
                    "subscription_list": [{
                        "id": s.id, "consumer": s.consumer, "paused": s.paused, "raw": s.raw,
                        "topics": self.topicset.mask_names(s.mask), "expires": s.expires,
                        "delivered": s.delivered, "failed": s.failed,
                        "queued": len(s.queue) if s.queue else 0} for s in p.subs],
                    "pullpoint_list": [{"id": q.id, "queued": len(q.ring),
                                        "dropped": q.ring.dropped} for q in p._pps or ()]})
                return 200, "application/json", json.dumps(d).encode()
            # POST /admin/sample?topic=T&count=N: N readings now (all sensors, or topic T)
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
                for s in self.sensors:
                    if topic in ("", self.topicset.names[s[0]]):
                        self.sample(s)
                        n += 1
            return 200, "application/json", ('{"published": %d}' % n).encode()
        if path == "/" and method == "GET":
            return 200, "text/plain", ("wsn-edge device %s: WS-Notification producer at %s\n"
                                       % (self.device_id, p.addr)).encode()
        r = p.handle(method, path, body, now(), hd.get("content-type", ""))
        for act, s in r.actions:
            if act == "resumed":
                self.kick(s)
            if act in ("subscribed", "unsubscribed", "paused", "resumed"):
                self.log("%s %s -> %s" % (act, s.id, s.consumer))
        self.mem()
        return r.status, r.ctype, r.body

    def after(self):
        # collect after every request and push: a small heap stays unfragmented, so the next
        # envelope finds a contiguous block (cheap at 64 KiB, ~1 ms at 2 MB)
        self.mem()
        if self.limits.get("gc_collect_each", True):
            gc.collect()

    # ------------------------------------------------------------------ publishing
    def reading(self, s, t):
        # One reading of sensor s as the payload XML, or None if the sensor failed. A sensor is
        # a list [topic index, kind, spec, reads so far, hardware, unit] (made in __init__).
        k, sp, hw = s[1], s[2], s[4]
        s[3] += 1
        try:
            if k == "heartbeat":  # a counter: proves the device is alive
                v = s[3]
            elif k == "adc":  # value = read_u16() * scale + offset
                v = hw.read_u16() * sp.get("scale", 1.0) + sp.get("offset", 0.0)
            elif k == "internal_temp":
                # RP2040: ADC 4, 27 degC at 0.706 V, -1.721 mV/K (datasheet §4.9.5); ESP32:
                # esp32.mcu_temperature() (degC) or raw_temperature() (degF)
                if hasattr(hw, "read_u16"):
                    v = 27 - (hw.read_u16() * 3.3 / 65535 - 0.706) / 0.001721
                elif hasattr(hw, "mcu_temperature"):
                    v = hw.mcu_temperature()
                else:
                    v = (hw.raw_temperature() - 32) / 1.8
            else:  # sim: a slow sine around base, deterministic (tests can predict the range)
                v = sp.get("base", 21.0) + sp.get("amplitude", 2.0) * math.sin(s[3] * 0.1)
            return reading(self.device_id, v, s[5], t, sp.get("decimals", 2))
        except Exception as e:  # noqa: BLE001 - a flaky sensor must not stop the device
            self.log("sensor %s: %r" % (self.topicset.names[s[0]], e))

    def sample(self, s):
        t = now()
        payload = self.reading(s, t)
        if payload:
            kick, gw = self.producer.publish(s[0], payload, t)
            for q in kick:
                self.kick(q)
            if gw and self.link:
                self.link.out.set()

    def kick(self, s):
        if not s.sending and s.queue is not None and len(s.queue):
            s.sending = True
            asyncio.create_task(self._sender(s))

    async def _sender(self, s):
        # drains one subscription's queue in order; each push is tried 1 + push_retries times
        # with exponential backoff, then given up (counted). At most push_concurrency pushes
        # are in flight device-wide.
        g = self.limits.get
        tries = int(g("push_retries", 3))
        try:
            while s.active and not s.paused and len(s.queue):
                item = s.queue.peek()
                ok = False
                err = ""
                url = s.consumer
                while self.slots <= 0:  # (polled: asyncio.Event would cost 0.7 KB of heap)
                    await asyncio.sleep_ms(20)
                self.slots -= 1
                try:
                    url, body, ctype = self.producer.render(item)
                    self.mem()
                    delay = int(g("retry_backoff_ms", 500))
                    for i in range(tries + 1):
                        try:
                            st = (await post(url, body, ctype, float(g("push_timeout_s", 5)), ""))[0]
                            ok = 200 <= st < 300
                            err = "HTTP %d" % st
                        except Exception as e:  # noqa: BLE001 - unreachable consumer: retry
                            err = repr(e)
                            gc.collect()
                        if ok or not s.active or i == tries:
                            break
                        await asyncio.sleep_ms(delay)
                        delay *= 2
                    body = None
                except MemoryError as e:
                    err = repr(e)
                finally:
                    self.slots += 1
                self.after()
                if s.queue.peek() is item:
                    s.queue.pop()
                if ok:
                    s.delivered += 1
                else:
                    s.failed += 1
                    self.producer.push_failed += 1
                    self.log("push to %s failed: %s" % (url, err))
        finally:
            s.sending = False

    async def _sampler(self, s, period):
        while True:
            try:
                self.sample(s)
            except MemoryError:
                gc.collect()
                self.log("sample %s: out of memory" % self.topicset.names[s[0]])
            await asyncio.sleep_ms(int(period * 1000))

    # ------------------------------------------------------------------ main
    async def run(self):
        g = self.conf.get
        host = g("http_host", "0.0.0.0")
        port = int(g("http_port"))
        adv = None
        w = g("wifi")
        if w and w.get("ssid"):
            adv = self.wifi(w)
        adv = g("advertise_host") or adv or (host if host not in ("0.0.0.0", "") else "127.0.0.1")
        base = "http://%s:%d" % (adv, port)
        p = self.producer = Producer(self.device_id, self.topicset, base, os.urandom, self.limits)
        if g("gateway"):
            from wsn import gateway
            self.link = gateway.Link(self)
            if g("mode") == "sleepy":
                await self.link.sleepy()
                return
        if g("consumer_allow") is not None:
            p.consumer_allow = list(g("consumer_allow"))
        await asyncio.start_server(self._conn, host, port, 8)
        print("producer %s%s" % (base, PRODUCER_PATH))
        if self.link:
            asyncio.create_task(self.link.run())
        for s in self.sensors:
            period = float(s[2].get("period_s", g("sample_period_s", 10)))
            if period > 0:
                asyncio.create_task(self._sampler(s, period))
        # housekeeping: expiry (WS-BaseNotification 1.3 §6.4 scheduled termination) every
        # 0.5 s, and the status line, printed when a drop counter moves and every
        # status_period_s
        period = float(g("status_period_s", 60))
        last = time.ticks_ms()
        key = (0, 0, 0)
        while True:
            await asyncio.sleep_ms(500)
            try:
                t = time.ticks_ms()
                self.uptime_ms += time.ticks_diff(t, self.started)
                self.started = t
                for s in p.expire(now()):
                    self.log("expired %s" % s.id)
                self.mem()
                k = (p.outbox.dropped, dict(p.counters())["pullpointDropped"], p.push_failed)
                if k != key or period > 0 and ms_since(last) >= period * 1000:
                    self.status_line("drops" if k != key else "")
                    last = time.ticks_ms()
                key = k
            except Exception as e:  # noqa: BLE001 - housekeeping must outlive any error
                gc.collect()
                self.log("housekeeping: %r" % e)

    def wifi(self, conf):
        # Wi-Fi join on boards (ESP32, Pico W) and NTP, so the dateTimes are real. conf: {"ssid",
        # "password", "hostname", "ntp": true} -> the IP address; None without `network` (unix).
        try:
            import network
        except ImportError:
            return None
        wlan = network.WLAN(network.STA_IF)
        wlan.active(True)
        try:
            network.hostname(conf["hostname"])
        except (KeyError, AttributeError, ValueError):
            pass
        if not wlan.isconnected():
            wlan.connect(conf["ssid"], conf.get("password", ""))
            t0 = time.ticks_ms()
            while not wlan.isconnected():
                if ms_since(t0) > 30000:
                    raise OSError("Wi-Fi: could not join %s in 30 s" % conf["ssid"])
                time.sleep_ms(200)
        if conf.get("ntp", True):
            try:
                import ntptime
                ntptime.settime()
            except Exception as e:  # noqa: BLE001 - no NTP: times are wrong, the device works
                print("ntp failed:", repr(e))
        return wlan.ifconfig()[0]

