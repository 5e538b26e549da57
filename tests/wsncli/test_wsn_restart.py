"""`wsn sub` rides out a gateway restart, and `wsn rm` ends what an EPR address is (issue
22): on a1410b0 a `wsn sub` long-polling through a gateway restart exited 1 ("left behind
... connection refused") though its pull point survived, and the CLI could not remove an
abandoned pull point. Against real gateway processes on one fixed port and data dir."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from gwtest import WSA, call, start_gateway, stop_gateway
from wsntest import Wsn, status, wsn

from tests.polling import until
from tests.wsdl_actions import action

NS = "tns=urn:wsn-cli-test"


def reading(v: int) -> str:
    return f'<r:Reading xmlns:r="urn:r"><r:value>{v}</r:value></r:Reading>'


def _port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


async def _one_subscription(url: str) -> dict:  # type: ignore[type-arg]
    async def ready() -> dict | None:  # type: ignore[type-arg]
        st = await status(url)
        return st if len(st["subscriptions"]) == 1 else None

    return await until(ready, "one subscription")  # type: ignore[no-any-return]


async def test_sub_keeps_its_pull_point_across_a_restart(tmp_path: Path) -> None:
    port = str(_port())
    gw = start_gateway(tmp_path / "gw", "--port", port)
    sub = await Wsn.start(
        "sub", gw.url, "tns:t", "--ns", NS, "--json", "--count", "4", "--wait", "2",
        "--interval", "0.2",
    )  # fmt: skip
    try:
        before = await _one_subscription(gw.url)
        for v in (1, 2):
            assert (await wsn("pub", gw.url, "tns:t", "--ns", NS, "-m", reading(v))).rc == 0
        stop_gateway(gw)  # SIGTERM, while `wsn sub` long-polls
        gw = start_gateway(tmp_path / "gw", "--port", port)
        for v in (3, 4):  # into the same pull point, which outlived the restart
            assert (await wsn("pub", gw.url, "tns:t", "--ns", NS, "-m", reading(v))).rc == 0
        done = await sub.finish(timeout=60)
        assert done.rc == 0, done
        values = [json.loads(x)["message"] for x in done.out.splitlines()]
        assert values == [reading(v) for v in (1, 2, 3, 4)]
        assert "lost the broker" in done.err and "answers again" in done.err, done.err
        assert "left behind" not in done.err
        # it kept its subscription and pull point, and cleaned them up at the end
        after = await status(gw.url)
        assert after["subscriptions"] == [] and after["pullpoints"] == []
        assert before["pullpoints"][0]["id"]
    finally:
        stop_gateway(gw)


async def test_sub_subscribes_again_when_its_pull_point_is_removed(tmp_path: Path) -> None:
    gw = start_gateway(tmp_path / "gw")
    try:
        sub = await Wsn.start(
            "sub", gw.url, "tns:t", "--ns", NS, "--count", "2", "--wait", "1",
            "--interval", "0.2",
        )  # fmt: skip
        st = await _one_subscription(gw.url)
        pp = st["pullpoints"][0]["address"]
        done = await wsn("rm", pp)  # what an operator does with an abandoned pull point
        assert (done.rc, done.out.strip()) == (0, "removed the pull point"), done
        new = await until(
            lambda: _other_pullpoint(gw.url, pp), "a new pull point made by `wsn sub`"
        )
        assert new
        assert (await wsn("pub", gw.url, "tns:t", "--ns", NS, "-m", reading(1))).rc == 0
        assert (await wsn("pub", gw.url, "tns:t", "--ns", NS, "-m", reading(2))).rc == 0
        done = await sub.finish(timeout=30)
        assert done.rc == 0, done
        assert len(done.out.splitlines()) == 2
        assert "is gone at the broker" in done.err, done.err
    finally:
        stop_gateway(gw)


async def _other_pullpoint(url: str, old: str) -> str | None:
    st = await status(url)
    others = [p["address"] for p in st["pullpoints"] if p["address"] != old]
    return others[0] if others and len(st["subscriptions"]) == 1 else None


async def test_rm_ends_a_subscription_a_pull_point_and_a_registration(tmp_path: Path) -> None:
    gw = start_gateway(tmp_path / "gw")
    try:
        r = await call(
            gw.url, "<wsnt:CreatePullPoint/>", action=action("CreatePullPoint", "CreatePullPoint")
        )
        pp = r.body.findtext(f".//{{{WSA}}}Address")
        body = (
            f"<wsnt:Subscribe><wsnt:ConsumerReference><wsa:Address>{pp}</wsa:Address>"
            "</wsnt:ConsumerReference></wsnt:Subscribe>"
        )
        r = await call(gw.url, body, action=action("NotificationProducer", "Subscribe"))
        sub = r.body.findtext(f".//{{{WSA}}}Address")
        reg_body = (
            "<br:RegisterPublisher><br:PublisherReference><wsa:Address>http://127.0.0.1:9/p"
            "</wsa:Address></br:PublisherReference></br:RegisterPublisher>"
        )
        r = await call(gw.url, reg_body, action=action("RegisterPublisher", "RegisterPublisher"))
        reg = r.body.findtext(
            ".//{http://docs.oasis-open.org/wsn/br-2}PublisherRegistrationReference/"
            f"{{{WSA}}}Address"
        )
        assert pp and sub and reg
        for url, what in (
            (sub, "subscription"),
            (pp, "pull point"),
            (reg, "publisher registration"),
        ):
            done = await wsn("rm", url)
            assert (done.rc, done.out.strip()) == (0, f"removed the {what}"), done
        st = await status(gw.url)
        assert st["subscriptions"] == st["pullpoints"] == st["registrations"] == []
        done = await wsn("rm", pp)  # gone already: every request refused, one line
        assert done.rc == 1 and done.err.startswith("wsn: ") and "ResourceUnknownFault" in done.err
    finally:
        stop_gateway(gw)
