"""Benchmark of gateway.topics (plain script, not collected by pytest).

    python tests/bench/topics_bench.py [--quick]

Builds a Topic Set of device topics (the broker's ``dev:<device>/<kind>``
layout), then for 10k and 100k subscriptions mixed evenly across the four
dialects (Simple, Concrete, Full, XPath) prints:

* compile cost per subscription, per dialect (parse once + index insert);
* matches/s of one notification against all subscriptions (SubscriptionIndex);
* memory per subscription (tracemalloc: Python allocations of the compiled
  expressions and the index; libxml2's own memory for compiled XPath is not
  traced, so the RSS growth is printed as well);
* the cost of the first match after the Topic Set grows (XPath groups are
  re-evaluated once per Topic Set version, §9).
"""

from __future__ import annotations

import gc
import random
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gateway.topics import (
    CONCRETE,
    FULL,
    SIMPLE,
    XPATH,
    ConcreteTopic,
    SubscriptionIndex,
    TopicExpression,
    TopicSet,
    compile_expression,
)
from gateway.topics.compile import _compile

DEV = "urn:wsn-edge:devices"
NSMAP = {
    "dev": DEV,
    "wstop": "http://docs.oasis-open.org/wsn/t-1",
    "wsnt": "http://docs.oasis-open.org/wsn/b-2",
    "wsa": "http://www.w3.org/2005/08/addressing",
}
KINDS = ["temperature", "humidity", "light", "heartbeat", "pressure"]
DEVICES = 1000


def rss() -> int:
    """Current resident set size in bytes (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource_page


resource_page = 4096
try:
    import os

    resource_page = os.sysconf("SC_PAGE_SIZE")
except (ValueError, OSError, AttributeError):
    pass


def make_topicset() -> tuple[TopicSet, list[ConcreteTopic]]:
    ts = TopicSet()
    topics = []
    for d in range(DEVICES):
        root = ConcreteTopic(DEV, (f"esp32-{d:04d}",))  # device status topic
        ts.grow(root)
        topics.append(root)
        for k in KINDS:
            t = ConcreteTopic(DEV, (f"esp32-{d:04d}", k))
            ts.grow(t)
            topics.append(t)
    return ts, topics


def subscription(i: int, rnd: random.Random, broad: bool) -> tuple[str, str]:
    """(dialect, text) of subscription i: dialects in turn, texts varied.

    ``broad``: Full/XPath subscriptions are mostly wildcards across devices
    (each notification then selects thousands of subscriptions); otherwise
    every subscription is about one device (a notification selects a few).
    """
    d = f"esp32-{rnd.randrange(DEVICES):04d}"
    k = rnd.choice(KINDS)
    which = i % 4
    if which == 0:
        return SIMPLE, f"dev:{d}"
    if which == 1:
        return CONCRETE, f"dev:{d}/{k}"
    if which == 2:
        if broad:
            return FULL, rnd.choice(
                [
                    f"dev:*/{k}",
                    f"dev:{d}//.",
                    f"dev:{d}/*",
                    f"//{k}",
                    f"dev:{d}/{k}|dev:esp32-{rnd.randrange(DEVICES):04d}/{k}",
                    "dev://*",
                ]
            )
        return FULL, rnd.choice(
            [
                f"dev:{d}//.",
                f"dev:{d}/*",
                f"dev:{d}/*|dev:esp32-{rnd.randrange(DEVICES):04d}/{k}",
                f"dev:{d}//{k}",
            ]
        )
    if broad:
        return XPATH, rnd.choice(
            [
                f"dev:{d}/{k}",  # a location path: matched like Full
                f"dev:*/{k}",
                # real XPath: predicates over the TopicSet document; 10 x 5 distinct texts
                f"dev:*[substring(local-name(), 10) = '{rnd.randrange(10)}']/{k}",
                f"//*[@wstop:topic='true'][local-name()='{k}'][not(*)]",
            ]
        )
    return XPATH, rnd.choice(
        [
            f"dev:{d}/{k}",
            f"dev:{d}/*[local-name() != '{k}']",  # real XPath, one per (device, kind)
        ]
    )


def build(
    n: int, ts: TopicSet, seed: int, broad: bool
) -> tuple[SubscriptionIndex[int], dict[str, float], dict[str, int]]:
    rnd = random.Random(seed)
    specs = [subscription(i, rnd, broad) for i in range(n)]
    idx: SubscriptionIndex[int] = SubscriptionIndex(ts)
    cost: dict[str, float] = dict.fromkeys((SIMPLE, CONCRETE, FULL, XPATH), 0.0)
    count: dict[str, int] = dict.fromkeys((SIMPLE, CONCRETE, FULL, XPATH), 0)
    for i, (dialect, text) in enumerate(specs):
        t0 = time.perf_counter()
        expr: TopicExpression = compile_expression(dialect, text, NSMAP)
        idx.add(i, expr)
        cost[dialect] += time.perf_counter() - t0
        count[dialect] += 1
    return idx, cost, count


def bench(n: int, seconds: float, broad: bool) -> None:
    ts, topics = make_topicset()
    _compile.cache_clear()
    gc.collect()
    rss0 = rss()
    tracemalloc.start()
    snap0 = tracemalloc.take_snapshot()
    idx, cost, count = build(n, ts, seed=n, broad=broad)
    snap1 = tracemalloc.take_snapshot()
    tracemalloc.stop()
    rss1 = rss()
    mem = sum(s.size_diff for s in snap1.compare_to(snap0, "filename"))
    # the timings above ran under tracemalloc; time compile again without it
    _compile.cache_clear()
    idx, cost, count = build(n, ts, seed=n, broad=broad)
    short = {SIMPLE: "Simple", CONCRETE: "Concrete", FULL: "Full", XPATH: "XPath"}
    total = sum(cost.values())
    print(
        f"\n== {n:,} subscriptions ({'broad wildcards' if broad else 'device-specific'}) "
        f"over {len(ts):,} topics "
        f"({', '.join(f'{count[d]:,} {short[d]}' for d in cost)})"
    )
    print(
        f"compile+index per subscription: {total / n * 1e6:8.1f} us (all)  "
        + "  ".join(f"{short[d]} {cost[d] / max(count[d], 1) * 1e6:.1f} us" for d in cost)
    )
    print(
        f"memory per subscription: {mem / n:8.0f} B (tracemalloc, Python heap)   "
        f"RSS growth {(rss1 - rss0) / n:.0f} B/sub (includes libxml2, allocator noise)"
    )
    # first match after a change: XPath groups evaluated once for this version
    rnd = random.Random(1)
    t0 = time.perf_counter()
    idx.match(topics[0])
    print(
        f"first match at a new Topic Set version: {(time.perf_counter() - t0) * 1e3:8.1f} ms "
        f"({len(idx._xgroups)} distinct XPath-only expressions re-evaluated)"
    )
    # steady state: one notification at a time against all subscriptions
    sample = [rnd.choice(topics) for _ in range(1000)]
    matched = 0
    calls = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while time.perf_counter() < deadline:
        for t in sample[:100]:
            matched += len(idx.match(t))
        calls += 100
        sample.append(sample.pop(0))
    dt = time.perf_counter() - t0
    print(
        f"matches/s (one notification vs all {n:,}), warm: {calls / dt:10,.0f}   "
        f"mean {matched / calls:.0f} subscriptions selected per notification, "
        f"{dt / calls * 1e6:.1f} us per match"
    )
    # cold: the per-topic result cache emptied before every notification (as
    # after a Subscribe/Unsubscribe): the index walk itself
    matched = 0
    calls = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while time.perf_counter() < deadline:
        for t in sample[:100]:
            idx._mcache.clear()
            matched += len(idx.match(t))
        calls += 100
        sample.append(sample.pop(0))
    dt = time.perf_counter() - t0
    print(
        f"matches/s (one notification vs all {n:,}), cold: {calls / dt:10,.0f}   "
        f"{dt / calls * 1e6:.1f} us per match"
    )
    # growth: a new device topic; wildcard subscriptions see it (§9)
    new = ConcreteTopic(DEV, ("esp32-9999", "temperature"))
    ts.grow(new)
    t0 = time.perf_counter()
    hits = idx.match(new)
    print(
        f"after grow(): first match {(time.perf_counter() - t0) * 1e3:.1f} ms, "
        f"{len(hits):,} subscriptions select the new topic"
    )
    t0 = time.perf_counter()
    for _ in range(1000):
        idx.match(new)
    print(f"  then {1000 / (time.perf_counter() - t0):,.0f} matches/s")


def main() -> None:
    quick = "--quick" in sys.argv
    print(f"gateway.topics benchmark, Python {sys.version.split()[0]}")
    for broad in (False, True):
        for n in (10_000, 100_000):
            bench(n, 1.0 if quick else 3.0, broad)


if __name__ == "__main__":
    main()
