"""A soak of the gateway left alone at a site (issue 22, point 6), measured.

    python tests/bench/soak_bench.py [--minutes 10] [--devices 3] [--json]

For --minutes, against one gateway process (fixed port, its data directory on a 96 MiB
tmpfs in a mount namespace of this bench's own: `unshare -rm`, no root needed):

- devices on the MicroPython unix port push readings (one a second each) through their
  publisher registrations; every 60 s one of them is killed and started again (it
  registers again);
- a legitimate publisher sends a one-reading Notify every 50 ms, each reading with a value
  of its own, and keeps what was acknowledged (202) and how long each took;
- a legitimate push consumer is subscribed to those readings all along (it answers 200 and
  keeps what it got, by edge:MessageIDs); a slow consumer (2 s per answer) and one that
  dies after a third of the run are subscribed too; `wsn sub` processes come and go every
  20 s, every other one killed with -9;
- every 30 s a hostile client of tests/bench/hostile_bench.py (in turn: //*//* filter,
  namespace axis, 5,000 prefixes, pull-point bytes, XPath topics, malformed HTTP);
- every 120 s the disk is filled for 10 s, then freed;
- every 90 s the gateway is restarted, by SIGTERM and by kill -9 in turn.

(A run shorter than 10 minutes scales these intervals down in proportion.)

At the end (the gateway stopped with SIGTERM, its landing files read): acknowledged
against landed (lost, duplicated) and against delivered to the legitimate consumer (lost,
delivered more than once), the legitimate Notify's latency (p50, p99, max; answers while
the gateway was down are counted apart), peak RSS, descriptors and data-directory size per
minute, every WARNING and ERROR line of the gateway by kind, and tracebacks. `--json`
prints the same as one JSON object (tests/gateway/test_soak.py runs a short one).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for _d in (ROOT, ROOT / "tests" / "gateway", ROOT / "tests" / "device", ROOT / "tests" / "bench"):
    if str(_d) not in sys.path:
        sys.path.insert(0, str(_d))

MOUNTED = "WSN_SOAK_MOUNTED"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--devices", type=int, default=3)
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.add_argument("--disk-mb", type=int, default=96)
    a = p.parse_args()
    if os.environ.get(MOUNTED):
        result = asyncio.run(Soak(Path(os.environ[MOUNTED]), a).run())
        print(json.dumps(result) if a.json else report(result), flush=True)
        return
    unshare = shutil.which("unshare")
    if unshare is None:
        sys.exit("soak_bench: util-linux unshare is needed (a mount namespace for the tmpfs)")
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="soak-"))
    mnt = top / "data"
    mnt.mkdir()
    script = f'mount -t tmpfs -o size={a.disk_mb}m tmpfs "{mnt}" && exec "$@"'
    env = {**os.environ, MOUNTED: str(mnt)}
    rc = subprocess.call(
        [unshare, "-rm", "sh", "-c", script, "sh", sys.executable, *sys.argv], env=env
    )
    sys.exit(rc)


class Soak:
    def __init__(self, mnt: Path, a: argparse.Namespace) -> None:
        self.mnt = mnt
        self.work = mnt.parent
        self.seconds = a.minutes * 60
        #: every interval below is scaled down for a run shorter than 10 minutes
        self.scale = min(1.0, a.minutes / 10)
        self.n_devices = a.devices
        self.sent_at: dict[int, float] = {}  # value -> when it was sent (monotonic)
        self.consumer_since = float("inf")
        self.stop = asyncio.Event()
        self.finished = asyncio.Event()  # set once the gateway has stopped for good
        self.acked: dict[int, float] = {}  # value -> latency (s)
        self.refused: Counter[str] = Counter()
        self.delivered: Counter[str] = Counter()  # message id -> times
        self.delivered_values: Counter[int] = Counter()
        self.samples: list[tuple[float, int, int, int]] = []  # (t, rss MB, fds, data bytes)
        self.events: list[str] = []
        self.restarted_at: list[float] = []  # when each restart was over (monotonic)
        self.log_lines: list[str] = []

    # ---- the gateway ----
    def start_gateway(self) -> None:
        from gwproc import GatewayProcess

        self.gw = GatewayProcess(
            self.mnt,
            self.port,
            ["--landing-max-age", "5", "--delivery-timeout", "3", "--backoff-max", "5",
             "--consumer-dead-after", "60", "--status-public"],
        )  # fmt: skip
        self.gw.wait_ready()

    def restart(self, sig: int) -> None:
        self.log_lines.extend(self.gw.lines)
        self.gw.lines.clear()
        self.gw.stop(sig)
        self.gw.restart()

    async def restarts(self) -> None:
        sigs = [signal.SIGTERM, signal.SIGKILL]
        k = 0
        while not await self._sleep(90 * self.scale):
            sig = sigs[k % 2]
            k += 1
            t0 = time.monotonic()
            try:
                await asyncio.get_running_loop().run_in_executor(None, self.restart, sig)
            except Exception as e:  # what the gateway said is in the log lines
                self.events.append(f"{self.t():.0f}s restart FAILED: {str(e)[-600:]}")
                continue
            self.restarted_at.append(time.monotonic())
            self.events.append(
                f"{self.t():.0f}s restart by {signal.Signals(sig).name}: "
                f"{time.monotonic() - t0:.1f} s down"
            )

    # ---- helpers ----
    def t(self) -> float:
        return time.monotonic() - self.t0

    async def _sleep(self, s: float) -> bool:
        """Sleep `s` or until the end; True at the end."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), s)
        return self.stop.is_set()

    # ---- legitimate traffic ----
    async def publisher(self) -> None:
        import aiohttp
        from gwtest import envelope, notify_body, post
        from hostile_bench import A_NOTIFY

        v = 0
        async with aiohttp.ClientSession() as s:
            while not self.stop.is_set():
                v += 1
                body = notify_body(("tns:soak", f"<r:R xmlns:r='urn:r'><r:v>{v}</r:v></r:R>"))
                t0 = self.sent_at[v] = time.monotonic()
                try:
                    r = await asyncio.wait_for(
                        post(self.gw.url, envelope(body, action=A_NOTIFY), session=s), 30
                    )
                    if r.status == 202:
                        self.acked[v] = time.monotonic() - t0
                    else:
                        self.refused[f"HTTP {r.status}"] += 1
                except (aiohttp.ClientError, OSError, TimeoutError) as e:
                    self.refused[type(e).__name__] += 1
                await asyncio.sleep(0.05)

    async def consumer(self) -> None:
        from aiohttp import web
        from gwtest import call, subscribe_body, topic_filter
        from lxml import etree

        async def handle(request: web.Request) -> web.Response:
            env = etree.fromstring(await request.read())
            ids = (env.findtext(".//{urn:wsn-edge}MessageIDs") or "").split()
            vals = [int(x.text or 0) for x in env.iter("{urn:r}v")]
            for i, v in zip(ids, vals, strict=False):
                self.delivered[i] += 1
                self.delivered_values[v] += 1
            return web.Response(status=200)

        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_post("/{tail:.*}", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        r = await call(
            self.gw.url,
            subscribe_body(
                f"http://127.0.0.1:{port}/legit",
                topic_filter("tns:soak"),
                "<wsnt:InitialTerminationTime>P1D</wsnt:InitialTerminationTime>",
            ),
        )
        assert r.status == 200, r.text
        self.consumer_since = time.monotonic()
        await self.finished.wait()  # after the gateway's last stop: it got everything
        await runner.cleanup()

    async def awkward_consumers(self) -> None:
        """One slow (2 s per answer), one that dies after a third of the run."""
        from aiohttp import web
        from gwtest import call, subscribe_body, topic_filter

        async def slow(request: web.Request) -> web.Response:
            await request.read()
            await asyncio.sleep(2)
            return web.Response(status=200)

        async def ok(request: web.Request) -> web.Response:
            await request.read()
            return web.Response(status=200)

        runners = []
        for name, handler in (("slow", slow), ("dying", ok)):
            app = web.Application()
            app.router.add_post("/{tail:.*}", handler)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            await call(
                self.gw.url,
                subscribe_body(f"http://127.0.0.1:{port}/{name}", topic_filter("tns:soak")),
            )
            runners.append(runner)
        if not await self._sleep(self.seconds / 3):  # (a third of the run)
            await runners[1].cleanup()
            self.events.append(f"{self.t():.0f}s the dying consumer stops listening")
        await self.stop.wait()
        await runners[0].cleanup()

    async def wsn_subs(self) -> None:
        k = 0
        while not await self._sleep(20 * self.scale):
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "wsncli", "sub", self.gw.url, "tns:soak",
                "--ns", "tns=urn:test", "--wait", "2", cwd=str(ROOT),
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            if await self._sleep(10 * self.scale):
                proc.kill()
                await proc.wait()
                return
            proc.send_signal(signal.SIGKILL if k % 2 else signal.SIGTERM)
            k += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 10)
            if proc.returncode is None:
                proc.kill()
                await proc.wait()

    async def devices(self) -> None:
        from devtest import MP_UNIX, launch

        started: list[Any] = []
        devs = []
        loop = asyncio.get_running_loop()

        def one(i: int) -> Any:
            d = self.work / f"dev{i}-{time.monotonic_ns()}"
            d.mkdir()
            return launch(
                MP_UNIX, d, started, device_id=f"soak-{i}", gateway=self.gw.url,
                sample_period_s=1, registration_ttl_s=60, renew_period_s=20,
                gateway_retry_s=1, gateway_retry_max_s=5,
            )  # fmt: skip

        for i in range(self.n_devices):
            devs.append(await loop.run_in_executor(None, one, i))
        k = 0
        while not await self._sleep(60 * self.scale):
            i = k % self.n_devices
            k += 1
            devs[i].stop()
            devs[i] = await loop.run_in_executor(None, one, i)
            self.events.append(f"{self.t():.0f}s device soak-{i} restarted")
        for dev in devs:
            dev.stop()

    # ---- adversity ----
    async def hostile(self) -> None:
        import hostile_bench as hb

        attacks = ["filter", "nsaxis", "nsdecl", "ppbytes", "topics", "malformed"]
        k = 0
        while not await self._sleep(30 * self.scale):
            name = attacks[k % len(attacks)]
            k += 1
            view = _GatewayView(self.gw.url)
            try:
                out = await asyncio.wait_for(hb.ATTACKS[name](view), 120)  # type: ignore[arg-type]
                self.events.append(
                    f"{self.t():.0f}s hostile {name}: healthz max {out['healthz_max_s']} s, "
                    f"legit Notify max {out['legit_notify_max_s']} s"
                )
            except Exception as e:  # a restart in the middle of one: it ends there
                self.events.append(f"{self.t():.0f}s hostile {name} cut short: {type(e).__name__}")

    async def disk(self) -> None:
        filler = self.mnt / "filler"
        while not await self._sleep(120 * self.scale):
            await asyncio.get_running_loop().run_in_executor(None, _fill, filler)
            self.events.append(f"{self.t():.0f}s disk full")
            await self._sleep(10 * self.scale)
            filler.unlink(missing_ok=True)
            self.events.append(f"{self.t():.0f}s disk freed")
        filler.unlink(missing_ok=True)

    async def sampler(self) -> None:
        while not await self._sleep(1):
            with contextlib.suppress(OSError, ValueError):
                pid = self.gw.proc.pid
                rss = 0
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            rss = int(line.split()[1]) // 1024
                fds = len(os.listdir(f"/proc/{pid}/fd"))
                size = sum(
                    p.stat().st_size
                    for p in self.mnt.rglob("*")
                    if p.is_file() and p.name != "filler"
                )
                self.samples.append((self.t(), rss, fds, size))

    # ---- the run ----
    async def run(self) -> dict[str, Any]:
        from devtest import free_port

        self.port = free_port()
        self.start_gateway()
        self.t0 = time.monotonic()
        tasks = [
            asyncio.ensure_future(c())
            for c in (self.consumer, self.awkward_consumers, self.publisher, self.wsn_subs,
                      self.devices, self.hostile, self.disk, self.sampler, self.restarts)
        ]  # fmt: skip
        await self._sleep(self.seconds)
        self.stop.set()
        consumer, others = tasks[0], tasks[1:]
        for t in others:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(t, 60)
        await asyncio.sleep(8)  # the last deliveries and the landing file's age
        await asyncio.get_running_loop().run_in_executor(None, self.gw.stop, signal.SIGTERM)
        self.log_lines.extend(self.gw.lines)
        self.finished.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(consumer, 10)
        return self.result()

    def result(self) -> dict[str, Any]:
        landed: Counter[int] = Counter()
        ids: Counter[str] = Counter()
        torn = 0
        for p in sorted((self.mnt / "landing").glob("*landing-*.jsonl*")):
            for raw in p.read_text().splitlines():
                try:
                    rec = json.loads(raw)
                except ValueError:
                    torn += 1
                    continue
                ids[rec["id"]] += 1
                if rec.get("topic_path") == "soak":
                    landed[int(rec["fields"]["v"])] += 1
        acked = set(self.acked)
        lat = sorted(self.acked.values())
        # what the legitimate consumer should have: acknowledged, sent once it subscribed
        since = {v for v in acked if self.sent_at.get(v, 0.0) >= self.consumer_since}
        # the acknowledged readings sent before the first restart, between two, after the
        # last: traffic throughout, whatever the machine's speed
        bounds = [float("-inf"), *self.restarted_at, float("inf")]
        per_span = [
            sum(1 for v in acked if lo <= self.sent_at.get(v, 0.0) < hi)
            for lo, hi in itertools.pairwise(bounds)
        ]
        warnings: Counter[str] = Counter()
        tracebacks = 0
        snippets: list[str] = []
        for n, line in enumerate(self.log_lines):
            if "Traceback" in line:
                tracebacks += 1
                if len(snippets) < 5:
                    snippets.append("\n".join(self.log_lines[max(0, n - 1) : n + 25]))
            m = re.search(r" (WARNING|ERROR) ([\w.]+): (.*)", line)
            if m:
                kind = re.sub(r"\d+", "N", m.group(3))[:110]
                warnings[f"{m.group(1)} {m.group(2)}: {kind}"] += 1
        per_minute = []
        for minute in range(int(self.seconds // 60) + 1):
            s = [x for x in self.samples if minute * 60 <= x[0] < (minute + 1) * 60]
            if s:
                per_minute.append({
                    "minute": minute,
                    "rss_mb_max": max(x[1] for x in s),
                    "fds_max": max(x[2] for x in s),
                    "data_mb_max": round(max(x[3] for x in s) / 2**20, 1),
                })  # fmt: skip
        return {
            "minutes": self.seconds / 60,
            "acknowledged": len(acked),
            "acknowledged_between_restarts": per_span,
            "landed": len(set(landed) & acked),
            "lost_in_landing": sorted(acked - set(landed))[:50],
            "lost_in_landing_count": len(acked - set(landed)),
            "landed_unacknowledged": len(set(landed) - acked),
            "duplicated_lines": sum(n - 1 for n in ids.values() if n > 1),
            "torn_lines": torn,
            "delivered": len(set(self.delivered_values) & since),
            "not_delivered": len(since - set(self.delivered_values)),
            "delivered_twice_by_id": sum(1 for n in self.delivered.values() if n > 1),
            "refused_or_down": dict(self.refused),
            "latency_ms": {
                "p50": round(1000 * statistics.median(lat), 1) if lat else None,
                "p99": round(1000 * lat[int(0.99 * (len(lat) - 1))], 1) if lat else None,
                "max": round(1000 * lat[-1], 1) if lat else None,
            },
            "per_minute": per_minute,
            "peak_rss_mb": max((x[1] for x in self.samples), default=0),
            "peak_fds": max((x[2] for x in self.samples), default=0),
            "warnings": dict(warnings.most_common()),
            "tracebacks": tracebacks,
            "traceback_samples": snippets,
            "events": self.events,
            "acknowledged_since_subscribed": len(since),
        }


class _GatewayView:
    """What hostile_bench's attacks need of a gateway (its URLs, samples)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.base = url.rsplit("/wsn/", 1)[0]
        self.peak_rss = self.peak_fds = 0
        self.err = Path(os.devnull)

    def sample(self) -> None:
        pass

    def data_bytes(self) -> int:
        return 0


def _fill(path: Path) -> None:
    with open(path, "ab", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 65536)


def report(r: dict[str, Any]) -> str:
    out = [
        f"soak of {r['minutes']:g} min",
        f"acknowledged {r['acknowledged']}, landed {r['landed']} "
        f"(lost {r['lost_in_landing_count']}, duplicated lines {r['duplicated_lines']}, "
        f"torn {r['torn_lines']}, landed but not acknowledged {r['landed_unacknowledged']})",
        f"of the {r['acknowledged_since_subscribed']} acknowledged once it subscribed, "
        f"delivered to the legitimate consumer {r['delivered']} "
        f"(not delivered {r['not_delivered']}, delivered twice by id {r['delivered_twice_by_id']})",
        f"refused or down: {r['refused_or_down']}",
        f"legitimate Notify latency: {r['latency_ms']}",
        f"peak RSS {r['peak_rss_mb']} MB, peak descriptors {r['peak_fds']}",
        "per minute: "
        + "; ".join(
            f"{m['minute']}: {m['rss_mb_max']} MB {m['fds_max']} fds {m['data_mb_max']} MB data"
            for m in r["per_minute"]
        ),
        f"tracebacks: {r['tracebacks']}",
        *r["traceback_samples"],
        "warnings:",
        *(f"  {n:6d} {k}" for k, n in r["warnings"].items()),
        "events:",
        *(f"  {e}" for e in r["events"]),
    ]
    return "\n".join(out)


if __name__ == "__main__":
    main()
