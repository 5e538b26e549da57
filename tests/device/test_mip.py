"""The device as people install it (issue 26): MicroPython's own `mip` (frozen into the 64-bit
unix port) installs device/package.json and the optional packages from this checkout served
over HTTP on 127.0.0.1, the way `mpremote mip install` or `mip.install()` on a board does; the
device then boots from what was installed, on the 64-bit and the 32-bit unix port, and answers
over HTTP.

- The default package alone: what a sensor that talks to a gateway needs. A request for a
  feature it does not have gets the fault the specs give for it: wsa:ActionNotSupported for an
  operation, VersionMismatch for a SOAP 1.1 envelope (SOAP 1.2 §5.4.7), 404 for a page.
- The default package and every optional one: the HTTP tests of test_push.py, test_wsrf.py and
  test_topic_namespace.py run again on it (imported below, with `device_install` set to it)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import pytest
from devtest import (
    WSA,
    WSNT,
    Client,
    Consumer,
    DeviceProcess,
    body_child,
    envelope,
    fault_name,
    parse,
    subscribe_body,
)
from gwproc import GW_ARGS, HEARTBEAT, delivered_values, start_gateway_process, subscribe_at_gateway
from packages import DEVICE, ROOT, mip_install, package_files, package_url, serve

# the HTTP tests of the full install: run again here on the tree mip installed
from test_push import (  # noqa: F401
    test_failed_pushes_are_retried_then_given_up,
    test_pause_resume_renew_unsubscribe,
    test_pullpoint_ring_overflow_in_memory,
    test_raw_push_delivers_the_reading_as_body,
    test_topic_filter_selects,
    test_wrapped_push_soap11_carries_references,
)
from test_topic_namespace import test_a_subscriber_gets_the_topics_in_the_devices_namespace  # noqa: F401
from test_wsrf import (  # noqa: F401
    test_a_pull_point_keeps_only_notifications,
    test_destroy_ends_a_pull_point,
    test_subscription_properties_are_what_subscribe_sent,
)

from tests.polling import until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """{"default": the default package installed by mip, "full": with every optional one}"""
    out = {}
    pkgs = package_files()
    with serve(ROOT) as base:
        for name, names in (("default", ["default"]), ("full", sorted(pkgs))):
            t = tmp_path_factory.mktemp(name)
            mip_install(t, [package_url(base, n) for n in names])
            out[name] = t
    yield out


@pytest.fixture
def device_install(trees: dict[str, Path]) -> Path:
    return trees["full"]


def _installed(tree: Path) -> set[str]:
    return {str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file()}


def test_every_file_is_in_one_package() -> None:
    pkgs = package_files()
    assert "default" in pkgs and len(pkgs) > 1
    seen: dict[str, str] = {}
    for name, files in pkgs.items():
        for dest, src in files:
            assert src.is_file(), (name, src)
            assert dest not in seen, f"{dest} is in {seen.get(dest)} and {name}"
            seen[dest] = name
            if name != "default":
                assert dest.startswith(name + "/"), (name, dest)  # its own directory
    every = {str(p.relative_to(DEVICE)) for p in (DEVICE / "wsn").rglob("*.py")}
    assert set(seen) == every | {"main.py", "topics.xml"}


def test_package_json_urls_are_relative() -> None:
    # mip fetches relative URLs from where the package.json is (a served checkout, a git host)
    for pj in DEVICE.rglob("package.json"):
        text = pj.read_text()
        assert "://" not in text and "github:" not in text and "../" not in text, pj


def test_mip_installs_what_each_package_lists(trees: dict[str, Path]) -> None:
    pkgs = package_files()
    for tree, names in ((trees["default"], ["default"]), (trees["full"], list(pkgs))):
        want = {dest: src for n in names for dest, src in pkgs[n]}
        assert _installed(tree) == set(want)
        for dest, src in want.items():
            assert (tree / dest).read_bytes() == src.read_bytes(), dest


def test_one_optional_package_installs_alone(tmp_path: Path) -> None:
    with serve(ROOT) as base:
        out = mip_install(tmp_path, [package_url(base, "wsn/core/current")])
    assert _installed(tmp_path) == {"wsn/core/current/__init__.py"}, out


@pytest.fixture
def start_default(
    interpreter: Path, tmp_path: Path, trees: dict[str, Path]
) -> Iterator[Callable[..., DeviceProcess]]:
    from devtest import launch

    started: list[DeviceProcess] = []

    def start(**overrides: object) -> DeviceProcess:
        return launch(interpreter, tmp_path, started, None, trees["default"], **overrides)

    yield start
    for d in started:
        d.stop()


GRP = (
    '<wsrf-rp:GetResourceProperty xmlns:wsrf-rp="http://docs.oasis-open.org/wsrf/rp-2">'
    "wsnt:TopicExpression</wsrf-rp:GetResourceProperty>"
)


async def test_the_default_package_serves_subscribers(
    start_default: Callable[..., DeviceProcess],
) -> None:
    # readings every 0.3 s (/admin/sample is an optional package)
    dev = start_default(sample_period_s=0.3, sensors=HEARTBEAT)
    raw = await Consumer().start("/raw")
    wrapped = await Consumer().start("/wrapped")
    try:
        async with aiohttp.ClientSession() as s:
            cl = Client(dev, s)
            await cl.subscribe(raw.url, raw=True, topic="dt:heartbeat")
            sub = await cl.subscribe(wrapped.url, topic="dt:heartbeat", itt="PT1M")
            _, data = await raw.next()
            assert body_child(parse(data)).tag == "{urn:wsn-edge:reading}Reading"
            _, data = await wrapped.next()
            assert body_child(parse(data)).tag == f"{{{WSNT}}}Notify"
            for op in ("PauseSubscription", "ResumeSubscription", "Unsubscribe"):
                st, data = await cl.soap(f"<wsnt:{op}/>", sub)
                assert st == 200, data
            st, data = await cl.soap(
                "<wsnt:Renew><wsnt:TerminationTime>PT1M</wsnt:TerminationTime></wsnt:Renew>", sub
            )
            assert fault_name(data) == "ResourceUnknownFault"
            # the tiny pull point
            st, data = await cl.soap("<wsnt:CreatePullPoint/>")
            assert st == 200, data
            pp = body_child(parse(data)).findtext(f"{{{WSNT}}}PullPoint/{{{WSA}}}Address")
            assert pp
            await cl.subscribe(pp, topic="dt:heartbeat")
            await asyncio.sleep(1)
            st, data = await cl.soap("<wsnt:GetMessages/>", pp)
            assert st == 200 and len(body_child(parse(data))) >= 2, data
            # what it does not have: the specs' faults, never a crash
            for body, fault in (
                (GRP, "ActionNotSupported"),
                (
                    '<wsnt:GetCurrentMessage><wsnt:Topic Dialect="http://docs.oasis-open.org'
                    '/wsn/t-1/TopicExpression/Simple">dt:heartbeat</wsnt:Topic>'
                    "</wsnt:GetCurrentMessage>",
                    "ActionNotSupported",
                ),
            ):
                st, data = await cl.soap(body)
                assert st == 400 and fault_name(data) == fault, data
                assert b"needs the package wsn/core/" in data
            st, data = await cl.soap(
                '<wsrf-rl:Destroy xmlns:wsrf-rl="http://docs.oasis-open.org/wsrf/rl-2"/>', pp
            )
            assert st == 400 and fault_name(data) == "ActionNotSupported", data
            async with s.post(
                dev.producer,
                data=envelope(subscribe_body(raw.url), 11),
                headers={"Content-Type": "text/xml"},
            ) as r:
                data = await r.read()
                assert r.status == 500 and b"VersionMismatch" in data, data
                assert b"SOAP 1.1 needs the package wsn/core/compat" in data, data
            for path in ("/status", "/admin/sample"):
                async with s.get(dev.base + path) as r:
                    assert r.status == 404 and b"needs the package wsn/admin" in await r.read()
            async with s.get(dev.base + "/") as r:
                assert r.status == 200
        assert "Traceback" not in dev.output(), dev.output()
    finally:
        await raw.stop()
        await wrapped.stop()


async def test_the_default_package_publishes_through_a_gateway(
    start_default: Callable[..., DeviceProcess], tmp_path: Path
) -> None:
    gw = start_gateway_process(tmp_path / "gw", GW_ARGS, ready_timeout=30)
    consumer = await Consumer().start()
    try:
        dev = start_default(
            gateway=gw.url, gateway_retry_s=0.3, sample_period_s=0.3, sensors=HEARTBEAT
        )
        await dev.await_line(r"^registered at ", 20)
        async with aiohttp.ClientSession() as s:
            await subscribe_at_gateway(s, gw, consumer.url, "dev:dev-test/heartbeat")
        await until(lambda: len(delivered_values(consumer)) >= 3, "3 readings via the gateway", 30)
        got = delivered_values(consumer)
        assert got == sorted(got) and len(set(got)) == len(got), got
        await dev.await_line(r"^status .*gateway=registered", 5)
    finally:
        gw.stop(signal.SIGKILL)
        await consumer.stop()
