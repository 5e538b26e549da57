"""Benchmark of the gateway as a process, against anchors measured in the same run
(plain script, not collected by pytest).

    python tests/bench/gateway_bench.py [--quick] [--only SECTION ...]

Needs the Debian packages `wrk`, `mosquitto` and `mosquitto-clients` (scripts/setup.sh
installs them). Every gateway is a fresh `python -m gateway` on 127.0.0.1 with its own data
dir at the durable defaults (SQLite synchronous=FULL, committed before the 202, landing zone
on); `--max-backlog` is raised so that no message is dropped. The load generators are C
programs (wrk, mosquitto_pub) or run in processes of their own, so the numbers are the
gateway's, not the generator's; what the generators and consumers can do at most is
measured and printed too. Sections:

* `http`: wrk -t1 -c16 POSTs one ~1 KB single-message Notify (no subscriber) for 10 s to
  the gateway, and the same body to a bare aiohttp handler that only reads the body (its
  own process): our HTTP stack's ceiling on this machine. Prints both and the ratio.
* `multi`: wrk POSTs one Notify carrying 100 NotificationMessages (200-byte payloads);
  prints Notify/s and messages/s accepted.
* `consumers`: the bench consumers' own ceiling. The consumers (one aiohttp app each, on
  its own port) run in one process of their own; wrk POSTs to one of them a wrapped Notify
  of 100 messages (what a batching gateway sends) and of 1 message: messages/s they absorb.
* `fanout`: 1, 10 and 100 wrapped subscriptions (batching: --delivery-batch 100, the
  default) of one topic; wrk publishes a fixed number of single-message Notify (200-byte
  payloads); deliveries/s = messages received by all consumers / time from the first publish
  to the last arrival. Next to it Mosquitto 2 (Debian) on a private port, QoS 0, the same
  fan-outs and 200-byte messages, published by `mosquitto_pub -l` and received by one
  `mosquitto_sub` process per subscriber, timed the same way. That is the strict
  comparison (one message per publish on both sides). A second, separately labelled table
  has the gateway's publisher batch (Notify of 16 messages, what the device sends with
  batch_max 16) against the same Mosquitto runs. Both print messages per delivery request.
* `latency`: publish -> delivery at 1,000 messages/s offered (single-message Notify, paced
  by a client in this process, the send time in the payload, arrival time taken by the
  consumer process; one monotonic clock), 1 and 10 consumers: p50, p99, max.
* `fanin`: K subscriptions of ONE consumer; the gateway batches what is pending for one
  consumer endpoint into one Notify across subscriptions: messages per request.

Everything shares this machine's two cores: the numbers are a lower bound of what the
gateway does with cores of its own. So `http`, `multi` and `fanout` also print work per
CPU-second of the serving process (gateway, bare handler, Mosquitto broker; user + system
time of all its threads from /proc): steadier than rates when other work shares the
machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "gateway"))

from gwtest import (  # noqa: E402
    envelope,
    notify_body,
    start_gateway,
    stop_gateway,
    subscribe_body,
    topic_filter,
)

A_NOTIFY = "http://docs.oasis-open.org/wsn/bw-2/NotificationConsumer/Notify"
A_SUB = "http://docs.oasis-open.org/wsn/bw-2/NotificationProducer/SubscribeRequest"
CT = "application/soap+xml; charset=utf-8"
SECTIONS = ("http", "multi", "consumers", "fanout", "latency", "fanin")
FANOUTS = (1, 10, 100)
# fan-out -> single-message Notify published to the gateway / lines to Mosquitto
GW_MSGS = {1: 10_000, 10: 2_000, 100: 400}
MQ_MSGS = {1: 50_000, 10: 10_000, 100: 2_000}
MSG_BYTES = 200
#: messages per Notify in the fan-out variant where the publisher batches (device batch_max)
PUBLISH_BATCH = 16
#: that variant publishes this many times GW_MSGS (same count of Notify requests would be
#: over too soon to time)
BATCHED_MSGS_FACTOR = 4
SENT_RE = re.compile(rb'sent="([0-9.]+)"')


def payload(seq: int, size: int = MSG_BYTES, sent: float | None = None) -> str:
    """A reading of exactly `size` characters (padded in rd:note); `sent` (monotonic
    seconds) lets the consumer process compute publish -> delivery latency."""
    attr = f' sent="{sent:.6f}"' if sent is not None else ""
    head = (
        f'<rd:Reading xmlns:rd="urn:wsn-edge:reading" device="bench"{attr}>'
        f"<rd:value>{seq}</rd:value><rd:unit>Cel</rd:unit><rd:note>"
    )
    tail = "</rd:note></rd:Reading>"
    return head + "x" * max(0, size - len(head) - len(tail)) + tail


def notify(n_msgs: int, size: int = MSG_BYTES, total: int | None = None) -> bytes:
    """A Notify with `n_msgs` messages; with `total`, the first payload is padded so the
    whole request is `total` bytes."""
    msgs = [("tns:bench", payload(i, size)) for i in range(n_msgs)]
    # no wsa:MessageID: wrk sends these bytes again and again, and the gateway publishes a
    # Notify whose MessageID it accepted before only once (gateway/dedupe.py)
    data = envelope(notify_body(*msgs), action=A_NOTIFY, message_id=None)
    if total is not None and len(data) < total:
        msgs[0] = ("tns:bench", payload(0, size + total - len(data)))
        data = envelope(notify_body(*msgs), action=A_NOTIFY, message_id=None)
    return data


# ---------------------------------------------------------------------- wrk
@dataclass
class WrkResult:
    requests: int
    seconds: float
    rps: float
    errors: int  # non-2xx answers and socket errors

    @property
    def ok(self) -> int:
        return self.requests - self.errors


def lua_post(body: bytes, done_file: str | None = None, limit: int = 0) -> str:
    """A wrk script that POSTs `body` (SOAP 1.2) each time; with `done_file`, see below."""
    text = body.decode()
    assert "]==]" not in text
    lua = f'wrk.method = "POST"\nwrk.headers["Content-Type"] = "{CT}"\nwrk.body = [==[{text}]==]\n'
    if done_file is not None:
        # after `limit` answers: write "<2xx> <others>" to done_file and stop (wrk itself
        # would sleep out its -d, so the bench ends it once the file is there)
        lua += f"""local n, bad = 0, 0
function response(status, headers, body)
  n = n + 1
  if status < 200 or status > 299 then bad = bad + 1 end
  if n == {limit} then
    local f = io.open("{done_file}", "w")
    f:write((n - bad) .. " " .. bad)
    f:close()
    wrk.thread:stop()
  end
end
"""
    return lua


async def wrk(url: str, body: bytes, seconds: float, conns: int = 16) -> WrkResult:
    """wrk -t1 -cCONNS -dSECONDS POSTing `body` to `url`."""
    return await wrk_script(url, lua_post(body), seconds, conns)


async def wrk_script(url: str, script: str, seconds: float, conns: int = 16) -> WrkResult:
    """wrk -t1 -cCONNS -dSECONDS running the Lua `script` (e.g. one that varies the body)."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
    try:
        proc = await asyncio.create_subprocess_exec(
            "wrk", "-t1", f"-c{conns}", f"-d{max(1, round(seconds))}s", "-s", f.name, url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out = (await proc.communicate())[0].decode()
    finally:
        os.unlink(f.name)
    m = re.search(r"(\d+) requests in ([\d.]+)(m?s)", out)
    if not m:
        raise RuntimeError(f"wrk output not understood:\n{out}")
    n, secs = int(m.group(1)), float(m.group(2)) / (1000 if m.group(3) == "ms" else 1)
    errors = 0
    if e := re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        errors += int(e.group(1))
    if e := re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out):
        errors += sum(int(x) for x in e.groups())
    return WrkResult(n, secs, n / secs if secs else 0.0, errors)


async def wrk_count(url: str, body: bytes, limit: int, conns: int = 16) -> WrkResult:
    """wrk -t1 -cCONNS POSTing `body` until `limit` answers came back (a few more requests
    may be in flight then: count deliveries, not this)."""
    with tempfile.TemporaryDirectory(prefix="wrk-") as tmp:
        done = Path(tmp) / "done"
        script = Path(tmp) / "post.lua"
        script.write_text(lua_post(body, str(done), limit))
        t0 = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            "wrk", "-t1", f"-c{conns}", "-d3600s", "-s", str(script), url,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        try:
            while not done.exists() or not done.read_text():
                if proc.returncode is not None:
                    raise RuntimeError("wrk ended before its limit")
                await asyncio.sleep(0.02)
            secs = time.monotonic() - t0
            ok, bad = (int(x) for x in done.read_text().split())
        finally:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
    return WrkResult(ok + bad, secs, (ok + bad) / secs, bad)


# ---------------------------------------------------------------------- helper processes
async def serve_bare() -> None:
    """The HTTP ceiling: an aiohttp handler that only reads the body (a process of its own)."""

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=202)

    app = web.Application(client_max_size=1 << 20)
    app.router.add_post("/wsn/broker", handle)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"listening on http://127.0.0.1:{port}/wsn/broker", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await runner.cleanup()


@dataclass
class FarmConsumer:
    received: int = 0
    requests: int = 0


async def consumer_farm(n: int) -> None:
    """N NotificationConsumers (one aiohttp app and port each) in this process. Prints
    {"urls": [...]}, then answers commands on stdin, one JSON line each:
    `count` -> {"received", "requests", "last_at"}; `lat` -> {"lat_ms": [...]} (and clears
    them); `reset` -> {} (zeroes the counters)."""
    state = {"last_at": 0.0}
    lat: list[float] = []
    consumers = [FarmConsumer() for _ in range(n)]
    runners = []
    urls = []

    def make(c: FarmConsumer):  # type: ignore[no-untyped-def]
        async def handle(request: web.Request) -> web.Response:
            data = await request.read()
            now = time.monotonic()
            c.requests += 1
            c.received += data.count(b"<rd:Reading")
            state["last_at"] = now
            if b'sent="' in data:
                lat.extend(now - float(s) for s in SENT_RE.findall(data))
            return web.Response(status=202)

        return handle

    for c in consumers:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/c", make(c))
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        urls.append(f"http://127.0.0.1:{port}/c")
        runners.append(runner)
    print(json.dumps({"urls": urls}), flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := (await reader.readline()).decode().strip():
        if line == "count":
            out: dict[str, object] = {
                "received": [c.received for c in consumers],
                "requests": [c.requests for c in consumers],
                "last_at": state["last_at"],
            }
        elif line == "lat":
            out = {"lat_ms": [x * 1000 for x in lat]}
            lat.clear()
        elif line == "reset":
            for c in consumers:
                c.received = c.requests = 0
            out = {}
        else:
            out = {"error": line}
        print(json.dumps(out), flush=True)
    for r in runners:
        await r.cleanup()


class Farm:
    """The consumer farm process, seen from the bench."""

    def __init__(self, n: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--consumer-farm", str(n)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
        )  # fmt: skip
        assert self.proc.stdout is not None
        self.urls: list[str] = json.loads(self.proc.stdout.readline())["urls"]

    def ask(self, cmd: str) -> dict[str, object]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        out: dict[str, object] = json.loads(self.proc.stdout.readline())
        return out

    def count(self) -> tuple[int, int, float]:
        c = self.ask("count")
        return sum(c["received"]), sum(c["requests"]), float(c["last_at"])  # type: ignore[arg-type]

    async def wait(self, n: int, timeout: float, quiet: float = 0.5) -> tuple[int, float, bool]:
        """Wait until `n` messages arrived (then `quiet` s without more, to count
        in-flight extras) or `timeout`; (received, last arrival, complete)."""
        deadline = time.monotonic() + timeout
        got, _, last = self.count()
        while got < n and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            got, _, last = self.count()
        while True:
            await asyncio.sleep(quiet)
            g2, _, l2 = self.count()
            if g2 == got:
                return got, last, got >= n
            got, last = g2, l2

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_bare() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve-bare"], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        raise RuntimeError(f"bare server did not start: {line!r}")
    return proc, line.strip().rsplit(" ", 1)[1]


def stop_proc(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def subscribe(url: str, consumers: Sequence[str], raw: bool = False) -> None:
    policy = "<wsnt:SubscriptionPolicy><wsnt:UseRaw/></wsnt:SubscriptionPolicy>" if raw else ""
    async with aiohttp.ClientSession() as s:
        for c in consumers:
            data = envelope(
                subscribe_body(c, topic_filter("tns:bench"), extra=policy), action=A_SUB
            )
            async with s.post(url, data=data, headers={"Content-Type": CT}) as r:
                text = await r.text()
                if r.status != 200:
                    raise RuntimeError(f"Subscribe answered {r.status}: {text}")


class Gateway:
    """A fresh `python -m gateway` in a temporary data dir (context manager)."""

    #: extra options for every gateway of the run (--gateway-arg)
    common: tuple[str, ...] = ()

    def __init__(self, *extra: str) -> None:
        self.extra = ("--max-backlog", "1000000", *self.common, *extra)

    def __enter__(self) -> Gateway:
        self.tmp = tempfile.TemporaryDirectory(prefix="gwbench-")
        self.gw = start_gateway(Path(self.tmp.name) / "gw", *self.extra)
        self.url = self.gw.url
        self.pid = self.gw.proc.pid
        return self

    def __exit__(self, *exc: object) -> None:
        rc = stop_gateway(self.gw)
        if rc != 0:
            print(f"  (gateway exited with {rc}: {self.gw.stderr.read_text()[-400:]})")
        self.tmp.cleanup()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process (all its threads) has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------- sections
async def section_http(scale: float, profile: Path | None) -> None:
    body = notify(1, total=1024)
    secs = 10 * scale
    print(f"== HTTP: wrk -t1 -c16 -d{secs:.0f}s, single-message Notify of {len(body)} bytes, "
          "no subscriber")  # fmt: skip
    bare, bare_url = start_bare()
    try:
        await wrk(bare_url, body, 1)  # warm-up
        c0 = cpu_seconds(bare.pid)
        rb = await wrk(bare_url, body, secs)
        cb = rb.requests / (cpu_seconds(bare.pid) - c0)
    finally:
        stop_proc(bare)
    with Gateway() as gw:
        await wrk(gw.url, body, 1)
        spy = start_profile(gw.pid, profile, secs) if profile is not None else None
        c0 = cpu_seconds(gw.pid)
        rg = await wrk(gw.url, body, secs)
        cg = rg.requests / (cpu_seconds(gw.pid) - c0)
        if spy is not None:
            spy.wait()
    # per CPU-second of the serving process: steadier than requests/s when other work
    # shares the cores, and it is what a core of its own would do
    print(f"  bare aiohttp handler  {rb.rps:>9,.0f} requests/s   {cb:>9,.0f} per CPU-second")
    print(f"  gateway Notify        {rg.rps:>9,.0f} requests/s   {cg:>9,.0f} per CPU-second")
    print(f"  ratio                 {rg.rps / rb.rps:>9.2f}              {cg / cb:>9.2f}"
          f"{_errs(rg)}")  # fmt: skip
    if profile is not None:
        print(f"  py-spy profile of the gateway during its run: {profile}")
    print(flush=True)


def _errs(r: WrkResult) -> str:
    return f"   ({r.errors} errors!)" if r.errors else ""


async def section_multi(scale: float) -> None:
    body = notify(100)
    secs = 10 * scale
    print(f"== Notify carrying 100 messages ({len(body):,} bytes), wrk -t1 -c16 -d{secs:.0f}s, "
          "no subscriber")  # fmt: skip
    with Gateway() as gw:
        await wrk(gw.url, body, 1)
        c0 = cpu_seconds(gw.pid)
        r = await wrk(gw.url, body, secs)
        cg = r.requests * 100 / (cpu_seconds(gw.pid) - c0)
    print(f"  {r.rps:,.0f} Notify/s = {r.rps * 100:,.0f} messages/s accepted, "
          f"{cg:,.0f} messages per CPU-second{_errs(r)}\n", flush=True)  # fmt: skip


async def section_consumers(scale: float) -> None:
    secs = 5 * scale
    print(f"== the bench consumers' own ceiling (their process, wrk -t1 -c8 -d{secs:.0f}s)")
    farm = Farm(1)
    try:
        for n in (100, 1):
            body = envelope(notify_body(*[("tns:bench", payload(i)) for i in range(n)]),
                            action=A_NOTIFY, message_id=None)  # fmt: skip
            r = await wrk(farm.urls[0], body, secs, conns=8)
            print(f"  wrapped Notify of {n:>3} messages: {r.rps * n:>9,.0f} messages/s "
                  f"({r.rps:,.0f} requests/s){_errs(r)}")  # fmt: skip
    finally:
        farm.close()
    print(flush=True)


def start_profile(pid: int, out: Path, seconds: float | None = None) -> subprocess.Popen[bytes]:
    """py-spy record (raw) of `pid` into `out`, for `seconds` or until stop_profile."""
    cmd = ["py-spy", "record", "-p", str(pid), "-r", "250", "-f", "raw", "-o", str(out)]
    if seconds is not None:
        cmd += ["-d", str(max(1, int(seconds)))]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_profile(spy: subprocess.Popen[bytes]) -> None:
    spy.send_signal(signal.SIGINT)  # py-spy writes what it has and ends
    spy.wait()


@dataclass
class Fanout:
    rate: float  # deliveries/s
    per_cpu: float  # deliveries per CPU-second of the serving process
    got: int  # deliveries
    complete: bool
    requests: int = 0  # HTTP requests the consumers received (gateway only)


async def fanout_gateway(
    n: int, msgs: int, raw: bool = False, profile: Path | None = None, per_notify: int = 1
) -> Fanout:
    """`msgs` messages published in Notify of `per_notify` messages each, delivered to `n`
    subscriptions of one consumer each."""
    body = notify(per_notify)
    with Gateway() as gw:
        farm = Farm(n)
        spy = None
        try:
            await subscribe(gw.url, farm.urls, raw)
            warm = await wrk_count(gw.url, notify(1), 20)
            await farm.wait(warm.ok * n, 20)
            farm.ask("reset")
            if profile is not None:
                spy = start_profile(gw.pid, profile)
            t0, c0 = time.monotonic(), cpu_seconds(gw.pid)
            r = await wrk_count(gw.url, body, max(1, msgs // per_notify))
            got, last, complete = await farm.wait(r.ok * per_notify * n, 120)
            cpu = cpu_seconds(gw.pid) - c0
            _, reqs, _ = farm.count()
        finally:
            if spy is not None:
                stop_profile(spy)
            farm.close()
    return Fanout(got / (last - t0), got / cpu, got, complete, reqs)


async def fanout_mosquitto(n: int, msgs: int) -> Fanout:
    """`msgs` lines published by one `mosquitto_pub -l`, received by `n` `mosquitto_sub`."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="mqbench-") as tmp:
        conf = Path(tmp) / "mosquitto.conf"
        conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\n"
                        "sys_interval 1\npersistence false\n")  # fmt: skip
        lines = Path(tmp) / "lines.txt"
        lines.write_text("".join(payload(i) + "\n" for i in range(msgs)))
        broker = subprocess.Popen(["mosquitto", "-c", str(conf)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        subs: list[asyncio.subprocess.Process] = []
        try:
            for _ in range(50):  # until it listens
                try:
                    socket.create_connection(("127.0.0.1", port), 0.2).close()
                    break
                except OSError:
                    await asyncio.sleep(0.1)
            for _ in range(n):
                subs.append(await asyncio.create_subprocess_exec(
                    "mosquitto_sub", "-p", str(port), "-t", "bench", "-C", str(msgs), "-W", "120",
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
                ))  # fmt: skip
            # every subscriber's SUBSCRIBE is in before the first publish
            for _ in range(100):
                out = subprocess.run(
                    ["mosquitto_sub", "-p", str(port), "-t", "$SYS/broker/subscriptions/count",
                     "-C", "1", "-W", "3"], capture_output=True, text=True,
                ).stdout.strip()  # fmt: skip
                if out.isdigit() and int(out) >= n + 1:
                    break
                await asyncio.sleep(0.2)
            ends: list[float] = []
            counts: list[int] = []

            async def drain(p: asyncio.subprocess.Process) -> None:
                assert p.stdout is not None
                k = 0
                while chunk := await p.stdout.read(1 << 16):
                    k += chunk.count(b"\n")
                await p.wait()
                counts.append(k)
                ends.append(time.monotonic())

            drains = [asyncio.ensure_future(drain(p)) for p in subs]
            t0, c0 = time.monotonic(), cpu_seconds(broker.pid)
            with open(lines) as fh:
                pub = await asyncio.create_subprocess_exec(
                    "mosquitto_pub", "-p", str(port), "-t", "bench", "-l", stdin=fh
                )
                await pub.wait()
            await asyncio.gather(*drains)
            cpu = cpu_seconds(broker.pid) - c0
        finally:
            for p in subs:
                if p.returncode is None:
                    p.kill()
            broker.terminate()
            broker.wait()
    got = sum(counts)
    return Fanout(got / (max(ends) - t0), got / cpu, got, got == n * msgs)


async def section_fanout(scale: float, profile: Path | None) -> None:
    print("== fan-out: deliveries/s, gateway (wrapped, batching 100) vs Mosquitto (QoS 0), "
          f"{MSG_BYTES}-byte messages, same run")  # fmt: skip
    print("   strict: one message per publish on both sides (single-message Notify by wrk, "
          "one PUBLISH per line by mosquitto_pub -l)")  # fmt: skip
    hdr = (
        f"{'consumers':>9} {'gateway/s':>11} {'Mosquitto/s':>12} {'ratio':>6}   "
        f"{'per CPU-s: gateway':>18} {'Mosquitto':>10} {'ratio':>6}   "
        f"{'msgs/request':>12}   (deliveries)"
    )
    print(hdr)
    print("-" * len(hdr))
    anchors: dict[int, Fanout] = {}
    for n in FANOUTS:
        prof = profile.with_name(f"{profile.name}.fanout-{n}") if profile is not None else None
        g = await fanout_gateway(n, max(10, int(GW_MSGS[n] * scale)), profile=prof)
        m = anchors[n] = await fanout_mosquitto(n, max(10, int(MQ_MSGS[n] * scale)))
        _fanout_line(n, g, m)
    print(f"   publisher batching (not the strict comparison): Notify of {PUBLISH_BATCH} "
          "messages by wrk (what the device sends with batch_max 16); Mosquitto: the strict "
          "run above")  # fmt: skip
    for n in FANOUTS:
        g = await fanout_gateway(
            n, max(10, int(GW_MSGS[n] * BATCHED_MSGS_FACTOR * scale)), per_notify=PUBLISH_BATCH
        )
        _fanout_line(n, g, anchors[n])
    print()


def _fanout_line(n: int, g: Fanout, m: Fanout) -> None:
    note = ("" if g.complete else "  gateway incomplete!") + (
        "" if m.complete else "  Mosquitto lost some"
    )
    per_req = g.got / max(1, g.requests)
    print(f"{n:>9} {g.rate:>11,.0f} {m.rate:>12,.0f} {g.rate / m.rate:>6.2f}   "
          f"{g.per_cpu:>18,.0f} {m.per_cpu:>10,.0f} {g.per_cpu / m.per_cpu:>6.2f}   "
          f"{per_req:>12.1f}   ({g.got:,} / {m.got:,}){note}", flush=True)  # fmt: skip


async def section_latency(scale: float) -> None:
    rate = 1000
    secs = 5 * scale
    print(f"== latency publish -> delivery at {rate:,} messages/s offered for {secs:.0f} s "
          "(single-message Notify, wrapped, batching 100)")  # fmt: skip
    for n in (1, 10):
        with Gateway() as gw:
            farm = Farm(n)
            try:
                await subscribe(gw.url, farm.urls)
                conn = aiohttp.TCPConnector(limit=64)
                failed = 0
                async with aiohttp.ClientSession(connector=conn) as s:

                    async def one(seq: int) -> None:
                        nonlocal failed
                        body = envelope(
                            notify_body(("tns:bench", payload(seq, sent=time.monotonic()))),
                            action=A_NOTIFY,
                            message_id=None,  # as the other sections: no seen-set work
                        )
                        async with s.post(gw.url, data=body, headers={"Content-Type": CT}) as r:
                            await r.read()
                            failed += r.status != 202

                    await asyncio.gather(*(one(i) for i in range(20)))  # warm-up
                    await farm.wait(20 * n, 10)
                    farm.ask("lat")
                    total = int(rate * secs)
                    tasks = []
                    t0 = time.monotonic()
                    for i in range(total):
                        delay = t0 + i / rate - time.monotonic()
                        if delay > 0:
                            await asyncio.sleep(delay)
                        tasks.append(asyncio.ensure_future(one(100 + i)))
                    offered = total / (time.monotonic() - t0)
                    await asyncio.gather(*tasks)
                _, _, complete = await farm.wait((20 + total) * n, 60)
                lat = sorted(farm.ask("lat")["lat_ms"])  # type: ignore[arg-type]
            finally:
                farm.close()
        p50 = statistics.median(lat) if lat else float("nan")
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else float("nan")
        note = "" if complete and not failed else f"  (incomplete: {failed} Notify failed)"
        print(f"  {n:>3} consumer(s): offered {offered:,.0f}/s, {len(lat):,} deliveries: "
              f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {lat[-1] if lat else 0:.1f} ms{note}",
              flush=True)  # fmt: skip
    print()


async def section_fanin(scale: float, k: int = 10) -> None:
    msgs = max(10, int(1000 * scale))
    with Gateway() as gw:
        farm = Farm(1)
        try:
            await subscribe(gw.url, farm.urls * k)
            t0 = time.monotonic()
            r = await wrk_count(gw.url, notify(1), msgs)
            got, last, complete = await farm.wait(r.ok * k, 60)
            _, reqs, _ = farm.count()
        finally:
            farm.close()
    note = "" if complete else "  (incomplete)"
    print(f"== fan-in: {k} subscriptions of one consumer, {r.ok:,} Notify -> {got:,} messages "
          f"in {reqs:,} requests ({got / max(1, reqs):.1f} per request), "
          f"{got / (last - t0):,.0f} deliveries/s{note}\n")  # fmt: skip


async def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="shorter runs (smoke test)")
    ap.add_argument("--only", action="append", choices=SECTIONS, help="run only these sections")
    ap.add_argument(
        "--profile",
        type=Path,
        metavar="FILE",
        help="py-spy record (raw) the gateway during the http section into FILE and during"
        " each fan-out into FILE.fanout-N",
    )
    ap.add_argument(
        "--gateway-arg", action="append", default=[], metavar="ARG",
        help="extra gateway option for every run, e.g. --gateway-arg=--sqlite-synchronous=NORMAL",
    )  # fmt: skip
    args = ap.parse_args()
    Gateway.common = tuple(args.gateway_arg)
    for tool in ("wrk", "mosquitto", "mosquitto_pub", "mosquitto_sub"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found: run scripts/setup.sh (Debian wrk, mosquitto, "
                     "mosquitto-clients)")  # fmt: skip
    scale = 0.3 if args.quick else 1.0
    want = args.only or SECTIONS
    started = time.monotonic()
    opts = " ".join(args.gateway_arg) or (
        "defaults: SQLite synchronous=FULL, committed before the 202, landing on"
    )
    print(f"gateway benchmark: python -m gateway on 127.0.0.1 ({opts})\n")
    if "http" in want:
        await section_http(scale, args.profile)
    if "multi" in want:
        await section_multi(scale)
    if "consumers" in want:
        await section_consumers(scale)
    if "fanout" in want:
        await section_fanout(scale, args.profile)
    if "latency" in want:
        await section_latency(scale)
    if "fanin" in want:
        await section_fanin(scale)
    print(f"total {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve-bare"]:
        asyncio.run(serve_bare())
    elif sys.argv[1:2] == ["--consumer-farm"]:
        asyncio.run(consumer_farm(int(sys.argv[2])))
    else:
        asyncio.run(main())
