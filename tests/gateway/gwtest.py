"""Helpers for the gateway tests: SOAP envelopes, posting, fault names, schema validation,
a real HTTP NotificationConsumer (a small aiohttp app) and the gateway as a real process
(start_gateway/stop_gateway, also used by tests/integration and tests/bench)."""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import os
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp
from aiohttp import web
from lxml import etree

from gateway.config import Config

SOAP11 = "http://schemas.xmlsoap.org/soap/envelope/"
SOAP12 = "http://www.w3.org/2003/05/soap-envelope"
WSA = "http://www.w3.org/2005/08/addressing"
WSNT = "http://docs.oasis-open.org/wsn/b-2"
BR = "http://docs.oasis-open.org/wsn/br-2"
BF = "http://docs.oasis-open.org/wsrf/bf-2"
WSTOP = "http://docs.oasis-open.org/wsn/t-1"
RP = "http://docs.oasis-open.org/wsrf/rp-2"
RL = "http://docs.oasis-open.org/wsrf/rl-2"
EDGE = "urn:wsn-edge"
SIMPLE = "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Simple"
CONCRETE = "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Concrete"
FULL = "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Full"
XPATH = "http://www.w3.org/TR/1999/REC-xpath-19991116"
NS = {
    "s11": SOAP11,
    "s12": SOAP12,
    "wsa": WSA,
    "wsnt": WSNT,
    "br": BR,
    "bf": BF,
    "wstop": WSTOP,
    "rp": RP,
    "rl": RL,
    "edge": EDGE,
}
NSDECL = (
    f'xmlns:wsa="{WSA}" xmlns:wsnt="{WSNT}" xmlns:br="{BR}" xmlns:edge="{EDGE}" '
    f'xmlns:rp="{RP}" xmlns:rl="{RL}" xmlns:wstop="{WSTOP}" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"'
)
READING = (
    '<rd:Reading xmlns:rd="urn:wsn-edge:reading" device="{dev}"><rd:value>{v}</rd:value>'
    "<rd:unit>Cel</rd:unit><rd:time>2026-11-21T05:00:00Z</rd:time></rd:Reading>"
)
#: the reading's namespace in Clark notation, for findtext(f".//{RD}value")
RD = "{urn:wsn-edge:reading}"
DT_NS = "urn:wsn-edge:device-topics"  # a device's own topics (design.md)
DEV_NS = "urn:wsn-edge:devices"  # the broker's device topics
DT = f'xmlns:dt="{DT_NS}"'
DEV = f'xmlns:dev="{DEV_NS}"'
# input actions of bw-2.wsdl and brw-2.wsdl (tests/wsdl_actions.py derives them all)
A_NOTIFY = "http://docs.oasis-open.org/wsn/bw-2/NotificationConsumer/Notify"
A_SUBSCRIBE = "http://docs.oasis-open.org/wsn/bw-2/NotificationProducer/SubscribeRequest"
A_REG = "http://docs.oasis-open.org/wsn/brw-2/RegisterPublisher/RegisterPublisherRequest"


#: envelope(message_id=FRESH): a new urn:uuid per envelope, as a WS-Addressing client
#: sends (WS-Addressing 1.0 Core §3.2: a MessageID identifies one message; the gateway
#: publishes a Notify whose MessageID it accepted before only once, gateway/dedupe.py)
FRESH = "fresh"


def envelope(
    body: str,
    version: int = 12,
    action: str | None = None,
    headers: str = "",
    to: str | None = None,
    message_id: str | None = FRESH,
) -> bytes:
    """With `action`, the headers wsa:Action and wsa:MessageID (`message_id`: FRESH, a
    given IRI, or None for none); the envelope of a Notify sent again must be the same
    bytes (or name the same MessageID)."""
    sv = SOAP12 if version == 12 else SOAP11
    h = ""
    if action:
        h += f"<wsa:Action>{action}</wsa:Action>"
        if message_id == FRESH:
            message_id = f"urn:uuid:{uuid.uuid4()}"
        if message_id is not None:
            h += f"<wsa:MessageID>{message_id}</wsa:MessageID>"
    if to:
        h += f"<wsa:To>{to}</wsa:To>"
    h += headers
    return (
        f'<s:Envelope xmlns:s="{sv}" {NSDECL}><s:Header>{h}</s:Header>'
        f"<s:Body>{body}</s:Body></s:Envelope>"
    ).encode()


@dataclass
class Reply:
    status: int
    text: str
    headers: dict[str, str]
    root: etree._Element | None

    @property
    def body(self) -> etree._Element:
        assert self.root is not None, self.text
        b = self.root.find(f"{{{SOAP12}}}Body")
        if b is None:
            b = self.root.find(f"{{{SOAP11}}}Body")
        assert b is not None
        return b[0]

    @property
    def is_fault(self) -> bool:
        return self.root is not None and etree.QName(self.body).localname == "Fault"

    @property
    def fault(self) -> etree._Element:
        """The fault's detail element (a bf-2 BaseFault subtype)."""
        assert self.is_fault, self.text
        d = self.body.find(f"{{{SOAP12}}}Detail")
        if d is None:
            d = self.body.find("detail")
        assert d is not None, self.text
        return d[0]

    @property
    def fault_name(self) -> str:
        return etree.QName(self.fault).localname

    def header(self, local: str) -> str | None:
        assert self.root is not None
        el = self.root.find(f".//{{{WSA}}}{local}")
        return el.text if el is not None else None


async def post(
    url: str,
    data: bytes,
    version: int = 12,
    headers: dict[str, str] | None = None,
    session: aiohttp.ClientSession | None = None,
) -> Reply:
    ct = "application/soap+xml; charset=utf-8" if version == 12 else "text/xml; charset=utf-8"
    hdrs = {"Content-Type": ct, **(headers or {})}
    own = session is None
    s = session or aiohttp.ClientSession()
    try:
        async with s.post(url, data=data, headers=hdrs) as r:
            raw = await r.read()
            root = None
            if raw and r.content_type in ("application/soap+xml", "text/xml"):
                root = etree.fromstring(raw)
            return Reply(r.status, raw.decode(errors="replace"), dict(r.headers), root)
    finally:
        if own:
            await s.close()


async def read_request(r: asyncio.StreamReader) -> bytes:
    """The body of the next HTTP/1.1 request on a raw connection (a hand-written consumer
    that answers what aiohttp would not), read by its Content-Length; IncompleteReadError
    when the peer closes."""
    head = await r.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return await r.readexactly(length)


async def call(
    url: str,
    body: str,
    version: int = 12,
    action: str | None = None,
    headers: str = "",
    http_headers: dict[str, str] | None = None,
    message_id: str | None = FRESH,
) -> Reply:
    data = envelope(body, version, action, headers, message_id=message_id)
    return await post(url, data, version, http_headers)


async def call_from(src: str, url: str, body: str, action: str | None = None) -> Reply:
    """`call` (SOAP 1.2) from the local address `src`: another loopback address
    (127.0.0.2, ...) stands for another client address."""
    conn = aiohttp.TCPConnector(local_addr=(src, 0))
    async with aiohttp.ClientSession(connector=conn) as s:
        return await post(url, envelope(body, 12, action), 12, session=s)


# ---------------------------------------------------------------- schemas
def _onvif_wsdl_dir() -> Path:
    """The official OASIS schemas shipped in onvif-zeep-async, found without importing
    onvif: its client module calls logging.basicConfig(INFO) at import, which would turn
    on INFO logging in every process importing these helpers (py4j in Spark tests)."""
    spec = importlib.util.find_spec("onvif")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("onvif-zeep-async is not installed (it ships the OASIS schemas)")
    return Path(next(iter(spec.submodule_search_locations))) / "wsdl"


WSDL_DIR = _onvif_wsdl_dir()


@functools.cache
def schema() -> etree.XMLSchema:
    """b-2 + r-2 (+ bf-2, t-1, ws-addr they import): the official OASIS schemas."""
    doc = f"""<xsd:schema xmlns:xsd="http://www.w3.org/2001/XMLSchema"
      targetNamespace="urn:wsn-edge:test-schema-root">
      <xsd:import namespace="{WSNT}" schemaLocation="{(WSDL_DIR / "b-2.xsd").as_uri()}"/>
      <xsd:import namespace="http://docs.oasis-open.org/wsrf/r-2"
                  schemaLocation="{(WSDL_DIR / "r-2.xsd").as_uri()}"/>
    </xsd:schema>"""
    return etree.XMLSchema(etree.fromstring(doc.encode(), base_url=str(WSDL_DIR) + "/"))


def validate(el: etree._Element) -> None:
    """Assert `el` (a response body element or fault detail) is valid against the official
    schemas; elements in namespaces without a shipped schema (br-2, rp-2, rl-2) are not
    checked themselves but their wsnt/wsa children are."""
    ns = etree.QName(el).namespace
    if ns in (WSNT, BF, "http://docs.oasis-open.org/wsrf/r-2", WSTOP, WSA):
        copy = etree.fromstring(etree.tostring(el))
        s = schema()
        assert s.validate(copy), f"{s.error_log}\n{etree.tostring(el).decode()}"
    else:
        for c in el:
            if isinstance(c.tag, str):
                validate(c)


# ---------------------------------------------------------------- consumer
@dataclass
class Consumer:
    """A real NotificationConsumer over HTTP. `fail` N first requests with 500,
    `delay` each answer, hold each answer until `hold` is set, record every received
    envelope."""

    fail: int = 0
    delay: float = 0.0
    hold: asyncio.Event | None = None
    status: int = 200
    received: list[etree._Element] = field(default_factory=list)
    requests: int = 0
    url: str = ""
    _runner: web.AppRunner | None = None
    _event: asyncio.Event = field(default_factory=asyncio.Event)

    async def _handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        data = await request.read()
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.hold is not None:
            await self.hold.wait()
        if self.fail > 0:
            self.fail -= 1
            return web.Response(status=500, text="try later")
        self.received.append(etree.fromstring(data))
        self._event.set()
        return web.Response(status=self.status)

    async def start(self) -> Consumer:
        return await self.start_on(0)

    async def start_on(self, port: int) -> Consumer:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/consumer"
        return self

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    def messages(self) -> list[etree._Element]:
        """Every NotificationMessage received (wrapped)."""
        out = []
        for env in self.received:
            out.extend(env.iter(f"{{{WSNT}}}NotificationMessage"))
        return out

    def bodies(self) -> list[etree._Element]:
        out = []
        for env in self.received:
            b = env.find(f"{{{SOAP12}}}Body")
            if b is None:
                b = env.find(f"{{{SOAP11}}}Body")
            out.append(b[0])
        return out

    async def wait_for(self, n: int, timeout: float = 30.0, wrapped: bool = True) -> None:
        """Until `n` messages (`wrapped`) or requests arrived; a condition, so the timeout
        is only how long a loaded machine may take (5 s was not always enough at load 20)."""

        async def _w() -> None:
            while (len(self.messages()) if wrapped else len(self.received)) < n:
                self._event.clear()
                await self._event.wait()

        await asyncio.wait_for(_w(), timeout)


# ---------------------------------------------------------------- message builders
def subscribe_body(consumer: str, filt: str = "", extra: str = "", epr_extra: str = "") -> str:
    """Subscribe: `filt` inside wsnt:Filter, `extra` after it, `epr_extra` inside the
    ConsumerReference (reference parameters, say)."""
    f = f"<wsnt:Filter>{filt}</wsnt:Filter>" if filt else ""
    return (
        f"<wsnt:Subscribe><wsnt:ConsumerReference><wsa:Address>{consumer}</wsa:Address>"
        f"{epr_extra}</wsnt:ConsumerReference>{f}{extra}</wsnt:Subscribe>"
    )


def topic_filter(text: str, dialect: str = CONCRETE, nsdecl: str = 'xmlns:tns="urn:test"') -> str:
    return f'<wsnt:TopicExpression Dialect="{dialect}" {nsdecl}>{text}</wsnt:TopicExpression>'


def notify_body(
    *msgs: tuple[str | None, str],
    nsdecl: str = 'xmlns:tns="urn:test"',
    dialect: str = CONCRETE,
    producer: str | None = None,
) -> str:
    out = "<wsnt:Notify>"
    for topic, payload in msgs:
        out += "<wsnt:NotificationMessage>"
        if topic is not None:
            out += f'<wsnt:Topic Dialect="{dialect}" {nsdecl}>{topic}</wsnt:Topic>'
        if producer:
            out += (
                f"<wsnt:ProducerReference><wsa:Address>{producer}</wsa:Address>"
                "</wsnt:ProducerReference>"
            )
        out += f"<wsnt:Message>{payload}</wsnt:Message></wsnt:NotificationMessage>"
    return out + "</wsnt:Notify>"


def reading(v: float | str, dev: str = "d1") -> str:
    return READING.format(dev=dev, v=v)


def readings(*values: float | str, topic: str = "tns:t") -> list[tuple[str | None, str]]:
    """One (topic, reading) per value, for notify_body and publish."""
    return [(topic, reading(v)) for v in values]


def register_body(
    publisher: str | None = "http://127.0.0.1:9999/wsn/producer",
    device_id: str | None = "esp32-01",
    topics: tuple[str, ...] = ("dt:temperature",),
    demand: bool = False,
    itt: str | None = None,
    dialect: str = SIMPLE,
) -> str:
    """br:RegisterPublisher of a device publishing `topics` (in dt:, design.md)."""
    out = "<br:RegisterPublisher>"
    if publisher:
        md = (
            f"<wsa:Metadata><edge:DeviceId>{device_id}</edge:DeviceId></wsa:Metadata>"
            if device_id
            else ""
        )
        out += (
            f"<br:PublisherReference><wsa:Address>{publisher}</wsa:Address>{md}"
            "</br:PublisherReference>"
        )
    for t in topics:
        out += f'<br:Topic Dialect="{dialect}" {DT}>{t}</br:Topic>'
    out += f"<br:Demand>{'true' if demand else 'false'}</br:Demand>"
    if itt:
        out += f"<br:InitialTerminationTime>{itt}</br:InitialTerminationTime>"
    return out + "</br:RegisterPublisher>"


# ---------------------------------------------------------------- requests a test makes often
class Subscribed(NamedTuple):
    address: str  # the SubscriptionReference's address
    id: str  # its edge:ResourceId


async def subscribe(
    broker: str,
    consumer: str,
    filt: str | None = None,
    *,
    extra: str = "",
    epr_extra: str = "",
    version: int = 12,
) -> Subscribed:
    """Subscribe `consumer` at `broker` (filter: `filt`, default tns:t in Concrete; "" for
    none) and assert it worked."""
    body = subscribe_body(consumer, topic_filter("tns:t") if filt is None else filt, extra,
                          epr_extra)  # fmt: skip
    r = await call(broker, body, version)
    assert r.status == 200, r.text
    rid = r.body.findtext(f".//{{{WSA}}}ReferenceParameters/{{{EDGE}}}ResourceId")
    assert rid, r.text
    return Subscribed(sub_address(r), rid)


async def publish(url: str, *msgs: tuple[str | None, str], **notify_kw: Any) -> None:
    """POST a Notify of `msgs` (notify_body's) to `url` and assert it was accepted (202)."""
    r = await call(url, notify_body(*msgs, **notify_kw))
    assert r.status == 202, r.text


async def register(broker: str, **body_kw: Any) -> str:
    """Register a publisher (register_body's arguments) and assert it worked: the
    registration's address, which is also its ConsumerReference; both EPRs valid."""
    r = await call(broker, register_body(**body_kw), action=A_REG)
    assert r.status == 200, r.text
    assert r.body.tag == f"{{{BR}}}RegisterPublisherResponse", r.text
    reg = r.body.findtext(f"{{{BR}}}PublisherRegistrationReference/{{{WSA}}}Address")
    cons = r.body.findtext(f"{{{BR}}}ConsumerReference/{{{WSA}}}Address")
    assert reg and reg == cons and "/wsn/registrations/" in reg, r.text
    for epr in r.body:  # both are schema-valid wsa:EndpointReferenceType
        validate_epr(epr)
    return reg


def sub_address(reply: Reply) -> str:
    el = reply.body.find(f"{{{WSNT}}}SubscriptionReference/{{{WSA}}}Address")
    assert el is not None and el.text, reply.text
    return el.text


def epr_address(reply: Reply, path: str) -> str:
    el = reply.body.find(path, NS)
    assert el is not None and el.text, reply.text
    return el.text


def validate_epr(el: etree._Element) -> None:
    """Validate an element of wsa:EndpointReferenceType whose own name has no schema here
    (br:PublisherRegistrationReference...) as a wsa:EndpointReference."""
    copy = etree.fromstring(etree.tostring(el))
    copy.tag = f"{{{WSA}}}EndpointReference"
    validate(copy)


def make_config(data_dir: Path, **kw: Any) -> Config:
    """The broker configuration of the tests: short backoffs, sweeps and rotation."""
    base = Config(
        data_dir=data_dir,
        host="127.0.0.1",
        port=0,
        backoff_initial=0.05,
        backoff_max=0.2,
        delivery_timeout=2.0,
        sweep_interval=0.1,
        landing_max_age=0.3,
        default_termination=timedelta(minutes=10),
        max_termination=timedelta(days=1),
        min_termination=timedelta(milliseconds=100),
    )
    return replace(base, **kw)


# ---------------------------------------------------------------- the gateway process
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class GatewayProcess:
    proc: subprocess.Popen[str]
    url: str
    stderr: Path


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` (all its threads) so far (Linux /proc). For
    "not held" bounds on a gateway process: a request held behind work on its event loop
    waits at least that work's CPU time, whereas on a loaded machine the wall clock also
    counts the gateway's waits for a core."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_gateway(data_dir: Path, *extra: str) -> GatewayProcess:
    """`python -m gateway --host 127.0.0.1 --port 0 --data-dir DIR [extra]`, returned once
    it listens; its stderr goes to DIR.stderr next to DIR."""
    data_dir.mkdir(parents=True, exist_ok=True)
    err = data_dir.parent / f"{data_dir.name}.stderr"
    with open(err, "w") as errf:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", "0",
             "--data-dir", str(data_dir), "--backoff-initial", "0.05", "--backoff-max", "0.2",
             *extra],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=errf, text=True,
        )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        proc.wait()
        raise AssertionError(f"gateway did not start: {line!r} {err.read_text()}")
    return GatewayProcess(proc, line.strip().rsplit(" ", 1)[1], err)


def stop_gateway(gw: GatewayProcess) -> int:
    """SIGTERM (graceful stop) and its exit code; kill and fail if it takes over 15 s."""
    if gw.proc.poll() is None:
        gw.proc.send_signal(signal.SIGTERM)
        try:
            return gw.proc.wait(15)
        except subprocess.TimeoutExpired:
            gw.proc.kill()
            gw.proc.wait()
            raise AssertionError("gateway did not stop on SIGTERM within 15 s") from None
    return int(gw.proc.returncode)
