"""Issue 16 points 2 and 3, through a real gateway (`python -m gateway`, tests/device/gwproc.py)
and the real device on MicroPython, on 127.0.0.1.

- Batching: readings buffered for the gateway while it was down go out as Notify messages of
  up to `batch_max` NotificationMessages, in order, and the gateway accepts each exactly once:
  one landing line (with its own id) per reading, one delivery per reading to a subscriber.
- Sleepy mode: Demand=false registration, one batched Notify per wake, state persisted in a
  file; readings taken while the gateway is down arrive after it returns, each exactly once,
  in order, also across a kill -9 and restart of the device.

Readings are identified by the heartbeat sensor's counter (device/wsn/device.py, kind heartbeat):
1, 2, 3, ... per sample (in sleepy mode: per wake, persisted across restarts)."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from devtest import WSA, Client, Consumer, DeviceProcess, body_child, sleepy_cycles
from gwproc import (
    GW_ARGS,
    HEARTBEAT,
    assert_landed_once_in_order,
    delivered_values,
    last_cycle,
    start_gateway_process,
    subscribe_at_gateway,
    subscribe_to_heartbeat_once_registered,
)
from lxml import etree

from tests.polling import until

pytestmark = pytest.mark.timeout(180)


async def test_readings_buffered_while_the_gateway_is_down_go_in_batches_exactly_once(
    start_device: Callable[..., DeviceProcess], tmp_path: Path
) -> None:
    gw = start_gateway_process(tmp_path / "gw", GW_ARGS, ready_timeout=30)
    consumer = await Consumer().start()
    try:
        dev = start_device(
            gateway=gw.url,
            gateway_retry_s=0.3,
            gateway_retry_max_s=0.6,
            gateway_timeout_s=2,
            sensors=HEARTBEAT,
            gateway_buffer=64,
        )
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as s:
            cl = Client(dev, s)
            await subscribe_to_heartbeat_once_registered(cl, gw, consumer.url)

            gw.stop()
            assert await cl.sample("heartbeat", 20) == 20
            await dev.await_line(r"^status \[gateway down\]", 10)
            st = (await cl.status())["gateway"]
            assert st["buffered"] == 20 and st["delivered"] == 0 and st["batches"] == 0
            gw.restart()

            async def all_sent() -> bool:
                return (await cl.status())["gateway"]["delivered"] == 20

            await until(all_sent, "20 readings delivered to the gateway", 30)
            st = (await cl.status())["gateway"]
            # batch_max is 16 by default: 16 + 4, two Notify messages, not twenty
            assert st["batches"] == 2 and st["buffered"] == 0, st
            await until(lambda: len(delivered_values(consumer)) >= 20, "20 deliveries", 20)
            await asyncio.sleep(0.5)
            assert delivered_values(consumer) == list(range(1, 21))
        assert_landed_once_in_order(gw, 20)
    finally:
        gw.stop(signal.SIGKILL)
        await consumer.stop()


async def test_sleepy_mode_through_a_real_gateway_down_and_device_restart(
    start_device: Callable[..., DeviceProcess], tmp_path: Path
) -> None:
    gw = start_gateway_process(tmp_path / "gw", GW_ARGS, ready_timeout=30)
    consumer = await Consumer().start()
    state = tmp_path / "sleepy-state.json"
    conf: dict[str, Any] = {
        "mode": "sleepy",
        "gateway": gw.url,
        "sample_period_s": 0.3,
        "sensors": HEARTBEAT,
        "state_file": str(state),
        "batch_max": 4,
        # no refused connection waits for it (the gateway is stopped, not hung): it only
        # has to outlast a loaded machine's slowest answer, or a wake would count a retry
        "gateway_timeout_s": 15,
        # longer than the test: no renewal adds a request to the wakes counted below
        "registration_ttl_s": 3600,
    }
    try:
        dev = start_device(**conf)
        dev.wait_line(r"registered at .* \(Demand=false\)", 20)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as s:
            await subscribe_at_gateway(s, gw, consumer.url, "dev:dev-test/heartbeat")
        first = last_cycle(dev)["seq"] + 1  # readings from this wake on reach the subscriber
        await until(lambda: last_cycle(dev)["seq"] >= first + 2, "three more wakes", 20)
        c = sleepy_cycles(dev)
        # awake, each wake is one Notify: requests per reading 1 (one sensor)
        assert all(x["requests"] == 1 and x["pending"] == 0 for x in c[1:]), c

        gw.stop()
        await until(lambda: last_cycle(dev)["pending"] >= 3, "readings pending while down", 20)
        # kill -9 in the middle: what was persisted must survive
        dev.proc.send_signal(signal.SIGKILL)
        dev.proc.wait(5)
        saved = json.loads(state.read_text())
        assert len(saved["pending"]) >= 3 and saved["reg"]
        seq_at_kill = saved["seq"]

        dev2 = start_device(**conf)
        await until(
            lambda: last_cycle(dev2)["pending"] >= len(saved["pending"]) + 2,
            "the restarted device keeps the pending readings and adds to them",
            20,
        )
        assert sleepy_cycles(dev2)[0]["seq"] == seq_at_kill + 1  # no wake number reused
        assert "registered at" not in dev2.output()  # the registration survived too
        gw.restart()
        await until(
            lambda: last_cycle(dev2)["pending"] == 0 and last_cycle(dev2)["sent"] > 0,
            "everything sent after the gateway came back",
            30,
        )
        # a batch is at most batch_max readings: pending > 4 needed more than one Notify. The
        # first is the batch of the first wake the gateway did not answer, sent again as it was
        # (same readings, same wsa:MessageID: the gateway may have committed it), k readings
        big = next(x for x in sleepy_cycles(dev2) if x["sent"] > 0)
        k = saved["mid"][1]
        assert big["sent"] > 4 and big["requests"] == 1 + (big["sent"] - k + 3) // 4, (big, k)
        # A kill can land mid-wake: after the state file took that wake's reading, before
        # the gateway accepted it. That reading then waits in the file for the next wake
        # (not lost), so the device wakes again until a kill finds nothing pending: every
        # reading up to the file's seq was then accepted (a batch resent after a kill keeps
        # its wsa:MessageID, and the checks below see it once).
        last = dev2
        for _ in range(8):
            last.proc.send_signal(signal.SIGKILL)
            last.proc.wait(5)
            end = json.loads(state.read_text())
            if not end["pending"]:
                break
            last = start_device(**conf)
            await until(
                lambda d=last: last_cycle(d)["pending"] == 0 and last_cycle(d)["sent"] > 0,
                "the pending readings sent at the next wake",
                30,
            )
        assert not end["pending"], end
        last_seq = end["seq"]

        await until(
            lambda: delivered_values(consumer)[-1:] == [last_seq], "the last reading delivered", 20
        )
        await asyncio.sleep(0.5)
        got = delivered_values(consumer)
        # the wake running while we subscribed may have been accepted just before
        assert got[:1] in ([first], [first + 1]), (first, got)
        assert got == list(range(got[0], last_seq + 1))
        assert_landed_once_in_order(gw, last_seq)  # each exactly once, in order
    finally:
        gw.stop(signal.SIGKILL)
        await consumer.stop()


def test_sleepy_state_file_that_is_not_a_whole_state_starts_afresh(
    start_device: Callable[..., DeviceProcess], tmp_path: Path
) -> None:
    """A state file that parses but lacks fields (another program's, a hand edit) is ignored:
    the device registers anew and writes a whole state, it does not die at boot."""
    gw = start_gateway_process(tmp_path / "gw", GW_ARGS, ready_timeout=30)
    state = tmp_path / "sleepy-state.json"
    state.write_text('{"reg": "http://127.0.0.1:9/wsn/registrations/old", "seq": 7}')
    try:
        dev = start_device(
            mode="sleepy",
            gateway=gw.url,
            sample_period_s=0.3,
            sensors=HEARTBEAT,
            state_file=str(state),
        )
        dev.wait_line(r"registered at .* \(Demand=false\)", 20)
        dev.wait_line(r"^cycle \d+ .* sent=1 ", 20)  # printed after the state is saved
        saved = json.loads(state.read_text())
        assert saved["reg"].startswith(gw.url.rsplit("/wsn/", 1)[0]) and saved["seq"] >= 1, saved
        assert "Traceback" not in dev.output()
    finally:
        gw.stop(signal.SIGKILL)


def test_sleepy_registration_is_demand_false() -> None:
    """The RegisterPublisher a sleepy device sends, checked on the envelope the core builds."""
    import subprocess

    from devtest import DEVICE_DIR, MP_UNIX, ROOT

    code = (
        "from wsn.core.registration import register_publisher\n"
        "from wsn.core.topics import topic_set\n"
        "print(register_publisher(12, 'http://g/', 'http://d/wsn/producer', 'd1', "
        "topic_set('urn:wsn-edge:device-topics', ['heartbeat']), ['heartbeat'], 100, False))"
    )
    r = subprocess.run(
        [str(MP_UNIX), "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"MICROPYPATH": f".frozen:{DEVICE_DIR}"},
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    root = etree.fromstring(r.stdout.strip().encode())
    b = body_child(root)
    assert b.findtext("{http://docs.oasis-open.org/wsn/br-2}Demand") == "false"
    assert (
        b.find(f"{{http://docs.oasis-open.org/wsn/br-2}}PublisherReference/{{{WSA}}}Address")
        is not None
    )
