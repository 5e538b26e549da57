# The device application: config -> producer core + HTTP server + samplers + push senders +
# gateway link. Everything protocol-related is in wsn.core; this is the asyncio glue.
#
#   micropython device/main.py CONFIG.json        (unix port)
#   main.py on a board reads /config.json
#
# Once listening it prints one line `producer http://<host>:<port>/wsn/producer`.
import asyncio
import gc
import json
import os
import sys
import time

from wsn import http, sensors
from wsn.core import httpmsg
from wsn.core import ns as NS
from wsn.core.producer import PRODUCER_PATH, Producer
from wsn.core.reading import reading
from wsn.core.topics import TopicSet, load_namespace

DEFAULT_TOPICS = ("temperature", "humidity", "light", "heartbeat")

# The clock: integer seconds since 2000-01-01T00:00:00Z for the core (wsn.core.times), ticks for
# intervals. Ports differ in their epoch (unix: 1970, most boards: 2000; time.gmtime(0) tells)
# and in time.time()'s type (float on the 64-bit unix port, int on boards); both are normalised
# here. Unix time (~1.76e9) is not a small int on 32-bit ports, seconds since 2000 (~8.5e8) are.
_OFFSET = 946684800 if time.gmtime(0)[0] == 1970 else 0


def now():
    return int(time.time()) - _OFFSET


def elapsed_ms(since):
    return time.ticks_diff(time.ticks_ms(), since)


def _find_topics_file(conf):
    cands = []
    if conf.get("topics_file"):
        cands.append(conf["topics_file"])
    main = sys.argv[0] if sys.argv and sys.argv[0] else ""
    d = main.rpartition("/")[0]
    cands += [(d + "/topics.xml") if d else "topics.xml", "/topics.xml", "/lib/topics.xml"]
    for c in cands:
        try:
            with open(c, "rb") as f:
                return c, f.read()
        except OSError:
            pass
    return None, None


def load_config(path):
    with open(path) as f:
        conf = json.load(f)
    if not isinstance(conf, dict):
        raise ValueError("config: not a JSON object")
    for k in ("device_id", "http_port"):
        if k not in conf:
            raise ValueError("config: %s required" % k)
    return conf


class Device:
    def __init__(self, conf):
        self.conf = conf
        self.device_id = str(conf["device_id"])
        self.verbose = conf.get("verbose", True)
        # conf["limits"] itself: the Producer completes it with its DEFAULTS (no second dict)
        lim = conf.get("limits") or {}
        conf["limits"] = lim
        if "gateway_buffer" in conf:
            lim["gateway_buffer"] = int(conf["gateway_buffer"])
        self.limits = lim
        self.push_timeout = float(lim.get("push_timeout_s", 5))
        self.push_retries = int(lim.get("push_retries", 3))
        self.backoff_ms = int(lim.get("retry_backoff_ms", 500))
        self.limiter = http.Limiter(int(lim.get("push_concurrency", 2)))
        self.gc_each = bool(lim.get("gc_collect_each", True))
        # Collect after every gc_threshold bytes allocated (not only when the heap is full):
        # garbage between collections is what the peak is made of, and collecting a small heap
        # takes about a millisecond. Default: 2048 on heaps up to 256 KB (boards without
        # PSRAM), off on larger ones (a collection there costs more than the headroom is worth).
        th = lim.get("gc_threshold")
        if th is None:
            th = 2048 if gc.mem_free() + gc.mem_alloc() <= 262144 else 0
        if int(th) > 0 and hasattr(gc, "threshold"):
            gc.threshold(int(th))
        self.read_timeout = float(lim.get("read_timeout_s", 10))
        src, data = _find_topics_file(conf)
        if data is not None:
            tns, names = load_namespace(data)
        else:
            tns, names = NS.DT, list(DEFAULT_TOPICS)
        self.topicset = TopicSet(tns, names)
        self.sensors = []  # (topic index, sensor, spec)
        reg = []
        for spec in conf.get("sensors") or [{"topic": "temperature"}]:
            ti = self.topicset.index(spec.get("topic", ""))
            if ti < 0:
                raise ValueError("sensor topic %s not in topics.xml" % spec.get("topic"))
            self.sensors.append((ti, sensors.make(spec), spec))
            if ti not in reg:
                reg.append(ti)
        self.registered_topics = TopicSet(tns, [names[i] for i in reg])
        self.host = conf.get("http_host", "0.0.0.0")
        self.port = int(conf["http_port"])
        self.adv_host = conf.get("advertise_host")
        self.secret = conf.get("secret") or None
        self.sample_period = float(conf.get("sample_period_s", 10))
        # "awake" (default): serves Subscribe, pushes each reading; "sleepy": wsn/sleepy.py
        self.mode = conf.get("mode", "awake")
        if self.mode not in ("awake", "sleepy"):
            raise ValueError("config: mode 'awake' or 'sleepy'")
        if self.mode == "sleepy" and not conf.get("gateway"):
            raise ValueError("config: sleepy mode needs 'gateway'")
        self.producer = None
        self.link = None
        self.started = time.ticks_ms()  # ticks wrap (~12 days on boards): uptime is summed
        self.uptime_ms = 0
        self.mem_peak = 0
        self.requests = 0
        self.last_status = None

    # ---------------------------------------------------------------- helpers
    def now(self):
        return now()

    def log(self, msg):
        if self.verbose:
            print(msg)

    def status_line(self, why=""):
        p = self.producer
        link = self.link
        st = "status %s gateway=%s buffered=%d dropped=%d subs=%d pullpoint_dropped=%d " \
             "push_failed=%d" % (why and ("[" + why + "]"), link.state if link else "none",
                                 len(p.outbox), p.outbox.dropped, len(p.subs),
                                 dict(p.counters())["pullpointDropped"], p.push_failed)
        print(st)

    def _sample_mem(self):
        a = gc.mem_alloc()
        if a > self.mem_peak:
            self.mem_peak = a

    def status(self):
        self._sample_mem()
        peak = self.mem_peak
        gc.collect()
        d = {"device_id": self.device_id, "producer": self.producer.addr,
             "uptime_s": (self.uptime_ms + elapsed_ms(self.started)) // 1000,
             "time": self.now(),
             "requests": self.requests, "mem_alloc": gc.mem_alloc(), "mem_free": gc.mem_free(),
             "mem_peak": peak, "gateway": self.link.status() if self.link else None}
        for k, v in self.producer.counters():
            d[k] = v
        d["subscription_list"] = [
            {"id": s.id, "consumer": s.consumer, "paused": s.paused, "raw": s.raw,
             "topics": self.topicset.mask_names(s.mask), "expires": s.expires,
             "delivered": s.delivered, "failed": s.failed,
             "queued": len(s.queue) if s.queue else 0} for s in self.producer.subs]
        d["pullpoint_list"] = [{"id": p.id, "queued": len(p.ring), "dropped": p.ring.dropped}
                               for p in self.producer._pps or ()]
        return d

    # ---------------------------------------------------------------- HTTP
    async def handle(self, method, path, query, headers, body):
        self.requests += 1
        try:
            admin = (path == "/status" and method == "GET") or (
                path == "/admin/sample" and method == "POST")
            if admin and not httpmsg.check_auth(headers.get("authorization"), self.secret):
                return 401, "text/plain", b"management secret required (Bearer or Basic)\n"
            if path == "/status" and admin:
                if "reset_peak" in query:
                    gc.collect()
                    self.mem_peak = 0
                return 200, "application/json", json.dumps(self.status()).encode()
            if admin:
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
                    for ti, sensor, spec in self.sensors:
                        if not topic or self.topicset.names[ti] == topic:
                            self.sample(ti, sensor, spec)
                            n += 1
                return 200, "application/json", json.dumps({"published": n}).encode()
            if path == "/" and method == "GET":
                return 200, "text/plain", ("wsn-edge device %s: WS-Notification producer at %s\n"
                                           % (self.device_id, self.producer.addr)).encode()
            r = self.producer.handle(method, path, body, self.now(), headers.get("content-type", ""))
            for act, obj in r.actions:
                if act == "resumed" and obj.queue is not None:
                    self._kick(obj)
                if act in ("subscribed", "unsubscribed", "paused", "resumed"):
                    self.log("%s %s -> %s" % (act, obj.id, obj.consumer))
            self._sample_mem()
            return r.status, r.ctype, r.body
        finally:
            self._sample_mem()

    def _after(self, status=None):
        # collect after every request and push: a small heap stays unfragmented, so the next
        # envelope finds a contiguous block (cheap at 64 KiB, ~1 ms at 2 MB)
        self._sample_mem()
        if self.gc_each:
            gc.collect()

    # ---------------------------------------------------------------- publishing
    def reading_for(self, ti, sensor, spec, now):
        # one reading of a sensor as the payload XML, or None if the sensor failed
        try:
            value = sensor.read()
        except Exception as e:  # noqa: BLE001 - a flaky sensor must not stop the device
            self.log("sensor %s: %r" % (self.topicset.names[ti], e))
            return None
        unit = spec.get("unit") or sensors.unit(self.topicset.names[ti])
        return reading(self.device_id, value, unit, now, spec.get("decimals", 2))

    def sample(self, ti, sensor, spec):
        payload = self.reading_for(ti, sensor, spec, self.now())
        if payload is None:
            return
        kick, gw = self.producer.publish(ti, payload, self.now())
        for s in kick:
            self._kick(s)
        if gw and self.link is not None:
            self.link.out.set()

    def _kick(self, s):
        if not s.sending and s.queue is not None and len(s.queue):
            s.sending = True
            asyncio.create_task(self._sender(s))

    async def _sender(self, s):
        # drains one subscription's queue in order; each push is tried 1 + push_retries times
        # with exponential backoff, then given up (counted). At most push_concurrency pushes
        # are in flight device-wide.
        try:
            while s.active and not s.paused and len(s.queue):
                item = s.queue.peek()
                ok = False
                err = ""
                url = s.consumer
                await self.limiter.acquire()
                try:
                    url, body, ctype = self.producer.render(item)
                    self._sample_mem()
                    delay = self.backoff_ms
                    for attempt in range(self.push_retries + 1):
                        try:
                            status, _ = await http.post(url, body, ctype, self.push_timeout)
                            ok = 200 <= status < 300
                            err = "HTTP %d" % status
                        except MemoryError as e:
                            err = repr(e)
                            gc.collect()
                        except Exception as e:  # noqa: BLE001 - unreachable consumer: retry
                            err = repr(e)
                        if ok or not s.active or attempt == self.push_retries:
                            break
                        await asyncio.sleep_ms(delay)
                        delay *= 2
                    body = None
                except MemoryError as e:
                    err = repr(e)
                finally:
                    self.limiter.release()
                self._after()
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

    async def _sampler(self, ti, sensor, spec):
        period = float(spec.get("period_s", self.sample_period))
        if period <= 0:
            return
        while True:
            try:
                self.sample(ti, sensor, spec)
            except MemoryError:
                gc.collect()
                self.log("sample %s: out of memory" % self.topicset.names[ti])
            await asyncio.sleep_ms(int(period * 1000))

    async def _housekeeping(self):
        period = float(self.conf.get("status_period_s", 60))
        last = time.ticks_ms()
        while True:
            await asyncio.sleep_ms(500)
            try:
                last = self._housekeeping_step(period, last)
            except Exception as e:  # noqa: BLE001 - housekeeping must outlive any error
                gc.collect()
                self.log("housekeeping: %r" % e)

    def _housekeeping_step(self, period, last):
        # expiry (WS-BaseNotification 1.3 §6.4 scheduled termination) and the status line,
        # printed when a drop counter moves and every status_period_s
        t = time.ticks_ms()
        self.uptime_ms += elapsed_ms(self.started)
        self.started = t
        for s in self.producer.expire(self.now()):
            self.log("expired %s" % s.id)
        self._sample_mem()
        p = self.producer
        key = (p.outbox.dropped, dict(p.counters())["pullpointDropped"], p.push_failed)
        if key != self.last_status:
            self.status_line("drops")
            last = time.ticks_ms()
        elif period > 0 and elapsed_ms(last) >= period * 1000:
            self.status_line()
            last = time.ticks_ms()
        self.last_status = key
        return last

    # ---------------------------------------------------------------- main
    async def run(self):
        ip = None
        if self.conf.get("wifi"):
            from wsn import wifi
            ip = wifi.connect(self.conf["wifi"])
        host = self.adv_host or ip or (self.host if self.host not in ("0.0.0.0", "") else "127.0.0.1")
        base = "http://%s:%d" % (host, self.port)
        self.producer = Producer(self.device_id, self.topicset, base, os.urandom, self.limits)
        if self.mode == "sleepy":
            from wsn.sleepy import Sleepy  # imported only in this mode
            await Sleepy(self).run()
            return
        if self.conf.get("consumer_allow") is not None:
            self.producer.consumer_allow = list(self.conf["consumer_allow"])
        srv = http.Server(self.handle, self.host, self.port, self.limits["max_request_bytes"],
                          self.read_timeout, self._after)
        await srv.start()
        print("producer %s%s" % (base, PRODUCER_PATH))
        if self.conf.get("gateway"):
            from wsn.gateway import GatewayLink
            self.link = GatewayLink(self, self.conf)
            asyncio.create_task(self.link.run())
        for ti, sensor, spec in self.sensors:
            asyncio.create_task(self._sampler(ti, sensor, spec))
        self.last_status = (0, 0, 0)
        await self._housekeeping()


def main(path):
    conf = load_config(path)
    dev = Device(conf)
    asyncio.run(dev.run())
