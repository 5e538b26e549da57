"""The delivery side alone (plain script, not collected by pytest): gateway.delivery's
DeliveryManager in this process with a real SQLite Storage, N wrapped subscriptions of one
consumer endpoint each (the consumers in a process of their own: gateway_bench.py's farm),
and a paced publisher that queues one message per subscription RATE times a second, as
the broker does after it committed a Notify. No HTTP server, parsing or insert on the
accepting side: what delivery costs per message, apart from what accepting costs.

    python tests/bench/delivery_bench.py [--fanout N ...] [--rate R] [--seconds S]

Prints deliveries/s, deliveries per CPU-second of this process (all threads, the consumers
excluded) and messages per request. Compare with `gateway_bench.py --only fanout`, where
the same fan-outs include accepting the Notify.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1].parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gateway_bench import Farm  # noqa: E402

from gateway.delivery import DeliveryManager, Target  # noqa: E402
from gateway.storage import Storage  # noqa: E402
from gateway.wire import ns  # noqa: E402
from gateway.wire.addressing import Epr  # noqa: E402

#: a wrapped NotificationMessage with a 200-byte payload, as the broker stores it
XML = (
    f'<wsnt:NotificationMessage xmlns:wsnt="{ns.WSNT}"><wsnt:Message>'
    '<rd:Reading xmlns:rd="urn:wsn-edge:reading"><rd:note>'
    + "x" * 160
    + "</rd:note></rd:Reading></wsnt:Message></wsnt:NotificationMessage>"
)


async def run(n: int, rate: float, seconds: float, linger_max: float | None) -> str:
    farm = Farm(n)
    urls = farm.urls
    with tempfile.TemporaryDirectory(prefix="delbench-") as tmp:
        storage = Storage(Path(tmp) / "gateway.sqlite")
        storage.open()
        kw = {} if linger_max is None else {"linger_max": linger_max}
        dm = DeliveryManager(storage, max_backlog=10**8, **kw)  # type: ignore[arg-type]
        await dm.start()
        subs = [f"s{i}" for i in range(n)]
        for sid, url in zip(subs, urls, strict=True):
            dm.add(Target(sid, Epr(url), raw=False))
        seq = 0
        total = int(rate * seconds)
        c0, t0 = time.process_time(), time.monotonic()
        for k in range(total):
            delay = t0 + k / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            for sid in subs:
                seq += 1
                dm.enqueue(sid, seq, XML)
        while any(dm.backlog(sid) for sid in subs):
            await asyncio.sleep(0.002)
        secs, cpu = time.monotonic() - t0, time.process_time() - c0
        requests = sum(dm.stats(sid)["requests"] for sid in subs)
        await dm.stop()
        storage.close()
    farm.close()
    return (
        f"{n:>9} {rate:>9,.0f} {seq / secs:>13,.0f} {seq / cpu:>11,.0f} "
        f"{seq / max(1, requests):>13.1f}"
    )


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fanout", type=int, action="append", help="subscriptions (10, 100)")
    ap.add_argument("--rate", type=float, default=1000.0, help="messages/s per subscription")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--linger-max", type=float, help="DeliveryManager linger_max (seconds)")
    args = ap.parse_args()
    print(f"{'consumers':>9} {'offered/s':>9} {'deliveries/s':>13} {'per CPU-s':>11} "
          f"{'msgs/request':>13}")  # fmt: skip
    for n in args.fanout or [10, 100]:
        print(await run(n, args.rate, args.seconds, args.linger_max), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
