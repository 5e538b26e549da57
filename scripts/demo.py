"""The main job: a gateway, simulated devices on the MicroPython unix port, and
the Spark aggregation of what they published, on embedded defaults.

Run through `bash scripts/demo.sh` (which sets everything up first). Everything
listens on 127.0.0.1 only; every process started here is stopped on exit.

Flow (docs/design.md has the contracts):
1. start `python -m gateway` on a free port with a fresh data dir;
2. start N devices (`micropython device/main.py CONFIG`), each registering with
   the gateway as a demand-based publisher;
3. create a pull point at the gateway and subscribe it to every device topic
   with one Full expression (`dev:*/*`): that demand makes the gateway resume
   its subscriptions at the devices, and readings start to flow;
4. after the run time, stop devices and gateway (the landing files are closed
   on shutdown), drain the pull point, then run `wsn-ingest batch` and
   `wsn-ingest plot` over the landing zone and print where the results are.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = ROOT / ".venv" / "bin"
WSNT = "http://docs.oasis-open.org/wsn/b-2"
WSA = "http://www.w3.org/2005/08/addressing"
S12 = "http://www.w3.org/2003/05/soap-envelope"
FULL = "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Full"


def log(msg: str) -> None:
    print(f"[demo] {msg}", flush=True)


def wait_for_line(proc: subprocess.Popen[str], pattern: str, timeout: float) -> str:
    """Read the process's stdout until a line matches `pattern`; return the match."""
    deadline = time.monotonic() + timeout
    rx = re.compile(pattern)
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"process exited with {proc.returncode} before printing {pattern!r}"
                )
            continue
        m = rx.search(line)
        if m:
            return m.group(1)
    raise RuntimeError(f"timed out waiting for {pattern!r}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def soap(url: str, action: str, body: str) -> str:
    env = (
        f'<s:Envelope xmlns:s="{S12}" xmlns:wsa="{WSA}" xmlns:wsnt="{WSNT}">'
        f"<s:Header><wsa:Action>{action}</wsa:Action><wsa:To>{url}</wsa:To></s:Header>"
        f"<s:Body>{body}</s:Body></s:Envelope>"
    )
    req = urllib.request.Request(
        url, data=env.encode(), headers={"Content-Type": f'application/soap+xml; action="{action}"'}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return str(resp.read().decode())


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--devices", type=int, default=3, help="simulated devices (default 3)")
    ap.add_argument(
        "--seconds", type=float, default=40.0, help="how long devices publish (default 40)"
    )
    ap.add_argument("--work", default=str(ROOT / "var" / "demo"), help="work directory (recreated)")
    ap.add_argument(
        "--window", default="10 seconds", help="aggregation window (default '10 seconds')"
    )
    args = ap.parse_args()

    work = Path(args.work)
    if work.exists():
        subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir(parents=True)
    data_dir = work / "gateway"
    procs: list[subprocess.Popen[str]] = []
    env = dict(os.environ, PYTHONUNBUFFERED="1", PATH=f"{VENV_BIN}:{os.environ.get('PATH', '')}")
    try:
        log("starting the gateway")
        gw = subprocess.Popen(
            [
                str(VENV_BIN / "python"),
                "-m",
                "gateway",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--data-dir",
                str(data_dir),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        procs.append(gw)
        broker = wait_for_line(gw, r"(http://\S+/wsn/broker)", 30)
        log(f"gateway at {broker}")

        for i in range(args.devices):
            device_id = f"sim-{i + 1:02d}"
            cfg = json.loads((ROOT / "device" / "config.example.json").read_text())
            cfg.update(
                device_id=device_id,
                http_host="127.0.0.1",
                http_port=free_port(),
                gateway=broker,
                sample_period_s=1,
                # simulated sensors, each device a little different so the plot tells them apart
                sensors=[
                    {
                        "topic": "temperature",
                        "kind": "sim",
                        "unit": "Cel",
                        "decimals": 2,
                        "base": 19.0 + 2.5 * i,
                        "amplitude": 1.0 + i,
                    },
                    {
                        "topic": "humidity",
                        "kind": "sim",
                        "unit": "%RH",
                        "decimals": 1,
                        "base": 40.0 + 8 * i,
                        "amplitude": 3.0,
                    },
                    {"topic": "heartbeat", "kind": "heartbeat", "period_s": 5},
                ],
                wifi=None,
            )
            cfg_path = work / f"{device_id}.json"
            cfg_path.write_text(json.dumps(cfg, indent=2))
            dev = subprocess.Popen(
                [str(ROOT / "flash.sh"), "unix", "--config", str(cfg_path)],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
            )
            procs.append(dev)
            addr = wait_for_line(dev, r"(http://\S+/wsn/producer)", 30)
            log(f"device {device_id} at {addr}")

        resp = soap(
            broker,
            f"{WSNT.replace('b-2', 'bw-2')}/CreatePullPoint/CreatePullPointRequest",
            "<wsnt:CreatePullPoint/>",
        )
        pull = re.search(r"<(?:\w+:)?Address>([^<]+)</", resp)
        assert pull, resp
        pull_addr = pull.group(1)
        log(f"pull point at {pull_addr}")
        soap(
            broker,
            f"{WSNT.replace('b-2', 'bw-2')}/NotificationProducer/SubscribeRequest",
            f"<wsnt:Subscribe><wsnt:ConsumerReference><wsa:Address>{pull_addr}</wsa:Address>"
            f'</wsnt:ConsumerReference><wsnt:Filter><wsnt:TopicExpression Dialect="{FULL}" '
            f'xmlns:dev="urn:wsn-edge:devices">dev:*/*</wsnt:TopicExpression></wsnt:Filter>'
            f"</wsnt:Subscribe>",
        )
        log(f"subscribed the pull point to dev:*/* ; devices publish for {args.seconds:.0f} s")
        landing = data_dir / "landing"
        t_end = time.monotonic() + args.seconds
        while time.monotonic() < t_end:
            time.sleep(min(10.0, max(0.0, t_end - time.monotonic())))
            for p in procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args} exited with {p.returncode}")
            log(f"{int(t_end - time.monotonic())} s left")

        resp = soap(
            pull_addr,
            f"{WSNT.replace('b-2', 'bw-2')}/PullPoint/GetMessagesRequest",
            "<wsnt:GetMessages><wsnt:MaximumNumber>100000</wsnt:MaximumNumber></wsnt:GetMessages>",
        )
        n_pulled = len(re.findall(r"NotificationMessage>", resp)) // 2
        log(f"the pull point collected {n_pulled} notifications")
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()

    files = sorted(landing.glob("*.jsonl"))
    lines = sum(1 for f in files for _ in f.open())
    size = sum(f.stat().st_size for f in files)
    log(
        f"landing zone: {len(files)} file(s), {lines} notification(s) in {landing}, "
        f"{size / max(lines, 1):.0f} bytes per line"
    )
    show_landing_line(files)
    out = work / "ingest"
    ingest = [str(VENV_BIN / "wsn-ingest")]
    subprocess.run(
        [*ingest, "batch", "--landing", str(landing), "--out", str(out), "--window", args.window],
        check=True,
        env=env,
    )
    png = work / "temperature.png"
    subprocess.run(
        [
            *ingest,
            "plot",
            "--out",
            str(out),
            "--field",
            "value",
            "--topic",
            "temperature",
            "--png",
            str(png),
        ],
        check=False,
        env=env,
    )
    show_devices(out / "devices")
    log(
        f"tables: database wsn, catalog {out / '_catalog'}, files under {out} "
        f'(docs/spark_ingest.md, "The tables")  plot: {png}'
    )
    return 0


def show_landing_line(files: list[Path]) -> None:
    """One reading's landing line: its identity (device_id, gateway_id, event_time) and a
    payload with only its own namespace declaration (docs/design.md, "Landing zone")."""
    for f in files:
        for line in f.open():
            rec = json.loads(line)
            if rec.get("message_type", "").endswith("}Reading"):
                log(
                    "a landing line: "
                    + json.dumps(
                        {
                            k: rec.get(k)
                            for k in (
                                "device_id",
                                "gateway_id",
                                "producer",
                                "event_time",
                                "topic_path",
                                "payload",
                            )
                        }
                    )
                )
                return


def show_devices(devices: Path) -> None:
    """The devices table, one line per device (pyarrow: no JVM to start), from its current
    version (`devices/vN/`, the highest N: docs/spark_ingest.md, "Reading the files")."""
    import pyarrow.parquet as pq

    versions = sorted(p for p in devices.glob("v*") if p.is_dir())
    rows = sorted(
        pq.read_table(versions[-1]).to_pylist(),
        key=lambda r: str(r.get("device_id") or r.get("producer")),
    )
    log("devices:")
    for r in rows:
        skew = r.get("clock_skew_s")
        log(
            f"  {r.get('device_id') or '-':8} {r['messages']:5d} msgs  gateway "
            f"{r.get('gateway_id')}  at {', '.join(r.get('producers') or [])}  "
            f"gaps {r['gap_count']}  clock skew " + (f"{skew:+.2f} s" if skew is not None else "-")
        )


if __name__ == "__main__":
    sys.exit(main())
