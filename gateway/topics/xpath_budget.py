"""Evaluating XPath expressions that are not proven linear (gateway/topics/xpath_guard.py):
in a worker process (gateway/topics/xpath_worker.py), each evaluation within a time limit.

A caller may rely on:

* `evaluate(jobs)` never blocks the event loop and returns one `Outcome` per job, in order:
  the value, or `TIMEOUT` (the evaluation ran longer than `time_limit` seconds, the
  operator's `--filter-timeout`: the worker is killed and replaced by a spare started
  beforehand), `ERROR` (the expression failed on this document, or the worker ran out of
  its `--filter-max-memory` or died), or `SKIPPED` (not evaluated: the expression is on
  probation, see below, or the call's own budget of REQUEST_LIMITS time limits ran out
  while it waited for the worker);
* an expression that timed out or failed is on probation: it is not evaluated again for
  PROBATION_FIRST seconds, doubling with each further failure up to PROBATION_MAX, and its
  jobs are SKIPPED meanwhile, so a hostile expression costs the worker at most one time
  limit per probation period; one WARNING line names it when its probation starts;
* jobs run one at a time, in the order of the calls; `counts` counts the outcomes.

Callers treat anything but a value as "no match" (a message is not delivered on a filter
nobody could judge; a topic is not selected): the broker never waits more than about
REQUEST_LIMITS x time limit for the jobs of one request, whatever a subscriber wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

log = logging.getLogger("gateway.xpath")

_LEN = struct.Struct(">I")
#: a call waits for the worker and runs its jobs within this many time limits in all
REQUEST_LIMITS = 4
PROBATION_FIRST = 5.0
PROBATION_MAX = 300.0
#: default --filter-timeout (seconds) and --filter-max-memory (MiB)
TIME_LIMIT = 0.25
MEMORY_MB = 512


class _Sentinel:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


TIMEOUT = _Sentinel("TIMEOUT")
ERROR = _Sentinel("ERROR")
SKIPPED = _Sentinel("SKIPPED")
#: a job's outcome: the value (bool, or a list of [namespace, [steps]]) or a sentinel
Outcome = Any


@dataclass(frozen=True)
class Job:
    """One evaluation: `text` with `nsmap` over the document `doc` (serialized XML) known by
    `doc_key` (jobs in a row on one document send it once); `mode` "bool" (XPath
    boolean() of the result) or "topics" (the topics of a TopicSet document it selects);
    `what` names it in the log (e.g. "MessageContent filter")."""

    text: str
    nsmap: Mapping[str, str]
    doc_key: str
    doc: str
    mode: str = "bool"
    what: str = "XPath expression"


class _Worker:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.doc_key: str | None = None

    def alive(self) -> bool:
        return self.proc.returncode is None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()


class XPathBudget:
    """See the module docstring."""

    def __init__(self, time_limit: float = TIME_LIMIT, memory_mb: int = MEMORY_MB) -> None:
        self.time_limit = time_limit
        self.memory_mb = memory_mb
        self.counts: Counter[str] = Counter()
        self._lock = asyncio.Lock()
        self._worker: _Worker | None = None
        self._spare: asyncio.Task[_Worker] | None = None
        # expression key -> (on probation until (monotonic), its current period)
        self._probation: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[float, float]] = {}
        self._closed = False
        self._reaped: set[asyncio.Task[None]] = set()

    # ---- workers ----
    async def _start(self) -> _Worker:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "gateway.topics.xpath_worker",
            str(self.memory_mb),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        assert proc.stdout is not None
        try:  # its first frame: ready (imports done), so no time limit counts them
            head = await proc.stdout.readexactly(4)
            await proc.stdout.readexactly(_LEN.unpack(head)[0])
        except (OSError, asyncio.IncompleteReadError):
            log.error("the XPath worker process did not start (exit status %s)", proc.returncode)
        return _Worker(proc)

    def _prestart(self) -> None:
        if self._spare is None and not self._closed:
            self._spare = asyncio.ensure_future(self._start())

    async def _take_worker(self) -> _Worker:
        if self._worker is not None and self._worker.alive():
            return self._worker
        if self._worker is not None:
            self._reap(self._worker)
        self._prestart()
        assert self._spare is not None
        spare, self._spare = self._spare, None
        self._worker = await spare
        self._prestart()  # the next spare, started now, ready by the next kill
        return self._worker

    def _reap(self, w: _Worker) -> None:
        w.kill()

        async def wait() -> None:
            with contextlib.suppress(Exception):
                await w.proc.wait()

        t = asyncio.ensure_future(wait())
        self._reaped.add(t)
        t.add_done_callback(self._reaped.discard)

    async def close(self) -> None:
        self._closed = True
        for w in (self._worker,):
            if w is not None:
                if w.proc.stdin is not None:
                    w.proc.stdin.close()
                self._reap(w)
        self._worker = None
        if self._spare is not None:
            spare, self._spare = self._spare, None
            with contextlib.suppress(Exception):
                self._reap(await spare)
        for t in list(self._reaped):
            with contextlib.suppress(Exception):
                await t

    # ---- probation ----
    @staticmethod
    def _key(job: Job) -> tuple[str, tuple[tuple[str, str], ...]]:
        return (job.text, tuple(sorted(job.nsmap.items())))

    def on_probation(self, job: Job) -> bool:
        p = self._probation.get(self._key(job))
        return p is not None and time.monotonic() < p[0]

    def _fail(self, job: Job, why: str, size: int) -> None:
        key = self._key(job)
        now = time.monotonic()
        prev = self._probation.get(key)
        period = PROBATION_FIRST if prev is None else min(PROBATION_MAX, prev[1] * 2)
        if len(self._probation) > 10_000:
            self._probation.clear()  # bounded: many distinct expressions fall out
        self._probation[key] = (now + period, period)
        log.warning(
            "%s %r %s on a document of %d characters: treated as no match; not evaluated "
            "again for %g s",
            job.what, job.text[:200], why, size, period,
        )  # fmt: skip

    # ---- evaluation ----
    async def evaluate(self, jobs: Sequence[Job]) -> list[Outcome]:
        """One outcome per job (module docstring)."""
        out: list[Outcome] = [SKIPPED] * len(jobs)
        todo = []
        for i, job in enumerate(jobs):
            if self.on_probation(job):
                self.counts["skipped"] += 1
            else:
                todo.append(i)
        if not todo or self._closed:
            return out
        deadline = time.monotonic() + REQUEST_LIMITS * self.time_limit
        try:
            async with asyncio.timeout(deadline - time.monotonic()):
                await self._lock.acquire()
        except TimeoutError:
            self.counts["skipped"] += len(todo)
            return out
        try:
            for i in todo:
                if time.monotonic() >= deadline:
                    self.counts["skipped"] += 1
                    continue
                out[i] = await self._one(jobs[i])
        finally:
            self._lock.release()
        return out

    async def _one(self, job: Job) -> Outcome:
        w = await self._take_worker()
        req: dict[str, Any] = {"x": job.text, "ns": dict(job.nsmap), "mode": job.mode}
        req["key"] = job.doc_key
        if w.doc_key != job.doc_key:
            req["doc"] = job.doc
        data = orjson.dumps(req)
        assert w.proc.stdin is not None and w.proc.stdout is not None
        try:
            w.proc.stdin.write(_LEN.pack(len(data)) + data)
            async with asyncio.timeout(self.time_limit):
                await w.proc.stdin.drain()
                head = await w.proc.stdout.readexactly(4)
                body = await w.proc.stdout.readexactly(_LEN.unpack(head)[0])
        except TimeoutError:
            self._reap(w)
            self._worker = None
            self.counts["timeout"] += 1
            self._fail(job, f"ran longer than --filter-timeout {self.time_limit:g} s", len(job.doc))
            return TIMEOUT
        except (OSError, asyncio.IncompleteReadError, ConnectionError):
            self._reap(w)
            self._worker = None
            self.counts["error"] += 1
            self._fail(
                job,
                f"stopped the evaluating process (more than --filter-max-memory "
                f"{self.memory_mb} MiB?)",
                len(job.doc),
            )
            return ERROR
        w.doc_key = job.doc_key
        ans = orjson.loads(body)
        if "e" in ans:
            self.counts["error"] += 1
            if "emory" in ans["e"]:
                self._fail(job, f"failed: {ans['e']}", len(job.doc))
            return ERROR
        self.counts["evaluated"] += 1
        self._probation.pop(self._key(job), None)
        return ans["v"]
