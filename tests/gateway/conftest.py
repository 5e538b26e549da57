"""Fixtures for the gateway tests: an in-process broker on 127.0.0.1:0 (real aiohttp
server, real SQLite under tmp_path) and real HTTP consumers."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from gwproducer import TestProducer
from gwtest import Consumer, make_config

from gateway import app
from gateway.wire.xmlutil import utcnow

GatewayFactory = Callable[..., Awaitable[app.Running]]


@pytest.fixture
async def make_gateway(tmp_path: Path) -> AsyncIterator[GatewayFactory]:
    """Start gateways with make_config(**kw) (and `clock`, the broker's time)."""
    started: list[app.Running] = []

    async def factory(**kw: Any) -> app.Running:
        data_dir = kw.pop("data_dir", tmp_path / f"gw{len(started)}")
        clock = kw.pop("clock", utcnow)
        r = await app.start(make_config(data_dir, **kw), clock=clock)
        started.append(r)
        return r

    yield factory
    for r in started:
        with contextlib.suppress(Exception):
            await r.stop()


@pytest.fixture
async def gw(make_gateway: GatewayFactory) -> app.Running:
    return await make_gateway()


@pytest.fixture
async def make_consumer() -> AsyncIterator[Callable[..., Awaitable[Consumer]]]:
    made: list[Consumer] = []

    async def factory(**kw: Any) -> Consumer:
        c = await Consumer(**kw).start()
        made.append(c)
        return c

    yield factory
    for c in made:
        await c.stop()


@pytest.fixture
async def consumer(make_consumer: Callable[..., Awaitable[Consumer]]) -> Consumer:
    return await make_consumer()


@pytest.fixture
async def make_producer() -> AsyncIterator[Callable[..., Awaitable[TestProducer]]]:
    """Start NotificationProducer doubles (gwproducer.TestProducer) on `port` (0: free)."""
    made: list[TestProducer] = []

    async def factory(port: int = 0) -> TestProducer:
        p = await TestProducer().start(port)
        made.append(p)
        return p

    yield factory
    for p in made:
        await p.stop()


@pytest.fixture
async def producer(make_producer: Callable[..., Awaitable[TestProducer]]) -> TestProducer:
    return await make_producer()
