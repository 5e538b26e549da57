"""Interoperability with the ONVIF clients people use (issue 25, point 4): Home Assistant's
way of receiving camera events, run against a real gateway process.

The client is onvif-zeep-async's `NotificationManager` (the webhook path of Home Assistant's
ONVIF integration): Subscribe without a filter, SOAP 1.2 with a WS-Security UsernameToken
digest, the ONVIF events.wsdl bindings, its own parsing of each delivered Notify; then
`onvif_parsers.parse` (Home Assistant's event parsers, which look an event up by its
literal topic text) turns each NotificationMessage into an entity.

The same client also subscribes to the camera double directly: the event it gets through
the gateway must parse to the same entity as the camera's original.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from aiohttp import web
from camera_double import CameraDouble
from gwtest import (
    CONCRETE,
    DEV_NS,
    FULL,
    WSA,
    WSNT,
    Consumer,
    GatewayProcess,
    call,
    start_gateway,
    stop_gateway,
    subscribe_body,
    topic_filter,
)

from gateway.onvif.client import onvif_module
from tests.polling import until
from wsncli.commands import render_ls

TT = "http://www.onvif.org/ver10/schema"
EVENTS = "http://www.onvif.org/ver10/events/wsdl"


def onvif_parsers() -> Any:
    """onvif-parsers, imported after onvif-zeep-async was imported without its
    logging.basicConfig(INFO) (gateway.onvif.client.onvif_module): importing it first
    would turn on INFO logging for every later test of the session."""
    onvif_module()
    import onvif_parsers as parsers

    return parsers


class HomeAssistantLike:
    """onvif-zeep-async's NotificationManager with a webhook, as Home Assistant runs it;
    `entities` are what onvif-parsers makes of each delivered NotificationMessage."""

    def __init__(self) -> None:
        #: (PropertyOperation, entity) of each event, as onvif-parsers made it
        self.entities: list[tuple[str, Any]] = []
        self.topics: list[str] = []
        #: topics onvif-parsers does not know (Home Assistant ignores such events)
        self.unknown: list[str] = []
        self.manager: Any = None
        self.camera: Any = None
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def _webhook(self, request: web.Request) -> web.Response:
        result = self.manager.process(await request.read())
        for msg in result.NotificationMessage if result is not None else []:
            topic = msg.Topic._value_1.rstrip("/.")  # what Home Assistant does
            self.topics.append(topic)
            parsers = onvif_parsers()
            op = str(msg.Message._value_1.PropertyOperation)
            try:
                self.entities.extend((op, e) for e in await parsers.parse(topic, "uid", msg))
            except parsers.errors.UnknownTopicError:
                self.unknown.append(topic)
        return web.Response(status=200)

    async def start(self, host: str, port: int, user: str, password: str,
                    events_at: str | None = None) -> HomeAssistantLike:  # fmt: skip
        app = web.Application()
        app.router.add_post("/webhook", self._webhook)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/webhook"  # type: ignore[union-attr]
        onvif = onvif_module()
        self.camera = onvif.ONVIFCamera(host, port, user, password, no_cache=True)
        if events_at is None:
            await self.camera.update_xaddrs()  # a camera: its device service says where
        else:
            self.camera.xaddrs[EVENTS] = events_at  # the gateway has no device service
        self.manager = await self.camera.create_notification_manager(
            self.url, dt.timedelta(minutes=10), lambda: None
        )
        return self

    async def stop(self) -> None:
        if self.manager is not None:
            await self.manager.shutdown()
        if self.camera is not None:
            await self.camera.close()
        if self._runner is not None:
            await self._runner.cleanup()


ONVIF_TOPICS = "http://www.onvif.org/ver10/topics"
MOTION = "RuleEngine/CellMotionDetector/Motion"


@pytest.fixture
async def cam() -> AsyncIterator[CameraDouble]:
    c = await CameraDouble().start()
    yield c
    await c.stop()


@pytest.fixture
async def gateway(tmp_path: Path, cam: CameraDouble) -> AsyncIterator[GatewayProcess]:
    """A gateway process subscribed to the camera double with --onvif-camera (its landing
    files published within 0.3 s)."""
    url = f"http://{quote(cam.user)}:{quote(cam.password)}@127.0.0.1:{cam.port}"
    gw = await asyncio.to_thread(
        start_gateway, tmp_path / "gw", "--onvif-camera", f"front-door={url}",
        "--landing-max-age", "0.3",
    )  # fmt: skip
    yield gw
    await asyncio.to_thread(stop_gateway, gw)


async def camera_status(gw: GatewayProcess, camera: str = "front-door") -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as s,
        s.get(gw.url.replace("/wsn/broker", "/status.json")) as r,
    ):
        cams = (await r.json())["cameras"]
    assert [c["id"] for c in cams] == [camera]
    return dict(cams[0])


async def test_a_camera_event_through_the_gateway_is_the_cameras_own_to_home_assistant(
    gateway: GatewayProcess, cam: CameraDouble, consumer: Consumer, tmp_path: Path
):
    """Acceptance (issue 25): a motion event of the camera (the gateway subscribed to it
    with --onvif-camera) reaches an onvif-zeep-async subscriber with no filter as
    tns1:RuleEngine/CellMotionDetector/Motion, which onvif-parsers recognises as the same
    entity as the camera's original; it also reaches a subscriber selecting that one
    camera (dev:front-door//.), a pull point selecting one kind of event across cameras
    (dev:*/tns1:RuleEngine/CellMotionDetector/Motion) and the landing zone with
    device_id = the camera's id."""
    direct, via = HomeAssistantLike(), HomeAssistantLike()
    dev = f'xmlns:dev="{DEV_NS}" xmlns:tns1="{ONVIF_TOPICS}"'
    try:
        # connected, and the state it sends on SetSynchronizationPoint handed on first (as
        # in the reboot test below): the pull point's last two are then the two changes
        await until_async(
            lambda: camera_status(gateway), lambda c: c["connected"] and c["events"] >= 1, 15
        )
        r = await call(gateway.url, subscribe_body(consumer.url, topic_filter(
            "dev:front-door//.", FULL, dev)))  # fmt: skip
        assert r.status == 200, r.text
        r = await call(gateway.url, "<wsnt:CreatePullPoint/>")
        pp = r.body.findtext(f"{{{WSNT}}}PullPoint/{{{WSA}}}Address")
        assert pp
        r = await call(gateway.url, subscribe_body(pp, topic_filter(
            f"dev:*/tns1:{MOTION}", FULL, dev)))  # fmt: skip
        assert r.status == 200, r.text
        await direct.start("127.0.0.1", cam.port, cam.user, cam.password)
        port = int(gateway.url.split(":")[2].split("/")[0])
        await via.start("127.0.0.1", port, "operator", "any", events_at=gateway.url)

        def changed(c: HomeAssistantLike) -> list[Any]:
            return [e for op, e in c.entities if op == "Changed"]

        for n in (1, 2):
            cam.motion(n == 1)
            await until(
                lambda n=n: via.unknown or len(changed(via)) == len(changed(direct)) == n,
                "both delivered",
                10,
            )
            assert not via.unknown, f"onvif-parsers does not know {via.unknown}"
        assert set(via.topics) == {f"tns1:{MOTION}"}
        assert set(direct.topics) == set(via.topics)
        assert changed(via) == changed(direct)
        assert [e.value for e in changed(via)] == [True, False]
        assert changed(via)[0].device_class == "motion"
        assert not cam.invalid, cam.invalid

        # the subscriber selecting the camera: its motion events, under the camera's text
        await consumer.wait_for(2, timeout=10)
        texts = [m.findtext(f"{{{WSNT}}}Topic") for m in consumer.messages()]
        assert texts and set(texts) == {f"tns1:{MOTION}"}, texts
        # the pull point
        r = await call(pp, "<wsnt:GetMessages/>")
        got = r.body.findall(f"{{{WSNT}}}NotificationMessage")
        values = [m.find(f".//{{{TT}}}Data/{{{TT}}}SimpleItem").get("Value") for m in got]
        assert values[-2:] == ["true", "false"], values
        assert {m.findtext(f"{{{WSNT}}}Topic") for m in got} == {f"tns1:{MOTION}"}
        # the landing zone
        lines = await until_async(
            lambda: asyncio.to_thread(landed, tmp_path / "gw" / "landing"),
            lambda ls: sum(1 for x in ls if x["topic_path"] == MOTION) >= 3,
            10,
        )
        motion = [x for x in lines if x["topic_path"] == MOTION]
        assert {x["device_id"] for x in motion} == {"front-door"}
        assert {x["topic_namespace"] for x in motion} == {ONVIF_TOPICS}
        assert all("<tt:Message" in x["payload"] or "Message" in x["payload"] for x in motion)
        st = await camera_status(gateway)
        assert st["events"] >= 3 and st["last_event"] and st["expires"], st
        # the current message, by either name of the camera's topic
        for expr in (f"tns1:{MOTION}", f"dev:front-door/tns1:{MOTION}"):
            r = await call(
                gateway.url,
                f'<wsnt:GetCurrentMessage><wsnt:Topic Dialect="'
                f'{CONCRETE}" {dev}>{expr}</wsnt:Topic></wsnt:GetCurrentMessage>',
            )
            assert r.status == 200, r.text
            item = r.body.find(f"{{{TT}}}Message/{{{TT}}}Data/{{{TT}}}SimpleItem")
            assert item is not None and item.get("Value") == "false", r.text
        # /metrics and `wsn ls` show the camera
        base = gateway.url.replace("/wsn/broker", "")
        async with aiohttp.ClientSession() as s, s.get(base + "/metrics") as m:
            metrics = await m.text()
        assert 'wsn_camera_connected{camera="front-door"} 1.0' in metrics, metrics
        assert 'wsn_camera_events_total{camera="front-door"}' in metrics
        async with aiohttp.ClientSession() as s, s.get(base + "/status.json") as m:
            ls = render_ls(await m.json())
        assert any(x.split()[:2] == ["front-door", "connected"] for x in ls), ls
    finally:
        for c in (direct, via):
            await c.stop()


def landed(d: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for f in sorted(d.glob("*.jsonl")) if d.is_dir() else []:
        out += [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    return out


async def until_async(get: Any, ok: Any, timeout: float) -> Any:
    """Poll the coroutine function `get` until `ok(value)`; -> the value."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await get()
        if ok(value):
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not reached within {timeout} s: {value!r}")
        await asyncio.sleep(0.1)


async def test_after_a_camera_reboot_events_flow_again_within_one_renewal_interval(
    tmp_path: Path, cam: CameraDouble, consumer: Consumer
):
    """Acceptance (issue 25): the camera double reboots (subscriptions gone, clock moved an
    hour); events reach the gateway's subscribers again within one renewal interval (half
    the 60 s lifetime of the config file's camera), and the camera never holds more than
    one subscription of the gateway. The camera comes from --onvif-config."""
    (tmp_path / "front.pw").write_text(cam.password + "\n")
    conf = tmp_path / "cameras.json"
    conf.write_text(json.dumps({"cameras": [{
        "id": "front-door", "address": cam.url, "user": cam.user,
        "password_file": "front.pw", "lifetime": 60}]}))  # fmt: skip
    gw = await asyncio.to_thread(start_gateway, tmp_path / "gw", "--onvif-config", str(conf))
    most = 0

    def watch(_op: str) -> None:
        nonlocal most
        most = max(most, len(cam.live()))

    cam.on_request = watch
    try:
        # connected, and the state the camera sends on SetSynchronizationPoint (which comes
        # after "connected") handed on: on a busy machine it reached the subscriber as its
        # first message, the change below came second, after the reboot, and the loop
        # below ended before the gateway had subscribed again
        await until_async(
            lambda: camera_status(gw), lambda c: c["connected"] and c["events"] >= 1, 15
        )
        r = await call(gw.url, subscribe_body(consumer.url, topic_filter(
            f"dev:front-door/tns1:{MOTION}", CONCRETE,
            f'xmlns:dev="{DEV_NS}" xmlns:tns1="{ONVIF_TOPICS}"')))  # fmt: skip
        assert r.status == 200, r.text
        cam.motion(True)
        await consumer.wait_for(1, timeout=10)
        before = await camera_status(gw)
        await cam.reboot()
        back = asyncio.get_running_loop().time()
        # each second an event: the first one after the gateway resubscribed is delivered
        while len(consumer.messages()) < 2:
            assert asyncio.get_running_loop().time() - back < 30.0, "none within 30 s"
            cam.motion(len(consumer.messages()) % 2 == 0)
            await asyncio.sleep(0.5)
        after = await camera_status(gw)
        assert after["subscriptions"] == before["subscriptions"] + 1, (before, after)
        assert len(cam.live()) == 1 and most <= 1, (cam.live(), most)
        assert not cam.invalid, cam.invalid
    finally:
        await asyncio.to_thread(stop_gateway, gw)
    assert cam.live() == []  # the gateway unsubscribed when it stopped


async def test_a_camera_without_pull_points_pushes_to_the_gateways_notify_endpoint(
    tmp_path: Path, cam: CameraDouble, consumer: Consumer
):
    """mode notify: the camera is subscribed with a Notify endpoint of the gateway
    (/onvif/notify/<camera>/<token>), and its pushed events are published like pulled
    ones."""
    conf = tmp_path / "cameras.json"
    conf.write_text(json.dumps({"cameras": [{
        "id": "yard", "address": cam.url, "user": cam.user, "password": cam.password,
        "mode": "notify"}]}))  # fmt: skip
    gw = await asyncio.to_thread(start_gateway, tmp_path / "gw", "--onvif-config", str(conf))
    try:
        st = await until_async(lambda: camera_status(gw, "yard"), lambda c: c["connected"], 15)
        assert st["using"] == "notify", st
        assert [s.kind for s in cam.live()] == ["notify"], cam.live()
        assert "/onvif/notify/yard/" in (cam.live()[0].consumer or "")
        # the Initialized state the camera pushes on SetSynchronizationPoint (which comes
        # after "connected") handed on before the subscriber is there: it is not its message
        await until(
            lambda: any(op == "SetSynchronizationPoint" for op, _ in cam.log) and cam.notified,
            "the camera's state pushed",
            15,
        )
        r = await call(gw.url, subscribe_body(consumer.url, topic_filter(
            "dev:yard//.", FULL, f'xmlns:dev="{DEV_NS}"')))  # fmt: skip
        assert r.status == 200, r.text
        cam.motion(True)
        await consumer.wait_for(1, timeout=10)
        (m,) = consumer.messages()
        assert m.findtext(f"{{{WSNT}}}Topic") == f"tns1:{MOTION}"
        assert not cam.invalid, cam.invalid
    finally:
        await asyncio.to_thread(stop_gateway, gw)
