"""Benchmark of the gateway as a process (plain script, not collected by pytest).

    python tests/bench/gateway_bench.py [--quick]

For each configuration a fresh `python -m gateway` process is started on 127.0.0.1 with its
own data dir (SQLite synchronous=FULL and the landing zone on, the defaults), and 0, 1, 10
or 100 NotificationConsumers (one aiohttp app each, on its own port, in this process)
subscribe to one topic, raw (wsnt:UseRaw) or wrapped (wsnt:Notify). Batching is the
gateway's `--delivery-batch` option: how many pending messages one wrapped Notify may carry
(default 100); `--delivery-batch 1` turns batching off. Raw delivery is always one message
per HTTP request (the payload is the SOAP body), so batching only changes wrapped delivery.
`--max-backlog` is raised so that no message is dropped (the bench measures throughput, not
the drop-oldest policy).

Printed per configuration:
* accepted/s: Notify requests (one NotificationMessage each) answered 202 per second, 16
  publishers in parallel over keep-alive connections, while delivery runs;
* delivered/s: messages received by all consumers together per second, from the first
  publish until the last message arrived (consumers x published / time);
* p50/p99 latency: publish (just before the POST) -> arrival at a consumer, for a paced run
  after the burst has drained, at an offered load well below delivery capacity (1 consumer:
  100 notifications at 50/s; 10: 50 at 20/s; 100: 16 at 2/s), so it is the latency of one
  message, not queueing.

Fan-in (`--fan-in K`, default 10; 0 skips it): K subscriptions of ONE consumer, wrapped,
one burst. The gateway batches what is pending for one consumer endpoint into one Notify
across subscriptions, so it prints messages, HTTP requests and messages per request.

Publishers, consumers and the gateway share this machine's cores: the numbers are a lower
bound of what the gateway does with cores of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
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
VALUE_RE = re.compile(rb"<rd:value>(\d+)</rd:value>")
PUBLISHERS = 16
# consumers -> notifications in the burst
BURST = {0: 3000, 1: 2000, 10: 300, 100: 100}
# consumers -> (notifications, seconds between them) of the paced latency run
PACED = {1: (100, 0.02), 10: (50, 0.05), 100: (16, 0.5)}


def payload(seq: int) -> str:
    return (
        f'<rd:Reading xmlns:rd="urn:wsn-edge:reading" device="bench"><rd:value>{seq}</rd:value>'
        "<rd:unit>Cel</rd:unit><rd:time>2026-11-21T05:00:00Z</rd:time></rd:Reading>"
    )


@dataclass
class Clock:
    """Send times by sequence number (shared by the consumers of one run)."""

    sent: dict[int, float] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    measure: bool = False


@dataclass
class BenchConsumer:
    clock: Clock
    received: int = 0
    last_at: float = 0.0
    url: str = ""
    runner: web.AppRunner | None = None
    event: asyncio.Event = field(default_factory=asyncio.Event)
    want: int = 0
    requests: int = 0

    async def handle(self, request: web.Request) -> web.Response:
        data = await request.read()
        self.requests += 1
        now = time.perf_counter()
        seqs = VALUE_RE.findall(data)
        self.received += len(seqs)
        self.last_at = now
        if self.clock.measure:
            for s in seqs:
                t = self.clock.sent.get(int(s))
                if t is not None:
                    self.clock.latencies.append(now - t)
        if self.received >= self.want:
            self.event.set()
        return web.Response(status=202)

    async def start(self) -> BenchConsumer:
        app = web.Application()
        app.router.add_post("/c", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/c"
        return self

    async def wait(self, n: int, deadline: float) -> bool:
        self.want = n
        while self.received < n:
            self.event.clear()
            left = deadline - time.perf_counter()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(self.event.wait(), left)
            except TimeoutError:
                return self.received >= n
        return True


@dataclass
class Result:
    consumers: int
    mode: str
    batch: int
    published: int
    accepted_s: float
    delivered_s: float | None
    complete: bool
    p50_ms: float | None
    p99_ms: float | None


async def publish(session: aiohttp.ClientSession, url: str, seqs: list[int], clock: Clock) -> None:
    """POST one Notify per seq with PUBLISHERS requests in flight."""
    it = iter(seqs)

    async def worker() -> None:
        for seq in it:
            data = envelope(notify_body(("tns:bench", payload(seq))), action=A_NOTIFY)
            clock.sent[seq] = time.perf_counter()
            async with session.post(url, data=data, headers={"Content-Type": CT}) as r:
                await r.read()
                if r.status != 202:
                    raise RuntimeError(f"Notify answered {r.status}")

    await asyncio.gather(*(worker() for _ in range(PUBLISHERS)))


async def run_one(
    n_consumers: int, raw: bool, batch: int, n_msgs: int, time_limit: float, extra: list[str]
) -> Result:
    with tempfile.TemporaryDirectory(prefix="gwbench-") as tmp:
        gw = start_gateway(
            Path(tmp) / "gw", "--delivery-batch", str(batch), "--max-backlog", "1000000", *extra
        )
        clock = Clock()
        consumers = [await BenchConsumer(clock).start() for _ in range(n_consumers)]
        conn = aiohttp.TCPConnector(limit=PUBLISHERS)
        try:
            async with aiohttp.ClientSession(connector=conn) as s:
                policy = "<wsnt:SubscriptionPolicy><wsnt:UseRaw/></wsnt:SubscriptionPolicy>"
                for c in consumers:
                    body = subscribe_body(
                        c.url, topic_filter("tns:bench"), extra=policy if raw else ""
                    )
                    data = envelope(body, action=A_SUB)
                    async with s.post(gw.url, data=data, headers={"Content-Type": CT}) as r:
                        text = await r.text()
                        if r.status != 200:
                            raise RuntimeError(f"Subscribe answered {r.status}: {text}")
                # warm-up (connections, caches), not counted
                await publish(s, gw.url, list(range(1_000_000, 1_000_005)), clock)
                deadline = time.perf_counter() + time_limit
                for c in consumers:
                    await c.wait(5, deadline)
                base = [c.received for c in consumers]

                # burst: throughput
                t0 = time.perf_counter()
                await publish(s, gw.url, list(range(n_msgs)), clock)
                t_pub = time.perf_counter() - t0
                deadline = time.perf_counter() + time_limit
                complete = True
                for c, b in zip(consumers, base, strict=True):
                    complete &= await c.wait(b + n_msgs, deadline)
                delivered = sum(c.received - b for c, b in zip(consumers, base, strict=True))
                t_del = (max(c.last_at for c in consumers) - t0) if consumers else 0.0

                # paced: latency without burst queueing
                p50 = p99 = None
                if consumers:
                    base = [c.received for c in consumers]
                    clock.measure = True
                    # offered load well below delivery capacity: no queueing
                    n_paced, gap = PACED[n_consumers]
                    for i in range(n_paced):
                        await publish(s, gw.url, [2_000_000 + i], clock)
                        await asyncio.sleep(gap)
                    deadline = time.perf_counter() + 15
                    for c, b in zip(consumers, base, strict=True):
                        await c.wait(b + n_paced, deadline)
                    lat = sorted(clock.latencies)
                    if lat:
                        p50 = statistics.median(lat) * 1000
                        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
        finally:
            for c in consumers:
                if c.runner is not None:
                    await c.runner.cleanup()
            rc = stop_gateway(gw)
            if rc != 0:
                print(f"  (gateway exited with {rc}: {gw.stderr.read_text()[-400:]})")
    return Result(
        n_consumers,
        "raw" if raw else "wrapped",
        batch,
        n_msgs,
        n_msgs / t_pub,
        delivered / t_del if consumers and t_del > 0 else None,
        complete,
        p50,
        p99,
    )


async def run_fan_in(k: int, n_msgs: int, time_limit: float, extra: list[str]) -> None:
    """K wrapped subscriptions of one consumer; one burst of n_msgs Notify."""
    with tempfile.TemporaryDirectory(prefix="gwbench-") as tmp:
        gw = start_gateway(Path(tmp) / "gw", "--max-backlog", "1000000", *extra)
        clock = Clock()
        c = await BenchConsumer(clock).start()
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=16)) as s:
                for _ in range(k):
                    data = envelope(subscribe_body(c.url, topic_filter("tns:bench")), action=A_SUB)
                    async with s.post(gw.url, data=data, headers={"Content-Type": CT}) as r:
                        if r.status != 200:
                            raise RuntimeError(f"Subscribe answered {r.status}")
                t0 = time.perf_counter()
                await publish(s, gw.url, list(range(n_msgs)), clock)
                complete = await c.wait(k * n_msgs, time.perf_counter() + time_limit)
                dt = c.last_at - t0
        finally:
            if c.runner is not None:
                await c.runner.cleanup()
            stop_gateway(gw)
    note = "" if complete else "  (incomplete: time limit)"
    print(
        f"fan-in: {k} subscriptions of one consumer, {n_msgs} Notify -> {c.received:,} messages "
        f"in {c.requests:,} requests ({c.received / max(1, c.requests):.1f} per request), "
        f"delivered/s {c.received / dt:,.0f}{note}"
    )


def fmt(x: float | None, spec: str = ",.0f") -> str:
    return "-" if x is None else format(x, spec)


async def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="fewer messages (smoke run)")
    ap.add_argument(
        "--consumers", type=int, action="append", choices=[0, 1, 10, 100],
        help="run only these consumer counts (repeatable; default all)",
    )  # fmt: skip
    ap.add_argument(
        "--gateway-arg", action="append", default=[], metavar="ARG",
        help="extra gateway option for every run, e.g. --gateway-arg=--sqlite-synchronous=NORMAL",
    )  # fmt: skip
    ap.add_argument(
        "--fan-in", type=int, default=10, metavar="K",
        help="subscriptions of one consumer in the fan-in run (0: skip it)",
    )  # fmt: skip
    args = ap.parse_args()
    scale = 0.2 if args.quick else 1.0
    started = time.perf_counter()
    opts = " ".join(args.gateway_arg) or "defaults: SQLite synchronous=FULL, landing on"
    print(f"gateway benchmark: python -m gateway on 127.0.0.1 ({opts})")
    print(f"{PUBLISHERS} concurrent publishers, 1 NotificationMessage per Notify; "
          "latency = paced run (see --help)")  # fmt: skip
    print()
    hdr = (
        f"{'consumers':>9} {'mode':>8} {'batch':>5} {'msgs':>6} {'accepted/s':>11} "
        f"{'delivered/s':>12} {'p50 ms':>7} {'p99 ms':>7}"
    )
    print(hdr)
    print("-" * len(hdr))
    configs: list[tuple[int, bool, int]] = [(0, False, 100)]
    for n in (1, 10, 100):
        for raw in (False, True):
            for batch in (100, 1):
                if raw and batch == 1:
                    continue  # raw is never batched: same as batch 100
                configs.append((n, raw, batch))
    for n, raw, batch in configs:
        if args.consumers and n not in args.consumers:
            continue
        n_msgs = int(BURST[n] * scale)
        r = await run_one(n, raw, batch, n_msgs, 40, args.gateway_arg)
        note = "" if r.complete else "  (incomplete: time limit)"
        print(
            f"{r.consumers:>9} {r.mode:>8} {r.batch:>5} {r.published:>6} "
            f"{fmt(r.accepted_s):>11} {fmt(r.delivered_s):>12} {fmt(r.p50_ms, '.1f'):>7} "
            f"{fmt(r.p99_ms, '.1f'):>7}{note}",
            flush=True,
        )
    if args.fan_in > 0:
        print()
        await run_fan_in(args.fan_in, int(400 * scale), 40, args.gateway_arg)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    asyncio.run(main())
