"""Half-sent requests against the gateway process (issue 13, defect 4), measured.

    python tests/bench/slowloris_bench.py [--attackers 1100] [--seconds 15] [--nofile 1024]

The gateway runs with the open-file limit at --nofile (default 1,024, as in the issue).
An attacker opens --attackers connections that send part of a request head and then stall,
spread over loopback source addresses 127.0.0.2... (100 per address), and re-opens each
one the gateway closes (a sustained attack). Meanwhile a normal client on 127.0.0.1 sends
one Notify every 100 ms on a fresh connection. Printed: the normal client's answers by
status and their latency (p50, max), the attacker's connections opened and how they were
ended (408, 503, other), the gateway's stderr (bytes, lines, tracebacks) and RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "gateway"))

import aiohttp  # noqa: E402
from gwtest import envelope, notify_body, reading  # noqa: E402

HEAD = b"POST /wsn/broker HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/xml\r\n"


def start(data_dir: Path, nofile: int) -> tuple[subprocess.Popen[str], int, Path]:
    err = data_dir.parent / "gw.stderr"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    with open(err, "w") as errf:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", "0",
             "--data-dir", str(data_dir)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=errf, text=True, preexec_fn=limit,
        )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    port = int(line.strip().rsplit(":", 1)[1].split("/", 1)[0])
    return proc, port, err


async def attacker(port: int, source: str, stop: asyncio.Event, ends: dict[str, int]) -> None:
    while not stop.is_set():
        try:
            r, w = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
            ends["opened"] = ends.get("opened", 0) + 1
            w.write(HEAD)
            await w.drain()
            stop_wait = asyncio.ensure_future(stop.wait())
            read = asyncio.ensure_future(r.read())
            await asyncio.wait([stop_wait, read], return_when=asyncio.FIRST_COMPLETED)
            stop_wait.cancel()
            if read.done():
                data = read.result()
                key = data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/") else "closed"
                ends[key] = ends.get(key, 0) + 1
            else:
                read.cancel()
            w.close()
        except OSError as e:
            ends[type(e).__name__] = ends.get(type(e).__name__, 0) + 1
            await asyncio.sleep(0.1)


async def normal_client(port: int, seconds: float) -> list[tuple[int, float]]:
    """Runs in its own process (--normal), so the attacker's event loop does not delay it."""
    data = envelope(notify_body(("tns:t", reading(1))))
    out: list[tuple[int, float]] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        try:
            async with aiohttp.ClientSession() as s, s.post(
                f"http://127.0.0.1:{port}/wsn/broker", data=data,
                headers={"Content-Type": "application/soap+xml"},
                timeout=aiohttp.ClientTimeout(total=15),
            ) as r:  # fmt: skip
                await r.read()
                out.append((r.status, time.monotonic() - t0))
        except (TimeoutError, aiohttp.ClientError) as e:
            out.append((0, time.monotonic() - t0))
            print(f"normal client: {type(e).__name__}: {e}", file=sys.stderr)
        await asyncio.sleep(0.1)
    return out


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--attackers", type=int, default=1100)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--nofile", type=int, default=1024)
    ap.add_argument("--normal", type=int, help=argparse.SUPPRESS)  # the client process
    args = ap.parse_args()
    if args.normal:
        for st, t in await normal_client(args.normal, args.seconds):
            print(f"{st}:{t:.4f}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        proc, port, err = start(Path(tmp) / "gw", args.nofile)
        rss0 = rss_mb(proc.pid)
        stop = asyncio.Event()
        ends: dict[str, int] = {}
        tasks = [
            asyncio.ensure_future(attacker(port, f"127.0.0.{2 + i // 100}", stop, ends))
            for i in range(args.attackers)
        ]
        await asyncio.sleep(1.0)  # the attack is on
        normal = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--normal", str(port), "--seconds", str(args.seconds),
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, _ = await normal.communicate()
        rss1 = rss_mb(proc.pid)
        stop.set()
        answers = [(int(a), float(b)) for a, b in (w.split(":") for w in out.decode().split())]
        await asyncio.gather(*tasks, return_exceptions=True)
        proc.terminate()
        proc.wait(15)
        text = err.read_text()
    by_status: dict[int, int] = {}
    for st, _ in answers:
        by_status[st] = by_status.get(st, 0) + 1
    ok = [t for st, t in answers if st == 202]
    print(f"attack: {args.attackers} half-requests from {1 + (args.attackers - 1) // 100} "
          f"addresses, gateway open-file limit {args.nofile}, {args.seconds:g} s")  # fmt: skip
    print(f"attacker connections: {dict(sorted(ends.items()))}")
    print(f"normal Notify: {len(answers)} sent, by status {dict(sorted(by_status.items()))}")
    if ok:
        print(f"normal Notify 202 latency: p50 {statistics.median(ok) * 1000:.1f} ms, "
              f"max {max(ok) * 1000:.1f} ms")  # fmt: skip
    print(f"gateway stderr: {len(text)} bytes, {len(text.splitlines())} lines, "
          f"{text.count('Traceback')} tracebacks")  # fmt: skip
    print(f"gateway RSS: {rss0:.1f} MB before, {rss1:.1f} MB under attack")


if __name__ == "__main__":
    asyncio.run(main())
