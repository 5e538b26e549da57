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
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from camera_double import CameraDouble
from gwtest import GatewayProcess, start_gateway, stop_gateway
from lxml import etree

from gateway import topics
from gateway.onvif import CameraConfig, CameraEvent, CameraSource, CameraTopic
from gateway.onvif.client import onvif_module
from tests.polling import until

WSNT = "http://docs.oasis-open.org/wsn/b-2"
WSA = "http://www.w3.org/2005/08/addressing"
S12 = "http://www.w3.org/2003/05/soap-envelope"
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


class ForwardAsNotify:
    """The camera source's sink for this test: each event posted to the gateway as the
    Notify of a publisher (its topic with the camera's prefixes, the camera's
    ProducerReference, the tt:Message)."""

    def __init__(self, broker: str) -> None:
        self.broker = broker
        self.session: aiohttp.ClientSession | None = None

    def camera_topics(self, camera_id: str, found: Sequence[CameraTopic]) -> None:
        pass

    async def camera_events(self, camera_id: str, events: Sequence[CameraEvent]) -> None:
        env = etree.Element(f"{{{S12}}}Envelope", nsmap={"s": S12, "wsnt": WSNT, "wsa": WSA})
        notify = etree.SubElement(etree.SubElement(env, f"{{{S12}}}Body"), f"{{{WSNT}}}Notify")
        for e in events:
            nm = etree.SubElement(notify, f"{{{WSNT}}}NotificationMessage")
            dialect, text, decl = topics.render_topic(e.topic, topics.CONCRETE, e.prefixes)
            t = etree.SubElement(nm, f"{{{WSNT}}}Topic", nsmap=decl)  # type: ignore[arg-type]
            t.set("Dialect", dialect)
            t.text = text
            prod = etree.SubElement(nm, f"{{{WSNT}}}ProducerReference")
            etree.SubElement(prod, f"{{{WSA}}}Address").text = e.producer
            etree.SubElement(nm, f"{{{WSNT}}}Message").append(e.message)
        if self.session is None:
            self.session = aiohttp.ClientSession()
        async with self.session.post(
            self.broker,
            data=etree.tostring(env),
            headers={"Content-Type": "application/soap+xml; charset=utf-8"},
        ) as r:
            assert r.status == 202, await r.text()


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[GatewayProcess]:
    gw = await asyncio.to_thread(start_gateway, tmp_path / "gw")
    yield gw
    await asyncio.to_thread(stop_gateway, gw)


async def test_a_camera_event_through_the_gateway_is_the_cameras_own_to_home_assistant(
    gateway: GatewayProcess,
):
    """Acceptance (issue 25): a motion event of the camera reaches an onvif-zeep-async
    subscriber with no filter as tns1:RuleEngine/CellMotionDetector/Motion, which
    onvif-parsers recognises, as the same entity as the camera's original."""
    cam = await CameraDouble().start()
    direct, via = HomeAssistantLike(), HomeAssistantLike()
    forward = ForwardAsNotify(gateway.url)
    source = CameraSource(
        CameraConfig("front-door", cam.url, cam.user, cam.password), forward, backoff_initial=0.05
    )
    try:
        await direct.start("127.0.0.1", cam.port, cam.user, cam.password)
        port = int(gateway.url.split(":")[2].split("/")[0])
        await via.start("127.0.0.1", port, "operator", "any", events_at=gateway.url)
        source.start()
        await until(lambda: source.status.connected, "the gateway's source subscribed", 10)
        # the gateway asked the camera for its state (SetSynchronizationPoint) on subscribing
        await until(lambda: via.unknown or via.entities, "the camera's state, via", 10)
        assert not via.unknown, f"onvif-parsers does not know {via.unknown}"
        assert [(op, e.value) for op, e in via.entities] == [("Initialized", False)]

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
        assert set(via.topics) == {"tns1:RuleEngine/CellMotionDetector/Motion"}
        assert set(direct.topics) == set(via.topics)
        assert changed(via) == changed(direct)
        assert [e.value for e in changed(via)] == [True, False]
        assert changed(via)[0].device_class == "motion"
        assert not cam.invalid, cam.invalid
    finally:
        await source.stop()
        for c in (direct, via):
            await c.stop()
        if forward.session is not None:
            await forward.session.close()
        await cam.stop()
