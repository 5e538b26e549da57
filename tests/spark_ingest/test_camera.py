"""Camera events in Spark (issue 25, point 3): ONVIF property events, landed by the gateway
as its contract says (docs/design.md, "Landing zone"; the payload is the camera's
tt:Message), become `camera_events` rows and, per camera, topic, source, item and window,
`camera_states` rows: the events, the changes, and how long a boolean state was true.
The messages are built from the ONVIF schema's own names (onvif.xsd, shipped by
onvif-zeep-async), not from this project's reading of it."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from ingest_data import T0, Bad, new_database, steady, write_zone
from lxml import etree

from spark_ingest.batch import run_batch
from spark_ingest.camera_xml import MESSAGE_TYPE, TOPICS_NS, TT
from spark_ingest.synth import Message

pytestmark = pytest.mark.spark

XS = "{http://www.w3.org/2001/XMLSchema}"
MOTION = "RuleEngine/CellMotionDetector/Motion"
CAMERA = "cam-01"


def _schema() -> dict[str, Any]:
    """Names of tt:Message and its parts, read from onvif.xsd."""
    import onvif

    xsd = etree.parse(str(Path(onvif.__file__).parent / "wsdl" / "onvif.xsd"))
    assert xsd.getroot().get("targetNamespace") == TT
    msg = xsd.find(f".//{XS}element[@name='Message']")
    items = xsd.find(f".//{XS}complexType[@name='ItemList']")
    simple = items.find(f".//{XS}element[@name='SimpleItem']")
    ops = xsd.find(f".//{XS}simpleType[@name='PropertyOperation']")
    assert msg is not None and simple is not None and ops is not None
    return {
        "message": msg.get("name"),
        "lists": [e.get("name") for e in msg.iterfind(f".//{XS}sequence/{XS}element")],
        "attrs": [a.get("name") for a in msg.iterfind(f"./{XS}complexType/{XS}attribute")],
        "item": simple.get("name"),
        "item_attrs": [a.get("name") for a in simple.iterfind(f".//{XS}attribute")],
        "ops": [e.get("value") for e in ops.iterfind(f".//{XS}enumeration")],
    }


S = _schema()


def onvif_event(
    n: int, sec: float, op: str, value: str, *, camera: str = CAMERA, topic: str = MOTION
) -> Message:
    """A camera's motion event as the gateway lands it."""
    assert op in S["ops"]
    source, _key, data = S["lists"][:3]
    utc_time, prop_op = S["attrs"]
    name, val = S["item_attrs"]
    at = T0 + timedelta(seconds=sec)
    m = etree.Element(f"{{{TT}}}{S['message']}", nsmap={"tt": TT})
    m.set(utc_time, at.strftime("%Y-%m-%dT%H:%M:%SZ"))
    m.set(prop_op, op)
    for parent, items in (
        (source, [("VideoSourceConfigurationToken", "VideoSourceToken"), ("Rule", "MyMotion")]),
        (data, [("IsMotion", value)]),
    ):
        el = etree.SubElement(m, f"{{{TT}}}{parent}")
        for k, v in items:
            it = etree.SubElement(el, f"{{{TT}}}{S['item']}")
            it.set(name, k)
            it.set(val, v)
    fields = {
        utc_time: m.get(utc_time),
        prop_op: op,
        name: "VideoSourceConfigurationToken",
        val: "VideoSourceToken",
    }  # fmt: skip  (leaves by local name, first one wins)
    return Message(
        id=f"cam{n:04d}", received_at=at, producer="http://127.0.0.1:9800/onvif/events",
        topic_path=topic, fields=fields, topic_namespace=TOPICS_NS, message_type=MESSAGE_TYPE,
        payload=etree.tostring(m).decode(), device_id=camera, gateway_id="gw-c",
        event_time=None,
    )  # fmt: skip


# false at 0 (a new subscription's Initialized), true 20..50 and 70..130
EVENTS = [(0, "Initialized", "false"), (20, "Changed", "true"), (50, "Changed", "false"),
          (70, "Changed", "true"), (130, "Changed", "false")]  # fmt: skip
SOURCE = "VideoSourceConfigurationToken=VideoSourceToken;Rule=MyMotion"


def _states(spark: Any, db: str) -> dict[datetime, Any]:
    rows = spark.table(f"{db}.camera_states").collect()
    assert {(r["device_id"], r["topic_path"], r["source"], r["item"]) for r in rows} == {
        (CAMERA, MOTION, SOURCE, "IsMotion")
    }
    return {r["window_start"]: r for r in rows}


@pytest.fixture(scope="module")
def camera_run(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run over the camera's events, a bad event and a thermometer at the same site (the
    site's newest message, at 150 s, bounds the last state); the tests below only read it."""
    root, db = tmp_path_factory.mktemp("camera"), new_database()
    events = [onvif_event(i, s, op, v) for i, (s, op, v) in enumerate(EVENTS)]
    bad = Bad(onvif_event(99, 5, "Changed", "true").to_json().replace("<tt:Data", "<tt:Data <"),
              "bad_camera_event")  # fmt: skip
    readings = steady(0, 160, devices=("esp32-01",))
    write_zone(root / "landing", [[*events, bad, *readings]])
    s = run_batch(spark, str(root / "landing"), str(root / "out"), database=db)
    return {"db": db, "summary": s}


def test_motion_events_become_states_per_window(spark: Any, camera_run: dict[str, Any]) -> None:
    db, s = camera_run["db"], camera_run["summary"]
    assert s.quarantined == {"bad_camera_event": 1}
    ev = spark.table(f"{db}.camera_events").collect()
    assert sorted((r["at"], r["operation"], r["item"], r["value"], r["source"]) for r in ev) == [
        ((T0 + timedelta(seconds=t)).replace(tzinfo=None), op, "IsMotion", v, SOURCE)
        for t, op, v in EVENTS
    ]
    st = _states(spark, db)
    w = [T0.replace(tzinfo=None) + timedelta(minutes=k) for k in range(3)]
    got = [(st[x]["events"], st[x]["changes"], st[x]["true_s"], st[x]["known_s"]) for x in w]
    assert got == [(3, 2, 30.0, 60.0), (1, 1, 50.0, 60.0), (1, 1, 10.0, 30.0)]
    assert [st[x]["value_at_start"] for x in w] == ["false", "false", "true"]
    assert [st[x]["last_value"] for x in w] == ["false", "true", "false"]
    # cameras are devices, with no period or gaps (they speak when something happens)
    cams = [r for r in spark.table(f"{db}.devices").collect() if r["device_id"] == CAMERA]
    assert cams[0]["messages"] == 5 and cams[0]["gap_count"] == 0
    assert cams[0]["period_s"] is None


def test_a_later_event_updates_the_states_of_an_earlier_run(
    spark: Any, tmp_path: Path, camera_run: dict[str, Any]
) -> None:
    """The event that ends a state arrives in a later file: the windows it spans are
    updated, and equal one run over every event at once (camera_run's: the same events and
    readings in one file, and a bad event, quarantined; its states are checked value by
    value above)."""
    landing, db = tmp_path / "landing", new_database()
    events = [onvif_event(i, s, op, v) for i, (s, op, v) in enumerate(EVENTS)]
    out = tmp_path / "out"
    write_zone(landing, [[*events[:4], *steady(0, 100, devices=("esp32-01",))]])
    run_batch(spark, str(landing), str(out), database=db)
    w1 = T0.replace(tzinfo=None) + timedelta(minutes=1)
    assert _states(spark, db)[w1]["true_s"] == 20.0  # true since 70 s, evidence until 90 s
    write_zone(landing, [[events[4], *steady(100, 160, devices=("esp32-01",))]], first_seq=2)
    run_batch(spark, str(landing), str(out), database=db)
    full = camera_run["db"]
    cols = [c for c in spark.table(f"{db}.camera_states").columns if c != "site"]
    assert sorted(map(repr, spark.table(f"{db}.camera_states").select(*cols).collect())) == sorted(
        map(repr, spark.table(f"{full}.camera_states").select(*cols).collect())
    )
    assert _states(spark, db)[w1]["true_s"] == 50.0


def test_the_documented_camera_query_runs(spark: Any, camera_run: dict[str, Any]) -> None:
    import re

    docs = (Path(__file__).resolve().parents[2] / "docs" / "spark_ingest.md").read_text()
    (query,) = re.findall(r"```sql camera\n(.*?)```", docs, re.S)
    rows = spark.sql(query.replace("wsn.", f"{camera_run['db']}.")).collect()
    assert [(r["device_id"], r["motion_minutes"], r["changes"]) for r in rows] == [(CAMERA, 1.5, 4)]


def test_a_windows_state_times_are_the_same_however_its_events_were_read(
    spark: Any, tmp_path: Path
) -> None:
    """Adding doubles depends on the order: `known_s` and `true_s` of a window crossed by
    several states, at times with fractions of a second, are the same bits after two
    incremental runs as after one full run."""
    timed = [(0.0, "Initialized", "false"), (20.1, "Changed", "true"), (33.7, "Changed", "false"),
             (41.3, "Changed", "true"), (52.9, "Changed", "false")]  # fmt: skip
    events = [onvif_event(i, s, op, v) for i, (s, op, v) in enumerate(timed)]
    landing, db, full = tmp_path / "landing", new_database(), new_database()
    write_zone(landing, [[*events[:3], *steady(0, 40, devices=("esp32-01",))]])
    run_batch(spark, str(landing), str(tmp_path / "out"), database=db)
    write_zone(landing, [[*events[3:], *steady(40, 160, devices=("esp32-01",))]], first_seq=2)
    run_batch(spark, str(landing), str(tmp_path / "out"), database=db)
    run_batch(spark, str(landing), str(tmp_path / "full"), database=full, full=True)
    w0 = T0.replace(tzinfo=None)
    got = {
        d: (_states(spark, d)[w0]["known_s"], _states(spark, d)[w0]["true_s"]) for d in (db, full)
    }
    # the nearest doubles to the exact sums: 60 s known, 13.6 + 11.6 s true
    assert got[db] == got[full] == (60.0, 25.2), got
