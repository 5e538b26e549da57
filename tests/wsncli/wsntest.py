"""Run `wsn` as its own process (what a user runs) and read the gateway's /status.json."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Done:
    rc: int
    out: str
    err: str


class Wsn:
    """`python -m wsncli ARGS` started in the background; `finish()` waits for it."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, *args: str, stdin: bytes | None = None) -> Wsn:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "wsncli", *args,
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        if stdin is not None:
            assert proc.stdin is not None
            proc.stdin.write(stdin)
            await proc.stdin.drain()
            proc.stdin.close()
        return cls(proc)

    def interrupt(self) -> None:
        self.proc.send_signal(signal.SIGINT)

    async def finish(self, timeout: float = 30.0) -> Done:
        try:
            out, err = await asyncio.wait_for(self.proc.communicate(), timeout)
        except TimeoutError:
            self.proc.kill()
            out, err = await self.proc.communicate()
            raise AssertionError(
                f"wsn did not finish within {timeout}s; stdout={out!r} stderr={err!r}"
            ) from None
        return Done(int(self.proc.returncode or 0), out.decode(), err.decode())


async def wsn(*args: str, stdin: bytes | None = None, timeout: float = 30.0) -> Done:
    return await (await Wsn.start(*args, stdin=stdin)).finish(timeout)


async def status(broker_url: str) -> dict[str, Any]:
    u = urlsplit(broker_url)
    async with aiohttp.ClientSession() as s, s.get(f"http://{u.netloc}/status.json") as r:
        assert r.status == 200, await r.text()
        return dict(json.loads(await r.text()))
