"""Device benchmark (a plain script, not collected by pytest): prints numbers, asserts nothing.

    .venv/bin/python tests/bench/device_bench.py [--quick] [--root DIR] [--only N,N] [--tmp-paths]

--root: measure another checkout's device (e.g. `git worktree add /tmp/old a1410b0`), with
this harness, for a before/after in one sitting; sections 1 and 2 only.
--tmp-paths: section 2 runs the .mpy install from its temporary directory (how the bench ran
before issue 26's second pass) instead of as a board runs it (below).

1. packages and code size: device/wsn compiled with .venv's mpy-cross as flash.sh compiles it
   (-O3, `-s` the module's name: tests/device/packages.py mpy_cross_args), per module
   and per package (the default one, device/package.json, and each optional one), and the
   heap each module takes when imported as .mpy on micropython32 (the 32-bit single-precision
   build; the .mpy files from that build's mpy-cross) after the default package; then
   mpy_account.py's item accounting of the default package;
2. the heap aims (issue 26): the default package as .mpy files on micropython32 (256 KiB
   heap; "installed" = the files mip installs, compiled by the same build's mpy-cross, run from
   their directory with "" first on sys.path, as a board runs what mip installed in its root:
   MicroPython interns each module's path, `wsn/core/xml.mpy` there), and the
   device frozen into the 32-bit firmware at a 64 KiB heap; 3 sensors sampled every second, a
   real gateway (`python -m gateway`, loopback) with a subscriber of the heartbeat (the gateway
   subscribes at the device once per registered topic: 3 subscriptions) and one direct raw
   subscriber of the temperature: 4 subscriptions. "steady" = the heap in use after a
   collection between requests (the status line's mem=), "peak" = the most the device sampled
   in use while the readings flow, after the subscriptions (the status lines' peak=); the
   peak of the Subscribe request itself is printed apart. A tree without mem= in its status
   line (a1410b0) is read through GET /status (mem_alloc after a collection; mem_peak after
   ?reset_peak=1 once subscribed);
3. raw pushes/s from the unix port to a local aiohttp consumer (one subscription, UseRaw);
4. Subscribe round-trip time (Subscribe over HTTP, then Unsubscribe), on the unix port;
5. sleepy mode against a real gateway: requests per reading and awake time per cycle, on the
   unix port, steady state and after a gateway outage of 10 wakes;
6. batching in awake mode: requests for 64 readings buffered during a gateway outage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
from packages import mpy_cross_args  # noqa: E402

MPY_CROSS32 = ROOT / ".cache" / "micropython" / "bin" / "mpy-cross"  # the build of micropython32
SENSORS = [
    {"topic": "temperature", "kind": "sim"},
    {"topic": "humidity", "kind": "sim"},
    {"topic": "heartbeat", "kind": "heartbeat"},
]

_IMPORT_PROBE = """
import gc, sys
import asyncio
s = asyncio.StreamReader
for m in BASE:
    __import__(m)
gc.collect()
prev = gc.mem_alloc()
for m in MODS:
    __import__(m)
    gc.collect()
    a = gc.mem_alloc()
    print(m, a - prev)
    prev = a
"""


def packages(root: Path) -> dict[str, list[str]]:
    """{package: [device-relative files]} of a checkout: "default" is device/package.json; a
    tree without optional packages (a1410b0) is one package of every device/wsn file."""
    dev = root / "device"
    out: dict[str, list[str]] = {}
    for pj in sorted(dev.rglob("package.json")):
        urls = json.loads(pj.read_text())["urls"]
        if any(":" in src for _, src in urls):  # github: URLs (a1410b0): every module
            out["default"] = sorted(str(p.relative_to(dev)) for p in (dev / "wsn").rglob("*.py"))
            return out
        name = "default" if pj.parent == dev else str(pj.parent.relative_to(dev))
        out[name] = [d for d, _ in urls if d.endswith(".py") and d != "main.py"]
    return out


def compile_files(root: Path, files: list[str], out: Path, mpy_cross: Path) -> int:
    """mpy-cross device/<file> into out/<file>.mpy as flash.sh does -> total bytes."""
    total = 0
    for rel in files:
        dst = out / (rel[:-3] + ".mpy")
        dst.parent.mkdir(parents=True, exist_ok=True)
        src = root / "device" / rel
        subprocess.run([str(mpy_cross), *mpy_cross_args(rel), "-o", str(dst), str(src)], check=True)
        total += dst.stat().st_size
    return total


def install(root: Path, out: Path, names: list[str]) -> Path:
    """A device tree as mip installs the packages named, with the modules compiled by the
    mpy-cross of micropython32's build (main.py and topics.xml as they are) -> out."""
    pk = packages(root)
    for n in names:
        compile_files(root, pk[n], out, MPY_CROSS32)
    for f in ("main.py", "topics.xml"):
        shutil.copy(root / "device" / f, out / f)
    return out


def mod_name(rel: str) -> str:
    return rel[:-3].replace("/", ".").removesuffix(".__init__")


def import_heap(binary: Path, base: list[str], mods: list[str], path: str) -> dict[str, int]:
    """Heap (bytes, after gc.collect()) each module adds when imported after `base`."""
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.py"
        # the names as literals: module names split from sys.argv crash 1.25 (uncaught NLR)
        probe.write_text(f"BASE = {tuple(base)!r}\nMODS = {tuple(mods)!r}\n" + _IMPORT_PROBE)
        out = subprocess.run(
            [str(binary), "-X", "heapsize=512K", str(probe)],
            capture_output=True,
            text=True,
            env={**os.environ, "MICROPYPATH": path},
            cwd=tmp,
            timeout=60,
        )
    if out.returncode:
        print(f"   (import probe failed on {binary.name}: {out.stderr.strip()[-300:]})")
    res: dict[str, int] = {}
    for line in out.stdout.splitlines():
        k, _, v = line.rpartition(" ")
        if v.lstrip("-").isdigit():
            res[k] = int(v)
    return res


# what stays loaded, in the order the device loads it, then the rest of the default package
# by what each needs (a later module adds what it needs beyond the earlier ones)
_ORDER = (
    "wsn",
    "wsn.core",
    "wsn.core.soap",
    "wsn.core.httpc",
    "wsn.core.producer",
    "wsn.device",
    "wsn.gateway",
)
_COLD = (
    "wsn.core.xml",
    "wsn.core.request",
    "wsn.core.topics",
    "wsn.core.httpmsg",
    "wsn.server",
    "wsn.core.ops",
    "wsn.core.registration",
    "wsn.publisher",
    "wsn.boot",
)


def code_size(root: Path) -> None:
    print(
        "== 1. packages: .mpy bytes (.venv mpy-cross, as flash.sh: -O3 -s MODULE) and import "
        "heap as .mpy on micropython32 (after the default package)"
    )
    pk = packages(root)
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        sizes: dict[str, dict[str, int]] = {}
        for name, files in pk.items():
            sizes[name] = {}
            for rel in files:
                compile_files(root, [rel], t / "venv", MPY_CROSS)
                sizes[name][rel] = (t / "venv" / (rel[:-3] + ".mpy")).stat().st_size
        tree = install(root, t / "mpy32", list(pk))
        default = [mod_name(r) for r in pk["default"]]
        hot = [m for m in _ORDER if m in default]
        heap = {}
        if MP_UNIX32.exists():
            # the modules that stay loaded first, then the rest of the default package (each
            # adds what it needs beyond those before it), then each optional package after
            # the whole default package
            cold = [m for m in _COLD if m in default]
            rest = [m for m in default if m not in hot and m not in cold]
            heap = import_heap(MP_UNIX32, [], hot + cold + rest, f".frozen:{tree}")
            for name, files in pk.items():
                if name != "default":
                    heap.update(
                        import_heap(
                            MP_UNIX32, default, [mod_name(r) for r in files], f".frozen:{tree}"
                        )
                    )
        for name, files in pk.items():
            total = sum(sizes[name].values())
            h = sum(heap.get(mod_name(r), 0) for r in files)
            print(f"   package {name}: {total} B of .mpy ({len(files)} files), import heap {h} B")
            if name == "default" and root == ROOT:
                k = sum(heap.get(m, 0) for m in hot)
                print(f"     of it, what stays loaded ({', '.join(hot)}): {k} B")
            for rel in files:
                h = heap.get(mod_name(rel), 0)
                print(f"     {rel:28s} {sizes[name][rel]:6d} B  heap {h:6d} B")
        every = sum(sum(v.values()) for v in sizes.values())
        print(f"   every package: {every} B of .mpy")
        rows = [(r, sizes["default"][r]) for r in pk["default"]]
        mpy_account.report(t / "venv", rows)


STATUS_MEM = re.compile(r"\bmem=(\d+) peak=(\d+)")
SUB = (
    "<wsnt:Subscribe><wsnt:ConsumerReference><wsa:Address>{}</wsa:Address>"
    "</wsnt:ConsumerReference><wsnt:Filter><wsnt:TopicExpression "
    'Dialect="http://docs.oasis-open.org/wsn/t-1/TopicExpression/Simple">dt:temperature'
    "</wsnt:TopicExpression></wsnt:Filter><wsnt:SubscriptionPolicy><wsnt:UseRaw/>"
    "</wsnt:SubscriptionPolicy></wsnt:Subscribe>"
)


async def aims_run(
    binary: Path,
    install_: str | Path,
    heap: str,
    seconds: float,
    unload: bool | None,
    board_paths: bool = True,
) -> dict[str, int | str]:
    """The scenario of section 2 -> {"steady", "peak", "subscribe_peak", "subs", "how"}."""
    from gwproc import start_gateway_process, subscribe_at_gateway

    started: list[DeviceProcess] = []
    with tempfile.TemporaryDirectory() as tmp:
        gw = start_gateway_process(Path(tmp) / "gw", ["--backoff-initial", "0.1"], ready_timeout=30)
        cons = await Consumer().start()
        try:
            dev = launch(
                binary,
                Path(tmp),
                started,
                heap,
                install_,
                board_paths=board_paths,
                gateway=gw.url,
                sensors=SENSORS,
                sample_period_s=1,
                status_period_s=1,
                gateway_retry_s=0.3,
                verbose=False,
                limits={"unload": unload},
            )
            async with aiohttp.ClientSession() as s:
                cl = Client(dev, s)
                await dev.await_line(r"^status .*gateway=registered", 30)
                await subscribe_at_gateway(s, gw, cons.url, "dev:dev-test/heartbeat")
                mark = len(dev.lines)
                await cl.soap(SUB.format(cons.url))
                lines_mem = "mem=" in dev.output()
                await asyncio.sleep(3)  # the gateway's subscriptions, paused and resumed
                sub_peak = max(
                    [int(m.group(2)) for ln in dev.lines[mark:] if (m := STATUS_MEM.search(ln))]
                    or [0]
                )
                if not lines_mem:
                    async with s.get(dev.base + "/status?reset_peak=1") as r:
                        await r.read()
                mark = len(dev.lines)
                await asyncio.sleep(seconds)
                if lines_mem:
                    got = [
                        (int(m.group(1)), int(m.group(2)))
                        for ln in dev.lines[mark:]
                        if (m := STATUS_MEM.search(ln))
                    ]
                    steady = statistics.median_low([g[0] for g in got])
                    peak = max(g[1] for g in got)
                    subs = int(re.findall(r"subs=(\d+)", dev.output())[-1])
                    how = "status line"
                else:
                    st = await cl.status()
                    steady, peak, subs, how = (
                        st["mem_alloc"],
                        st["mem_peak"],
                        st["subscriptions"],
                        "GET /status",
                    )
            return {
                "steady": steady,
                "peak": peak,
                "subscribe_peak": sub_peak,
                "subs": subs,
                "how": how,
            }
        finally:
            for d in started:
                d.stop()
            gw.stop()
            await cons.stop()


async def aims(root: Path, quick: bool, board_paths: bool = True) -> None:
    print(
        "== 2. heap aims (bytes): default package, a gateway link, 4 subscriptions "
        "(3 by the gateway, 1 direct), 3 sensors every second"
    )
    seconds = 10 if quick else 30
    runs: list[tuple[str, Path, str | Path, str]] = []
    tmp = Path(tempfile.mkdtemp())
    try:
        if MP_UNIX32.exists():
            tree = install(root, tmp / "mpy", ["default"])
            runs.append(("micropython32, .mpy (not frozen), 256 KiB heap", MP_UNIX32, tree, "256K"))
        fw = fwbuild
        if root != ROOT:  # the other checkout's firmware, built from its tree
            import importlib.util

            spec = importlib.util.spec_from_file_location(
                "fwbuild_root", root / "tests" / "device" / "fwbuild.py"
            )
            assert spec and spec.loader
            fw = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(fw)
        try:
            runs.append(
                (
                    "frozen into the 32-bit firmware, 64 KiB heap",
                    fw.device_firmware(),
                    "frozen",
                    "64K",
                )
            )
        except fw.FirmwareUnavailable as e:
            print(f"   (frozen firmware unavailable: {e})")
        for title, binary, inst, heap in runs:
            for unload in (None, False) if inst not in ("frozen",) and root == ROOT else (None,):
                r = await aims_run(binary, inst, heap, seconds, unload, board_paths)
                how = (
                    " (limits.unload false: the request path stays loaded)"
                    if unload is False
                    else ""
                )
                print(
                    f"   {title}{how}: steady {r['steady']}  peak {r['peak']}  "
                    f"(subscriptions {r['subs']}; the Subscribe request's peak "
                    f"{r['subscribe_peak']}; read from the {r['how']})"
                )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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


async def main(quick: bool, root: Path, only: set[int], board_paths: bool) -> None:
    out = subprocess.run(
        [str(MP_UNIX), "-c", "import sys; print(sys.version)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    print(f"device benchmark: micropython {out}; device of {root}")
    if 1 in only:
        code_size(root)
    if 2 in only:
        await aims(root, quick, board_paths)
    if root != ROOT:
        return
    if 3 in only or 4 in only:
        await throughput(quick, True)
        await throughput(quick, False)
    if 5 in only or 6 in only:
        await sleepy(quick)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--root", type=Path, default=ROOT, help="another checkout's device")
    ap.add_argument("--only", default="1,2,3,4,5,6", help="the sections to run")
    ap.add_argument("--tmp-paths", action="store_true", help="section 2 from a temporary path")
    a = ap.parse_args()
    asyncio.run(
        main(a.quick, a.root.resolve(), {int(x) for x in a.only.split(",")}, not a.tmp_paths)
    )
