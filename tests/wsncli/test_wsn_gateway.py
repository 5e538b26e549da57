"""`wsn` against a real gateway process (issue 14): sub with Full-dialect wildcards,
--json, --count, Ctrl-C and --push, each cleaned up at the gateway; pub (one message or
one per stdin line); pull, renew, pause, resume, unsubscribe, topics, ls; one-line errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gwtest import WSA, GatewayProcess, call, start_gateway, stop_gateway
from wsntest import Wsn, wsn

from tests.polling import until

NS = "tns=urn:wsn-cli-test"
A_GET_MESSAGES = "http://docs.oasis-open.org/wsn/bw-2/PullPoint/GetMessagesRequest"


def reading(v: int) -> str:
    return f'<r:Reading xmlns:r="urn:r"><r:value>{v}</r:value></r:Reading>'


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[GatewayProcess]:
    g = start_gateway(tmp_path / "gw", "--auth-token", "tok")
    yield g
    stop_gateway(g)


async def subscribed(gw: GatewayProcess, n: int = 1) -> dict[str, Any]:
    return await until(lambda: _has_subs(gw, n), f"{n} subscription(s) at the gateway")  # type: ignore[no-any-return]


async def _has_subs(gw: GatewayProcess, n: int) -> dict[str, Any] | None:
    s = await status_tok(gw)
    return s if len(s["subscriptions"]) >= n else None


async def status_tok(gw: GatewayProcess) -> dict[str, Any]:
    import aiohttp

    base = gw.url.rsplit("/wsn/", 1)[0]
    async with (
        aiohttp.ClientSession() as s,
        s.get(base + "/status.json", headers={"Authorization": "Bearer tok"}) as r,
    ):
        assert r.status == 200
        return dict(json.loads(await r.text()))


async def test_sub_full_wildcard_json_count_and_cleanup(gw: GatewayProcess) -> None:
    sub = await Wsn.start(
        "sub", gw.url, "tns:sensors//*", "--dialect", "full", "--ns", NS, "--json",
        "--count", "3", "--token", "tok",
    )  # fmt: skip
    st = await subscribed(gw)
    (s,) = st["subscriptions"]
    assert s["dialect"] == "Full" and s["expression"] == "tns:sensors//*" and s["pullpoint"]
    (pp,) = st["pullpoints"]
    for topic, v in [("tns:sensors/a", 1), ("tns:other/x", 99), ("tns:sensors/b/c", 2)]:
        done = await wsn("pub", gw.url, topic, "--ns", NS, "-m", reading(v))
        assert (done.rc, done.err) == (0, ""), done
    # two more in one go from stdin: only the first is still needed
    more = f"{reading(3)}\n\n{reading(4)}\n".encode()
    done = await wsn("pub", gw.url, "tns:sensors/d", "--ns", NS, "-m", "-", stdin=more)
    assert done.rc == 0, done
    res = await sub.finish()
    assert res.rc == 0, res
    assert res.err == ""
    rows = [json.loads(line) for line in res.out.splitlines()]
    assert [r["topic"] for r in rows] == ["tns:sensors/a", "tns:sensors/b/c", "tns:sensors/d"]
    assert {r["topic_namespace"] for r in rows} == {"urn:wsn-cli-test"}
    assert [r["message"] for r in rows] == [reading(1), reading(2), reading(3)]
    assert all(r["producer"] == gw.url for r in rows)
    assert all(r["subscription"].endswith("/wsn/subscriptions/" + s["id"]) for r in rows)
    # clean-up, seen by the gateway: no subscription, and the pull point is gone
    after = await status_tok(gw)
    assert after["subscriptions"] == [] and after["pullpoints"] == []
    gone = await call(pp["address"], "<wsnt:GetMessages/>", action=A_GET_MESSAGES)
    assert gone.is_fault and gone.fault_name == "ResourceUnknownFault"
    assert after["gateway"]["accepted"] == 5


async def test_sub_ctrl_c_cleans_up_and_lines_are_readable(gw: GatewayProcess) -> None:
    sub = await Wsn.start("sub", gw.url, "tns:a", "--ns", NS, "--token", "tok")
    await subscribed(gw)
    assert (await wsn("pub", gw.url, "tns:a", "--ns", NS, "-m", reading(7))).rc == 0
    await until(lambda: _depth_zero_and_accepted(gw), "the message taken by wsn sub")
    sub.interrupt()
    res = await sub.finish()
    assert res.rc == 0 and res.err == "", res
    assert res.out == f"tns:a {reading(7)}\n"
    after = await status_tok(gw)
    assert after["subscriptions"] == [] and after["pullpoints"] == []


async def _depth_zero_and_accepted(gw: GatewayProcess) -> bool:
    s = await status_tok(gw)
    return s["gateway"]["accepted"] == 1 and all(p["depth"] == 0 for p in s["pullpoints"])


async def test_sub_push_consumer_raw(gw: GatewayProcess) -> None:
    sub = await Wsn.start(
        "sub", gw.url, "tns:a", "--ns", NS, "--push", "127.0.0.1:0", "--raw", "--count", "1",
        "--token", "tok",
    )  # fmt: skip
    st = await subscribed(gw)
    (s,) = st["subscriptions"]
    assert s["raw"] is True and s["consumer"].startswith("http://127.0.0.1:")
    assert (await wsn("pub", gw.url, "tns:a", "--ns", NS, "-m", reading(5))).rc == 0
    res = await sub.finish()
    assert res.rc == 0 and res.err == "", res
    assert res.out == f"- {reading(5)}\n"  # raw: the payload alone, no topic
    assert (await status_tok(gw))["subscriptions"] == []


async def test_manager_commands_pull_topics_and_ls(gw: GatewayProcess) -> None:
    pp = await call(gw.url, "<wsnt:CreatePullPoint/>")
    pp_addr = pp.body.findtext(f".//{{{WSA}}}Address") or ""
    r = await call(
        gw.url,
        f"<wsnt:Subscribe><wsnt:ConsumerReference><wsa:Address>{pp_addr}</wsa:Address>"
        "</wsnt:ConsumerReference><wsnt:Filter><wsnt:TopicExpression Dialect="
        '"http://docs.oasis-open.org/wsn/t-1/TopicExpression/Concrete" '
        'xmlns:tns="urn:wsn-cli-test">tns:a/b</wsnt:TopicExpression></wsnt:Filter>'
        "</wsnt:Subscribe>",
    )
    sub_addr = r.body.findtext(f".//{{{WSA}}}Address") or ""
    tok = ("--token", "tok")
    assert (await wsn("pause", sub_addr, *tok)).out == "paused\n"
    assert (await status_tok(gw))["subscriptions"][0]["paused"] is True
    assert (await wsn("resume", sub_addr, *tok)).out == "resumed\n"
    assert (await status_tok(gw))["subscriptions"][0]["paused"] is False
    renewed = await wsn("renew", sub_addr, "PT2H", *tok)
    assert renewed.rc == 0 and renewed.out.startswith("renewed until 20"), renewed
    for v in (1, 2):
        assert (await wsn("pub", gw.url, "tns:a/b", "--ns", NS, "-m", reading(v))).rc == 0
    pulled = await wsn("pull", pp_addr, "--max", "1", "--json")
    assert [json.loads(x)["message"] for x in pulled.out.splitlines()] == [reading(1)]
    topics = await wsn("topics", gw.url)
    assert topics.rc == 0 and topics.out.splitlines() == ["urn:wsn-cli-test", "  a", "    b *"]
    ls = await wsn("ls", gw.url, *tok)
    assert ls.rc == 0 and "subscriptions (1)" in ls.out and "depth=1" in ls.out, ls
    assert (await wsn("unsubscribe", sub_addr, *tok)).out == "unsubscribed\n"
    assert (await status_tok(gw))["subscriptions"] == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("sub", "http://127.0.0.1:9/wsn/broker", "tns:a", "--ns", NS), "cannot connect"),
        (("sub", "{gw}", "tns:a"), "add --ns tns="),
        (("pub", "{gw}", "tns:a/*", "--ns", NS, "--dialect", "concrete", "-m", "<x/>"),
         "InvalidTopicExpressionFault"),
        (("pub", "{gw}", "tns:a", "--ns", NS, "-m", "21.5"), "not one XML element"),
        (("unsubscribe", "{sub}"), "needs credentials"),
        (("ls", "{gw}"), "credentials"),
        (("sub", "{gw}", "tns:a", "--ns", NS, "--count", "0"), "whole number"),
    ],
)  # fmt: skip
async def test_errors_are_one_actionable_line(
    gw: GatewayProcess, args: tuple[str, ...], needle: str
) -> None:
    r = await call(
        gw.url,
        "<wsnt:Subscribe><wsnt:ConsumerReference><wsa:Address>http://127.0.0.1:9/c"
        "</wsa:Address></wsnt:ConsumerReference></wsnt:Subscribe>",
    )
    sub_addr = r.body.findtext(f".//{{{WSA}}}Address") or ""
    done = await wsn(*(a.format(gw=gw.url, sub=sub_addr) for a in args))
    assert done.rc in (1, 2) and done.out == "", done
    assert len(done.err.strip().splitlines()) == 1, done.err
    assert needle in done.err and "Traceback" not in done.err


async def test_help_has_examples() -> None:
    for cmd in ((), ("sub",), ("pub",), ("pull",), ("renew",), ("unsubscribe",), ("pause",),
                ("resume",), ("topics",), ("ls",)):  # fmt: skip
        done = await wsn(*cmd, "--help")
        assert done.rc == 0 and "example" in done.out, cmd
