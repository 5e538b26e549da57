"""The shipped board config (device/config.example.json, with internal-temperature and ADC
sensors) runs unchanged on the unix port: board-only sensors fall back to simulation, as the
README promises, instead of crashing at boot."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from devtest import DeviceProcess

ROOT = Path(__file__).resolve().parents[2]


async def test_example_config_runs_with_simulated_sensors(
    start_device: Callable[..., DeviceProcess],
) -> None:
    example: dict[str, Any] = json.loads((ROOT / "device" / "config.example.json").read_text())
    kinds = {s["kind"] for s in example["sensors"]}
    assert {"internal_temp", "adc"} <= kinds, kinds  # the point of this test
    dev = start_device(
        sensors=example["sensors"],
        gateway=None,
        wifi=None,
        secret="s3cret",
    )
    out = dev.output()
    assert "temperature: no internal_temp hardware here, simulating" in out, out
    assert "light: no adc hardware here, simulating" in out, out
    async with aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{dev.port}/admin/sample?topic=temperature&count=1"
        async with http.post(url, headers={"Authorization": "Bearer s3cret"}) as resp:
            assert resp.status == 200, await resp.text()
