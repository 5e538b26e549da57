"""Issue 22's hostile clients against a gateway process, measured.

    python tests/bench/hostile_bench.py [--tree PATH] [--only NAME ...] [--nofile 1024]

Each attack runs against a fresh gateway started from the source tree --tree (default this
one; give an old checkout, `git worktree add /tmp/old a1410b0`, to compare), with the
open-file limit at --nofile. While the hostile request (or client) runs, a prober asks
/healthz and publishes a legitimate one-message Notify (another topic, no filter) in turn.
Printed per attack: the hostile request's answer and time, the slowest /healthz and
legitimate Notify meanwhile, the gateway's peak RSS and open descriptors, the data
directory's growth and the gateway's stderr (bytes, tracebacks).

Attacks (names for --only):
  filter      MessageContent //*//* and one Notify of 240 nested elements, 10,000 leaves
  nsaxis      MessageContent boolean(//*/namespace::*), a payload of 240 prefixes x 20,000
              elements
  nsdecl      an Envelope declaring 5,000 prefixes with 500 empty messages
  ppbytes     a pull-point subscriber, 2,000 messages under 240 prefixes in one Notify
  topics      20 XPath topic subscriptions, then 10 Notify on a new topic each, after
              5,000 topics
  blackhole   1,200 subscriptions to loopback consumers that accept and never answer,
              one Notify, 40 s
  malformed   4 clients sending malformed HTTP (CL+TE, obs-fold, 2,000 headers) for 10 s
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "gateway"))

import aiohttp  # noqa: E402
from gwtest import (  # noqa: E402
    WSA,
    XPATH,
    call,
    envelope,
    notify_body,
    post,
    reading,
    subscribe_body,
    topic_filter,
)

A_NOTIFY = "http://docs.oasis-open.org/wsn/bw-2/NotificationConsumer/Notify"
A_SUB = "http://docs.oasis-open.org/wsn/bw-2/NotificationProducer/SubscribeRequest"
A_CPP = "http://docs.oasis-open.org/wsn/bw-2/CreatePullPoint/CreatePullPointRequest"
WSTOP_DECL = 'xmlns:tns="urn:test" xmlns:wstop="http://docs.oasis-open.org/wsn/t-1"'


class Gateway:
    def __init__(self, tree: Path, nofile: int) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="hostile-"))
        self.data = self.dir / "data"
        self.err = self.dir / "gw.stderr"

        def limit() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        with open(self.err, "w") as errf:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", "0",
                 "--data-dir", str(self.data)],
                cwd=tree, stdout=subprocess.PIPE, stderr=errf, text=True, preexec_fn=limit,
                env={**os.environ, "PYTHONPATH": str(tree)},
            )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        self.url = line.strip().rsplit(" ", 1)[1]
        self.base = self.url.rsplit("/wsn/", 1)[0]
        self.peak_rss = self.peak_fds = 0

    def sample(self) -> None:
        pid = self.proc.pid
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    self.peak_rss = max(self.peak_rss, int(line.split()[1]) // 1024)
        self.peak_fds = max(self.peak_fds, len(os.listdir(f"/proc/{pid}/fd")))

    def data_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.data.rglob("*") if p.is_file())

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


async def under(gw: Gateway, attack: Awaitable[Any]) -> dict[str, Any]:
    """Run `attack`; meanwhile /healthz and a legitimate Notify in turn, and samples."""
    task = asyncio.ensure_future(attack)
    health: list[float] = []
    legit: list[float] = []
    t0 = time.monotonic()
    try:
        async with aiohttp.ClientSession() as s:
            while not task.done():
                gw.sample()
                t = time.monotonic()
                async with s.get(gw.base + "/healthz") as r:
                    await r.read()
                health.append(time.monotonic() - t)
                t = time.monotonic()
                body = notify_body(("tns:legit", reading(21.5)))
                await post(gw.url, envelope(body, action=A_NOTIFY), session=s)
                legit.append(time.monotonic() - t)
                await asyncio.sleep(0.05)
    finally:
        if not task.done():  # the prober failed (the gateway went away): the attack too
            task.cancel()
        with contextlib.suppress(BaseException):
            await task
    gw.sample()
    return {
        "answer": task.result(),
        "took_s": round(time.monotonic() - t0, 2),
        "healthz_max_s": round(max(health, default=0), 3),
        "legit_notify_max_s": round(max(legit, default=0), 3),
    }


async def _status(url: str, data: bytes) -> str:
    r = await post(url, data)
    return f"{r.status}" + (f" {r.text[:120]!r}" if r.status >= 400 else "")


def _nested(depth: int, leaves: int) -> str:
    return "<p:a xmlns:p='urn:x'>" + "<n>" * depth + "<l/>" * leaves + "</n>" * depth + "</p:a>"


def _prefixed(body: str, n: int) -> bytes:
    decls = " ".join(f'xmlns:p{i}="urn:{i}"' for i in range(n))
    env: bytes = envelope(body, action=A_NOTIFY)
    return env.replace(b"<s:Envelope ", f"<s:Envelope {decls} ".encode(), 1)


async def _subscribe(url: str, consumer: str, filt: str) -> None:
    r = await call(url, subscribe_body(consumer, filt), action=A_SUB)
    assert r.status == 200, r.text[:300]


async def attack_filter(gw: Gateway) -> dict[str, Any]:
    mc = f'<wsnt:MessageContent Dialect="{XPATH}">//*//*</wsnt:MessageContent>'
    await _subscribe(gw.url, "http://127.0.0.1:9/x", topic_filter("tns:t") + mc)
    data = envelope(notify_body(("tns:t", _nested(240, 10_000))), action=A_NOTIFY)
    return await under(gw, _status(gw.url, data))


async def attack_nsaxis(gw: Gateway) -> dict[str, Any]:
    mc = f'<wsnt:MessageContent Dialect="{XPATH}">boolean(//*/namespace::*)</wsnt:MessageContent>'
    await _subscribe(gw.url, "http://127.0.0.1:9/x", topic_filter("tns:t") + mc)
    decls = " ".join(f'xmlns:p{i}="urn:{i}"' for i in range(240))
    data = envelope(
        notify_body(("tns:t", f"<a {decls}>" + "<b/>" * 20_000 + "</a>")), action=A_NOTIFY
    )
    return await under(gw, _status(gw.url, data))


async def attack_nsdecl(gw: Gateway) -> dict[str, Any]:
    return await under(
        gw, _status(gw.url, _prefixed(notify_body(*[("tns:t", "<x/>")] * 500), 5000))
    )


async def attack_ppbytes(gw: Gateway) -> dict[str, Any]:
    r = await call(gw.url, "<wsnt:CreatePullPoint/>", action=A_CPP)
    pp = r.body.findtext(f".//{{{WSA}}}Address")
    assert pp
    await _subscribe(gw.url, pp, topic_filter("tns:t"))
    await asyncio.sleep(0.5)
    before = gw.data_bytes()
    data = _prefixed(notify_body(*[("tns:t", "<x/>")] * 2000), 240)
    out = await under(gw, _status(gw.url, data))
    await asyncio.sleep(1.0)
    out["request_bytes"] = len(data)
    out["data_dir_grew_bytes"] = gw.data_bytes() - before
    return out


async def attack_topics(gw: Gateway) -> dict[str, Any]:
    for i in range(20):
        expr = f"//*[@wstop:topic='true' and contains(local-name(), 'q{i}')]"
        await _subscribe(gw.url, "http://127.0.0.1:9/x", topic_filter(expr, XPATH, WSTOP_DECL))
    for k in range(5):
        body = notify_body(*[(f"tns:w{k}x{j}", "<x/>") for j in range(1000)])
        await post(gw.url, envelope(body, action=A_NOTIFY))

    async def new_topics() -> str:
        times = []
        for k in range(10):
            t = time.monotonic()
            await post(gw.url, envelope(notify_body((f"tns:new{k}q3", "<x/>")), action=A_NOTIFY))
            times.append(time.monotonic() - t)
        return f"new-topic Notify max {max(times):.3f} s, mean {sum(times) / len(times):.3f} s"

    return await under(gw, new_topics())


async def attack_blackhole(gw: Gateway) -> dict[str, Any]:
    hole = socket.socket()
    hole.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    hole.bind(("0.0.0.0", 0))
    hole.listen(4096)  # the kernel completes connections; nobody reads
    port = hole.getsockname()[1]
    refused = 0  # past --max-client-subscriptions (1000) where the quotas exist
    async with aiohttp.ClientSession() as s:
        for k in range(1200):
            addr = f"http://127.0.{k // 250}.{k % 250 + 1}:{port}/x"
            r = await post(
                gw.url,
                envelope(subscribe_body(addr, topic_filter("tns:t")), action=A_SUB),
                session=s,
            )
            if r.fault_name == "SubscribeCreationFailedFault" and "--max-client" in r.text:
                refused += 1
            else:
                assert r.status == 200, r.text[:300]
    size0 = gw.err.stat().st_size

    async def run() -> str:
        r = await post(gw.url, envelope(notify_body(("tns:t", "<x/>")), action=A_NOTIFY))
        for _ in range(80):
            gw.sample()
            await asyncio.sleep(0.5)
        grew = gw.err.stat().st_size - size0
        return f"{r.status}; {refused} Subscribe refused by quota; stderr grew {grew} bytes"

    out = await under(gw, run())
    hole.close()
    return out


MALFORMED = [
    b"POST /wsn/broker HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked"
    b"\r\n\r\n0\r\n\r\n",
    b"POST /wsn/broker HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\nContent-Length: 0\r\n\r\n",
    b"POST /wsn/broker HTTP/1.1\r\nHost: x\r\n"
    + b"".join(b"X-H%d: v\r\n" % i for i in range(2000))
    + b"Content-Length: 0\r\n\r\n",
]


async def attack_malformed(gw: Gateway) -> dict[str, Any]:
    host, port = gw.url.split("/")[2].rsplit(":", 1)

    async def client(data: bytes, until: float) -> int:
        n = 0
        while time.monotonic() < until:
            r, w = await asyncio.open_connection(host, int(port))
            w.write(data)
            await w.drain()
            await r.read(1024)
            w.close()
            n += 1
        return n

    async def run() -> str:
        until = time.monotonic() + 10
        counts = await asyncio.gather(*(client(MALFORMED[i % 3], until) for i in range(4)))
        return f"{sum(counts)} requests"

    return await under(gw, run())


ATTACKS: dict[str, Callable[[Gateway], Awaitable[dict[str, Any]]]] = {
    "filter": attack_filter,
    "nsaxis": attack_nsaxis,
    "nsdecl": attack_nsdecl,
    "ppbytes": attack_ppbytes,
    "topics": attack_topics,
    "blackhole": attack_blackhole,
    "malformed": attack_malformed,
}


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tree", type=Path, default=ROOT)
    p.add_argument("--only", nargs="*", choices=list(ATTACKS), default=list(ATTACKS))
    p.add_argument("--nofile", type=int, default=1024)
    a = p.parse_args()
    rev = subprocess.run(
        ["git", "-C", str(a.tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    print(f"tree {a.tree} (git {rev}), load {os.getloadavg()[0]:.2f}", flush=True)
    for name in a.only:
        gw = Gateway(a.tree, a.nofile)
        try:
            out = await ATTACKS[name](gw)
        finally:
            gw.stop()
        log = gw.err.read_text(errors="replace")
        out.update(
            peak_rss_mb=gw.peak_rss,
            peak_fds=gw.peak_fds,
            stderr_bytes=len(log.encode()),
            tracebacks=log.count("Traceback"),
        )
        print(name, out, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
