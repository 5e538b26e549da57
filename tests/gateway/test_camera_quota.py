"""Each ONVIF camera's topics and events count against the camera's own address, the host of
its configured URL (issue 22 point 3), as a Notify from it would: cameras do not share one
topic quota. On ca8bf7e camera events published with no client address, all cameras under
client "": the second camera here was refused there."""

from __future__ import annotations

import pytest
from lxml import etree

from gateway import quotas, topics
from gateway.cameras import BrokerSink
from gateway.onvif import CameraConfig, CameraEvent, CameraTopic
from gateway.wire.faults import WsnFault

ONVIF = topics.ONVIF_TOPICS
CAMS = [
    CameraConfig("front", "http://127.0.0.5:8080"),
    CameraConfig("back", "http://127.0.0.6"),
]


def _event(camera: str, *path: str) -> CameraEvent:
    msg = etree.fromstring('<tt:Message xmlns:tt="http://www.onvif.org/ver10/schema"/>')
    host = "127.0.0.5:8080" if camera == "front" else "127.0.0.6"
    return CameraEvent(
        camera, topics.ConcreteTopic(ONVIF, path), {ONVIF: "tns1"}, msg, f"http://{host}/ev"
    )


async def test_each_camera_has_its_own_topic_quota(make_gateway) -> None:  # type: ignore[no-untyped-def]
    # each event grows two topics: its own and its dev:<camera>/... name
    gw = await make_gateway(max_client_topics=2)
    sink = BrokerSink(gw.ctx, CAMS)
    q = gw.ctx.quotas
    await sink.camera_events("front", [_event("front", "RuleEngine", "Motion")])
    assert q.held(quotas.TOPICS, "127.0.0.5") == 2
    await sink.camera_events("back", [_event("back", "RuleEngine", "Tamper")])
    assert q.held(quotas.TOPICS, "127.0.0.6") == 2
    assert q.held(quotas.TOPICS, "") == 0
    # past its own bound, a camera's event on a new topic is refused, naming the flag
    with pytest.raises(WsnFault) as e:
        await sink.camera_events("front", [_event("front", "VideoSource", "Lost")])
    assert "--max-client-topics 2 reached for 127.0.0.5" in str(e.value)
    assert q.refusals[(quotas.TOPICS, "client")] == 1


async def test_a_cameras_topic_set_is_held_under_its_address(make_gateway) -> None:  # type: ignore[no-untyped-def]
    gw = await make_gateway(max_client_topics=1)
    sink = BrokerSink(gw.ctx, CAMS)
    t = CameraTopic(topics.ConcreteTopic(ONVIF, ("RuleEngine", "Motion")), {ONVIF: "tns1"})
    sink.camera_topics("back", [t])  # the operator's camera: held, not refused
    assert gw.ctx.quotas.held(quotas.TOPICS, "127.0.0.6") == 2
    assert t.topic in gw.state.ts
