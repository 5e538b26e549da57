"""A small board's heap: the device frozen into a 32-bit single-precision MicroPython (as on an
ESP32 / Pico W, where the bytecode lives in flash), run with `-X heapsize=64K`, holding a full
table of 8 subscriptions and a 32-message pull point, over real HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import aiohttp
from devtest import (
    RD,
    WSA,
    WSNT,
    Client,
    Consumer,
    DeviceProcess,
    body_child,
    envelope,
    parse,
)

Consumers = Callable[..., Awaitable[Consumer]]


async def test_8_subscriptions_and_32_message_pullpoint_in_64k(
    start_frozen_device: Callable[..., DeviceProcess], consumers: Consumers
) -> None:
    dev = start_frozen_device(
        "64K",
        limits={"max_subscriptions": 8, "pullpoint_size": 32, "max_pullpoints": 1, "queue_len": 4},
    )
    assert "heapsize" not in dev.output()
    cons = [await consumers(path=f"/c{i}") for i in range(7)]
    async with aiohttp.ClientSession() as s:
        cl = Client(dev, s)
        st, data = await cl.soap("<wsnt:CreatePullPoint/>")
        assert st == 200, data
        pp = body_child(parse(data)).findtext(f"{{{WSNT}}}PullPoint/{{{WSA}}}Address")
        assert pp
        await cl.subscribe(pp, topic=None)
        for i, c in enumerate(cons):
            await cl.subscribe(c.url, version=11 if i % 2 else 12, raw=bool(i % 3 == 0), topic=None)
        status = await cl.status()
        assert status["subscriptions"] == 8
        # 40 readings (bursts of 3, within the per-subscription queue of 4): every consumer
        # gets each one; the pull point keeps the newest 32 and counts 8 dropped
        for _ in range(13):
            assert await cl.sample("", count=1) == 3  # temperature, humidity, heartbeat
            for c in cons:
                for _ in range(3):
                    await c.next(10)
        assert await cl.sample("temperature") == 1
        for c in cons:
            await c.next(10)
        status = await cl.status()
        assert status["pullpoint_list"][0]["queued"] == 32
        assert status["pullpointDropped"] == 40 - 32
        got: list[str] = []
        while True:
            st, data = await cl.soap(
                "<wsnt:GetMessages><wsnt:MaximumNumber>8</wsnt:MaximumNumber></wsnt:GetMessages>",
                pp,
            )
            assert st == 200, data
            msgs = body_child(parse(data)).findall(f"{{{WSNT}}}NotificationMessage")
            if not msgs:
                break
            got += [m.findtext(f".//{{{RD}}}value") or "" for m in msgs]
        assert len(got) == 32
        status = await cl.status()
        assert status["pushFailed"] == 0 and status["queueDropped"] == 0
        print(
            f"64K heap: in use {status['mem_alloc']} B after GC, peak seen "
            f"{status['mem_peak']} B, free {status['mem_free']} B"
        )
        assert status["mem_alloc"] + status["mem_free"] <= 64 * 1024
    await asyncio.sleep(0)
    assert "MemoryError" not in dev.output() and "out of memory" not in dev.output()


async def test_hostile_input_in_64k_does_not_kill_the_device(
    start_frozen_device: Callable[..., DeviceProcess], consumers: Consumers
) -> None:
    dev = start_frozen_device("64K")
    c = await consumers()
    many = b"<r>" + b"<e a='1'/>" * 127 + b"</r>"  # just under the element limit, ~1.4 KB
    near_limit = envelope("<wsnt:CreatePullPoint/>" + "<!--" + "x" * 7600 + "-->")
    deep = b"<a>" * 15 + b"</a>" * 15
    async with aiohttp.ClientSession() as s:
        cl = Client(dev, s)
        await cl.subscribe(c.url, raw=True)
        for _ in range(3):
            results = await asyncio.gather(
                *[cl.soap(b) for b in (many, near_limit, deep) * 2], return_exceptions=True
            )
            for res in results:
                assert not isinstance(res, BaseException), res
                # a third CreatePullPoint that gets through (enough heap for it) meets the full
                # table (max_pullpoints 2): the spec's answer, a Receiver fault
                assert res[0] in (200, 400, 503) or (
                    res[0] == 500 and b"UnableToCreatePullPointFault" in res[1]
                ), res
        # still serving, still pushing
        await cl.sample("temperature")
        await c.next(10)
        st = await cl.status()
        assert st["subscriptions"] == 1
    assert "Traceback" not in dev.output()


async def test_distinct_characters_do_not_pile_up_in_64k(
    start_frozen_device: Callable[..., DeviceProcess], consumers: Consumers
) -> None:
    """MicroPython interns every one-character string that indexing or iterating a str makes,
    and every chr() (qstrs are never freed): a parser that walks names character by character
    keeps each distinct character of every name it ever saw. An attacker's requests with
    thousands of distinct characters in names and character references must leave the heap
    as it was, and the device serving."""
    dev = start_frozen_device("64K")
    c = await consumers()
    async with aiohttp.ClientSession() as s:
        cl = Client(dev, s)
        before = (await cl.status())["mem_alloc"]
        cp = 0x4E00  # CJK ideographs: 3 bytes each in UTF-8, all name characters
        for _ in range(4):
            name = "".join(chr(cp + i) for i in range(2500))  # one element, 7.5 KB
            refs = "".join(f"&#x{cp + 2500 + i:x};" for i in range(700))  # 700 references
            cp += 3200
            for body in (f"<{name}/>", f"<r>{refs}</r>"):
                st, _ = await cl.soap(body.encode())
                assert st in (400, 503), st  # not SOAP, or no room: never a crash
        await cl.subscribe(c.url, raw=True)
        await cl.sample("temperature")
        await c.next(10)
        after = (await cl.status())["mem_alloc"]
    # one subscription and its first push: well under 2 KB; 11,000 interned characters would
    # be over 100 KB
    print(f"64K heap in use before the attack {before} B, after it and a subscription {after} B")
    assert after - before < 2000, (before, after)
    assert "Traceback" not in dev.output()
