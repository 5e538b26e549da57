"""The app owns the lifecycle (gateway.app): its parts start in the order of aiohttp's
cleanup_ctx and stop in reverse, also when starting fails half-way."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from gwtest import make_config

from gateway import app, upkeep
from gateway.delivery import DeliveryManager
from gateway.demand import DemandManager
from gateway.landing import LandingWriter
from gateway.storage import Storage


@pytest.fixture
def stops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The parts that stopped, in order."""
    order: list[str] = []

    def record(cls: Any, name: str, what: str) -> None:
        real = getattr(cls, name)

        async def astop(self: Any) -> None:
            order.append(what)
            await real(self)

        def stop(self: Any) -> None:
            order.append(what)
            real(self)

        monkeypatch.setattr(cls, name, stop if name == "close" else astop)

    record(Storage, "close", "storage")
    record(DeliveryManager, "stop", "delivery")
    record(LandingWriter, "stop", "landing")
    record(DemandManager, "stop", "demand")
    return order


async def test_the_parts_start_in_order_and_stop_in_reverse(
    tmp_path: Path, stops: list[str]
) -> None:
    gw = await app.start(make_config(tmp_path / "d"))
    steps = [f.__name__ for f in gw.runner.app.cleanup_ctx]
    assert steps == ["storage", "delivery", "landing_writers", "state", "demand_publishing",
                     "dedupe", "onvif_cameras"]  # fmt: skip
    assert gw.ctx.storage.is_open
    await gw.stop()
    assert stops == ["demand", "landing", "delivery", "storage"]
    assert not gw.ctx.storage.is_open
    await gw.stop()  # a second stop does nothing
    assert stops == ["demand", "landing", "delivery", "storage"]


async def test_a_failed_start_stops_what_had_started(
    tmp_path: Path, stops: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(_ctx: Any) -> None:
        raise RuntimeError("restore failed")

    monkeypatch.setattr(upkeep, "restore", broken)
    with pytest.raises(RuntimeError, match="restore failed"):
        await app.start(make_config(tmp_path / "d"))
    # storage, delivery and the landing writers had started: stopped, in reverse
    assert stops == ["landing", "delivery", "storage"]


@pytest.mark.parametrize(
    "option, why",
    [
        ("front", "expected ID=URL"),
        ("9front=http://10.0.0.5", "an id is 1-64 characters"),
        ("front=ftp://10.0.0.5", "is not an http(s) URL"),
    ],
)
def test_a_camera_option_that_cannot_work_stops_the_build_with_the_reason(
    tmp_path: Path, option: str, why: str
) -> None:
    """--onvif-camera is checked when the gateway is built, before anything starts."""
    cfg = make_config(tmp_path / "d")
    cfg.onvif_cameras = [option]
    with pytest.raises(ValueError, match=re.escape(why)):
        app.build(cfg)
