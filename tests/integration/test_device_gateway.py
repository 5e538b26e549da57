"""End to end (issue 4): a real gateway process and a real device on the MicroPython unix
port, on 127.0.0.1.

The device registers with Demand=true; the gateway subscribes at the device per topic and
keeps those subscriptions paused until a subscriber at the gateway wants the topic; a
subscriber with a Full expression (`dev:*/temperature`) then receives the readings; a pull
point at the gateway collects them while that subscriber is away; and readings the device
produced while the gateway was stopped (orderly or killed) arrive after it returns, none
lost, none twice, in order.

Readings are identified by their sequence number: the device's simulated temperature sensor
reads 21 + 2 sin(0.1 n) at its n-th sample (device/wsn/device.py, kind sim), so the value of
every reading says which sample it was.
"""

from __future__ import annotations

import asyncio
import math
import signal
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from devtest import Client, DeviceProcess
from gwtest import FULL, WSA, WSNT, Consumer, call, sub_address, subscribe_body

from tests.polling import until

pytestmark = pytest.mark.timeout(240)

DEV_NS = "urn:wsn-edge:devices"
RD = "urn:wsn-edge:reading"
DEVICE_ID = "dev-test"  # devtest.make_config
A_REG_PATH = "/wsn/registrations/"
MAX_SAMPLES = 15


def sample_value(n: int) -> float:
    return 21.0 + 2.0 * math.sin(n * 0.1)


def sequence_of(values: list[float]) -> list[int]:
    """The sample number of each value. 0.1 n stays below pi/2 for n <= 15, so samples
    1..15 are strictly increasing, at least 0.024 apart: the device's 2 decimals tell them
    apart (the test takes fewer than 16 samples)."""
    out: list[int] = []
    for v in values:
        ks = [k for k in range(1, MAX_SAMPLES + 1) if abs(sample_value(k) - v) < 0.0051]
        assert len(ks) == 1, f"value {v} is not one of samples 1..{MAX_SAMPLES}"
        out.append(ks[0])
    return out


def at_least_once(seqs: list[int], expected: range) -> None:
    """Push delivery is at-least-once (a consumer answer lost in a gateway crash means the
    message is sent again after the restart): every expected reading arrived, first
    arrivals in order, nothing else."""
    first = list(dict.fromkeys(seqs))
    assert first == list(expected), f"got {seqs}, want each of {list(expected)} in order"


def readings(msgs: list[Any]) -> list[float]:
    """Temperature values of wsnt:NotificationMessage elements, checking each is a device
    reading on dev:<DEVICE_ID>/temperature."""
    out: list[float] = []
    for nm in msgs:
        topic = nm.find(f"{{{WSNT}}}Topic")
        assert topic is not None and topic.text, "wrapped messages carry wsnt:Topic"
        prefix, _, path = topic.text.strip().partition(":")
        assert topic.nsmap.get(prefix) == DEV_NS, topic.text
        assert path == f"{DEVICE_ID}/temperature", topic.text
        r = nm.find(f"{{{WSNT}}}Message/{{{RD}}}Reading")
        assert r is not None and r.get("device") == DEVICE_ID
        out.append(float(r.findtext(f"{{{RD}}}value") or "nan"))
    return out


async def demand_subs(client: Client) -> dict[str, dict[str, Any]]:
    """The device's subscriptions made by the gateway (consumer = the registration), by
    topic name."""
    st = await client.status()
    out = {}
    for s in st["subscription_list"]:
        if A_REG_PATH in s["consumer"]:
            assert len(s["topics"]) == 1, s  # one subscription per registered topic
            assert s["raw"] is False  # wrapped: the Notify carries the topic
            assert s["topics"][0] not in out, f"two subscriptions for one topic: {st}"
            out[s["topics"][0]] = s
    return out


async def create_pullpoint_subscription(gw_url: str, expr: str) -> str:
    r = await call(gw_url, "<wsnt:CreatePullPoint/>")
    assert r.status == 200, r.text
    pp = r.body.findtext(f"{{{WSNT}}}PullPoint/{{{WSA}}}Address")
    assert pp
    r = await call(gw_url, subscribe_body(pp, full(expr)))
    assert r.status == 200, r.text
    return pp


async def get_messages(pp: str) -> list[Any]:
    r = await call(
        pp, "<wsnt:GetMessages><wsnt:MaximumNumber>1000</wsnt:MaximumNumber></wsnt:GetMessages>"
    )
    assert r.status == 200, r.text
    return list(r.body.iter(f"{{{WSNT}}}NotificationMessage"))


def full(expr: str) -> str:
    return (
        f'<wsnt:TopicExpression Dialect="{FULL}" xmlns:dev="{DEV_NS}">{expr}</wsnt:TopicExpression>'
    )


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGKILL], ids=["stop", "kill"])
async def test_device_gateway_demand_pullpoint_and_restart(
    gateway_process: Callable[..., Any],
    start_device: Callable[..., DeviceProcess],
    make_consumer: Callable[..., Any],
    stop_signal: int,
) -> None:
    gw = gateway_process("--backoff-initial", "0.1", "--backoff-max", "1")
    dev = start_device(gateway=gw.url, gateway_retry_s=0.3, gateway_timeout_s=2, gateway_buffer=64)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as s:
        client = Client(dev, s)
        sampled = 0

        async def sample(k: int) -> None:
            nonlocal sampled
            assert await client.sample("temperature", k) == k
            sampled += k

        # 1. the device registers; the gateway subscribes per topic and pauses (no demand)
        await until(lambda: demand_subs(client), "the gateway's subscriptions at the device", 20)
        await until(
            lambda: _all_paused(client, ("temperature", "humidity", "heartbeat")),
            "three paused demand subscriptions",
            20,
        )
        st = await client.status()
        assert st["gateway"]["state"] == "registered"
        reg = st["gateway"]["registration"]
        assert {x["consumer"] for x in (await demand_subs(client)).values()} == {reg}
        await sample(2)  # nobody wants them: produced, not sent anywhere
        st = await client.status()
        assert st["gateway"]["buffered"] == 0 and st["gateway"]["delivered"] == 0

        # 2. a subscriber with a Full expression: demand -> Resume -> readings arrive
        consumer: Consumer = await make_consumer()
        r = await call(gw.url, subscribe_body(consumer.url, full("dev:*/temperature")))
        assert r.status == 200, r.text
        sub_addr = sub_address(r)
        await until(lambda: _paused_is(client, "temperature", False), "temperature resumed", 20)
        subs = await demand_subs(client)
        assert subs["humidity"]["paused"] and subs["heartbeat"]["paused"]
        first = sampled + 1
        await sample(3)
        await consumer.wait_for(3, timeout=20)
        assert sequence_of(readings(consumer.messages())) == [first, first + 1, first + 2]

        # 3. a pull point collects them while the subscriber is away
        pp = await create_pullpoint_subscription(gw.url, "dev:*/temperature")
        port = int(consumer.url.split(":")[2].split("/")[0])
        await consumer.stop()
        away = sampled + 1
        await sample(4)
        got: list[Any] = []

        async def pulled(n: int) -> bool:
            got.extend(await get_messages(pp))
            return len(got) >= n

        await until(lambda: pulled(4), "4 readings in the pull point", 20)
        assert sequence_of(readings(got)) == list(range(away, away + 4))  # exactly once
        # the subscriber comes back: the gateway delivers what it missed
        back: Consumer = await make_consumer(port)
        await back.wait_for(4, timeout=30)
        at_least_once(sequence_of(readings(back.messages())), range(away, away + 4))
        await asyncio.sleep(0.3)  # let the gateway see the consumer's answers

        # 4. the gateway stops; the device buffers; the gateway returns; nothing is lost
        await asyncio.to_thread(gw.stop, stop_signal)  # the consumer keeps serving meanwhile
        down = sampled + 1
        await sample(5)
        assert sampled <= MAX_SAMPLES
        await until(lambda: _buffered_is(client, 5), "5 readings buffered at the device", 20)
        st = await client.status()
        assert st["gateway"]["dropped"] == 0
        await asyncio.to_thread(gw.restart)
        await until(lambda: _buffered_is(client, 0), "the device's buffer drained", 60)
        await until(
            lambda: set(sequence_of(readings(back.messages()))) >= set(range(away, down + 5)),
            "the 5 at the subscriber",
            30,
        )
        at_least_once(sequence_of(readings(back.messages())), range(away, down + 5))
        await until(lambda: pulled(4 + 5), "the 5 in the pull point too", 20)
        assert sequence_of(readings(got)) == list(range(away, down + 5))  # exactly once
        st = await client.status()
        assert st["gateway"]["dropped"] == 0 and st["gateway"]["state"] == "registered"
        assert st["gateway"]["registration"] == reg  # the registration survived the restart
        # the gateway kept its remote subscriptions: no second set at the device
        subs = await demand_subs(client)
        assert sorted(subs) == ["heartbeat", "humidity", "temperature"]
        assert not subs["temperature"]["paused"]
        await asyncio.sleep(0.5)
        assert len(got) == 4 + 5 and not await get_messages(pp)  # nothing more, nothing twice

        # 5. demand goes away: the gateway (restarted) pauses the remembered subscription
        r = await call(sub_addr, "<wsnt:Unsubscribe/>")
        assert r.status == 200, r.text
        r = await call(pp, "<wsnt:DestroyPullPoint/>")
        assert r.status == 200, r.text
        await until(lambda: _paused_is(client, "temperature", True), "temperature paused", 20)
        assert len(await demand_subs(client)) == 3


async def _all_paused(client: Client, names: tuple[str, ...], *active: str) -> bool:
    """The gateway's subscriptions at the device are exactly `names` (paused) + `active`."""
    subs = await demand_subs(client)
    return (
        sorted(subs) == sorted(names + active)
        and all(subs[n]["paused"] for n in names)
        and not any(subs[n]["paused"] for n in active)
    )


async def _paused_is(client: Client, name: str, paused: bool) -> bool:
    subs = await demand_subs(client)
    return name in subs and subs[name]["paused"] is paused


async def _buffered_is(client: Client, n: int) -> bool:
    st = await client.status()
    return int(st["gateway"]["buffered"]) == n


async def test_device_reboot_is_subscribed_again(
    gateway_process: Callable[..., Any],
    start_device: Callable[..., DeviceProcess],
    make_consumer: Callable[..., Any],
) -> None:
    """The device restarts (its subscriptions are gone, and here its port changes too): it
    registers again with the same device id; the gateway replaces the old registration's
    subscriptions with new ones at the new device, and the subscriber at the gateway keeps
    receiving dev:<id>/temperature without doing anything."""
    gw = gateway_process("--backoff-initial", "0.1", "--backoff-max", "1")
    conf = {"gateway": gw.url, "gateway_retry_s": 0.3, "gateway_timeout_s": 2}
    consumer: Consumer = await make_consumer()
    r = await call(gw.url, subscribe_body(consumer.url, full("dev:*/temperature")))
    assert r.status == 200, r.text
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as s:
        first = Client(start_device(**conf), s)
        await until(lambda: _paused_is(first, "temperature", False), "temperature active", 20)
        assert await first.sample("temperature", 2) == 2
        await consumer.wait_for(2, timeout=20)
        old_reg = (await first.status())["gateway"]["registration"]
        first.dev.stop()  # power cut

        second = Client(start_device(**conf), s)
        assert second.dev.port != first.dev.port
        await until(lambda: _paused_is(second, "temperature", False), "subscribed again", 20)
        await until(
            lambda: _all_paused(second, ("humidity", "heartbeat"), "temperature"),
            "the other topics paused (no demand)",
            20,
        )
        new_reg = (await second.status())["gateway"]["registration"]
        assert new_reg != old_reg
        assert {x["consumer"] for x in (await demand_subs(second)).values()} == {new_reg}
        gw.wait_line(r"supersedes", 10)  # the old registration is no longer served
        assert await second.sample("temperature", 2) == 2
        await consumer.wait_for(4, timeout=20)
        # the new device's sensor starts again at sample 1
        assert sequence_of(readings(consumer.messages())) == [1, 2, 1, 2]


async def test_device_registers_with_a_gateway_that_requires_credentials(
    gateway_process: Callable[..., Any],
    start_device: Callable[..., DeviceProcess],
    make_consumer: Callable[..., Any],
) -> None:
    """RegisterPublisher and SetTerminationTime are management operations at a gateway with
    credentials: a device without `gateway_token` is refused (and says so in its status),
    one with it registers, and its readings reach a subscriber."""
    gw = gateway_process("--auth-token", "t0ken", "--backoff-initial", "0.1")
    consumer: Consumer = await make_consumer()
    r = await call(gw.url, subscribe_body(consumer.url, full("dev:*/temperature")))
    assert r.status == 200, r.text
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as s:
        refused = Client(start_device(gateway=gw.url, gateway_retry_s=0.3), s)
        refused.dev.wait_line(r"gateway refused registration: .*HTTP 401", 20)
        assert (await refused.status())["gateway"]["state"] == "unregistered"
        refused.dev.stop()

        dev = Client(start_device(gateway=gw.url, gateway_retry_s=0.3, gateway_token="t0ken"), s)
        await until(lambda: _paused_is(dev, "temperature", False), "temperature active", 20)
        assert (await dev.status())["gateway"]["state"] == "registered"
        assert await dev.sample("temperature", 2) == 2
        await consumer.wait_for(2, timeout=20)
        assert sequence_of(readings(consumer.messages())) == [1, 2]
