"""A consumer that answers every Notify 200 with a huge body (plain script, not collected
by pytest): what the gateway's memory and the consumer's connection do
(--max-consumer-answer-bytes, gateway/delivery_http.py).

    python tests/bench/answer_cap_bench.py [--flood-mib N] [--notifies K] [--root TREE]

Starts `python -m gateway` from TREE (default: this tree; give another worktree to measure
other code in the same sitting), a raw asyncio consumer on 127.0.0.1 that answers each
request `200 OK` with a chunked body of N MiB (sent as fast as the socket takes it, ended
properly if the gateway reads it all), one subscription, and K Notify one after the other.
Prints, per answer, the body bytes the consumer got written before the gateway closed the
connection or read it all, then the gateway's peak RSS (VmHWM) before and after, and the
requests the consumer received (K when each Notify is delivered once).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "gateway"))
sys.path.insert(0, str(ROOT))

from gwtest import call, notify_body, read_request, reading, topic_filter  # noqa: E402

CHUNK = 64 * 1024


def vm_hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return -1


async def run(root: Path, flood: int, notifies: int) -> None:
    sent: list[tuple[int, str]] = []
    requests = 0
    handlers: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    async def consumer(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        nonlocal requests
        task = asyncio.current_task()
        assert task is not None
        handlers[task] = w
        n, how = 0, "read to its end"
        try:
            while True:
                await read_request(r)
                requests += 1
                w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                chunk = b"%x\r\n" % CHUNK + b"x" * CHUNK + b"\r\n"
                n, how = 0, "read to its end"
                while n < flood:
                    w.write(chunk)
                    await w.drain()
                    n += CHUNK
                w.write(b"0\r\n\r\n")
                await w.drain()
                sent.append((n, how))
                n = 0
        except (asyncio.IncompleteReadError, ConnectionError):
            if n:
                sent.append((n, "connection closed by the gateway"))
        finally:
            w.close()

    server = await asyncio.start_server(consumer, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/consumer"
    with tempfile.TemporaryDirectory(prefix="capbench-") as tmp:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", "0",
             "--data-dir", str(Path(tmp) / "gw"), "--no-landing", "--log-level", "WARNING"],
            cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proc.stdout is not None
        gw = proc.stdout.readline().strip().rsplit(" ", 1)[1]
        try:
            body = (
                f"<wsnt:Subscribe><wsnt:ConsumerReference><wsa:Address>{url}</wsa:Address>"
                f"</wsnt:ConsumerReference><wsnt:Filter>{topic_filter('tns:t')}</wsnt:Filter>"
                "</wsnt:Subscribe>"
            )
            assert (await call(gw, body)).status == 200
            before = vm_hwm_kib(proc.pid)
            t0 = time.monotonic()
            for v in range(notifies):
                assert (await call(gw, notify_body(("tns:t", reading(v))))).status == 202
                deadline = time.monotonic() + 30
                while len(sent) <= v and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)  # a resend would come within the backoff
            after = vm_hwm_kib(proc.pid)
            took = time.monotonic() - t0
        finally:
            proc.terminate()
            proc.wait()
    server.close()
    for w in handlers.values():  # kept-alive connections wait for a next request
        w.transport.abort()
    await asyncio.gather(*handlers, return_exceptions=True)
    print(f"gateway from {root}")
    for i, (n, how) in enumerate(sent):
        print(f"  answer {i}: {n / 2**20:8.2f} MiB of body written, {how}")
    print(f"  gateway peak RSS: {before / 1024:.1f} MiB before, {after / 1024:.1f} MiB after")
    print(f"  requests received: {requests} for {notifies} Notify ({took:.1f} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--flood-mib", type=int, default=256, help="body per answer (MiB)")
    ap.add_argument("--notifies", type=int, default=3)
    ap.add_argument("--root", type=Path, default=ROOT, help="the tree to run the gateway from")
    a = ap.parse_args()
    asyncio.run(run(a.root.resolve(), a.flood_mib * 2**20, a.notifies))


if __name__ == "__main__":
    main()
