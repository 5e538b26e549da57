"""Benchmark of demand-based publishing (plain script, not collected by pytest).

    python tests/bench/demand_bench.py [--quick]

A. In-process gateway (gateway.app.start, SQLite under a temp dir) and one aiohttp
   NotificationProducer standing in for N devices (each registration its own address
   path), 2 topics per device:
   * settle: N RegisterPublisher -> 2N Subscribe + 2N Pause at the producers (wall time
     from the first registration until every subscription is paused);
   * demand: one subscriber `dev:*/temperature` -> N ResumeSubscription (time until all
     are resumed), then Unsubscribe -> N PauseSubscription;
   * restart: stop + start on the same data dir and port: time until the DemandManager
     manages all 2N stored subscriptions again, and the number of requests it sent (0
     expected: nothing changed while it was down).
B. Real device (MicroPython unix port) + real gateway process: latency of one reading
   from `POST /admin/sample` at the device until a consumer at the gateway has it
   (device -> gateway registration address -> SQLite commit -> push), and the time to
   drain 50 readings the device buffered while the gateway was stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "device"))
sys.path.insert(0, str(ROOT / "tests" / "gateway"))

import aiohttp  # noqa: E402
from aiohttp import web  # noqa: E402
from devtest import MP_UNIX, Client, DeviceProcess, free_port, launch  # noqa: E402
from gwtest import FULL, Consumer, call, sub_address, subscribe_body  # noqa: E402
from lxml import etree  # noqa: E402

from gateway import app as gateway_app  # noqa: E402
from gateway.config import Config  # noqa: E402

S12 = "http://www.w3.org/2003/05/soap-envelope"
WSA = "http://www.w3.org/2005/08/addressing"
WSNT = "http://docs.oasis-open.org/wsn/b-2"
SIMPLE = "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Simple"
DEV = 'xmlns:dev="urn:wsn-edge:devices"'
A_REG = "http://docs.oasis-open.org/wsn/brw-2/RegisterPublisher/RegisterPublisherRequest"


class Fleet:
    """N producers on one aiohttp server: /d<k>/producer and /d<k>/subs/<id>."""

    def __init__(self) -> None:
        self.paused: dict[str, bool] = {}
        self.ops: Counter[str] = Counter()
        self.n = 0
        self.url = ""
        self.runner: web.AppRunner | None = None

    def _ok(self, body: str) -> web.Response:
        return web.Response(
            body=(
                f'<s:Envelope xmlns:s="{S12}" xmlns:wsa="{WSA}" xmlns:wsnt="{WSNT}">'
                f"<s:Body>{body}</s:Body></s:Envelope>"
            ).encode(),
            content_type="application/soap+xml",
        )

    async def producer(self, request: web.Request) -> web.Response:
        await request.read()
        self.n += 1
        sid = f"s{self.n}"
        self.paused[sid] = False
        self.ops["Subscribe"] += 1
        d = request.match_info["d"]
        return self._ok(
            f"<wsnt:SubscribeResponse><wsnt:SubscriptionReference><wsa:Address>"
            f"{self.url}/{d}/subs/{sid}</wsa:Address></wsnt:SubscriptionReference>"
            "</wsnt:SubscribeResponse>"
        )

    async def manager(self, request: web.Request) -> web.Response:
        env = etree.fromstring(await request.read())
        op = etree.QName(env.find(f"{{{S12}}}Body")[0]).localname  # type: ignore[index]
        sid = request.match_info["sid"]
        self.ops[op] += 1
        self.paused[sid] = op == "PauseSubscription"
        return self._ok(f"<wsnt:{op}Response/>")

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{d}/producer", self.producer)
        app.router.add_post("/{d}/subs/{sid}", self.manager)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"


def register_body(address: str, dev: str) -> str:
    t = "".join(
        f'<br:Topic Dialect="{SIMPLE}" xmlns:dt="urn:wsn-edge:device-topics">dt:{n}</br:Topic>'
        for n in ("temperature", "humidity")
    )
    return (
        f"<br:RegisterPublisher><br:PublisherReference><wsa:Address>{address}</wsa:Address>"
        f"<wsa:Metadata><edge:DeviceId>{dev}</edge:DeviceId></wsa:Metadata>"
        f"</br:PublisherReference>{t}<br:Demand>true</br:Demand></br:RegisterPublisher>"
    )


async def wait(pred, timeout: float = 300.0) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    while not pred():
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError
        await asyncio.sleep(0.005)
    return time.perf_counter() - t0


async def part_a(n: int) -> None:
    fleet = Fleet()
    await fleet.start()
    consumer = await Consumer().start()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Config(data_dir=Path(tmp), host="127.0.0.1", port=0)
        gw = await gateway_app.start(cfg)
        t0 = time.perf_counter()
        for k in range(n):
            r = await call(
                gw.url, register_body(f"{fleet.url}/d{k}/producer", f"d{k}"), action=A_REG
            )
            assert r.status == 200, r.text
        t_reg = time.perf_counter() - t0
        await wait(lambda: len(fleet.paused) == 2 * n and all(fleet.paused.values()))
        t_settle = time.perf_counter() - t0
        print(
            f"A n={n} devices x 2 topics: {n} RegisterPublisher in {t_reg:.2f}s; all "
            f"{2 * n} subscribed+paused after {t_settle:.2f}s "
            f"({2 * n / t_settle:.0f} subscriptions/s)"
        )
        before = fleet.ops["ResumeSubscription"]
        t1 = time.perf_counter()
        r = await call(
            gw.url,
            subscribe_body(
                consumer.url,
                f'<wsnt:TopicExpression Dialect="{FULL}" {DEV}>dev:*/temperature'
                "</wsnt:TopicExpression>",
            ),
        )
        sub = sub_address(r)
        await wait(lambda: fleet.ops["ResumeSubscription"] - before >= 1)
        first = time.perf_counter() - t1
        await wait(lambda: fleet.ops["ResumeSubscription"] - before >= n)
        allr = time.perf_counter() - t1
        print(
            f"A demand: Subscribe dev:*/temperature sent -> first Resume {first * 1000:.1f} ms, "
            f"all {n} Resumes {allr * 1000:.0f} ms"
        )
        t2 = time.perf_counter()
        await call(sub, "<wsnt:Unsubscribe/>")
        await wait(lambda: all(fleet.paused.values()))
        print(
            f"A demand gone: Unsubscribe -> all {n} Pauses {(time.perf_counter() - t2) * 1000:.0f}"
            " ms"
        )
        assert gw.demand is not None
        dm0 = gw.demand
        await wait(lambda: all(e["paused"] for e in dm0.status()))  # answers seen and stored
        await asyncio.sleep(0.2)
        port = gw.port
        await gw.stop()
        sent = sum(fleet.ops.values())
        ops_before = Counter(fleet.ops)
        t3 = time.perf_counter()
        gw2 = await gateway_app.start(Config(data_dir=Path(tmp), host="127.0.0.1", port=port))
        assert gw2.demand is not None
        dm = gw2.demand
        await wait(lambda: sum(1 for e in dm.status() if e["subscription"]) == 2 * n)
        t_restart = time.perf_counter() - t3
        await asyncio.sleep(0.5)
        print(
            f"A restart: gateway start -> {2 * n} remote subscriptions managed again in "
            f"{t_restart * 1000:.0f} ms, requests sent to the devices: "
            f"{sum(fleet.ops.values()) - sent} {dict(fleet.ops - ops_before)}"
        )
        await gw2.stop()
    await consumer.stop()
    assert fleet.runner is not None
    await fleet.runner.cleanup()


async def part_b(samples: int, buffered: int) -> None:
    if not MP_UNIX.exists():
        print("B skipped: .venv/bin/micropython missing")
        return
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        cmd = [
            sys.executable,
            "-m",
            "gateway",
            "--port",
            str(port),
            "--data-dir",
            f"{tmp}/gw",
            "--backoff-initial",
            "0.1",
            "--backoff-max",
            "1",
        ]

        def spawn() -> subprocess.Popen[str]:
            p = subprocess.Popen(
                cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            assert p.stdout is not None
            for line in p.stdout:
                if "listening on" in line:
                    return p
            raise RuntimeError("gateway did not start")

        gwp = spawn()
        url = f"http://127.0.0.1:{port}/wsn/broker"
        started: list[DeviceProcess] = []
        consumer = await Consumer().start()
        try:
            dev = launch(
                MP_UNIX,
                Path(tmp),
                started,
                None,
                "source",
                gateway=url,
                gateway_retry_s=0.2,
                gateway_buffer=64,
            )
            r = await call(
                url,
                subscribe_body(
                    consumer.url,
                    f'<wsnt:TopicExpression Dialect="{FULL}" {DEV}>dev:*/temperature'
                    "</wsnt:TopicExpression>",
                ),
            )
            assert r.status == 200, r.text
            async with aiohttp.ClientSession() as s:
                c = Client(dev, s)

                async def resumed() -> bool:
                    st = await c.status()
                    return any(
                        x["topics"] == ["temperature"]
                        and not x["paused"]
                        and "/wsn/registrations/" in x["consumer"]
                        for x in st["subscription_list"]
                    )

                t0 = time.perf_counter()
                while not await resumed():
                    await asyncio.sleep(0.02)
                print(
                    f"B device start -> gateway subscription resumed at the device: "
                    f"{time.perf_counter() - t0:.2f}s after the gateway Subscribe"
                )
                lat = []
                for i in range(samples):
                    t = time.perf_counter()
                    await c.sample("temperature", 1)
                    await consumer.wait_for(i + 1, timeout=20)
                    lat.append((time.perf_counter() - t) * 1000)
                lat.sort()
                print(
                    f"B reading latency device sample -> consumer ({samples} readings): "
                    f"median {statistics.median(lat):.1f} ms, p90 "
                    f"{lat[int(0.9 * len(lat)) - 1]:.1f} ms, max {lat[-1]:.1f} ms"
                )
                gwp.send_signal(signal.SIGTERM)
                gwp.wait(15)
                await c.sample("temperature", buffered)
                have = len(consumer.messages())
                t = time.perf_counter()
                gwp = spawn()
                t_up = time.perf_counter() - t
                await consumer.wait_for(have + buffered, timeout=120)
                print(
                    f"B gateway restart: up in {t_up:.2f}s; {buffered} readings buffered at "
                    f"the device delivered to the consumer {time.perf_counter() - t:.2f}s "
                    "after the restart began"
                )
        finally:
            await consumer.stop()
            for d in started:
                d.stop()
            with contextlib.suppress(Exception):
                gwp.kill()
                gwp.wait(5)


async def main() -> None:
    quick = "--quick" in sys.argv
    for n in (10,) if quick else (10, 100, 300):
        await part_a(n)
    await part_b(10 if quick else 50, 20 if quick else 50)


if __name__ == "__main__":
    asyncio.run(main())
