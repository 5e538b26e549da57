"""Exactly once when the gateway's answer to a batched Notify is lost (docs/device.md "The
gateway link", docs/gateway.md "Exactly once when an answer is lost"): the real device on
MicroPython, a real gateway (`python -m gateway`), and between them a TCP proxy that passes the
device's Notify to the gateway whole, waits for the gateway's answer (so the gateway has
committed it: it answers only after the commit) and then closes the device's connection without
passing the answer on. The device cannot know the readings were accepted and sends them again;
they reach the landing zone and the subscriber once each, in order.

The proxy only carries the device's own requests (its `gateway` URL, and the registration
address: the gateway's --public-url names the proxy); the gateway's requests to the device and
to the subscriber go direct."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from devtest import Client, Consumer, DeviceProcess, sleepy_cycles
from gwproc import (
    GW_ARGS,
    HEARTBEAT,
    GatewayProcess,
    assert_landed_once_in_order,
    delivered_values,
    last_cycle,
    start_gateway_process,
    subscribe_at_gateway,
    subscribe_to_heartbeat_once_registered,
)

from tests.polling import until

pytestmark = pytest.mark.timeout(180)


class LossyProxy:
    """127.0.0.1:port -> the gateway. While `drop` > 0, the answer to a Notify is swallowed:
    the request went through whole, the gateway answered (it answers after its commit), and
    the device's connection is closed instead of answered; `on_drop` runs first (e.g. to
    kill the device while it waits). The answers to the first `skip` of those Notify pass.
    While `down`, each connection is closed unanswered: the gateway is unreachable."""

    def __init__(self) -> None:
        self.drop = 0
        self.skip = 0
        self.down = False
        self.dropped = 0
        self.notifies = 0
        self.upstream = 0
        self.port = 0
        self.on_drop: Callable[[], None] | None = None
        self._server: asyncio.Server | None = None

    async def start(self) -> LossyProxy:
        self._server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _conn(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        if self.down:
            cw.close()
            return
        ur, uw = await asyncio.open_connection("127.0.0.1", self.upstream)
        head = bytearray()  # enough of the request to see whether it is a Notify

        async def up() -> None:
            while data := await cr.read(65536):
                if len(head) < 4096:
                    head.extend(data)
                uw.write(data)
                await uw.drain()

        pump = asyncio.ensure_future(up())
        try:
            first = True
            while data := await ur.read(65536):
                if first and b"<wsnt:Notify " in head:
                    self.notifies += 1
                    if self.drop > 0 and self.skip > 0:
                        self.skip -= 1
                    elif self.drop > 0:  # the gateway answered: it has committed
                        self.drop -= 1
                        self.dropped += 1
                        if self.on_drop is not None:
                            self.on_drop()
                        return
                first = False
                cw.write(data)
                await cw.drain()
        except OSError:
            pass
        finally:
            pump.cancel()
            for w in (cw, uw):
                with contextlib.suppress(Exception):
                    w.close()


async def start_behind_proxy(tmp_path: Path) -> tuple[LossyProxy, GatewayProcess]:
    proxy = await LossyProxy().start()
    gw = start_gateway_process(
        tmp_path / "gw",
        [*GW_ARGS, "--public-url", f"http://127.0.0.1:{proxy.port}"],
        ready_timeout=30,
    )
    proxy.upstream = gw.port
    return proxy, gw


async def test_awake_readings_whose_answer_was_lost_arrive_once(
    start_device: Callable[..., DeviceProcess], tmp_path: Path
) -> None:
    proxy, gw = await start_behind_proxy(tmp_path)
    consumer = await Consumer().start()
    try:
        dev = start_device(
            gateway=f"http://127.0.0.1:{proxy.port}/wsn/broker",
            gateway_retry_s=0.2,
            gateway_retry_max_s=0.4,
            gateway_timeout_s=5,
            sensors=HEARTBEAT,
            gateway_buffer=64,
            batch_max=4,
        )
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as s:
            cl = Client(dev, s)
            await subscribe_to_heartbeat_once_registered(cl, gw, consumer.url)
            proxy.drop = 2  # the answers to the next two Notify are lost
            assert await cl.sample("heartbeat", 10) == 10

            async def all_sent() -> bool:
                return (await cl.status())["gateway"]["delivered"] == 10

            await until(all_sent, "10 readings delivered to the gateway", 30)
            assert proxy.dropped == 2 and proxy.notifies >= 5, (proxy.dropped, proxy.notifies)
            await until(lambda: len(delivered_values(consumer)) >= 10, "10 deliveries", 20)
            await asyncio.sleep(0.5)  # time for a wrong eleventh delivery
            assert delivered_values(consumer) == list(range(1, 11))
        assert_landed_once_in_order(gw, 10)
    finally:
        gw.stop(signal.SIGKILL)
        await consumer.stop()
        await proxy.stop()


def sleepy_conf(proxy: LossyProxy, state: Path) -> dict[str, Any]:
    """A sleepy device's config that reaches the gateway through the proxy."""
    return {
        "mode": "sleepy",
        "gateway": f"http://127.0.0.1:{proxy.port}/wsn/broker",
        "sample_period_s": 0.3,
        "sensors": HEARTBEAT,
        "state_file": str(state),
        "batch_max": 4,
        "gateway_timeout_s": 5,
        "registration_ttl_s": 120,
    }


async def killed_when_an_answer_is_lost(
    proxy: LossyProxy, dev: DeviceProcess, state: Path, skip: int = 0
) -> dict[str, Any]:
    """The proxy (up again, if it was down) passes the answers to `skip` Notify, then swallows
    one and kills the device (kill -9) while it waits for it: it never sees one. -> the state
    file as the device left it."""
    killed: list[dict[str, Any]] = []

    def kill_device() -> None:
        dev.proc.send_signal(signal.SIGKILL)
        dev.proc.wait(5)
        killed.append(json.loads(state.read_text()))

    proxy.on_drop = kill_device
    proxy.skip, proxy.drop = skip, 1
    proxy.down = False
    await until(lambda: killed, "a Notify answered, the answer lost, the device killed", 20)
    return killed[0]


async def restarted_until_all_sent(dev: DeviceProcess, saved: dict[str, Any]) -> None:
    """The device started again on the state `saved` of its first run: wait until it woke 3
    more times and has nothing pending, check it kept its registration, then kill it (-9)."""
    await until(
        lambda: last_cycle(dev)["seq"] >= saved["seq"] + 3 and last_cycle(dev)["pending"] == 0,
        "the restarted device sent everything",
        20,
    )
    assert "registered at" not in dev.output()  # the same registration: the same key
    dev.proc.send_signal(signal.SIGKILL)
    dev.proc.wait(5)


async def test_sleepy_readings_whose_answer_was_lost_arrive_once_across_a_restart(
    start_device: Callable[..., DeviceProcess], tmp_path: Path
) -> None:
    """The device is killed (kill -9) while it waits for the answer that the proxy swallows:
    the restarted device sends the same readings with the same MessageID from its state file,
    and then new ones with a new one."""
    proxy, gw = await start_behind_proxy(tmp_path)
    consumer = await Consumer().start()
    state = tmp_path / "sleepy-state.json"
    conf = sleepy_conf(proxy, state)
    try:
        dev = start_device(**conf)
        # (await_line: the proxy runs in this loop)
        await dev.await_line(r"registered at .* \(Demand=false\)", 20)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as s:
            await subscribe_at_gateway(s, gw, consumer.url, "dev:dev-test/heartbeat")
        await until(lambda: last_cycle(dev)["seq"] >= 3, "three wakes", 20)
        saved = await killed_when_an_answer_is_lost(proxy, dev, state)
        assert saved["pending"] and saved["mid"], saved  # the batch in flight, and its id

        await restarted_until_all_sent(start_device(**conf), saved)
        last_seq = json.loads(state.read_text())["seq"]
        await until(
            lambda: delivered_values(consumer)[-1:] == [last_seq], "the last reading delivered", 20
        )
        await asyncio.sleep(0.5)
        got = delivered_values(consumer)
        assert got == list(range(got[0], last_seq + 1)), got  # each once, in order
        assert_landed_once_in_order(gw, last_seq)  # each exactly once, in order
    finally:
        gw.stop(signal.SIGKILL)
        await consumer.stop()
        await proxy.stop()


async def test_sleepy_restore_into_a_smaller_buffer_resends_only_what_the_batch_still_holds(
    start_device: Callable[..., DeviceProcess], tmp_path: Path
) -> None:
    """The gateway committed a batch of 4 whose answer was lost, and the device was killed with
    more readings pending than that batch. It restarts with a `gateway_buffer` too small for
    them: refilling the buffer drops the oldest readings, the batch's first ones
    (device/wsn/gateway.py `sleepy`). The drop count saved in the state file is added to those
    drops, so the batch is sent again under its wsa:MessageID with only the readings it still
    holds (accepted with it already), and the readings after it go in new batches. Were the
    saved count written over the refill's drops, the resent batch would reach past its own
    readings into the next ones, and those the gateway takes for the duplicate would be lost."""
    proxy, gw = await start_behind_proxy(tmp_path)
    state = tmp_path / "sleepy-state.json"
    conf = sleepy_conf(proxy, state)
    try:
        dev = start_device(**conf)
        await dev.await_line(r"registered at .* \(Demand=false\)", 20)
        await until(lambda: last_cycle(dev)["seq"] >= 2, "two wakes", 20)
        proxy.down = True  # a batch of 1 is made at the first wake that cannot send ...
        await until(lambda: last_cycle(dev)["pending"] >= 6, "six readings pending", 20)
        # ... and sent first once the gateway is back; the answer to the next, of 4, is lost
        saved = await killed_when_an_answer_is_lost(proxy, dev, state, skip=1)
        assert saved["mid"][1] == 4 and len(saved["pending"]) >= 5, saved

        # 2 fewer places than readings pending, and the first wake samples one more: 3 of the
        # batch's 4 readings are dropped, it is resent with its last one
        dev2 = start_device(**conf, gateway_buffer=len(saved["pending"]) - 2)
        await restarted_until_all_sent(dev2, saved)
        assert_landed_once_in_order(gw, json.loads(state.read_text())["seq"])
        assert sleepy_cycles(dev2)[0]["dropped"] == saved["dropped"] + 3, sleepy_cycles(dev2)
    finally:
        gw.stop(signal.SIGKILL)
        await proxy.stop()
