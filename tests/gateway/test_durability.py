"""kill -9 durability: the real `python -m gateway` process is killed and started again on
the same --data-dir; subscriptions, registrations, pull-point messages, pending deliveries
and landing lines are all still there."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from gwtest import (
    BR,
    CONCRETE,
    EDGE,
    WSA,
    WSNT,
    Consumer,
    call,
    notify_body,
    reading,
    subscribe_body,
)

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(data_dir: Path, port: int, *extra: str) -> tuple[subprocess.Popen[str], str]:
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--data-dir",
            str(data_dir),
            "--backoff-initial",
            "0.05",
            "--backoff-max",
            "0.2",
            "--landing-max-age",
            "60",
            *extra,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None
    line = p.stdout.readline()
    if "listening on" not in line:
        p.kill()
        raise AssertionError(
            f"gateway did not start: {line!r} {p.stderr.read() if p.stderr else ''}"
        )
    return p, line.strip().rsplit(" ", 1)[1]


def landing_ids(d: Path) -> list[str]:
    ids = []
    for f in sorted((d / "landing").glob("landing-*.jsonl")):
        ids.extend(json.loads(x)["id"] for x in f.read_text().splitlines())
    return ids


async def test_port_zero_prints_the_chosen_port(tmp_path):
    p, url = start(tmp_path / "d", 0)
    try:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/wsn/broker")
        assert int(url.split(":")[2].split("/")[0]) > 0
        r = await call(url, "<wsnt:CreatePullPoint/>")
        assert r.status == 200
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(10) == 0


async def test_kill_9_and_restart_keeps_everything(tmp_path):
    data = tmp_path / "state"
    port = free_port()
    consumer_port = free_port()
    consumer_url = f"http://127.0.0.1:{consumer_port}/consumer"
    p, url = start(data, port)
    try:
        # a subscription whose consumer is down: deliveries stay pending
        r = await call(url, subscribe_body(consumer_url))
        sub_id = r.body.findtext(f".//{{{EDGE}}}ResourceId")
        # a second subscription of the same consumer (one delivery worker for both)
        r = await call(url, subscribe_body(consumer_url))
        sub_id2 = r.body.findtext(f".//{{{EDGE}}}ResourceId")
        # a pull point fed by a subscription
        r = await call(url, "<wsnt:CreatePullPoint/>")
        pp = r.body.findtext(f"{{{WSNT}}}PullPoint/{{{WSA}}}Address")
        assert (await call(url, subscribe_body(pp or ""))).status == 200
        r = await call(
            url,
            "<br:RegisterPublisher><br:PublisherReference><wsa:Address>"
            "http://127.0.0.1:1/p</wsa:Address></br:PublisherReference>"
            "</br:RegisterPublisher>",
        )
        reg = r.body.findtext(f"{{{BR}}}PublisherRegistrationReference/{{{WSA}}}Address")
        for v in range(20):
            assert (await call(url, notify_body(("tns:t", reading(v))))).status == 202
        await asyncio.sleep(0.3)
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)

    p, url2 = start(data, port)
    consumer = await Consumer().start_on(consumer_port)
    try:
        assert url2 == url
        # subscription and registration still there
        r = await call(
            f"{url.rsplit('/', 2)[0]}/wsn/subscriptions/{sub_id}",
            "<rp:GetResourceProperty>wsnt:ConsumerReference</rp:GetResourceProperty>",
        )
        assert r.status == 200 and r.body.findtext(f".//{{{WSA}}}Address") == consumer_url
        r = await call(
            reg or "", "<rp:GetResourceProperty>br:PublisherReference</rp:GetResourceProperty>"
        )
        assert r.status == 200, r.text
        # all 20 pull-point messages survived
        r = await call(pp or "", "<wsnt:GetMessages/>")
        vals = [m.findtext(".//{urn:wsn-edge:reading}value") for m in r.body]
        assert vals == [str(v) for v in range(20)]
        # current message and grown topic survived too
        r = await call(
            url,
            f'<wsnt:GetCurrentMessage><wsnt:Topic Dialect="{CONCRETE}" xmlns:tns="urn:test">'
            "tns:t</wsnt:Topic></wsnt:GetCurrentMessage>",
        )
        assert r.body.findtext(".//{urn:wsn-edge:reading}value") == "19"
        r = await call(url, "<rp:GetResourceProperty>wstop:TopicSet</rp:GetResourceProperty>")
        assert r.body[0].find("{urn:test}t") is not None
        # the pending deliveries go out now that the consumer is up
        await consumer.wait_for(40, timeout=10)
        got: dict[str, list[str]] = {}
        for m in consumer.messages():
            rid = m.findtext(f"{{{WSNT}}}SubscriptionReference//{{{EDGE}}}ResourceId")
            got.setdefault(rid or "", []).append(m.findtext(".//{urn:wsn-edge:reading}value"))
        assert got == {sub_id: [str(v) for v in range(20)], sub_id2: [str(v) for v in range(20)]}
        assert len(consumer.received) < 40  # batched across the two subscriptions
    finally:
        await consumer.stop()
        p.send_signal(signal.SIGTERM)
        assert p.wait(10) == 0
    # landing: every accepted notification exactly once, in published files
    ids = landing_ids(data)
    assert len(ids) == 20 and len(set(ids)) == 20
    assert not list((data / "landing").glob(".landing-*"))


async def test_startup_failure_is_reported(tmp_path):
    port = free_port()
    p, _ = start(tmp_path / "a", port)
    try:
        q = subprocess.run(
            [
                sys.executable,
                "-m",
                "gateway",
                "--port",
                str(port),
                "--data-dir",
                str(tmp_path / "b"),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert q.returncode != 0 and "wsn-gateway:" in q.stderr
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(10)
    t0 = time.monotonic()
    q = subprocess.run(
        [
            sys.executable,
            "-m",
            "gateway",
            "--topic-namespace",
            str(tmp_path / "missing.xml"),
            "--port",
            "0",
            "--data-dir",
            str(tmp_path / "c"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert q.returncode != 0 and "missing.xml" in q.stderr
    assert time.monotonic() - t0 < 60  # refused, not hung (a loaded start takes seconds)


async def test_kill_9_with_both_landing_formats_lands_each_record_once(tmp_path):
    import pyarrow.parquet as pq

    data = tmp_path / "state"
    port = free_port()
    p, url = start(data, port, "--landing-format", "both")
    try:
        for v in range(20):
            assert (await call(url, notify_body(("tns:t", reading(v))))).status == 202
        await asyncio.sleep(0.2)
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
    p, url = start(data, port, "--landing-format", "both")
    try:
        assert (await call(url, notify_body(("tns:t", reading(20))))).status == 202
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(10) == 0
    ids = landing_ids(data)
    pq_ids = [
        i
        for f in sorted((data / "landing").glob("landing-*.parquet"))
        for i in pq.read_table(f).column("id").to_pylist()
    ]
    assert len(ids) == 21 and len(set(ids)) == 21
    assert sorted(pq_ids) == sorted(ids)
    assert not list((data / "landing").glob(".landing-*"))


async def test_kill_9_after_concurrent_notify_keeps_the_group_commits(tmp_path):
    """Concurrent Notify are committed in groups (storage.Storage._grouped: the rows a
    group shares written once, storage_accept.accept_shared; the landing writer's deletions
    in the same groups). After kill -9 each accepted one is there once, in one order: the
    current message is the last one the pull point got, before the kill and after it."""
    data = tmp_path / "state"
    port = free_port()
    p, url = start(data, port)
    current_xml = (
        f'<wsnt:GetCurrentMessage><wsnt:Topic Dialect="{CONCRETE}" xmlns:tns="urn:test">'
        "tns:t</wsnt:Topic></wsnt:GetCurrentMessage>"
    )
    n = 60
    try:
        r = await call(url, "<wsnt:CreatePullPoint/>")
        pp = r.body.findtext(f"{{{WSNT}}}PullPoint/{{{WSA}}}Address") or ""
        assert (await call(url, subscribe_body(pp))).status == 200
        for burst in range(3):  # the landing writer flushes between and during bursts
            replies = await asyncio.gather(
                *(call(url, notify_body(("tns:t", reading(burst * n + v)))) for v in range(n))
            )
            assert [x.status for x in replies] == [202] * n
        r = await call(url, current_xml)
        current = r.body.findtext(".//{urn:wsn-edge:reading}value")
        await asyncio.sleep(0.3)
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
    p, url = start(data, port)
    try:
        r = await call(url, current_xml)
        assert r.body.findtext(".//{urn:wsn-edge:reading}value") == current
        r = await call(pp, "<wsnt:GetMessages/>")
        vals = [m.findtext(".//{urn:wsn-edge:reading}value") for m in r.body]
        assert sorted(vals, key=int) == [str(v) for v in range(3 * n)]
        assert vals[-1] == current
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(10) == 0
    ids = landing_ids(data)
    assert len(ids) == 3 * n and len(set(ids)) == 3 * n
