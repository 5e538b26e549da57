"""End to end (issue 25, acceptance): an ONVIF camera's motion events, taken by a real
gateway process (`--onvif-camera`, the camera double built from the official WSDL), land in
the landing zone with `device_id` = the camera's id and become `camera_events` and
`camera_states` rows of the batch job (issue 25 point 3), with the camera's own times,
operations and values, never our reading of them."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "gateway"))
sys.path.insert(0, str(ROOT / "tests" / "spark_ingest"))

from camera_double import CameraDouble  # noqa: E402
from gwtest import start_gateway, stop_gateway  # noqa: E402
from ingest_data import new_database  # noqa: E402

from spark_ingest.batch import run_batch  # noqa: E402
from tests.polling import until  # noqa: E402


def _load_spark_conftest() -> Any:
    """The session SparkSession fixture of tests/spark_ingest/conftest.py (one JVM)."""
    spec = importlib.util.spec_from_file_location(
        "spark_ingest_tests_conftest_cam", ROOT / "tests" / "spark_ingest" / "conftest.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


spark = _load_spark_conftest().spark

pytestmark = pytest.mark.spark

MOTION = "RuleEngine/CellMotionDetector/Motion"
ONVIF_TOPICS = "http://www.onvif.org/ver10/topics"


def landed(d: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for f in sorted(d.glob("*.jsonl")) if d.is_dir() else []:
        out += [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    return out


async def _connected(url: str) -> bool:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        cams = (await r.json())["cameras"]
    return bool(cams) and bool(cams[0]["connected"])


async def test_camera_motion_events_reach_the_spark_tables(spark: Any, tmp_path: Path) -> None:
    cam = await CameraDouble().start()
    url = f"http://{quote(cam.user)}:{quote(cam.password)}@127.0.0.1:{cam.port}"
    gw = await asyncio.to_thread(
        start_gateway, tmp_path / "gw", "--onvif-camera", f"front-door={url}",
        "--landing-max-age", "0.3",
    )  # fmt: skip
    landing = tmp_path / "gw" / "landing"
    try:
        status = gw.url.replace("/wsn/broker", "/status.json")
        deadline = asyncio.get_running_loop().time() + 20
        while not await _connected(status):
            assert asyncio.get_running_loop().time() < deadline, "camera never connected"
            await asyncio.sleep(0.1)
        # the state the camera sends on SetSynchronizationPoint queued first: on a busy
        # machine the call came after the first change, and its Initialized was the later
        await until(
            lambda: any(op == "SetSynchronizationPoint" for op, _ in cam.log),
            "the gateway asked for the camera's state",
            20,
        )
        for active in (True, False, True, False):
            cam.motion(active)
            await asyncio.sleep(0.3)  # distinct UtcTimes, in order
        await until(
            lambda: sum(1 for x in landed(landing) if x["topic_path"] == MOTION) >= 5,
            "the motion events landed",
            15,
        )
    finally:
        await asyncio.to_thread(stop_gateway, gw)
        await cam.stop()

    motion = [x for x in landed(landing) if x["topic_path"] == MOTION]
    assert {x["device_id"] for x in motion} == {"front-door"}
    assert {x["topic_namespace"] for x in motion} == {ONVIF_TOPICS}

    db = new_database()
    await asyncio.to_thread(run_batch, spark, str(landing), str(tmp_path / "out"), database=db)
    ev = spark.table(f"{db}.camera_events").where("device_id = 'front-door'").collect()
    motion_ev = sorted((r for r in ev if r["topic_path"] == MOTION), key=lambda r: r["at"])
    # the subscription's Initialized state, then the four changes the camera made
    assert [r["operation"] for r in motion_ev][-4:] == ["Changed"] * 4, motion_ev
    assert [r["value"] for r in motion_ev][-4:] == ["true", "false", "true", "false"]
    assert {r["item"] for r in motion_ev} == {"IsMotion"}
    st = spark.table(f"{db}.camera_states").where("device_id = 'front-door'").collect()
    st = [r for r in st if r["topic_path"] == MOTION and r["item"] == "IsMotion"]
    assert st, "no camera_states row for the motion events"
    assert sum(r["changes"] for r in st) >= 4
    # true twice for about 0.3 s each: the states' true time counts it, and no more than
    # the whole span of the events
    span = (motion_ev[-1]["at"] - motion_ev[0]["at"]).total_seconds()
    true_s = sum(r["true_s"] or 0.0 for r in st)
    assert 0.2 < true_s <= span, (true_s, span)
