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


def test_the_schema_names_every_setting_the_device_reads() -> None:
    """device/config.schema.json (what flash.sh checks a config against) and the device agree:
    every key the device reads is in the schema, at its level, and the defaults of the limits
    are the device's (wsn.core.ops.defaults)."""
    import re

    schema = json.loads((ROOT / "device" / "config.schema.json").read_text())
    levels = {
        "top": (r"\b(?:g|c|conf\.get|\.conf\.get)\(\"(\w+)\"", schema["properties"]),
        "limits": (
            r"\b(?:lim|limits|L)(?:\.get\(|\[)\"(\w+)\"",
            schema["properties"]["limits"]["properties"],
        ),
        "sensor": (
            r"\bsp(?:\.get\(|\[)\"(\w+)\"",
            schema["properties"]["sensors"]["items"]["properties"],
        ),
        "wifi": (r"\bw(?:\.get\(|\[)\"(\w+)\"", schema["properties"]["wifi"]["properties"]),
    }
    src = "\n".join(p.read_text() for p in (ROOT / "device" / "wsn").rglob("*.py"))
    for level, (rx, props) in levels.items():
        read = set(re.findall(rx, src))
        assert read, level
        assert read <= set(props), f"{level}: read but not in the schema: {read - set(props)}"
    ops = (ROOT / "device" / "wsn" / "core" / "ops.py").read_text()
    defaults = dict(re.findall(r'^\s+"(\w+)": (\d+),', ops, re.M))
    assert defaults
    lp = schema["properties"]["limits"]["properties"]
    for k, v in defaults.items():
        assert lp[k]["default"] == int(v), k


def test_the_example_config_is_valid() -> None:
    import subprocess
    import sys

    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools/micropython/check_config.py"),
            str(ROOT / "device/config.example.json"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert "package wsn/sensors" in r.stdout and "package wsn/wifi" in r.stdout
