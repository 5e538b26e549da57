"""A device whose topics file is in a namespace of its own (issue 26), end to end: a
spec-following subscriber at the device, and registration with a real gateway
(`python -m gateway`, tests/device/gwproc.py).

WS-BaseNotification 1.3 §3.1: the Topic of a Notify "MUST be the Topic that is associated with
the Notification"; WS-Topics 1.3 §7: the TopicSet lists each topic in its namespace. At the
gateway the device's topics are dev:<device id>/<topic> (design.md), whatever namespace the
device names them in."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from devtest import SIMPLE, WSNT, Client, Consumer, DeviceProcess, body_child, parse
from gwproc import (
    GW_ARGS,
    HEARTBEAT,
    delivered_values,
    landed_values,
    start_gateway_process,
    subscribe_to_heartbeat_once_registered,
)

from tests.polling import until

pytestmark = pytest.mark.timeout(120)

ACME = "urn:acme:t"
TOPICS = f"""<?xml version="1.0"?>
<wstop:TopicNamespace name="Acme" targetNamespace="{ACME}"
    xmlns:wstop="http://docs.oasis-open.org/wsn/t-1">
  <wstop:Topic name="temperature"/>
  <wstop:Topic name="heartbeat"/>
</wstop:TopicNamespace>"""
GRP = (
    '<wsrf-rp:GetResourceProperty xmlns:wsrf-rp="http://docs.oasis-open.org/wsrf/rp-2" '
    'xmlns:wstop="http://docs.oasis-open.org/wsn/t-1">{}</wsrf-rp:GetResourceProperty>'
)


def _filter(expr: str) -> str:
    return (
        f'<wsnt:Filter><wsnt:TopicExpression Dialect="{SIMPLE}" xmlns:acme="{ACME}">{expr}'
        "</wsnt:TopicExpression></wsnt:Filter>"
    )


async def test_a_subscriber_gets_the_topics_in_the_devices_namespace(
    start_device: Callable[..., DeviceProcess], tmp_path: Path
) -> None:
    topics = tmp_path / "acme.xml"
    topics.write_text(TOPICS)
    dev = start_device(topics_file=str(topics), sensors=HEARTBEAT)
    consumer = await Consumer().start()
    try:
        async with aiohttp.ClientSession() as s:
            cl = Client(dev, s)
            # what the device advertises is in its namespace, and Subscribe accepts it
            st, data = await cl.soap(GRP.format("wstop:TopicSet"))
            assert st == 200, data
            ts = body_child(parse(data))[0]
            assert [c.tag for c in ts] == [f"{{{ACME}}}temperature", f"{{{ACME}}}heartbeat"]
            st, data = await cl.soap(GRP.format("wsnt:TopicExpression"))
            tes = body_child(parse(data)).findall(f"{{{WSNT}}}TopicExpression")
            for te in tes:
                prefix, _, local = (te.text or "").partition(":")
                assert te.nsmap[prefix] == ACME, te.text
            sub = (
                f"<wsnt:Subscribe><wsnt:ConsumerReference><wsa:Address>{consumer.url}"
                f"</wsa:Address></wsnt:ConsumerReference>{_filter('acme:heartbeat')}"
                "</wsnt:Subscribe>"
            )
            st, data = await cl.soap(sub)
            assert st == 200, data
            await cl.sample("heartbeat")
            _, push = await consumer.next()
            topic = body_child(parse(push)).find(f"{{{WSNT}}}NotificationMessage/{{{WSNT}}}Topic")
            assert topic is not None
            prefix, _, local = (topic.text or "").partition(":")
            assert (topic.nsmap[prefix], local) == (ACME, "heartbeat")
            # the ad-hoc name (no namespace) is not one of its topics (WS-Topics 1.3 §10)
            st, data = await cl.soap(sub.replace("acme:heartbeat", "heartbeat"))
            assert st == 400 and b"TopicNotSupportedFault" in data
    finally:
        await consumer.stop()


async def test_registration_with_a_gateway_names_the_devices_topics(
    start_device: Callable[..., DeviceProcess], tmp_path: Path
) -> None:
    topics = tmp_path / "acme.xml"
    topics.write_text(TOPICS)
    gw = start_gateway_process(tmp_path / "gw", GW_ARGS, ready_timeout=30)
    consumer = await Consumer().start()
    try:
        dev = start_device(
            topics_file=str(topics), gateway=gw.url, gateway_retry_s=0.3, sensors=HEARTBEAT
        )
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as s:
            cl = Client(dev, s)
            # a subscriber of dev:dev-test/heartbeat at the gateway: the gateway subscribes at
            # the device (demand) with the device's own topic, and resumes it
            await subscribe_to_heartbeat_once_registered(cl, gw, consumer.url)
            assert await cl.sample("heartbeat", 3) == 3
            await until(lambda: len(delivered_values(consumer)) >= 3, "3 deliveries", 20)
            assert delivered_values(consumer) == [1, 2, 3]
            await asyncio.sleep(0.3)
        gw.stop()
        assert landed_values(gw)[0] == [1, 2, 3]  # landed as dev-test/heartbeat
    finally:
        gw.stop(signal.SIGKILL)
        await consumer.stop()
