"""A real gateway (`python -m gateway`) as a child process, for the tests that need one next
to a real device (tests/device batching and sleepy mode, tests/integration, the device bench):
started on 127.0.0.1 with its own data dir, stoppable (SIGTERM: orderly; SIGKILL: crash) and
restartable on the same port (so every EPR, and the registration address a device keeps, stays
valid), and its landing zone readable.

Also what the tests of a device next to a gateway share: the heartbeat sensor whose values
(1, 2, 3, ... per sample; per wake in sleepy mode) identify the readings, a subscription at the
gateway, and the readings' values as delivered and as landed.

The device-side helpers are in devtest.py; this only adds the gateway process. (The gateway
tests' own `start_gateway` in tests/gateway/gwtest.py listens on port 0 and cannot come back
on the same port: a different tool for tests that never restart it.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
from devtest import (
    EDGE,
    RD,
    ROOT,
    WSNT,
    Client,
    Consumer,
    DeviceProcess,
    body_child,
    ctype,
    envelope,
    free_port,
    parse,
    sleepy_cycles,
)

LISTENING = r"wsn-gateway listening on http://"
DEV_NS = "urn:wsn-edge:devices"
CONCRETE = "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Concrete"
HEARTBEAT = [{"topic": "heartbeat", "kind": "heartbeat"}]  # device/wsn/device.py, kind heartbeat
GW_ARGS = ["--backoff-initial", "0.1", "--backoff-max", "1"]


class GatewayProcess(DeviceProcess):
    """`python -m gateway` as a child process (the stdout line reader of DeviceProcess).
    Constructing it spawns the process; `wait_ready()` waits for its listening line."""

    def __init__(
        self, data_dir: Path, port: int, extra: Sequence[str] = (), ready_timeout: float = 20.0
    ) -> None:
        self.data_dir = data_dir
        self.extra = list(extra)
        self.ready_timeout = ready_timeout
        self.url = f"http://127.0.0.1:{port}/wsn/broker"
        super().__init__(self._spawn(port), port, {})

    def _spawn(self, port: int) -> subprocess.Popen[str]:
        cmd = [
            sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", str(port),
            "--data-dir", str(self.data_dir), "--log-level", "INFO", *self.extra,
        ]  # fmt: skip
        return subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=str(ROOT),
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def wait_ready(self, start: int = 0) -> None:
        """Wait for the listening line printed after stdout line `start`."""
        self.wait_line(LISTENING, self.ready_timeout, start=start)

    def stop(self, sig: int = signal.SIGTERM) -> None:  # type: ignore[override]
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(5)

    def restart(self) -> None:
        """Start again on the same port and data dir (after stop()), and wait until ready."""
        assert self.proc.poll() is not None, "stop it first"
        mark = len(self.lines)
        self.proc = self._spawn(self.port)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.wait_ready(start=mark)

    def landing(self) -> list[dict[str, Any]]:
        """Every landing line written so far (complete files and the open .tmp file)."""
        out: list[dict[str, Any]] = []
        d = self.data_dir / "landing"
        files = sorted(d.glob("landing-*.jsonl")) + sorted(d.glob(".landing-*.jsonl.tmp"))
        for f in files:
            for line in f.read_text().splitlines():
                if line.strip():
                    out.append(json.loads(line))
        return out


def start_gateway_process(
    data_dir: Path,
    extra: Sequence[str] = (),
    ready_timeout: float = 20.0,
    started: list[GatewayProcess] | None = None,
) -> GatewayProcess:
    """A GatewayProcess on a free port, returned once it listens. A free port can be taken
    between probe and bind: then it tries another (three attempts). Every process spawned is
    appended to `started` (for the caller's teardown)."""
    last = ""
    for _attempt in range(3):
        gp = GatewayProcess(data_dir, free_port(), extra, ready_timeout)
        if started is not None:
            started.append(gp)
        try:
            gp.wait_ready()
            return gp
        except AssertionError as e:
            last = str(e)
            gp.stop(signal.SIGKILL)
            if "Address already in use" not in gp.output():
                break
    raise AssertionError(f"gateway did not start: {last}")


async def subscribe_at_gateway(
    s: aiohttp.ClientSession, gw: GatewayProcess, consumer: str, topic: str
) -> None:
    body = (
        f"<wsnt:Subscribe><wsnt:ConsumerReference><wsa:Address>{consumer}</wsa:Address>"
        f'</wsnt:ConsumerReference><wsnt:Filter><wsnt:TopicExpression Dialect="{CONCRETE}" '
        f'xmlns:dev="{DEV_NS}">{topic}</wsnt:TopicExpression></wsnt:Filter></wsnt:Subscribe>'
    )
    async with s.post(gw.url, data=envelope(body), headers={"Content-Type": ctype(12)}) as r:
        assert r.status == 200, await r.text()


async def subscribe_to_heartbeat_once_registered(
    cl: Client, gw: GatewayProcess, consumer: str
) -> None:
    """Wait until the device registered, subscribe `consumer` at the gateway to the device's
    heartbeat, then wait until the gateway's subscription at the device (its consumer is the
    registration address) is resumed: the device pushes its readings from then on.

    The gateway subscribes at the device when it registers and pauses that subscription
    while nobody wants its topics (gateway/demand.py): between the two it is not paused, so
    the helper first waits for the pause (with no broker subscription yet there always is
    one), and only a resume can end the wait that follows. Waiting for "not paused" alone
    once passed in that window, and the pause came after it (a flake under load)."""
    from tests.polling import until  # (imported here: the benches import gwproc without it)

    def gateways(x: dict[str, Any]) -> bool:
        return "/wsn/registrations/" in x["consumer"]

    await cl.dev.await_line(r"^registered at ", 20)
    await until(
        lambda: cl.subscription_paused(True, gateways),
        "the gateway's subscription at the device paused", 20,
    )  # fmt: skip
    await subscribe_at_gateway(cl.s, gw, consumer, "dev:dev-test/heartbeat")
    await until(
        lambda: cl.subscription_paused(False, gateways),
        "the gateway's subscription at the device resumed", 20,
    )  # fmt: skip


def delivered_values(consumer: Consumer) -> list[int]:
    """Heartbeat values of the NotificationMessages the consumer got so far (wrapped), each
    message once: the gateway's delivery is at-least-once (docs/gateway.md: a message whose
    answer came too late for a stop or a timeout is sent again), and a message sent again
    keeps its entry in edge:MessageIDs, so a repeated id is the same message again, not a
    second publication (which gets an id of its own and is counted)."""
    out: list[int] = []
    seen: dict[str, int] = {}
    q = consumer.received
    items = list(q._queue)  # type: ignore[attr-defined]  # peek, keep them queued
    for _, data in items:
        notify = body_child(parse(data))
        ids = (notify.findtext(f"{{{EDGE}}}MessageIDs") or "").split()
        nms = list(notify.iter(f"{{{WSNT}}}NotificationMessage"))
        for i, nm in enumerate(nms):
            v = int(nm.findtext(f"{{{WSNT}}}Message/{{{RD}}}Reading/{{{RD}}}value") or -1)
            mid = ids[i] if len(ids) == len(nms) else None
            if mid is not None and mid in seen:
                assert seen[mid] == v, f"message {mid} came as {seen[mid]} and as {v}"
                continue
            if mid is not None:
                seen[mid] = v
            out.append(v)
    return out


def landed_values(gw: GatewayProcess) -> tuple[list[int], list[str]]:
    """(heartbeat values in landing order, landing ids) of this device's heartbeat topic."""
    values, ids = [], []
    for rec in gw.landing():
        if rec["topic_path"] == "dev-test/heartbeat":
            values.append(int(rec["fields"]["value"]))
            ids.append(rec["id"])
    return values, ids


def last_cycle(dev: DeviceProcess) -> dict[str, int]:
    """The latest sleepy-mode wake report (devtest.sleepy_cycles); zeros before the first."""
    c = sleepy_cycles(dev)
    return c[-1] if c else {"seq": 0, "pending": 0, "sent": 0}


def assert_landed_once_in_order(gw: GatewayProcess, last: int) -> None:
    """Stop the gateway (which flushes its landing zone), then check that the heartbeat
    readings 1..last landed each exactly once, in order, each with its own landing id."""
    gw.stop()
    values, ids = landed_values(gw)
    assert values == list(range(1, last + 1)), (last, values)
    assert len(set(ids)) == len(ids), ids
