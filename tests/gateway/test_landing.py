"""Landing zone (design.md contract): JSON lines, hidden temporary names, rotation by
size and age, recovery of a file a crash left behind."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

from gwtest import call, notify_body, reading

from gateway import landing
from gateway.storage import AcceptBatch, Storage

NAME = re.compile(r"^landing-\d{8}T\d{6}-\d+\.jsonl$")


def _lines(d: Path) -> list[dict]:  # type: ignore[type-arg]
    out = []
    for p in sorted(d.glob("landing-*.jsonl")):
        assert NAME.match(p.name), p.name
        out.extend(json.loads(line) for line in p.read_text().splitlines())
    return out


async def test_records_follow_the_contract_and_rotate_by_age(make_gateway, tmp_path):
    gw = await make_gateway(data_dir=tmp_path / "d", landing_max_age=0.3, gateway_id="site-7")
    r = await call(
        gw.url,
        notify_body(
            ("tns:a/b", reading(21.5, "esp32-01")),
            (None, "<plain>7</plain>"),
            producer="http://127.0.0.1:1/p",
        ),
    )
    assert r.status == 202
    d = tmp_path / "d" / "landing"
    for _ in range(50):
        await asyncio.sleep(0.05)
        if len(_lines(d)) == 2:
            break
    recs = _lines(d)
    assert len(recs) == 2
    a, b = recs
    assert set(a) == {
        "id",
        "received_at",
        "producer",
        "topic_namespace",
        "topic_path",
        "message_type",
        "fields",
        "payload",
        "device_id",
        "gateway_id",
        "event_time",
    }
    assert re.fullmatch(r"[0-9a-f]{32}", a["id"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", a["received_at"])
    assert a["producer"] == "http://127.0.0.1:1/p"
    assert a["topic_namespace"] == "urn:test" and a["topic_path"] == "a/b"
    assert a["message_type"] == "{urn:wsn-edge:reading}Reading"
    assert a["fields"] == {
        "device": "esp32-01",
        "value": "21.5",
        "unit": "Cel",
        "time": "2026-11-21T05:00:00Z",
    }
    # only the declaration the payload uses, none of the envelope's (issue 15)
    assert a["payload"] == reading(21.5, "esp32-01")
    assert a["event_time"] == "2026-11-21T05:00:00.000000Z"
    assert a["gateway_id"] == b["gateway_id"] == "site-7"
    assert a["device_id"] is None  # not a registered device
    assert b["topic_namespace"] is None and b["topic_path"] is None
    assert b["message_type"] == "plain" and b["fields"] == {"plain": "7"}
    assert b["payload"] == "<plain>7</plain>" and b["event_time"] is None
    # nothing hidden stays behind once the age passed
    await asyncio.sleep(0.5)
    assert not list(d.glob(".landing-*"))


async def test_rotation_by_size(make_gateway, tmp_path):
    gw = await make_gateway(data_dir=tmp_path / "d", landing_max_bytes=600, landing_max_age=30)
    for v in range(6):
        assert (await call(gw.url, notify_body(("tns:t", reading(v))))).status == 202
        await asyncio.sleep(0.02)
    await gw.stop()  # graceful stop publishes the open file
    d = tmp_path / "d" / "landing"
    files = sorted(d.glob("landing-*.jsonl"))
    assert len(files) >= 3
    recs = _lines(d)
    assert [r["fields"]["value"] for r in recs] == [str(v) for v in range(6)]
    assert not list(d.glob(".landing-*"))


async def test_recovery_of_a_torn_temporary_file(tmp_path):
    st = Storage(tmp_path / "db.sqlite3")
    st.open()
    try:
        lines = [json.dumps({"id": f"id{i}", "payload": "<x/>"}) for i in range(3)]
        await st.accept(AcceptBatch(landing=[(f"id{i}", ln) for i, ln in enumerate(lines)]))
        d = tmp_path / "landing"
        d.mkdir()
        # crash after id0 and id1 reached the file, in the middle of a third line
        tmp = d / ".landing-20260101T000000-000001.jsonl.tmp"
        tmp.write_text(lines[0] + "\n" + lines[1] + "\n" + lines[2][:10])
        w = landing.LandingWriter(d, st, max_age=0.1)
        w.recover()
        assert not tmp.exists()
        published = d / "landing-20260101T000000-000001.jsonl"
        assert published.read_text().splitlines() == lines[:2]
        # what is left in the outbox is exactly the line that was not on disk
        assert [r[1] for r in await st.landing_pending(10)] == ["id2"]
        await w.flush()
        await asyncio.sleep(0)
        w._rotate()
        ids = [r["id"] for r in _lines(d)]
        assert sorted(ids) == ["id0", "id1", "id2"]
        # new files never reuse a name
        assert len(list(d.glob("landing-*.jsonl"))) == 2
    finally:
        st.close()


async def test_stop_during_a_slow_append_writes_each_line_once(make_gateway, tmp_path, monkeypatch):
    """SIGTERM while the writer thread is inside write+fsync: stop() must let that flush
    finish and record it, not cancel it and write the same outbox rows again."""
    orig = landing.LandingWriter._append

    def slow_append(self: landing.LandingWriter, data: bytes) -> None:
        time.sleep(0.3)
        orig(self, data)

    monkeypatch.setattr(landing.LandingWriter, "_append", slow_append)
    gw = await make_gateway(data_dir=tmp_path / "d", landing_max_age=30)
    assert (await call(gw.url, notify_body(("tns:t", reading(1))))).status == 202
    await asyncio.sleep(0.1)  # the writer is now inside _append, in its thread
    await gw.stop()  # what SIGTERM does
    d = tmp_path / "d" / "landing"
    ids = [r["id"] for r in _lines(d)]
    assert len(ids) == 1, ids
    assert not list(d.glob(".landing-*"))


async def test_a_second_stop_is_quiet_and_loses_nothing(make_gateway, tmp_path, caplog):
    # a test (or an operator's wrapper) that stops the gateway itself, then its fixture
    # again, used to get "final landing flush failed" from the second flush on a closed store
    gw = await make_gateway(data_dir=tmp_path / "d")
    r = await call(gw.url, notify_body(("tns:a", reading(1.0)), producer="http://127.0.0.1:1/p"))
    assert r.status == 202
    await gw.stop()
    with caplog.at_level("ERROR"):
        await gw.stop()
    assert [rec.getMessage() for rec in caplog.records if rec.levelname == "ERROR"] == []
    assert len(_lines(tmp_path / "d" / "landing")) == 1
