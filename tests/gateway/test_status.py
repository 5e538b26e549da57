"""Operator endpoints and logs (gateway.status, gateway.oplog; issue 14): /status.json
content, who may read /status, /status.json and /metrics, /healthz and /readyz, and the
lifecycle log lines (`--log-format json`) of a real gateway process."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import make_mocked_request
from gwtest import (
    A_NOTIFY,
    A_REG,
    CONCRETE,
    DT,
    WSA,
    Consumer,
    call,
    notify_body,
    reading,
    register_body,
    start_gateway,
    stop_gateway,
    subscribe_body,
    topic_filter,
)

from gateway import app
from gateway.status import STATUS_KEY
from tests.wsdl_actions import action as wsdl_action

PRODUCER = "http://127.0.0.1:9/wsn/producer"  # never called: Demand=false
A_DESTROY = wsdl_action("ImmediateResourceTermination", "Destroy")


async def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.get(url, headers=headers or {}) as r:
        return r.status, await r.text()


async def populate(gw: app.Running, dead: Consumer) -> dict[str, str]:
    """A registered device, a push subscription whose consumer fails (a backlog of 2) and a
    pull point with a subscription into it (depth 2); -> their ids."""
    r = await call(gw.url, register_body(publisher=PRODUCER, device_id="esp32-07"), action=A_REG)
    assert not r.is_fault, r.text
    reg = r.body.findtext(f".//{{{WSA}}}Address") or ""
    r = await call(gw.url, subscribe_body(dead.url, topic_filter("tns:a")))
    assert not r.is_fault, r.text
    sub = (r.body.findtext(f".//{{{WSA}}}Address") or "").rsplit("/", 1)[1]
    r = await call(gw.url, "<wsnt:CreatePullPoint/>")
    pp = r.body.findtext(f".//{{{WSA}}}Address") or ""
    r = await call(gw.url, subscribe_body(pp, topic_filter("tns:a")))
    assert not r.is_fault, r.text
    for i in range(2):
        r = await call(gw.url, notify_body(("tns:a", reading(i))), action=A_NOTIFY)
        assert r.status == 202, r.text
    last = {"registration": reg, "pullpoint": pp}
    return {"subscription": sub, **{k: a.rsplit("/", 1)[1] for k, a in last.items()}}


async def test_status_json_lists_what_the_broker_holds(
    make_gateway: Any, make_consumer: Any
) -> None:
    gw = await make_gateway()
    dead: Consumer = await make_consumer(fail=10**9)
    ids = await populate(gw, dead)
    status, text = await get(f"http://127.0.0.1:{gw.port}/status.json")
    assert status == 200, text
    s = json.loads(text)
    assert {"subscriptions", "registrations", "pullpoints", "landing"} <= set(s)
    (reg,) = s["registrations"]
    assert reg["id"] == ids["registration"] and reg["device_id"] == "esp32-07"
    assert reg["producer"] == "http://127.0.0.1:9/wsn/producer"
    assert reg["topics"] == ["{urn:wsn-edge:devices}esp32-07/temperature"]
    assert reg["state"] == "pushing" and reg["last_seen"] == reg["created"]  # registered
    subs = {x["id"]: x for x in s["subscriptions"]}
    push = subs[ids["subscription"]]
    assert push["consumer"] == dead.url and push["dialect"] == "Concrete"
    assert push["expression"] == "tns:a" and push["raw"] is False and push["paused"] is False
    assert push["backlog"] == 2 and push["expires"]
    (pp,) = s["pullpoints"]
    assert pp["id"] == ids["pullpoint"] and pp["depth"] == 2 and len(pp["subscriptions"]) == 1
    assert s["landing"]["enabled"] is True and s["gateway"]["accepted"] == 2
    # the HTML page shows the same rows
    status, page = await get(f"http://127.0.0.1:{gw.port}/status")
    assert status == 200 and 'http-equiv="refresh"' in page
    for needle in ("esp32-07", ids["subscription"], ids["pullpoint"]):
        assert needle in page


async def test_registration_last_seen_and_backlog_failures(make_gateway: Any) -> None:
    gw = await make_gateway()
    r = await call(gw.url, register_body(publisher=PRODUCER, device_id="d9"), action=A_REG)
    reg_addr = r.body.findtext(f".//{{{WSA}}}Address") or ""
    msg = notify_body(("dt:temperature", reading(1)), nsdecl=DT)
    r = await call(reg_addr, msg, action=A_NOTIFY)
    assert r.status == 202, r.text
    _, text = await get(f"http://127.0.0.1:{gw.port}/status.json")
    (reg,) = json.loads(text)["registrations"]
    assert reg["last_seen"] is not None


async def test_token_guards_status_json_and_metrics(make_gateway: Any) -> None:
    gw = await make_gateway(auth_token="s3cret")
    base = f"http://127.0.0.1:{gw.port}"
    for path in ("/status", "/status.json", "/metrics"):
        status, text = await get(base + path)
        assert status == 401 and "credentials" in text, (path, text)
        status, _ = await get(base + path, {"Authorization": "Bearer wrong"})
        assert status == 401
        status, _ = await get(base + path, {"Authorization": "Bearer s3cret"})
        assert status == 200, path
    for path in ("/healthz", "/readyz"):  # probes stay open
        status, _ = await get(base + path)
        assert status == 200, path


@pytest.mark.parametrize(
    ("peer", "public", "allowed"),
    [("127.0.0.1", False, True), ("::1", False, True), ("192.0.2.7", False, False),
     ("192.0.2.7", True, True)],
)  # fmt: skip
async def test_loopback_only_unless_status_public(
    make_gateway: Any, peer: str, public: bool, allowed: bool
) -> None:
    """The policy as such; a non-loopback peer can only be simulated here (tests use
    loopback addresses only), so the request object says where it came from."""
    gw = await make_gateway(status_public=public)
    web_app = gw.runner.app
    transport: Any = type("T", (), {"get_extra_info": lambda self, k, d=None: (peer, 5000)})()
    req = make_mocked_request("GET", "/status.json", app=web_app, transport=transport)
    resp = await web_app[STATUS_KEY].status_json(req)
    assert resp.status == (200 if allowed else 403)
    if not allowed:
        assert "--status-public" in resp.text  # type: ignore[attr-defined]


async def test_readyz_reports_an_unwritable_landing_zone(make_gateway: Any, tmp_path: Path) -> None:
    gw = await make_gateway(data_dir=tmp_path / "gw")
    base = f"http://127.0.0.1:{gw.port}"
    assert await get(base + "/healthz") == (200, "ok\n")
    assert (await get(base + "/readyz"))[0] == 200
    landing = tmp_path / "gw" / "landing"
    shutil.rmtree(landing)
    landing.write_text("not a directory")
    status, text = await get(base + "/readyz")
    assert status == 503 and "landing" in text
    landing.unlink()
    landing.mkdir()
    assert (await get(base + "/readyz"))[0] == 200


async def test_lifecycle_logs_one_json_line_each_and_no_tracebacks(
    tmp_path: Path, make_consumer: Any
) -> None:
    gwp = start_gateway(tmp_path / "gw", "--log-format", "json", "--min-termination", "0.1",
                        "--sweep-interval", "0.1", "--consumer-dead-after", "0.3")  # fmt: skip
    try:
        c: Consumer = await make_consumer()
        r = await call(gwp.url, register_body(publisher=PRODUCER, device_id="dj"), action=A_REG)
        assert not r.is_fault
        # a Demand=true publisher (not listening: the gateway's attempts fail, logged) and a
        # subscriber for its topic: demand for dev:dk/temperature appears
        body = register_body(publisher="http://127.0.0.1:9/p", device_id="dk", demand=True)
        r = await call(gwp.url, body, action=A_REG)
        assert not r.is_fault, r.text
        r = await call(
            gwp.url,
            subscribe_body(
                "http://127.0.0.1:9/down",
                topic_filter("dev:dk/temperature", CONCRETE, 'xmlns:dev="urn:wsn-edge:devices"'),
            ),
        )
        assert not r.is_fault, r.text
        dead_sub = (r.body.findtext(f".//{{{WSA}}}Address") or "").rsplit("/", 1)[1]
        # its consumer is down: a notification makes the gateway try, and give up at 0.3 s
        r = await call(
            gwp.url,
            notify_body(
                ("dev:dk/temperature", reading(1)), nsdecl='xmlns:dev="urn:wsn-edge:devices"'
            ),
        )
        assert r.status == 202, r.text
        r = await call(gwp.url, subscribe_body(c.url, topic_filter("tns:a")))
        sub_addr = r.body.findtext(f".//{{{WSA}}}Address") or ""
        await call(sub_addr, "<wsnt:Unsubscribe/>")
        r = await call(
            gwp.url,
            subscribe_body(c.url, topic_filter("tns:a"),
                           "<wsnt:InitialTerminationTime>PT0.3S</wsnt:InitialTerminationTime>"),
        )  # fmt: skip
        assert not r.is_fault, r.text
        # client mistakes: not SOAP, not XML, an unknown operation, a bad topic
        async with aiohttp.ClientSession() as s:
            for body, ctype in [(b"hello", "text/plain"), (b"<a><b>", "application/soap+xml"),
                                (b"\x00\xff" * 10, "application/soap+xml")]:  # fmt: skip
                async with s.post(gwp.url, data=body, headers={"Content-Type": ctype}) as resp:
                    assert 400 <= resp.status < 500
        r = await call(gwp.url, notify_body(("tns:*", reading(1)), dialect=CONCRETE))
        assert r.is_fault
        # the expiry sweep and the dead consumer (a few backoffs past 0.3 s)
        for _ in range(200):
            text = gwp.stderr.read_text()
            if '"subscription_expired"' in text and '"reason": "consumer dead"' in text:
                break
            await asyncio.sleep(0.05)
    finally:
        assert stop_gateway(gwp) == 0
    lines = gwp.stderr.read_text().splitlines()
    assert "Traceback" not in "\n".join(lines)
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    events = [r["event"] for r in records if "event" in r]
    assert events.count("registration_created") == 2
    assert events.count("subscription_created") == 3
    assert events.count("subscription_ended") == 2  # Unsubscribe, consumer dead
    assert events.count("subscription_expired") == 1
    dead = [r for r in records if r.get("event") == "consumer_dead"]
    assert [(r["subscription"], r["level"]) for r in dead] == [(dead_sub, "WARNING")]
    demand = [r for r in records if r.get("event") == "demand_changed"]
    # none at registration, one with the subscriber, none again when it ended
    assert [(r["device"], r["demanded"]) for r in demand] == [("dk", d) for d in (0, 1, 0)]
    created = [r for r in records if r.get("event") == "subscription_created"]
    assert [(r["consumer"], r["expression"]) for r in created] == [
        ("http://127.0.0.1:9/down", "dev:dk/temperature"),
        (c.url, "tns:a"),
        (c.url, "tns:a"),
    ]
    assert created[1]["level"] == "INFO" and created[1]["time"].endswith("Z")


async def test_restored_registrations_and_destroyed_subscriptions_are_logged_as_such(
    make_gateway: Any, make_consumer: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A registration reloaded at start is `registration_restored`, not a second
    `registration_created`; a subscription ended by wsrf-rl:Destroy (WS-ResourceLifetime
    1.2 §4.1) is `subscription_ended` with reason=Destroy, by Unsubscribe reason=Unsubscribe."""
    c: Consumer = await make_consumer()
    data = tmp_path / "gw"

    def events(name: str) -> list[Any]:
        return [r for r in caplog.records if getattr(r, "wsn_event", None) == name]

    with caplog.at_level(logging.INFO, logger="gateway.events"):
        gw = await make_gateway(data_dir=data)
        r = await call(gw.url, register_body(publisher=PRODUCER, device_id="dr"), action=A_REG)
        assert not r.is_fault, r.text
        addrs = []
        for _ in range(2):
            r = await call(gw.url, subscribe_body(c.url, topic_filter("tns:a")))
            assert not r.is_fault, r.text
            addrs.append(r.body.findtext(f".//{{{WSA}}}Address") or "")
        r = await call(addrs[0], "<wsnt:Unsubscribe/>")
        assert not r.is_fault, r.text
        r = await call(addrs[1], "<rl:Destroy/>", action=A_DESTROY)
        assert not r.is_fault, r.text
        assert [e.wsn_fields["reason"] for e in events("subscription_ended")] == [
            "Unsubscribe",
            "Destroy",
        ]
        await gw.stop()
        gw2 = await make_gateway(data_dir=data)  # reloads the registration
        assert len(gw2.state.registrations) == 1
    created, restored = events("registration_created"), events("registration_restored")
    assert [e.wsn_fields["device"] for e in created] == ["dr"]
    assert [e.wsn_fields["device"] for e in restored] == ["dr"]
    assert restored[0].wsn_fields["registration"] == created[0].wsn_fields["registration"]


async def test_status_page_escapes_what_clients_sent(make_gateway: Any) -> None:
    """Publisher addresses and device ids come from clients: the page shows them as text,
    never as markup (jinja2 autoescape)."""
    gw = await make_gateway()
    body = register_body(
        publisher="http://127.0.0.1:9/p?q=&lt;script&gt;alert(1)&lt;/script&gt;",
        device_id="d&lt;i&gt;1",
    )
    r = await call(gw.url, body, action=A_REG)
    assert not r.is_fault, r.text
    status, page = await get(f"http://127.0.0.1:{gw.port}/status")
    assert status == 200
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
