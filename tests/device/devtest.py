"""Helpers for the device tests (imported by conftest.py and the test modules).

See conftest.py for the fixtures."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from lxml import etree
from packages import mpy_cross_args

ROOT = Path(__file__).resolve().parents[2]
DEVICE_DIR = ROOT / "device"
MP_UNIX = ROOT / ".venv" / "bin" / "micropython"
MP_UNIX32 = ROOT / ".cache" / "micropython" / "bin" / "micropython32"
MPY_CROSS = ROOT / ".venv" / "bin" / "mpy-cross"
BUILD_HINT = "bash scripts/build_micropython.sh"

S11 = "http://schemas.xmlsoap.org/soap/envelope/"
S12 = "http://www.w3.org/2003/05/soap-envelope"
WSA = "http://www.w3.org/2005/08/addressing"
WSNT = "http://docs.oasis-open.org/wsn/b-2"
BF = "http://docs.oasis-open.org/wsrf/bf-2"
SIMPLE = "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Simple"
DT = "urn:wsn-edge:device-topics"
RD = "urn:wsn-edge:reading"
NOTIFY_ACTION = "http://docs.oasis-open.org/wsn/bw-2/NotificationConsumer/Notify"
FAULT_ACTION = "http://docs.oasis-open.org/wsn/fault"

INTERPRETERS = {"unix": MP_UNIX, "unix32": MP_UNIX32}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def resolve_interpreter(name: str) -> Path:
    path = INTERPRETERS[name]
    if path.exists():
        return path
    reason = f"{path.relative_to(ROOT)} is missing: build it with `{BUILD_HINT}`"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


class DeviceProcess:
    """A running device: its URLs, its stdout lines, and small helpers."""

    def __init__(self, proc: subprocess.Popen[str], port: int, config: dict[str, Any]):
        self.proc = proc
        self.port = port
        self.config = config
        self.base = f"http://127.0.0.1:{port}"
        self.producer = self.base + "/wsn/producer"
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_line(self, pattern: str, timeout: float = 10.0, start: int = 0) -> re.Match[str]:
        """Wait until a stdout line (from index `start`) matches `pattern`; fail otherwise."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self.lines[start:]:
                    m = rx.search(line)
                    if m:
                        return m
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(
                        f"no line matching {pattern!r} within {timeout}s; "
                        f"exit={self.proc.poll()} output:\n" + "\n".join(self.lines[-40:])
                    )
                self._cond.wait(min(left, 0.2))

    async def await_line(self, pattern: str, timeout: float = 10.0) -> re.Match[str]:
        """wait_line for async tests: polls without blocking the event loop (servers of the
        test, e.g. a consumer, keep running meanwhile)."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            with self._cond:
                for line in self.lines:
                    m = rx.search(line)
                    if m:
                        return m
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"no line matching {pattern!r} within {timeout}s; output:\n"
                    + self.output()[-4000:]
                )
            await asyncio.sleep(0.05)

    def output(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)


def sleepy_cycles(dev: DeviceProcess, start: int = 0) -> list[dict[str, int]]:
    """The sleepy-mode wake reports (device/wsn/gateway.py prints one ``cycle SEQ k=v ...``
    line per wake) among the device's stdout lines from index `start`, oldest first, as
    {"seq": SEQ, k: v, ...}."""
    out = []
    for line in dev.lines[start:]:
        if line.startswith("cycle "):
            parts = line.split()
            d = {"seq": int(parts[1])}
            for kv in parts[2:]:
                k, _, v = kv.partition("=")
                d[k] = int(v)
            out.append(d)
    return out


def make_config(port: int, **overrides: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "device_id": "dev-test",
        "http_host": "127.0.0.1",
        "http_port": port,
        "gateway": None,
        "sample_period_s": 0,
        "status_period_s": 0,
        "sensors": [
            {"topic": "temperature", "kind": "sim", "base": 21.0},
            {"topic": "humidity", "kind": "sim", "base": 50.0},
            {"topic": "heartbeat", "kind": "heartbeat"},
        ],
        "limits": {
            "push_timeout_s": 2,
            "push_retries": 2,
            "retry_backoff_ms": 100,
            "read_timeout_s": 2,
            # drop the request path when idle also when running the source, as a board running
            # .mpy files does (wsn.device.idle), so every test goes through it
            "unload": True,
        },
    }
    limits = overrides.pop("limits", None)
    conf.update(overrides)
    if limits:
        conf["limits"] = {**conf["limits"], **limits}
    return conf


def compile_mpy(dest: Path) -> Path:
    """Compile device/wsn to .mpy files under dest/wsn (as flash.sh deploys it); -> dest."""
    for src in sorted((DEVICE_DIR / "wsn").rglob("*.py")):
        rel = src.relative_to(DEVICE_DIR).as_posix()
        out = dest / (rel[:-3] + ".mpy")
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(MPY_CROSS), *mpy_cross_args(rel), "-o", str(out), str(src)], check=True)
    shutil.copy(DEVICE_DIR / "main.py", dest / "main.py")
    shutil.copy(DEVICE_DIR / "topics.xml", dest / "topics.xml")
    return dest


def launch(
    interpreter: Path,
    tmp_path: Path,
    started: list[DeviceProcess],
    heapsize: str | None = None,
    install: str | Path = "source",
    board_paths: bool = False,
    **overrides: Any,
) -> DeviceProcess:
    """Start `interpreter main.py CONFIG.json` and wait for its producer line.

    install: "source" (device/ as is), "mpy" (compiled with mpy-cross into tmp_path/mpy, as
    flash.sh deploys it), "frozen" (the interpreter has the device frozen in: only main.py and
    topics.xml are on the "filesystem"), or a Path: a directory the device was installed into
    (e.g. by mip: main.py, topics.xml and wsn/ in it).

    board_paths (an install directory only): run it as a board runs what mip installed with
    --target . (files in /, its working directory): `micropython -m main config.json` in that
    directory with "" first on sys.path, so every path MicroPython interns (a module's
    __file__, sys.argv) is as short as on the board (`wsn/core/xml.mpy`, not
    `/tmp/.../wsn/core/xml.mpy`): for the heap figures of tests/bench/device_bench.py."""
    last_error = ""
    # a sleepy device (wsn/gateway.py) serves no HTTP: it announces itself differently
    ready = (
        r"^sleepy "
        if overrides.get("mode") == "sleepy"
        else r"^producer http://127\.0\.0\.1:\d+/wsn/producer$"
    )
    for _attempt in range(3):  # a free port can be taken between probe and bind
        port = free_port()
        conf = make_config(port, **overrides)
        cfg = tmp_path / f"config-{port}.json"
        cfg.write_text(json.dumps(conf))
        if isinstance(install, Path):
            main, path = install / "main.py", f".frozen:{install}"
        elif install == "mpy":
            app = compile_mpy(tmp_path / "mpy")
            main, path = app / "main.py", f".frozen:{app}"
        elif install == "frozen":
            app = tmp_path / "fs"
            app.mkdir(exist_ok=True)
            shutil.copy(DEVICE_DIR / "main.py", app / "main.py")
            shutil.copy(DEVICE_DIR / "topics.xml", app / "topics.xml")
            main, path = app / "main.py", ".frozen"
        else:
            main, path = DEVICE_DIR / "main.py", f".frozen:{DEVICE_DIR}"
        cmd = [str(interpreter)]
        if heapsize:
            cmd += ["-X", f"heapsize={heapsize}"]
        cmd += [str(main), str(cfg)]
        cwd = tmp_path
        if board_paths and isinstance(install, Path):
            # `-m main`: the unix port puts a script's absolute directory first on sys.path
            conf.setdefault("topics_file", "topics.xml")  # on a board: /topics.xml
            (install / "config.json").write_text(json.dumps(conf))
            cmd[-2:] = ["-m", "main", "config.json"]
            cwd, path = install, ":.frozen"
        env = {**os.environ, "MICROPYPATH": path}
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=str(cwd),
        )
        dev = DeviceProcess(proc, port, conf)
        started.append(dev)
        try:
            dev.wait_line(ready, 15)
            return dev
        except AssertionError as e:
            last_error = str(e)
            dev.stop()
            if "EADDRINUSE" not in dev.output() and "Errno 98" not in dev.output():
                break
    raise AssertionError(f"device did not start: {last_error}")


# --------------------------------------------------------------------------- SOAP helpers


def envelope(body: str, version: int = 12, action: str | None = None, headers: str = "") -> bytes:
    sns = S12 if version == 12 else S11
    h = f"<wsa:Action>{action}</wsa:Action>" if action else ""
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<s:Envelope xmlns:s="{sns}" xmlns:wsa="{WSA}" '
        f'xmlns:wsnt="{WSNT}" xmlns:dt="{DT}">\n <s:Header>{h}<wsa:MessageID>urn:uuid:t-1'
        f"</wsa:MessageID>{headers}</s:Header>\n <s:Body>{body}</s:Body>\n</s:Envelope>"
    ).encode()


def ctype(version: int) -> str:
    return "application/soap+xml; charset=utf-8" if version == 12 else "text/xml; charset=utf-8"


def subscribe_body(
    consumer: str,
    topic: str | None = "dt:temperature",
    raw: bool = False,
    itt: str | None = None,
    extra_filter: str = "",
    policy: str = "",
) -> str:
    f = ""
    if topic is not None or extra_filter:
        te = (
            f'<wsnt:TopicExpression Dialect="{SIMPLE}">{topic}</wsnt:TopicExpression>'
            if topic is not None
            else ""
        )
        f = f"<wsnt:Filter>{te}{extra_filter}</wsnt:Filter>"
    t = f"<wsnt:InitialTerminationTime>{itt}</wsnt:InitialTerminationTime>" if itt else ""
    pol = ""
    if raw or policy:
        pol = (
            f"<wsnt:SubscriptionPolicy>{'<wsnt:UseRaw/>' if raw else ''}{policy}"
            "</wsnt:SubscriptionPolicy>"
        )
    return (
        f"<wsnt:Subscribe><wsnt:ConsumerReference><wsa:Address>{consumer}</wsa:Address>"
        f"</wsnt:ConsumerReference>{f}{t}{pol}</wsnt:Subscribe>"
    )


def parse(data: bytes) -> etree._Element:
    return etree.fromstring(data, etree.XMLParser(resolve_entities=False, no_network=True))


def body_child(root: etree._Element) -> etree._Element:
    body = next(c for c in root if etree.QName(c).localname == "Body")
    return body[0]


def fault_name(data: bytes) -> str:
    """Local name of a SOAP fault's WS-BaseFaults detail element (or its SOAP code)."""
    f = body_child(parse(data))
    assert etree.QName(f).localname == "Fault", data
    for path in (f"{{{S12}}}Detail/*", "detail/*"):
        d = f.find(path)
        if d is not None and d.find(f"{{{BF}}}Timestamp") is not None:
            return str(etree.QName(d).localname)
    sub = f.find(f"{{{S12}}}Code/{{{S12}}}Subcode/{{{S12}}}Value")
    if sub is not None:
        return str(sub.text).rpartition(":")[2]
    code = f.find(f"{{{S12}}}Code/{{{S12}}}Value")
    if code is None:
        code = f.find("faultcode")
    return str(code.text).rpartition(":")[2] if code is not None else ""


def header_action(data: bytes) -> str:
    root = parse(data)
    a = root.find(f"*/{{{WSA}}}Action")
    return (a.text or "").strip() if a is not None else ""


# --------------------------------------------------------------------------- consumers


class Consumer:
    """A tiny aiohttp NotificationConsumer: records every POST; can fail the first N."""

    def __init__(self, fail_first: int = 0, status: int = 202) -> None:
        self.fail_first = fail_first
        self.status = status
        self.attempts = 0
        self.received: asyncio.Queue[tuple[dict[str, str], bytes]] = asyncio.Queue()
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.attempts += 1
        if self.fail_first > 0:
            self.fail_first -= 1
            return web.Response(status=503, text="try later")
        await self.received.put((dict(request.headers), body))
        return web.Response(status=self.status)

    async def start(self, path: str = "/consumer") -> Consumer:
        app = web.Application()
        app.router.add_post(path, self._handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}{path}"
        return self

    async def next(self, timeout: float = 10.0) -> tuple[dict[str, str], bytes]:
        return await asyncio.wait_for(self.received.get(), timeout)

    async def nothing(self, wait: float = 0.7) -> bool:
        await asyncio.sleep(wait)
        return self.received.empty()

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


class Client:
    """HTTP to the device (aiohttp)."""

    def __init__(self, dev: DeviceProcess, session: aiohttp.ClientSession) -> None:
        self.dev = dev
        self.s = session

    async def soap(
        self, body: str | bytes, path: str = "/wsn/producer", version: int = 12, headers: str = ""
    ) -> tuple[int, bytes]:
        data = body if isinstance(body, bytes) else envelope(body, version, headers=headers)
        url = path if path.startswith("http") else self.dev.base + path
        async with self.s.post(url, data=data, headers={"Content-Type": ctype(version)}) as r:
            return r.status, await r.read()

    async def subscribe(self, consumer: str, version: int = 12, **kw: Any) -> str:
        st, data = await self.soap(subscribe_body(consumer, **kw), version=version)
        assert st == 200, data
        ref = body_child(parse(data)).find(f"{{{WSNT}}}SubscriptionReference/{{{WSA}}}Address")
        assert ref is not None and ref.text
        return ref.text

    async def sample(self, topic: str = "", count: int = 1, auth: str | None = None) -> int:
        h = {"Authorization": auth} if auth else {}
        async with self.s.post(
            f"{self.dev.base}/admin/sample?topic={topic}&count={count}", headers=h
        ) as r:
            assert r.status == 200, await r.text()
            return int((await r.json())["published"])

    async def status(self, auth: str | None = None) -> dict[str, Any]:
        h = {"Authorization": auth} if auth else {}
        async with self.s.get(f"{self.dev.base}/status", headers=h) as r:
            assert r.status == 200, await r.text()
            return dict(await r.json())

    async def subscription_paused(
        self, paused: bool, matches: Callable[[dict[str, Any]], bool]
    ) -> bool:
        """Whether some subscription at the device that `matches` (an entry of the status'
        subscription_list) is paused (`paused` True) or pushing (False)."""
        st = await self.status()
        return any(matches(x) and bool(x["paused"]) == paused for x in st["subscription_list"])


# --------------------------------------------------------------------------- a stand-in gateway

BR = "http://docs.oasis-open.org/wsn/br-2"
RL = "http://docs.oasis-open.org/wsrf/rl-2"
EDGE = "urn:wsn-edge"


class FakeGateway:
    """Just enough of the gateway's side of the device link (design.md) to test the device:
    RegisterPublisher at /wsn/broker, SetTerminationTime and Notify at /wsn/registrations/<n>.
    The real broker is another part; the end-to-end tests with it live elsewhere.
    `forget()` drops every registration (a restart without state); `stop()`/`start()` take it
    off the network and back on the same port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/wsn/broker"
        self.registrations: dict[str, etree._Element] = {}
        self.register_requests: list[etree._Element] = []
        self.renewals: list[tuple[str, str]] = []
        self.notifications: asyncio.Queue[tuple[str, etree._Element]] = asyncio.Queue()
        self.runner: web.AppRunner | None = None
        self.n = 0

    def reg_url(self, rid: str) -> str:
        return f"http://127.0.0.1:{self.port}/wsn/registrations/{rid}"

    async def start(self) -> FakeGateway:
        app = web.Application()
        app.router.add_post("/wsn/broker", self._broker)
        app.router.add_post("/wsn/registrations/{rid}", self._registration)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    def forget(self) -> None:
        self.registrations.clear()

    @staticmethod
    def _reply(version: str, body: str, status: int = 200) -> web.Response:
        env = (
            f'<s:Envelope xmlns:s="{version}" xmlns:wsa="{WSA}" xmlns:br="{BR}" '
            f'xmlns:wsrf-rl="{RL}" xmlns:wsrf-r="http://docs.oasis-open.org/wsrf/r-2" '
            f'xmlns:wsrf-bf="{BF}" xmlns:edge="{EDGE}"><s:Body>{body}</s:Body></s:Envelope>'
        )
        ct = "application/soap+xml" if version == S12 else "text/xml"
        return web.Response(status=status, body=env.encode(), content_type=ct)

    def _unknown(self, version: str, rid: str) -> web.Response:
        code = "s:Sender" if version == S12 else "s:Client"
        if version == S12:
            fault = (
                f"<s:Fault><s:Code><s:Value>{code}</s:Value></s:Code><s:Reason><s:Text "
                f'xml:lang="en">no registration {rid}</s:Text></s:Reason><s:Detail>'
            )
            end = "</s:Detail></s:Fault>"
        else:
            fault = (
                f"<s:Fault><faultcode>{code}</faultcode><faultstring>no registration "
                f"{rid}</faultstring><detail>"
            )
            end = "</detail></s:Fault>"
        detail = (
            "<wsrf-r:ResourceUnknownFault><wsrf-bf:Timestamp>2026-01-01T00:00:00Z"
            "</wsrf-bf:Timestamp></wsrf-r:ResourceUnknownFault>"
        )
        return self._reply(version, fault + detail + end, 400 if version == S12 else 500)

    async def _broker(self, request: web.Request) -> web.Response:
        root = parse(await request.read())
        version = etree.QName(root).namespace or S11
        rp = body_child(root)
        assert rp.tag == f"{{{BR}}}RegisterPublisher", rp.tag
        self.register_requests.append(rp)
        self.n += 1
        rid = f"r{self.n}"
        self.registrations[rid] = rp
        addr = self.reg_url(rid)
        epr = (
            f"<wsa:Address>{addr}</wsa:Address><wsa:ReferenceParameters><edge:ResourceId>"
            f"{rid}</edge:ResourceId></wsa:ReferenceParameters>"
        )
        return self._reply(
            version,
            (
                f"<br:RegisterPublisherResponse><br:PublisherRegistrationReference>{epr}"
                f"</br:PublisherRegistrationReference><br:ConsumerReference>{epr}"
                "</br:ConsumerReference></br:RegisterPublisherResponse>"
            ),
        )

    async def _registration(self, request: web.Request) -> web.Response:
        rid = request.match_info["rid"]
        root = parse(await request.read())
        version = etree.QName(root).namespace or S11
        rp_header = root.find(f"*/{{{EDGE}}}ResourceId")
        assert rp_header is not None and rp_header.text == rid  # reference parameter echoed
        if rid not in self.registrations:
            return self._unknown(version, rid)
        b = body_child(root)
        if b.tag == f"{{{RL}}}SetTerminationTime":
            self.renewals.append((rid, b.findtext(f"{{{RL}}}RequestedTerminationTime") or ""))
            return self._reply(
                version,
                (
                    "<wsrf-rl:SetTerminationTimeResponse><wsrf-rl:NewTerminationTime>"
                    f"{self.renewals[-1][1]}</wsrf-rl:NewTerminationTime>"
                    "</wsrf-rl:SetTerminationTimeResponse>"
                ),
            )
        await self.notifications.put((rid, b))
        return web.Response(status=202)
