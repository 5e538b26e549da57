"""One gateway per data directory (issue 22): a second gateway on a directory in use
refuses to start and names the holder; the first goes on undisturbed (on a1410b0 the
second published the first one's open landing file and the first one's landing stalled
silently). The lock goes with its process, kill -9 included."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from gwtest import ROOT, envelope, notify_body, post, reading, start_gateway, stop_gateway

from tests.wsdl_actions import action

A_NOTIFY = action("NotificationConsumer", "Notify")


def _second(data: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", "0",
         "--data-dir", str(data)],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )  # fmt: skip


def _landed(data: Path) -> list[str]:
    out = []
    for p in sorted((data / "landing").glob("landing-*.jsonl")):
        out += [json.loads(x)["fields"]["value"] for x in p.read_text().splitlines()]
    return out


async def test_a_second_gateway_on_a_directory_in_use_refuses_to_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = start_gateway(data, "--landing-max-age", "0.3")
    try:
        r = await post(first.url, envelope(notify_body(("tns:t", reading(1))), action=A_NOTIFY))
        assert r.status == 202
        second = _second(data)
        assert second.returncode != 0
        assert f"in use by another gateway (pid {first.proc.pid}" in second.stderr, second.stderr
        assert "listening" not in second.stdout
        # the first one goes on: its landing file is still its own and lands what follows
        r = await post(first.url, envelope(notify_body(("tns:t", reading(2))), action=A_NOTIFY))
        assert r.status == 202
        for _ in range(50):
            if _landed(data) == ["1", "2"]:
                break
            await asyncio.sleep(0.1)
        assert _landed(data) == ["1", "2"]
    finally:
        stop_gateway(first)
    # stopped (or killed): the directory is free again
    killed = start_gateway(data)
    killed.proc.kill()
    killed.proc.wait()
    again = start_gateway(data)
    stop_gateway(again)
