"""CPU per delivery request (plain script, not collected by pytest): the gateway's Notify
request (gateway/delivery_http.py NotifySender: aiohttp's connector, a request head made
once per endpoint, aiohttp's response parser) against the same request through an aiohttp
ClientSession with the options the gateway used before (no cookies, no decompression, no
User-Agent/Accept/Accept-Encoding, no redirects, one total timeout), alternating in one
process.

    python tests/bench/delivery_request_bench.py [--consumers N] [--requests M] [--rounds R]

N consumers (gateway_bench.py's consumer farm: one aiohttp app and port each, in a process
of their own) each get M requests one after the other from their own task, as the
gateway's one worker per consumer endpoint sends them; each request carries a wsnt:Notify
of 9 NotificationMessages of 200-byte payloads (what the strict fan-out at 100 consumers
sends per request). Prints requests/s and µs of CPU of this process per request (the
consumers excluded).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1].parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from delivery_bench import XML  # noqa: E402
from gateway_bench import Farm  # noqa: E402

from gateway.consumer_policy import ConsumerPolicy  # noqa: E402
from gateway.delivery_http import NotifySender  # noqa: E402
from gateway.wire import ns, soap  # noqa: E402
from gateway.wire.addressing import Epr  # noqa: E402

BATCH = [XML] * 9


async def via_sender(urls: list[str], m: int) -> None:
    sender = NotifySender(ConsumerPolicy([]), "urn:uuid:bench", 10.0)
    await sender.start()

    async def one(url: str) -> None:
        epr = Epr(url)
        for _ in range(m):
            ok, why, _peer = await sender.send(("wrapped", url), epr, ns.SOAP12, False, BATCH, ())
            assert ok, why

    await asyncio.gather(*(one(u) for u in urls))
    await sender.close()


async def via_session(urls: list[str], m: int) -> None:
    sender = NotifySender(ConsumerPolicy([]), "urn:uuid:bench", 10.0)  # the same envelope
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, limit_per_host=8),
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
    )
    timeout = aiohttp.ClientTimeout(total=10.0)
    headers = {"Content-Type": soap.content_type(ns.SOAP12, ns.A_NOTIFY)}

    async def one(url: str) -> None:
        epr = Epr(url)
        body = "<wsnt:Notify>" + "".join(BATCH) + "</wsnt:Notify>"
        for _ in range(m):
            data = sender.envelope(("wrapped", url), epr, ns.SOAP12, (), body)
            async with session.post(
                url, data=data, headers=headers, timeout=timeout, allow_redirects=False
            ) as resp:
                await resp.read()
                assert 200 <= resp.status < 300

    await asyncio.gather(*(one(u) for u in urls))
    await session.close()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--consumers", type=int, default=100)
    ap.add_argument("--requests", type=int, default=100, help="per consumer")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    farm = Farm(args.consumers)
    urls = farm.urls
    ways: list[tuple[str, Callable[[list[str], int], Awaitable[None]]]] = [
        ("NotifySender", via_sender),
        ("ClientSession", via_session),
    ]
    n = args.consumers * args.requests
    print(f"{args.consumers} consumers x {args.requests} requests of {len(BATCH)} messages")
    print(f"{'path':>13} {'requests/s':>11} {'µs CPU/request':>15}")
    try:
        for _ in range(args.rounds):
            for name, way in ways:
                c0, t0 = time.process_time(), time.monotonic()
                await way(urls, args.requests)
                cpu, secs = time.process_time() - c0, time.monotonic() - t0
                print(f"{name:>13} {n / secs:>11,.0f} {1e6 * cpu / n:>15.1f}", flush=True)
    finally:
        farm.close()


if __name__ == "__main__":
    asyncio.run(main())
