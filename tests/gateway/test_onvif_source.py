"""gateway.onvif against the camera double (tests/gateway/camera_double.py, built from the
official devicemgmt.wsdl/events.wsdl): discovery, the topic set, pull points and Notify,
renewal, the known camera quirks (clock skew, absolute vs relative times, a reboot that
forgets subscriptions and moves the clock, a full pull point pool), and that the camera's
pull point slots never leak. No broker: the sink is a recorder.

Every test ends by checking that the camera saw nothing invalid: each request the library
made validated against the WSDL's schema (camera.invalid)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from camera_double import MOTION, TNS1, CameraDouble
from lxml import etree

from gateway.onvif import CameraConfig, CameraEvent, CameraSource, CameraTopic
from gateway.onvif.model import BACKOFF, SUBSCRIBED
from gateway.onvif.webhook import routes
from gateway.topics import ConcreteTopic
from tests.polling import until

# seconds for a condition to hold: the first exchange of a test process imports the ONVIF
# library (zeep), which took 25 s of wall clock for 0.7 s of CPU at load 21; a wait that
# ends when the condition holds costs nothing when it is quick
WAIT = 60


class Recorder:
    """An EventSink that keeps what it is given."""

    def __init__(self) -> None:
        self.topic_sets: list[list[CameraTopic]] = []
        self.events: list[CameraEvent] = []
        self.fail = 0

    def camera_topics(self, camera_id: str, topics: Sequence[CameraTopic]) -> None:
        self.topic_sets.append(list(topics))

    async def camera_events(self, camera_id: str, events: Sequence[CameraEvent]) -> None:
        if self.fail:
            self.fail -= 1
            raise RuntimeError("the sink is full")
        self.events.extend(events)

    def values(self, operation: str) -> list[str]:
        """The Data value of each event whose PropertyOperation is `operation` (Changed:
        what the camera saw happen; Initialized: its state, sent again on
        SetSynchronizationPoint after each subscription)."""
        return [
            e.message.find(".//{http://www.onvif.org/ver10/schema}Data/*").get("Value")  # type: ignore[union-attr]
            for e in self.events
            if e.message.get("PropertyOperation") == operation
        ]

    def changes(self) -> list[str]:
        return self.values("Changed")

    def initial(self) -> list[str]:
        return self.values("Initialized")


@pytest.fixture
async def make_camera() -> AsyncIterator[Any]:
    made: list[CameraDouble] = []

    async def factory(**kw: Any) -> CameraDouble:
        c = await CameraDouble(**kw).start()
        made.append(c)
        return c

    yield factory
    for c in made:
        await c.stop()
        assert not c.invalid, c.invalid  # what the library sent validates against the WSDL


@pytest.fixture
async def make_source() -> AsyncIterator[Any]:
    made: list[CameraSource] = []

    def factory(camera: CameraDouble, sink: Recorder, **kw: Any) -> CameraSource:
        cfg_kw = {k: kw.pop(k) for k in ("lifetime", "mode", "password", "pull_wait") if k in kw}
        cfg = CameraConfig(
            "cam1",
            camera.url,
            "admin",
            cfg_kw.pop("password", "camera-secret"),
            **cfg_kw,
        ).checked()
        kw.setdefault("backoff_initial", 0.05)
        kw.setdefault("backoff_max", 0.5)
        # the product's default: no test here waits for an exchange to time out (a stopped
        # camera refuses at once), and a loaded machine took a discovery past 3 s
        kw.setdefault("timeout", 10.0)
        s = CameraSource(cfg, sink, **kw)
        s.start()
        made.append(s)
        return s

    yield factory
    for s in made:
        await s.stop()


def subscribed(s: CameraSource) -> bool:
    return s.status.state == SUBSCRIBED


async def test_discovers_reads_topics_and_pulls_events(make_camera, make_source):
    cam = await make_camera()
    sink = Recorder()
    src = make_source(cam, sink)
    await until(lambda: subscribed(src), "subscribed", WAIT)
    assert src.status.using == "pullpoint" and src.status.topics == 3
    # GetEventProperties: the camera's topics, with its prefix and message descriptions
    topics = {str(t.topic): t for t in sink.topic_sets[0]}
    motion = topics[str(ConcreteTopic(TNS1, MOTION))]
    assert motion.prefixes == {TNS1: "tns1"} and motion.is_property
    assert (
        motion.description is not None
        and motion.description.find(
            ".//{http://www.onvif.org/ver10/schema}SimpleItemDescription[@Name='IsMotion']"
        )
        is not None
    )
    # SetSynchronizationPoint after subscribing: the current state first
    await until(lambda: sink.initial() == ["false"], "the state at subscription", WAIT)
    cam.motion(True)
    cam.motion(False)
    await until(lambda: sink.changes() == ["true", "false"], "two events", WAIT)
    e = sink.events[1]
    assert e.camera_id == "cam1" and e.topic == ConcreteTopic(TNS1, MOTION)
    assert e.topic_text == "tns1:RuleEngine/CellMotionDetector/Motion"
    assert e.producer == f"{cam.url}/onvif/event_service"
    assert etree.QName(e.message).localname == "Message" and e.message.get("UtcTime")
    assert src.status.events == 3 and src.status.last_event is not None
    assert [op for op, _ in cam.log[:5]] == [
        "GetSystemDateAndTime",
        "GetServices",
        "GetServiceCapabilities",
        "GetEventProperties",
        "CreatePullPointSubscription",
    ]


async def test_an_older_camera_is_found_through_get_capabilities(make_camera, make_source):
    cam = await make_camera(get_services=False)
    src = make_source(cam, Recorder())
    await until(lambda: subscribed(src), "subscribed", WAIT)
    assert "GetCapabilities" in [op for op, _ in cam.log]


async def test_renews_in_time_by_the_cameras_own_clock(make_camera, make_source):
    """The camera's clock is 3 h ahead (and WS-Security timestamps outside its 5-minute
    window are refused): the lease is its TerminationTime - CurrentTime, renewed at the
    given fraction, with relative times."""
    cam = await make_camera(clock_offset=3 * 3600)
    src = make_source(cam, Recorder(), lifetime=10, renew_fraction=0.1)
    await until(lambda: src.status.renewals >= 2, "two renewals", WAIT)
    assert abs((src.status.clock_skew or 0) - 3 * 3600) < 5
    assert not src.status.absolute_times and src.status.subscriptions == 1
    assert len(cam.live()) == 1


async def test_a_camera_that_mistreats_durations_gets_absolute_times(make_camera, make_source):
    cam = await make_camera(clock_offset=-7200, broken_relative_time=True)
    src = make_source(cam, Recorder(), lifetime=30, renew_fraction=0.1)
    await until(lambda: src.status.renewals >= 2, "renewals", WAIT)
    assert src.status.absolute_times
    # what it was granted is the lifetime asked (in the camera's clock), not 10 s
    sub = cam.live()[0]
    assert sub.termination - cam.now() > 20


async def test_after_a_reboot_events_flow_again_without_growing_subscriptions(
    make_camera, make_source
):
    """Acceptance (issue 25): after the camera reboots (subscriptions gone, clock moved),
    events flow again within one renewal interval, with no growth in its subscriptions."""
    cam = await make_camera()
    sink = Recorder()
    # renewed every 30 s (half the lifetime): the bound below leaves a loaded machine room,
    # and a source that waited for a renewal to notice the reboot would still exceed it
    src = make_source(cam, sink, lifetime=60)
    await until(lambda: subscribed(src), "subscribed", WAIT)
    most = 0

    def count(_op: str) -> None:
        nonlocal most
        most = max(most, len(cam.live()))

    cam.on_request = count
    # the state the camera sends on each subscription (SetSynchronizationPoint, right
    # after the source counts as subscribed) first, so no change races it
    await until(lambda: sink.initial() == ["false"], "the camera's state", WAIT)
    cam.motion(True)
    await until(lambda: sink.changes() == ["true"], "first event", WAIT)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await cam.reboot(downtime=0.5, clock_shift=-5400)
    await until(lambda: subscribed(src) and len(cam.live()) == 1, "resubscribed", WAIT)
    await until(lambda: len(sink.initial()) == 2, "the camera's state after the reboot", WAIT)
    cam.motion(False)
    await until(lambda: sink.changes() == ["true", "false"], "an event after the reboot", WAIT)
    took = loop.time() - t0
    assert took < 30, took  # one renewal interval: half of the 60 s lifetime
    assert most <= 1 and len(cam.live()) == 1
    assert src.status.subscriptions == 2
    # each subscription began with the camera's state: before, and after the reboot
    assert sink.initial() == ["false", "true"]
    assert len(sink.topic_sets) == 2  # the topic set is read again after a reconnection


async def test_an_unreachable_camera_keeps_its_subscription(make_camera, make_source):
    """A camera that does not answer for a while (not a reboot): the same pull point is
    used when it is back; no slot is taken twice."""
    cam = await make_camera()
    sink = Recorder()
    src = make_source(cam, sink, lifetime=30)
    await until(lambda: subscribed(src), "subscribed", WAIT)
    first = src.status.subscription
    await cam.stop()
    await until(lambda: src.status.state == "unreachable", "noticed", WAIT)
    await cam.start(cam.port)
    cam.motion(True)
    await until(lambda: sink.changes() == ["true"], "event on the same subscription", WAIT)
    assert src.status.subscription == first and src.status.subscriptions == 1
    assert [op for op, _ in cam.log].count("CreatePullPointSubscription") == 1


async def test_a_full_pool_is_retried_ever_more_slowly(make_camera, make_source):
    """No resubscribe storm: a camera whose pull points are all taken is asked again after
    a growing, jittered backoff."""
    cam = await make_camera(max_pullpoints=0)
    loop = asyncio.get_running_loop()
    at: list[float] = []

    def record(op: str) -> None:
        if op == "CreatePullPointSubscription":
            at.append(loop.time())

    cam.on_request = record
    src = make_source(cam, Recorder(), backoff_initial=0.1, backoff_max=10)
    # The state is read while the source waits (it says why it waits), not at a moment it
    # may be retrying: a check at a fixed time failed on a busy machine.
    await until(lambda: len(at) >= 6 and src.status.state == BACKOFF, "six refused attempts", 30)
    assert "pull points in use" in (src.status.last_error or "")
    assert src.status.retry_at is not None
    # The wait after the n-th failure is at least half of 0.1 * 2**(n-1), and never less
    # than the initial 0.1 s: a sleep is never shorter, however loaded the machine.
    floors = [max(0.1, 0.1 * 2 ** (n - 1) / 2) for n in range(1, len(at))]
    gaps = [b - a for a, b in itertools.pairwise(at)]
    assert all(g >= f - 0.01 for g, f in zip(gaps, floors, strict=False)), (gaps, floors)
    cam.faults.clear()


async def test_stop_unsubscribes(make_camera, make_source):
    cam = await make_camera()
    src = make_source(cam, Recorder())
    await until(lambda: subscribed(src), "subscribed", WAIT)
    await src.stop()
    assert cam.live() == []
    assert [op for op, _ in cam.log][-1] == "Unsubscribe"


async def test_a_slot_left_by_a_previous_process_is_released_first(
    make_camera, make_source, tmp_path: Path
):
    """A gateway killed without Unsubscribe left a pull point (its state file says which):
    the next one unsubscribes it before creating its own."""
    cam = await make_camera(max_pullpoints=1)
    first = make_source(cam, Recorder(), state_dir=tmp_path)
    await until(lambda: subscribed(first), "subscribed", WAIT)
    old = first.status.subscription
    assert old and (tmp_path / "cam1.json").exists()
    task = first._task
    assert task is not None
    first._task = None  # as if the process died: no Unsubscribe
    task.cancel()
    first._end_cycle = lambda gone: asyncio.sleep(0)  # type: ignore[method-assign]
    await asyncio.sleep(0.1)
    assert len(cam.live()) == 1
    second = make_source(cam, Recorder(), state_dir=tmp_path)
    await until(lambda: subscribed(second), "subscribed again", WAIT)
    assert second.status.subscription != old and len(cam.live()) == 1
    assert ("Unsubscribe", old.rsplit("/", 1)[1]) in cam.log


async def test_wrong_credentials_are_an_error_not_a_storm(make_camera, make_source):
    cam = await make_camera()
    src = make_source(cam, Recorder(), password="wrong", backoff_initial=0.2)
    await until(lambda: src.status.errors >= 2, "two attempts", WAIT)
    assert "NotAuthorized" in (src.status.last_error or "") or "password" in (
        src.status.last_error or ""
    )
    assert not cam.live()
    cam.faults.clear()


async def test_a_failing_sink_costs_its_batch_not_the_camera(make_camera, make_source):
    cam = await make_camera()
    sink = Recorder()
    src = make_source(cam, sink)
    await until(lambda: sink.initial(), "subscribed", WAIT)
    sink.fail = 1
    cam.motion(True)
    await until(lambda: src.status.errors == 1, "the error counted", WAIT)
    cam.motion(False)
    await until(lambda: sink.changes() == ["false"], "the next batch", WAIT)
    assert src.status.subscriptions == 1


# ---------------------------------------------------------------- Notify (no pull points)
@pytest.fixture
async def notify_app() -> AsyncIterator[Any]:
    """A web app standing in for the gateway's HTTP server, with the Notify endpoint."""
    sources: dict[str, CameraSource] = {}
    app = web.Application()
    app.add_routes(routes(sources.get))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield sources, f"http://127.0.0.1:{port}/onvif/notify"
    await runner.cleanup()


async def test_a_camera_without_pull_points_pushes_notify(make_camera, make_source, notify_app):
    sources, base = notify_app
    cam = await make_camera(pullpoint=False)
    sink = Recorder()
    src = sources["cam1"] = make_source(
        cam, sink, notify_base=base, lifetime=10, renew_fraction=0.2
    )
    await until(lambda: subscribed(src) and cam.live(), "subscribed", WAIT)
    assert src.status.using == "notify"
    consumer = cam.live()[0].consumer or ""
    assert consumer.startswith(base + "/cam1/") and len(consumer) > len(base) + 25
    cam.motion(True)
    await until(lambda: sink.changes() == ["true"], "pushed", WAIT)
    assert sink.events[0].topic_text == "tns1:RuleEngine/CellMotionDetector/Motion"
    # (the double keeps a Notify once it has read the answer: after the sink got it)
    await until(lambda: cam.notified, "the camera's Notify answered", WAIT)
    # a made-up token, or another camera's path, is refused and hands nothing on
    async with aiohttp.ClientSession() as s:
        for url in (base + "/cam1/guess", base + "/nocam/x"):
            async with s.post(url, data=cam.notified[0]) as r:
                assert r.status == 404
        async with s.post(consumer, data=b"<not-soap/>") as r:
            assert r.status == 400
    assert sink.changes() == ["true"]
    # renewed in time; after a reboot, the next renewal finds it gone and subscribes again
    # in time: before its 10 s lifetime ends
    await until(lambda: src.status.renewals >= 1, "renewed", 10)
    await cam.reboot(downtime=0.2, clock_shift=600)
    await until(lambda: src.status.subscriptions == 2 and cam.live(), "resubscribed", WAIT)
    cam.motion(False)
    await until(lambda: sink.changes() == ["true", "false"], "pushed after the reboot", WAIT)
    assert len(cam.live()) == 1 and cam.live()[0].consumer != consumer


async def test_a_notify_before_the_answer_to_subscribe_is_taken(
    make_camera, make_source, notify_app
):
    """Cameras push the current state as soon as they subscribe: a Notify that arrives
    before the answer to Subscribe is the new subscription's, not refused."""
    sources, base = notify_app
    cam = await make_camera(pullpoint=False, state_before_answer=True)
    sink = Recorder()
    sources["cam1"] = make_source(cam, sink, notify_base=base)
    await until(lambda: sink.initial()[:1] == ["false"], "the initial state", WAIT)


async def test_auto_falls_back_to_notify_when_pull_points_are_refused(
    make_camera, make_source, notify_app
):
    """A camera that does not say whether it has pull points, and has none: `auto` tries one,
    is refused, and subscribes with Notify in the same attempt."""
    sources, base = notify_app
    cam = await make_camera(pullpoint=False, says_pullpoint=False)
    sink = Recorder()
    src = sources["cam1"] = make_source(cam, sink, notify_base=base)
    await until(lambda: subscribed(src) and cam.live(), "subscribed", WAIT)
    assert src.status.using == "notify" and src.status.subscriptions == 1
    ops = [op for op, _ in cam.log]
    assert ops.count("CreatePullPointSubscription") == 1 and ops.count("Subscribe") == 1
    cam.faults.clear()  # the refused CreatePullPointSubscription


async def test_notify_mode_needs_an_address_for_the_camera(make_camera, make_source):
    cam = await make_camera(pullpoint=False)
    src = make_source(cam, Recorder())
    await until(lambda: src.status.errors >= 1, "refused", WAIT)
    assert "--public-url" in (src.status.last_error or "") and not cam.live()


async def test_an_answer_the_library_cannot_read_is_still_read(make_camera, make_source):
    """A camera's odd payload (here an UtcTime that is no xsd:dateTime), which zeep cannot
    turn into its objects, reaches the sink as the camera wrote it: events are read from the
    answer's XML, not from zeep's objects."""
    cam = await make_camera()
    sink = Recorder()
    src = make_source(cam, sink)
    await until(lambda: subscribed(src), "subscribed", WAIT)
    # the state sent on SetSynchronizationPoint first: on a busy machine it came after the
    # change, with a real UtcTime, and was the last event
    await until(lambda: sink.initial() == ["false"], "the camera's state", WAIT)
    cam.motion(True)
    for s in cam.live():
        for nm in s.queue:
            nm.find(".//{http://www.onvif.org/ver10/schema}Message").set("UtcTime", "yesterday")  # type: ignore[union-attr]
    await until(lambda: sink.changes() == ["true"], "the event", WAIT)
    (changed,) = [e for e in sink.events if e.message.get("PropertyOperation") == "Changed"]
    assert changed.message.get("UtcTime") == "yesterday"
    cam.invalid.clear()  # the double's own answer was invalid, on purpose
