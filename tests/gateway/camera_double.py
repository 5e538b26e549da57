"""A camera for the tests: an ONVIF device and event service on 127.0.0.1, built from the
official `devicemgmt.wsdl` and `events.wsdl` shipped in onvif-zeep-async (`onvif/wsdl/`).

What it checks of its clients (as a strict camera would): every request body validates
against the schema of the WSDL of its service (the `xs:schema` embedded in
`devicemgmt.wsdl` / `events.wsdl`, with the `b-2.xsd`, `t-1.xsd`, `onvif.xsd` they import),
else a SOAP Sender fault and an entry in `invalid`; every request but GetSystemDateAndTime
carries a WS-Security UsernameToken whose PasswordDigest (Base64(SHA-1(nonce + created +
password))) is right and whose Created is within `time_window` seconds of the camera's
clock, else `ter:NotAuthorized`. Its own answers and Notify validate too (`invalid` again),
so a test cannot pass because the double drifted from the WSDL.

What it does (the ONVIF event service, WS-BaseNotification 1.3 underneath): GetServices
(or, with `get_services=False`, only GetCapabilities, as older cameras), GetEventProperties
(a wstop:TopicSet with tt:MessageDescription), CreatePullPointSubscription + PullMessages
(long poll up to the request's Timeout), Subscribe (Notify pushed to the consumer),
Renew, Unsubscribe, SetSynchronizationPoint (the property events again, Initialized); at
most `max_pullpoints` live pull points (more: a fault, as cameras have a few slots); a
subscription ends at its TerminationTime by the camera's clock. `broken_relative_time`
makes it read every xsd:duration as 10 s (a known firmware bug). `reboot()` forgets every
subscription, is unreachable for a moment, and comes back with its clock moved.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
from aiohttp import web
from gwtest import WSDL_DIR
from lxml import etree

from gateway.wire.xmlutil import format_datetime, parse_duration

S12 = "http://www.w3.org/2003/05/soap-envelope"
WSA = "http://www.w3.org/2005/08/addressing"
WSNT = "http://docs.oasis-open.org/wsn/b-2"
WSTOP = "http://docs.oasis-open.org/wsn/t-1"
WSRF_R = "http://docs.oasis-open.org/wsrf/r-2"
WSRF_BF = "http://docs.oasis-open.org/wsrf/bf-2"
TT = "http://www.onvif.org/ver10/schema"
TDS = "http://www.onvif.org/ver10/device/wsdl"
TEV = "http://www.onvif.org/ver10/events/wsdl"
TER = "http://www.onvif.org/ver10/error"
TNS1 = "http://www.onvif.org/ver10/topics"
WSSE = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd"
WSU = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd"
XSD = "http://www.w3.org/2001/XMLSchema"
#: ONVIF's dialect for the concrete topic of a notification (events.wsdl,
#: GetEventPropertiesResponse), what cameras put in wsnt:Topic/@Dialect
CONCRETE_SET = "http://www.onvif.org/ver10/tev/topicExpression/ConcreteSet"
NOTIFY_ACTION = "http://docs.oasis-open.org/wsn/bw-2/NotificationConsumer/Notify"
#: the envelope's declarations, as real cameras write them (tns1 on the Envelope, so a
#: wsnt:Topic's prefix resolves only through its ancestors)
NSMAP = {"s": S12, "wsa": WSA, "wsnt": WSNT, "wstop": WSTOP, "tt": TT, "tns1": TNS1}

MOTION = ("RuleEngine", "CellMotionDetector", "Motion")
SOURCE = (
    ("VideoSourceConfigurationToken", "VideoSourceToken"),
    ("VideoAnalyticsConfigurationToken", "VideoAnalyticsToken"),
    ("Rule", "MyMotionDetectorRule"),
)


@functools.cache
def wsdl_schema(wsdl: str) -> etree.XMLSchema:
    """The xs:schema embedded in `wsdl` (of onvif/wsdl/), its imports resolved next to it."""
    doc = etree.parse(str(WSDL_DIR / wsdl))
    el = doc.find(f".//{{{XSD}}}schema")
    assert el is not None
    return etree.XMLSchema(etree.fromstring(etree.tostring(el), base_url=str(WSDL_DIR / wsdl)))


def schema_for(el: etree._Element) -> etree.XMLSchema:
    return wsdl_schema("devicemgmt.wsdl" if etree.QName(el).namespace == TDS else "events.wsdl")


class Fault(Exception):
    def __init__(self, subcode: tuple[str, str], reason: str, sender: bool = True) -> None:
        super().__init__(reason)
        self.subcode, self.reason, self.sender = subcode, reason, sender


@dataclass
class Sub:
    id: str
    kind: str  # "pullpoint" | "notify"
    termination: float  # camera clock
    consumer: str | None = None
    queue: list[etree._Element] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    requests: list[str] = field(default_factory=list)


def _q(ns: str, local: str) -> str:
    return f"{{{ns}}}{local}"


def _sub(parent: etree._Element, ns: str, local: str, text: str | None = None) -> etree._Element:
    el = etree.SubElement(parent, _q(ns, local))
    if text is not None:
        el.text = text
    return el


@dataclass
class CameraDouble:
    user: str = "admin"
    password: str = "camera-secret"
    pullpoint: bool = True
    #: GetServiceCapabilities tells whether it has pull points (some cameras leave it out)
    says_pullpoint: bool = True
    #: a Subscribe is answered only after the current state was pushed (Initialized)
    state_before_answer: bool = False
    get_services: bool = True
    max_pullpoints: int = 2
    #: seconds the camera adds to real time (its clock is wrong by this much)
    clock_offset: float = 0.0
    time_window: float = 300.0
    broken_relative_time: bool = False
    max_termination: float = 3600.0
    #: what failed to validate against the WSDL's schema (requests, and its own answers)
    invalid: list[str] = field(default_factory=list)
    #: every fault it answered but ResourceUnknownFault, with its reason
    faults: list[str] = field(default_factory=list)
    #: (operation, subscription id or "") of every request, in order
    log: list[tuple[str, str]] = field(default_factory=list)
    subs: dict[str, Sub] = field(default_factory=dict)
    notified: list[bytes] = field(default_factory=list)
    url: str = ""
    port: int = 0
    boots: int = 0
    motion_state: bool = False
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _runner: web.AppRunner | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    on_request: Callable[[str], None] | None = None

    # ------------------------------------------------------------------ lifecycle
    async def start(self, port: int = 0) -> CameraDouble:
        app = web.Application()
        app.router.add_post("/onvif/device_service", self._device)
        app.router.add_post("/onvif/event_service", self._events)
        app.router.add_post("/onvif/subscription/{sid}", self._subscription)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port or self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{self.port}"
        return self

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        for s in self.subs.values():
            s.wake.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def reboot(self, downtime: float = 0.3, clock_shift: float = 3600.0) -> None:
        """Power-cycle: every subscription gone, unreachable for `downtime` seconds, back
        on the same port with its clock moved by `clock_shift` seconds."""
        await self.stop()
        self.subs.clear()
        self.boots += 1
        self.clock_offset += clock_shift
        await asyncio.sleep(downtime)
        await self.start(self.port)

    # ------------------------------------------------------------------ clock
    def now(self) -> float:
        return time.time() + self.clock_offset

    def now_dt(self) -> datetime:
        return datetime.fromtimestamp(self.now(), UTC)

    def _expire(self) -> None:
        now = self.now()
        for sid in [s.id for s in self.subs.values() if s.termination <= now]:
            self.subs.pop(sid).wake.set()

    def _termination(self, text: str | None, default: float = 60.0) -> float:
        now = self.now()
        if not text:
            return now + default
        t = text.strip()
        if t.startswith(("P", "-P")):
            secs = parse_duration(t).total_seconds()
            if self.broken_relative_time:
                secs = 10.0
        else:
            secs = datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp() - now
        if secs <= 0:
            raise Fault(
                (WSNT, "UnacceptableInitialTerminationTimeFault"), f"{t!r} is not in the future"
            )
        return now + min(secs, self.max_termination)

    def live(self, kind: str | None = None) -> list[Sub]:
        self._expire()
        return [s for s in self.subs.values() if kind is None or s.kind == kind]

    # ------------------------------------------------------------------ events
    def message(self, path: tuple[str, ...], data: tuple[tuple[str, str], ...],
                operation: str = "Changed", source: tuple[tuple[str, str], ...] = SOURCE,
                sub: Sub | None = None) -> etree._Element:  # fmt: skip
        nm = etree.Element(_q(WSNT, "NotificationMessage"), nsmap=NSMAP)
        if sub is not None:
            ref = _sub(nm, WSNT, "SubscriptionReference")
            _sub(ref, WSA, "Address", f"{self.url}/onvif/subscription/{sub.id}")
        t = _sub(nm, WSNT, "Topic", "tns1:" + "/".join(path))
        t.set("Dialect", CONCRETE_SET)
        prod = _sub(nm, WSNT, "ProducerReference")
        _sub(prod, WSA, "Address", f"{self.url}/onvif/event_service")
        m = _sub(_sub(nm, WSNT, "Message"), TT, "Message")
        m.set("UtcTime", format_datetime(self.now_dt()))
        m.set("PropertyOperation", operation)
        src = _sub(m, TT, "Source")
        for name, value in source:
            it = _sub(src, TT, "SimpleItem")
            it.set("Name", name)
            it.set("Value", value)
        dat = _sub(m, TT, "Data")
        for name, value in data:
            it = _sub(dat, TT, "SimpleItem")
            it.set("Name", name)
            it.set("Value", value)
        return nm

    def emit(self, path: tuple[str, ...], data: tuple[tuple[str, str], ...],
             operation: str = "Changed") -> int:  # fmt: skip
        """One event to every live subscription (queued or pushed); -> how many got it."""
        n = 0
        for s in self.live():
            if s.kind == "pullpoint":
                s.queue.append(self.message(path, data, operation, sub=s))
                s.wake.set()
            else:
                self._push(s, [self.message(path, data, operation, sub=s)])
            n += 1
        return n

    def motion(self, active: bool) -> int:
        self.motion_state = active
        return self.emit(MOTION, (("IsMotion", "true" if active else "false"),))

    def _push(self, s: Sub, msgs: list[etree._Element]) -> asyncio.Task[None]:
        env = etree.Element(_q(S12, "Envelope"), nsmap=NSMAP)
        hdr = _sub(env, S12, "Header")
        _sub(hdr, WSA, "Action", NOTIFY_ACTION)
        _sub(hdr, WSA, "To", s.consumer)
        notify = _sub(_sub(env, S12, "Body"), WSNT, "Notify")
        notify.extend(msgs)
        self._check(notify, "Notify sent")
        data = etree.tostring(env, xml_declaration=True, encoding="utf-8")

        async def send() -> None:
            async with (
                aiohttp.ClientSession() as session,
                session.post(
                    s.consumer or "",
                    data=data,
                    headers={"Content-Type": "application/soap+xml; charset=utf-8"},
                ) as r,
            ):
                await r.read()
                self.notified.append(data)

        t = asyncio.get_running_loop().create_task(send())
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)
        return t

    # ------------------------------------------------------------------ SOAP
    def _check(self, el: etree._Element, what: str) -> bool:
        copy = etree.fromstring(etree.tostring(el))
        s = schema_for(copy)
        if s.validate(copy):
            return True
        self.invalid.append(f"{what} {etree.QName(el).localname}: {s.error_log}")
        return False

    def _authenticate(self, env: etree._Element) -> None:
        tok = env.find(f"{{{S12}}}Header/{{{WSSE}}}Security/{{{WSSE}}}UsernameToken")
        if tok is None:
            raise Fault((TER, "NotAuthorized"), "a WS-Security UsernameToken is required")
        user = tok.findtext(f"{{{WSSE}}}Username")
        pw = tok.find(f"{{{WSSE}}}Password")
        nonce = tok.findtext(f"{{{WSSE}}}Nonce") or ""
        created = tok.findtext(f"{{{WSU}}}Created") or ""
        if pw is None or not pw.get("Type", "").endswith("#PasswordDigest"):
            raise Fault((TER, "NotAuthorized"), "only PasswordDigest is accepted")
        digest = base64.b64encode(
            hashlib.sha1(
                base64.b64decode(nonce) + created.encode() + self.password.encode()
            ).digest()
        ).decode()
        if user != self.user or pw.text != digest:
            raise Fault((TER, "NotAuthorized"), "wrong user name or password")
        when = datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
        if abs(when - self.now()) > self.time_window:
            raise Fault(
                (TER, "NotAuthorized"),
                f"Created {created} is {when - self.now():+.0f} s from the camera's clock",
            )

    async def _serve(
        self, request: web.Request, ops: dict[str, Callable[..., Any]], sid: str = ""
    ) -> web.Response:
        env = etree.fromstring(await request.read())
        body = env.find(f"{{{S12}}}Body")
        if body is None or not len(body):
            return self._fault((TER, "InvalidArgs"), "a SOAP 1.2 envelope is expected")
        op_el = body[0]
        op = etree.QName(op_el).localname
        self.log.append((op, sid))
        if self.on_request is not None:
            self.on_request(op)
        try:
            if not self._check(op_el, "request"):
                raise Fault((TER, "InvalidArgs"), f"{op} does not validate: {self.invalid[-1]}")
            if op != "GetSystemDateAndTime":
                self._authenticate(env)
            handler = ops.get(op)
            if handler is None:
                raise Fault((TER, "ActionNotSupported"), f"{op} is not supported here")
            out = (
                await handler(op_el, sid)
                if asyncio.iscoroutinefunction(handler)
                else handler(op_el, sid)
            )
        except Fault as f:
            if f.subcode[1] != "ResourceUnknownFault":
                self.faults.append(f"{op}: {f.reason}")
            return self._fault(f.subcode, f.reason, f.sender)
        self._check(out, "answer")
        resp = etree.Element(_q(S12, "Envelope"), nsmap=NSMAP)
        etree.SubElement(resp, _q(S12, "Body")).append(out)
        return web.Response(
            body=etree.tostring(resp, xml_declaration=True, encoding="utf-8"),
            content_type="application/soap+xml",
            charset="utf-8",
        )

    def _fault(self, subcode: tuple[str, str], reason: str, sender: bool = True) -> web.Response:
        env = etree.Element(_q(S12, "Envelope"), nsmap={"s": S12, "sc": subcode[0]})
        f = _sub(_sub(env, S12, "Body"), S12, "Fault")
        code = _sub(f, S12, "Code")
        _sub(code, S12, "Value", "s:Sender" if sender else "s:Receiver")
        _sub(_sub(code, S12, "Subcode"), S12, "Value", f"sc:{subcode[1]}")
        txt = _sub(_sub(f, S12, "Reason"), S12, "Text", reason)
        txt.set("{http://www.w3.org/XML/1998/namespace}lang", "en")
        if subcode[1] == "ResourceUnknownFault":
            d = _sub(_sub(f, S12, "Detail"), WSRF_R, "ResourceUnknownFault")
            _sub(d, WSRF_BF, "Timestamp", format_datetime(self.now_dt()))
        return web.Response(
            status=400 if sender else 500,
            body=etree.tostring(env, xml_declaration=True, encoding="utf-8"),
            content_type="application/soap+xml",
            charset="utf-8",
        )

    # ------------------------------------------------------------------ device service
    async def _device(self, request: web.Request) -> web.Response:
        ops: dict[str, Callable[..., Any]] = {
            "GetSystemDateAndTime": self._get_time,
            "GetCapabilities": self._get_capabilities,
        }
        if self.get_services:
            ops["GetServices"] = self._get_services
        return await self._serve(request, ops)

    def _get_time(self, _el: etree._Element, _sid: str) -> etree._Element:
        now = self.now_dt()
        out = etree.Element(_q(TDS, "GetSystemDateAndTimeResponse"), nsmap={"tds": TDS})
        sdt = _sub(out, TDS, "SystemDateAndTime")
        _sub(sdt, TT, "DateTimeType", "Manual")
        _sub(sdt, TT, "DaylightSavings", "false")
        utc = _sub(sdt, TT, "UTCDateTime")
        t, d = _sub(utc, TT, "Time"), _sub(utc, TT, "Date")
        for k, v in (("Hour", now.hour), ("Minute", now.minute), ("Second", now.second)):
            _sub(t, TT, k, str(v))
        for k, v in (("Year", now.year), ("Month", now.month), ("Day", now.day)):
            _sub(d, TT, k, str(v))
        return out

    def _get_services(self, _el: etree._Element, _sid: str) -> etree._Element:
        out = etree.Element(_q(TDS, "GetServicesResponse"), nsmap={"tds": TDS})
        for ns, path in ((TDS, "device_service"), (TEV, "event_service")):
            s = _sub(out, TDS, "Service")
            _sub(s, TDS, "Namespace", ns)
            _sub(s, TDS, "XAddr", f"{self.url}/onvif/{path}")
            v = _sub(s, TDS, "Version")
            _sub(v, TT, "Major", "2")
            _sub(v, TT, "Minor", "60")
        return out

    def _get_capabilities(self, _el: etree._Element, _sid: str) -> etree._Element:
        out = etree.Element(_q(TDS, "GetCapabilitiesResponse"), nsmap={"tds": TDS})
        ev = _sub(_sub(out, TDS, "Capabilities"), TT, "Events")
        _sub(ev, TT, "XAddr", f"{self.url}/onvif/event_service")
        _sub(ev, TT, "WSSubscriptionPolicySupport", "false")
        _sub(ev, TT, "WSPullPointSupport", "true" if self.pullpoint else "false")
        _sub(ev, TT, "WSPausableSubscriptionManagerInterfaceSupport", "false")
        return out

    # ------------------------------------------------------------------ event service
    async def _events(self, request: web.Request) -> web.Response:
        ops: dict[str, Callable[..., Any]] = {
            "GetServiceCapabilities": self._service_capabilities,
            "GetEventProperties": self._event_properties,
            "Subscribe": self._subscribe,
        }
        if self.pullpoint:
            ops["CreatePullPointSubscription"] = self._create_pullpoint
        return await self._serve(request, ops)

    def _service_capabilities(self, _el: etree._Element, _sid: str) -> etree._Element:
        out = etree.Element(_q(TEV, "GetServiceCapabilitiesResponse"), nsmap={"tev": TEV})
        c = _sub(out, TEV, "Capabilities")
        if self.says_pullpoint:
            c.set("WSPullPointSupport", "true" if self.pullpoint else "false")
        c.set("WSSubscriptionPolicySupport", "false")
        c.set("MaxPullPoints", str(self.max_pullpoints))
        return out

    def _event_properties(self, _el: etree._Element, _sid: str) -> etree._Element:
        out = etree.Element(_q(TEV, "GetEventPropertiesResponse"), nsmap={"tev": TEV})
        _sub(
            out,
            TEV,
            "TopicNamespaceLocation",
            "http://www.onvif.org/onvif/ver10/topics/topicns.xml",
        )
        _sub(out, WSNT, "FixedTopicSet", "true")
        ts = _sub(out, WSTOP, "TopicSet")

        def topic(path: tuple[str, ...], items: tuple[tuple[str, str], ...], prop: bool) -> None:
            el = ts.find(_q(TNS1, path[0]))
            if el is None:
                el = _sub(ts, TNS1, path[0])
            for step in path[1:]:
                nxt = el.find(step)
                el = nxt if nxt is not None else etree.SubElement(el, step)
            el.set(_q(WSTOP, "topic"), "true")
            md = _sub(el, TT, "MessageDescription")
            md.set("IsProperty", "true" if prop else "false")
            src = _sub(md, TT, "Source")
            for name, _v in SOURCE:
                d = _sub(src, TT, "SimpleItemDescription")
                d.set("Name", name)
                d.set("Type", "tt:ReferenceToken")
            data = _sub(md, TT, "Data")
            for name, typ in items:
                d = _sub(data, TT, "SimpleItemDescription")
                d.set("Name", name)
                d.set("Type", typ)

        topic(MOTION, (("IsMotion", "xs:boolean"),), True)
        topic(
            ("VideoSource", "GlobalSceneChange", "ImagingService"), (("State", "xs:boolean"),), True
        )
        topic(("Device", "Trigger", "DigitalInput"), (("LogicalState", "xs:boolean"),), True)
        _sub(
            out,
            WSNT,
            "TopicExpressionDialect",
            "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Concrete",
        )
        _sub(out, WSNT, "TopicExpressionDialect", CONCRETE_SET)
        _sub(
            out,
            TEV,
            "MessageContentFilterDialect",
            "http://www.onvif.org/ver10/tev/messageContentFilter/ItemFilter",
        )
        _sub(
            out,
            TEV,
            "MessageContentSchemaLocation",
            "http://www.onvif.org/onvif/ver10/schema/onvif.xsd",
        )
        return out

    def _new_sub(self, kind: str, itt: etree._Element | None, consumer: str | None) -> Sub:
        s = Sub(
            f"{self.boots}-{next(self._ids)}",
            kind,
            self._termination(itt.text if itt is not None else None),
            consumer,
        )
        self.subs[s.id] = s
        return s

    def _times(self, parent: etree._Element, s: Sub, ns: str = WSNT) -> None:
        _sub(parent, ns, "CurrentTime", format_datetime(self.now_dt()))
        _sub(
            parent,
            ns,
            "TerminationTime",
            format_datetime(datetime.fromtimestamp(s.termination, UTC)),
        )

    def _ref(self, parent: etree._Element, s: Sub) -> None:
        ref = _sub(
            parent, TEV if parent.tag.startswith("{" + TEV) else WSNT, "SubscriptionReference"
        )
        _sub(ref, WSA, "Address", f"{self.url}/onvif/subscription/{s.id}")

    def _create_pullpoint(self, el: etree._Element, _sid: str) -> etree._Element:
        if len(self.live("pullpoint")) >= self.max_pullpoints:
            raise Fault(
                (TER, "MaxPullPoints"),
                f"all {self.max_pullpoints} pull points in use",
                sender=False,
            )
        s = self._new_sub("pullpoint", el.find(_q(TEV, "InitialTerminationTime")), None)
        out = etree.Element(_q(TEV, "CreatePullPointSubscriptionResponse"), nsmap={"tev": TEV})
        self._ref(out, s)
        self._times(out, s)
        return out

    async def _subscribe(self, el: etree._Element, _sid: str) -> etree._Element:
        consumer = el.findtext(f"{{{WSNT}}}ConsumerReference/{{{WSA}}}Address")
        s = self._new_sub("notify", el.find(_q(WSNT, "InitialTerminationTime")), consumer)
        if self.state_before_answer:  # the current state, delivered before the answer
            state = (("IsMotion", "true" if self.motion_state else "false"),)
            await self._push(s, [self.message(MOTION, state, "Initialized", sub=s)])
        out = etree.Element(_q(WSNT, "SubscribeResponse"), nsmap={"wsnt": WSNT})
        self._ref(out, s)
        self._times(out, s)
        return out

    # ------------------------------------------------------------------ subscriptions
    async def _subscription(self, request: web.Request) -> web.Response:
        ops: dict[str, Callable[..., Any]] = {
            "Renew": self._renew,
            "Unsubscribe": self._unsubscribe,
            "PullMessages": self._pull,
            "SetSynchronizationPoint": self._sync,
        }
        return await self._serve(request, ops, request.match_info["sid"])

    def _find(self, sid: str) -> Sub:
        self._expire()
        s = self.subs.get(sid)
        if s is None:
            raise Fault((WSRF_R, "ResourceUnknownFault"), f"no subscription {sid}")
        return s

    def _renew(self, el: etree._Element, sid: str) -> etree._Element:
        s = self._find(sid)
        s.termination = self._termination(el.findtext(_q(WSNT, "TerminationTime")))
        out = etree.Element(_q(WSNT, "RenewResponse"), nsmap={"wsnt": WSNT})
        _sub(
            out,
            WSNT,
            "TerminationTime",
            format_datetime(datetime.fromtimestamp(s.termination, UTC)),
        )
        _sub(out, WSNT, "CurrentTime", format_datetime(self.now_dt()))
        return out

    def _unsubscribe(self, _el: etree._Element, sid: str) -> etree._Element:
        self.subs.pop(self._find(sid).id).wake.set()
        return etree.Element(_q(WSNT, "UnsubscribeResponse"), nsmap={"wsnt": WSNT})

    async def _pull(self, el: etree._Element, sid: str) -> etree._Element:
        s = self._find(sid)
        if s.kind != "pullpoint":
            raise Fault((TER, "ActionNotSupported"), "not a pull point")
        timeout = parse_duration(el.findtext(_q(TEV, "Timeout")) or "PT0S").total_seconds()
        limit = int(el.findtext(_q(TEV, "MessageLimit")) or "1")
        if not s.queue:
            s.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(s.wake.wait(), timeout)
        s = self._find(sid)  # gone meanwhile (Unsubscribe, expiry, reboot): a fault
        msgs, s.queue = s.queue[:limit], s.queue[limit:]
        out = etree.Element(_q(TEV, "PullMessagesResponse"), nsmap={"tev": TEV})
        _sub(out, TEV, "CurrentTime", format_datetime(self.now_dt()))
        _sub(
            out, TEV, "TerminationTime", format_datetime(datetime.fromtimestamp(s.termination, UTC))
        )
        out.extend(msgs)
        return out

    def _sync(self, _el: etree._Element, sid: str) -> etree._Element:
        s = self._find(sid)
        msg = self.message(MOTION, (("IsMotion", "true" if self.motion_state else "false"),),
                           "Initialized", sub=s)  # fmt: skip
        if s.kind == "pullpoint":
            s.queue.append(msg)
            s.wake.set()
        else:
            self._push(s, [msg])
        return etree.Element(_q(TEV, "SetSynchronizationPointResponse"), nsmap={"tev": TEV})
