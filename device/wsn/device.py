# The device application, the asyncio layer: the accept loop, the HTTP client, push senders,
# sampling, housekeeping. Start-up (config, topics, sensors, Wi-Fi) is wsn.boot, a connection
# wsn.server; the protocol is in wsn.core; the gateway link is wsn.gateway, imported only when
# a gateway is configured.
#
#   micropython device/main.py CONFIG.json        (unix port)
#   main.py on a board reads /config.json
#
# Once listening it prints one line `producer http://<host>:<port>/wsn/producer`.
#
# What stays loaded is what every reading and push uses (this module, wsn.core.producer,
# wsn.core.soap, wsn.core.httpc, wsn.gateway). What only start-up, a request or a registration
# needs (wsn.boot, wsn.server, the XML reader, request parsing, the operations, an optional
# package) is imported when needed and dropped (idle()) when nothing uses it any more, so
# between requests the heap holds none of that bytecode: on a board that runs .mpy files from
# its filesystem it is the larger part.
import asyncio
import gc
import sys
import time

from micropython import const

from wsn.core import httpc as H
from wsn.core.soap import reading

# the modules that stay loaded (" name " in it); every other wsn module is dropped when idle
_KEEP = const(" wsn wsn.core wsn.device wsn.gateway wsn.sleepy wsn.sensors wsn.core.soap "
              "wsn.core.producer wsn.core.httpc ")

# The clock: integer seconds since 2000-01-01T00:00:00Z for the core, ticks for intervals. Ports
# differ in their epoch (unix: 1970, most boards: 2000; time.gmtime(0) tells) and in
# time.time()'s type (float on the 64-bit unix port, int on boards); both are normalised here.
# Unix time (~1.76e9) is not a small int on 32-bit ports, seconds since 2000 (~8.5e8) are.
_OFFSET = 946684800 if time.gmtime(0)[0] == 1970 else 0


def now():
    return int(time.time()) - _OFFSET


def ms_since(t):
    return time.ticks_diff(time.ticks_ms(), t)


# ------------------------------------------------------------------------------- HTTP
# One request per connection (Connection: close), Content-Length bodies only, every read under
# a timeout, sizes bounded: a slow, truncated or oversized request gets 408/400/413 and never
# holds the device. Message parsing is in wsn.core.httpmsg.
async def _close(s):
    try:
        s.close()
        await s.wait_closed()
    except Exception:  # noqa: BLE001 - already reset by the peer: closed either way
        pass


def _alarm(s):
    # The device's timeouts: a task that cancels the current one after s seconds (cancel() the
    # alarm when done in time). asyncio.wait_for would do, but its module (asyncio.funcs) takes
    # 0.5 KB of heap, and it makes two tasks per call; this is one per connection.
    async def ring(t):
        await asyncio.sleep_ms(int(s * 1000))
        t.cancel()
    return asyncio.create_task(ring(asyncio.current_task()))


async def post(url, body, ctype, t, extra):
    # POST body (bytes, or a list of bytes chunks: a batch written in pieces, no big contiguous
    # block) to url -> (status, the whole response: wsn.core.httpmsg.body reads its body).
    # Raises OSError when the peer is unreachable or slower than t seconds, ValueError for a
    # bad URL or a malformed head.
    host, port, path = H.split_url(url)
    if not isinstance(body, list):
        body = (body,)
    n = 0
    for c in body:
        n += len(c)
    al = _alarm(t)
    w = None
    Device.out += 1
    try:
        r, w = await asyncio.open_connection(host, port)
        w.write(H.request_head(host, port, path, ctype, n, extra))
        for c in body:
            w.write(c)
            await w.drain()
        buf = b""
        while True:
            c = await r.read(512)  # answers to pushes are small: small reads, small heap
            if not c:
                return H.status(buf), buf
            buf += c
            if len(buf) > 16384:
                raise ValueError("response over 16384 bytes")
    except asyncio.CancelledError:
        raise OSError("no answer within %s s" % t)
    finally:
        Device.out -= 1
        al.cancel()
        if w:
            await _close(w)


class Device:
    # Device().run(config path): conf, device_id, limits, topicset, sensors, producer, link are
    # set by wsn.boot (the config file, the topics, the sensors, the network)
    producer = link = None
    # out: requests the device made that are in flight (wsn.device.post: pushes, the gateway
    # link's); mem_idle is measured when none is, nor a request to the device (busy)
    busy = conns = out = mem_peak = mem_top = mem_idle = requests = uptime_ms = 0

    def log(self, text):
        if self.conf.get("verbose", True):
            print(text)

    def mem(self):
        # the heap in use now (garbage included): mem_top is the highest since the last status
        # line, mem_peak since start (or /status?reset_peak=1)
        a = gc.mem_alloc()
        if a > self.mem_top:
            self.mem_top = a
            if a > self.mem_peak:
                self.mem_peak = a

    def idle(self):
        # Drop every module not in _KEEP (the request path, an optional package) once nothing
        # uses them (wsn.boot decides whether to: not for .py files), then collect: a small
        # heap stays unfragmented, and the next envelope finds a contiguous block (cheap at
        # 64 KiB, ~1 ms at 2 MB).
        self.mem()
        if not self.busy and self.unload:
            for k in list(sys.modules):
                if k[:4] != "wsn." or " " + k + " " in _KEEP:
                    continue
                del sys.modules[k]
                k, _, leaf = k.rpartition(".")
                try:
                    delattr(sys.modules[k], leaf)  # the parent package holds it too
                except Exception:  # noqa: BLE001 - a parent without it (never imported through it)
                    pass
        if self.limits.get("gc_collect_each", True):
            gc.collect()

    def pp_dropped(self):
        n = 0
        for q in self.producer.pps:
            n += q.dropped
        return n

    def status_line(self, text):
        # also for the console (flash.sh --monitor): mem, the heap in use between requests
        # (mem_idle), and peak, the most the device saw in use since the previous line
        p = self.producer
        print("status %s gateway=%s buffered=%d dropped=%d subs=%d pullpoint_dropped=%d "
              "push_failed=%d mem=%d peak=%d" % (
                  text and "[" + text + "]", self.link.state if self.link else "none",
                  len(p.outbox), p.outbox.dropped, len(p.subs), self.pp_dropped(),
                  p.push_failed, self.mem_idle, self.mem_top))
        self.mem_top = 0

    # ------------------------------------------------------------------ HTTP server
    async def serve(self, s):
        # The accept loop (asyncio.start_server's own dies of a MemoryError in its accept, and
        # the device stops answering until it is rebooted): a connection that cannot be
        # accepted is dropped and the loop goes on. At most limits.max_connections are served
        # at once; more wait in the listen backlog (then the kernel refuses them), so a flood
        # of slow clients cannot fill the heap, and once it stops the device serves again.
        io = asyncio.core._io_queue
        while True:
            while self.conns >= self.limits.get("max_connections", 4):
                await asyncio.sleep_ms(20)  # (polled only while the limit is reached)
            yield io.queue_read(s)
            c = None
            try:
                c = s.accept()[0]
                c.setblocking(False)
                self.conns += 1
                self.busy += 1
                try:
                    from wsn import server  # (dropped when idle: wsn.server.serve ends with idle())

                    c = asyncio.StreamReader(c)
                    asyncio.create_task(server.serve(self, c))
                    server = None  # this loop's frame must not keep it
                except BaseException:
                    self.conns -= 1
                    self.busy -= 1
                    raise
            except Exception:  # noqa: BLE001 - out of memory or a reset: drop it, go on
                try:
                    c.close()
                except Exception:  # noqa: BLE001 - None, or already closed
                    pass
                c = None
                gc.collect()

    # ------------------------------------------------------------------ publishing
    def read(self, s):
        # One reading of sensor s as the payload XML, or None if the sensor failed. A sensor is
        # a list [topic index, kind, spec, reads so far, hardware read(), unit, period in ms]
        # (wsn.boot).
        sp = s[2]
        s[3] += 1
        try:
            if s[1] == "heartbeat":  # a counter: proves the device is alive
                v = s[3]
            elif s[4]:  # a board sensor (wsn.sensors)
                v = s[4]()
            else:  # sim: a slow sine around base, deterministic (tests can predict the range)
                import math

                v = sp.get("base", 21.0) + sp.get("amplitude", 2.0) * math.sin(s[3] * 0.1)
            return reading(self.device_id, v, s[5], now(), sp.get("decimals", 2))
        except Exception as e:  # noqa: BLE001 - a flaky sensor must not stop the device
            self.log("sensor %s: %r" % (self.topicset.names[s[0]], e))

    def sample(self, s):
        payload = self.read(s)
        if payload:
            kick, gw = self.producer.publish(s[0], payload, now())
            for q in kick:
                self.kick(q)
            if gw and self.link:
                self.link.wake()

    def kick(self, s):
        if not s.sending and s.queue is not None and len(s.queue):
            s.sending = True
            asyncio.create_task(self._sender(s))

    async def _sender(self, s):
        # drains one subscription's queue in order; each push is tried 1 + push_retries times
        # with exponential backoff, then given up (counted). At most push_concurrency pushes
        # are in flight device-wide.
        L = self.limits
        tries = int(L.get("push_retries", 3))
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
                    url, body, ctype = self.producer.render(item, False)
                    self.mem()
                    delay = int(L.get("retry_backoff_ms", 500))
                    for i in range(tries + 1):
                        try:
                            st = (await post(url, body, ctype, float(L.get("push_timeout_s", 5)), ""))[0]
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
                self.idle()
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

    # ------------------------------------------------------------------ main
    async def run(self, path):
        # The device with the config file at path: start-up (wsn.boot), then its clock, one
        # task (a task each would cost a frame each): each sensor is sampled when it is due (its
        # period; 0: only on /admin/sample), and every 0.5 s the housekeeping runs: expiry
        # (WS-BaseNotification 1.3 §6.4 scheduled termination) and the status line, printed
        # when a drop counter moves and every status_period_s; mem_idle is the heap in use
        # after a collection with no request in flight, to the device or from it, and the
        # request path dropped.
        from wsn import boot

        self.started = time.ticks_ms()  # ticks wrap (~12 days on boards): uptime is summed
        c = boot.start(self, path)  # the config, the producer, the gateway link, the server
        boot = None
        if c:  # sleepy mode: its loop instead of the server's
            await c
            return
        p = self.producer
        period = float(self.conf.get("status_period_s", 60)) * 1000
        last = hk = time.ticks_ms()
        nxt = [last] * len(self.sensors)
        key = (0, 0, 0)
        while True:
            t = time.ticks_ms()
            wait = 500 - time.ticks_diff(t, hk)
            if wait <= 0:  # housekeeping
                hk = t
                wait = 500
                try:
                    self.uptime_ms += time.ticks_diff(t, self.started)
                    self.started = t
                    for s in p.expire(now()):
                        self.log("expired %s" % s.id)
                    if not self.busy:
                        self.idle()
                        gc.collect()
                        if not self.out:
                            self.mem_idle = gc.mem_alloc()
                    k = (p.outbox.dropped, self.pp_dropped(), p.push_failed)
                    if k != key or period > 0 and ms_since(last) >= period:
                        self.status_line("drops" if k != key else "")
                        last = time.ticks_ms()
                    key = k
                except Exception as e:  # noqa: BLE001 - housekeeping must outlive any error
                    gc.collect()
                    self.log("housekeeping: %r" % e)
            for i in range(len(nxt)):
                s = self.sensors[i]
                if s[6]:
                    left = time.ticks_diff(nxt[i], t)
                    if left <= 0:
                        try:
                            self.sample(s)
                        except MemoryError:
                            gc.collect()
                            self.log("sample %s: out of memory" % self.topicset.names[s[0]])
                        nxt[i] = time.ticks_add(nxt[i], s[6])
                        if time.ticks_diff(nxt[i], t) < 0:  # (behind: skip, do not catch up)
                            nxt[i] = time.ticks_add(t, s[6])
                        left = time.ticks_diff(nxt[i], t)
                    wait = min(wait, left)
            await asyncio.sleep_ms(max(wait, 1))
