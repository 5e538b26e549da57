"""Waiting in async tests: poll a condition until it holds, or fail saying what was awaited.

One helper for every test tree (imported as ``from tests.polling import until``, like
tests/wsdl_actions.py), so the device, integration and `wsn` client tests wait the same way."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


async def until(
    pred: Callable[[], Any], what: str, timeout: float = 15.0, every: float = 0.1
) -> Any:
    """Call `pred` (sync, or returning an awaitable) every `every` seconds until it returns
    something truthy, and return that; raise AssertionError naming `what` once `timeout`
    seconds have passed without it."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(every)
