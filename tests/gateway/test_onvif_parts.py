"""The pure parts of gateway.onvif: reading what cameras send (with their quirks), the
timing rules, the configuration and the naming of camera events in the broker."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from lxml import etree

from gateway import topics
from gateway.onvif import CameraConfig, camera_topic, device_topic, load_file, parse_option
from gateway.onvif.messages import detach, read_notification, read_topic, read_topic_set
from gateway.onvif.timing import Backoff, lease_of, relative_is_broken, request_time

TNS1 = topics.ONVIF_TOPICS
TT = "http://www.onvif.org/ver10/schema"
MOTION = topics.ConcreteTopic(TNS1, ("RuleEngine", "CellMotionDetector", "Motion"))
WSNT = "http://docs.oasis-open.org/wsn/b-2"


# ---------------------------------------------------------------- notifications
@pytest.mark.parametrize(
    "text",
    [
        "tns1:RuleEngine/CellMotionDetector/Motion",
        " tns1:RuleEngine/CellMotionDetector/Motion\n",
        "tns1:RuleEngine/CellMotionDetector/Motion//.",  # a Full expression for a topic
        "tns1:RuleEngine/CellMotionDetector/Motion/.",
        "tns1:RuleEngine/CellMotionDetector/Motion/",
    ],
)
def test_a_notifications_topic_quirks(text):
    got = read_topic(text, {"tns1": TNS1})
    assert got == (MOTION, {TNS1: "tns1"})


def test_an_undeclared_tns1_is_the_onvif_namespace_and_others_are_refused():
    assert read_topic("tns1:RuleEngine/CellMotionDetector/Motion", {}) == (MOTION, {TNS1: "tns1"})
    assert "not declared" in str(read_topic("ax:Foo/Bar", {}))
    assert "not a concrete topic" in str(read_topic("tns1:A|tns1:B", {"tns1": TNS1}))
    assert read_topic("", {}) == "the notification has no topic"
    # a vendor namespace and its own prefix, also as an extension step
    got = read_topic("tnsaxis:Storage/tns1:Alert", {"tnsaxis": "urn:axis", "tns1": TNS1})
    assert got == (
        topics.ConcreteTopic("urn:axis", ("Storage", "{" + TNS1 + "}Alert")),
        {"urn:axis": "tnsaxis", TNS1: "tns1"},
    )


NOTIFY = f"""<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope"
  xmlns:wsnt="{WSNT}" xmlns:wsa="http://www.w3.org/2005/08/addressing"
  xmlns:tt="{TT}" xmlns:tns1="{TNS1}" xmlns:xs="http://www.w3.org/2001/XMLSchema"><s:Body>
 <wsnt:Notify><wsnt:NotificationMessage>
  <wsnt:Topic Dialect="http://www.onvif.org/ver10/tev/topicExpression/ConcreteSet"
   >tns1:RuleEngine/CellMotionDetector/Motion</wsnt:Topic>
  <wsnt:ProducerReference><wsa:Address>http://cam/onvif/event_service</wsa:Address>
  </wsnt:ProducerReference>
  <wsnt:Message><tt:Message UtcTime="2026-11-26T10:00:00Z" PropertyOperation="Changed">
   <tt:Data><tt:SimpleItem Name="IsMotion" Value="true"/><tt:SimpleItem Name="T"
    Value="xs:boolean"/></tt:Data></tt:Message></wsnt:Message>
 </wsnt:NotificationMessage></wsnt:Notify></s:Body></s:Envelope>"""


def _nm(xml: str = NOTIFY) -> etree._Element:
    return etree.fromstring(xml.encode()).find(f".//{{{WSNT}}}NotificationMessage")


def test_a_notification_message_becomes_an_event():
    e = read_notification(_nm(), "cam1", "http://fallback")
    assert not isinstance(e, str)
    assert e.topic == MOTION and e.topic_text == "tns1:RuleEngine/CellMotionDetector/Motion"
    assert e.producer == "http://cam/onvif/event_service" and e.producer_epr is not None
    # the payload stands alone: its own declarations, also for a QName in an attribute
    assert e.message.getparent() is None
    xml = etree.tostring(e.message).decode()
    assert xml.startswith("<tt:Message") and 'xmlns:xs="http://www.w3.org/2001/XMLSchema"' in xml
    assert "xmlns:wsnt" not in xml
    # no ProducerReference: the camera's event service
    no_prod = NOTIFY.replace("wsnt:ProducerReference>", "wsnt:Other>")
    e2 = read_notification(_nm(no_prod), "cam1", "http://fallback")
    assert not isinstance(e2, str) and e2.producer == "http://fallback"


def test_unusable_notification_messages_say_why():
    assert "without wsnt:Topic" in str(
        read_notification(_nm(NOTIFY.replace("Topic", "Tpc")), "c", "")
    )
    two = NOTIFY.replace("</tt:Message></wsnt:Message>", "</tt:Message><tt:X/></wsnt:Message>")
    assert "exactly one element" in str(read_notification(_nm(two), "c", ""))


def test_detach_keeps_what_the_copy_needs_only():
    root = etree.fromstring(b'<a xmlns:p="urn:p" xmlns:q="urn:q"><p:b v="q:name"/></a>')
    d = detach(root[0])
    assert d.nsmap == {"p": "urn:p", "q": "urn:q"} and d.getparent() is None
    plain = etree.fromstring(b'<a xmlns:p="urn:p" xmlns:q="urn:q"><p:b/></a>')
    assert detach(plain[0]).nsmap == {"p": "urn:p"}


# ---------------------------------------------------------------- topic sets
TOPIC_SET = f"""<wstop:TopicSet xmlns:wstop="http://docs.oasis-open.org/wsn/t-1"
  xmlns:tt="{TT}" xmlns:tns1="{TNS1}" xmlns:ax="urn:axis">
 <tns1:RuleEngine><CellMotionDetector><Motion wstop:topic="true">
   <tt:MessageDescription IsProperty="true"><tt:Data>
   <tt:SimpleItemDescription Name="IsMotion" Type="xs:boolean"/></tt:Data>
   </tt:MessageDescription></Motion></CellMotionDetector></tns1:RuleEngine>
 <tns1:VideoSource><tns1:MotionAlarm wstop:topic="true"/></tns1:VideoSource>
 <ax:Storage><tns1:Alert wstop:topic="true"/></ax:Storage>
</wstop:TopicSet>"""


def test_a_topic_set_with_its_quirks():
    found, skipped = read_topic_set(etree.fromstring(TOPIC_SET.encode()))
    assert not skipped
    by = {str(t.topic): t for t in found}
    assert set(by) == {
        str(MOTION),
        str(topics.ConcreteTopic(TNS1, ("VideoSource", "MotionAlarm"))),  # qualified child
        str(topics.ConcreteTopic("urn:axis", ("Storage", "{" + TNS1 + "}Alert"))),
    }
    m = by[str(MOTION)]
    assert m.is_property and m.description is not None and m.prefixes == {TNS1: "tns1"}
    ext = by[str(topics.ConcreteTopic("urn:axis", ("Storage", "{" + TNS1 + "}Alert")))]
    assert ext.prefixes == {"urn:axis": "ax", TNS1: "tns1"}


def test_a_topic_set_without_topic_markers_has_its_leaves_as_topics():
    unmarked = TOPIC_SET.replace(' wstop:topic="true"', "")
    found, _ = read_topic_set(etree.fromstring(unmarked.encode()))
    assert len(found) == 3 and read_topic_set(None) == ([], [])


def test_a_hostile_topic_set_is_bounded():
    deep = "<x>" * 70 + "</x>" * 70
    doc = (
        '<wstop:TopicSet xmlns:wstop="http://docs.oasis-open.org/wsn/t-1" xmlns:a="urn:a">'
        f"<a:r>{deep}</a:r></wstop:TopicSet>"
    )
    found, skipped = read_topic_set(etree.fromstring(doc.encode()))
    assert all(len(t.topic.path) <= 64 for t in found) and skipped


# ---------------------------------------------------------------- timing
def test_a_lease_is_the_cameras_own_difference_whatever_its_clock():
    cam = datetime(2020, 1, 1, tzinfo=UTC)  # a camera 6 years behind
    lease = lease_of(100.0, cam, cam + timedelta(seconds=60), 60)
    assert lease.granted == 60 and lease.expires == 160 and lease.renew_at(0.5) == 130
    assert lease.camera_time(110.0) == cam + timedelta(seconds=10)
    assert not relative_is_broken(lease, 60)
    assert relative_is_broken(lease_of(0, cam, cam + timedelta(seconds=10), 60), 60)
    # only TerminationTime: against our clock corrected by the known skew
    now = datetime(2026, 1, 1, tzinfo=UTC)
    only = lease_of(0, None, now + timedelta(seconds=3600 + 50), 60, timedelta(hours=1), now)
    assert only.granted == 50
    assert lease_of(0, None, None, 60).granted == 60


def test_requests_are_relative_unless_the_camera_needs_absolute():
    assert request_time(60, None) == "PT60S"
    t = datetime(2026, 11, 26, 10, 0, 0, 500_000, tzinfo=UTC)
    assert request_time(60, t) == "2026-11-26T10:01:00Z"


def test_backoff_grows_with_jitter_and_resets():
    b = Backoff(1.0, 8.0)
    waits = [b.next(rand=1.0) for _ in range(6)]
    assert waits == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    b.reset()
    assert b.next(rand=0.0) == 1.0 and 2.0 <= Backoff(1.0, 8.0, 2).next(rand=0.0) <= 4.0


# ---------------------------------------------------------------- configuration
def test_a_camera_option_with_credentials_in_the_url():
    c = parse_option("front-door=http://admin:p%40ss@192.168.1.20:8000/")
    assert (c.id, c.address, c.user, c.password) == (
        "front-door",
        "http://192.168.1.20:8000",
        "admin",
        "p@ss",
    )
    assert "p@ss" not in repr(c)
    for bad in ("front", "=http://x", "1x=http://x", "a=ftp://x", "a b=http://x"):
        with pytest.raises(ValueError):
            parse_option(bad)


def test_a_config_file_for_many_cameras(tmp_path: Path):
    (tmp_path / "gate.pw").write_text("s3cret\n")
    f = tmp_path / "cameras.json"
    f.write_text(
        json.dumps(
            {
                "cameras": [
                    {
                        "id": "front",
                        "address": "http://10.0.0.5",
                        "user": "admin",
                        "password_file": "gate.pw",
                        "mode": "notify",
                        "lifetime": 120,
                    },
                    {"id": "back", "address": "http://u:p@10.0.0.6"},
                ]
            }
        )
    )
    front, back = load_file(f)
    assert (front.password, front.mode, front.lifetime) == ("s3cret", "notify", 120.0)
    assert (back.user, back.password, back.mode) == ("u", "p", "auto")
    for cams, why in (
        ([{"id": "a", "address": "http://x"}] * 2, "given twice"),
        ([{"id": "a", "address": "http://x", "colour": 1}], "unknown field"),
        ([{"id": "a", "address": "http://x", "mode": "push"}], "mode"),
        ([{"id": "a", "address": "http://x", "lifetime": 1}], "lifetime"),
        ([{"id": "a", "address": "http://x", "lifetime": True}], "lifetime"),
        ([{"id": "a"}], "required"),
        ([{"id": "a", "address": "http://x", "password_file": "nope"}], "password_file"),
    ):
        f.write_text(json.dumps({"cameras": cams}))
        with pytest.raises(ValueError, match=why):
            load_file(f)
    f.write_text("{")
    with pytest.raises(ValueError, match="not JSON"):
        load_file(f)
    assert CameraConfig("a", "http://x").checked().mode == "auto"


# ---------------------------------------------------------------- naming
def test_camera_events_have_their_own_name_and_one_in_the_device_hierarchy():
    dev = device_topic("front-door", MOTION)
    assert dev == topics.ConcreteTopic(
        "urn:wsn-edge:devices",
        ("front-door", "{" + TNS1 + "}RuleEngine", "CellMotionDetector", "Motion"),
    )
    assert camera_topic(dev) == ("front-door", MOTION)
    assert camera_topic(topics.ConcreteTopic("urn:wsn-edge:devices", ("d1", "temperature"))) == (
        "d1",
        topics.ConcreteTopic("", ("temperature",)),
    )
    assert camera_topic(MOTION) is None
    # both names grow into a Topic Set and the filters of docs/gateway.md select them
    ts = topics.TopicSet()
    others = [device_topic("back", MOTION), topics.ConcreteTopic(TNS1, ("Device", "Trigger"))]
    for t in (MOTION, dev, *others):
        ts.grow(t)
    ns = {"dev": "urn:wsn-edge:devices", "tns1": TNS1}

    def sel(dialect: str, text: str) -> set[topics.ConcreteTopic]:
        return set(topics.compile_expression(dialect, text, ns).select(ts))

    assert sel(topics.FULL, "dev:front-door//.") >= {dev} and device_topic(
        "back", MOTION
    ) not in sel(topics.FULL, "dev:front-door//.")
    assert sel(topics.FULL, "dev:*/tns1:RuleEngine/CellMotionDetector/Motion") == {
        dev,
        device_topic("back", MOTION),
    }
    assert sel(topics.CONCRETE, "dev:front-door/tns1:RuleEngine/CellMotionDetector/Motion") == {dev}
    assert sel(topics.CONCRETE, "tns1:RuleEngine/CellMotionDetector/Motion") == {MOTION}
    assert topics.topic_text(dev) == "dev:front-door/tns1:RuleEngine/CellMotionDetector/Motion"


# ---------------------------------------------------------------- cancelling
async def test_a_cancel_in_the_turn_an_exchange_completes_is_not_swallowed():
    """A camera source cancelled (gateway stop) just as a camera's answer arrived must stop.
    On 9656bd0 (asyncio.wait_for on Python 3.11, CPython gh-86296) the exchange's result
    was returned and the cancel lost: the source went on pulling, and a test's teardown
    waited 300 s for it."""
    import asyncio

    from gateway.onvif.client import _call

    loop = asyncio.get_running_loop()
    answer: asyncio.Future[str] = loop.create_future()
    task = asyncio.create_task(_call(answer, 10.0, "PullMessages"))
    await asyncio.sleep(0)  # the task waits for the answer
    answer.set_result("messages")  # the answer arrives ...
    task.cancel()  # ... and, in the same turn, the stop
    with pytest.raises(asyncio.CancelledError):
        await task
