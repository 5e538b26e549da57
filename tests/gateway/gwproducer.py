"""A NotificationProducer double for demand-based publishing (outside the product: it
stands in for a device): a small aiohttp app with its own subscription table, answering
Subscribe, Pause/ResumeSubscription, Renew and Unsubscribe as bw-2.wsdl says, logging each
operation and keeping every envelope it was sent (`received`), a reboot that forgets its
subscriptions, and `notify` to push as a device does. The fixtures `producer` and
`make_producer` (conftest.py) start it."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from aiohttp import web
from gwtest import A_NOTIFY, BF, DT_NS, EDGE, SIMPLE, SOAP11, SOAP12, WSA, WSNT
from lxml import etree

WSRF_R = "http://docs.oasis-open.org/wsrf/r-2"


@dataclass
class RemoteSub:
    id: str
    consumer: str
    consumer_headers: list[str]  # reference parameters, echoed as headers
    topic: tuple[str | None, str]  # (namespace, local name) of the Simple filter
    dialect: str
    raw: bool
    itt: str | None
    expires: float | None
    paused: bool = False


@dataclass
class TestProducer:
    """A NotificationProducer + SubscriptionManager over HTTP with its own table."""

    subs: dict[str, RemoteSub] = field(default_factory=dict)
    log: list[tuple[str, str]] = field(default_factory=list)  # (operation, subscription id)
    fail_subscribe: int = 0  # answer the next N Subscribe with SubscribeCreationFailedFault
    soap11_only: bool = False  # answer SOAP 1.2 with a SOAP 1.1 VersionMismatch fault
    versions: list[str] = field(default_factory=list)  # envelope namespace of each request
    received: list[etree._Element] = field(default_factory=list)  # every envelope, in order
    url: str = ""
    port: int = 0
    _runner: web.AppRunner | None = None
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    __test__ = False  # not a pytest class

    @staticmethod
    def _env(body: str, action: str, ver: str) -> str:
        return (
            f'<s:Envelope xmlns:s="{ver}" xmlns:wsa="{WSA}" xmlns:wsnt="{WSNT}" '
            f'xmlns:edge="{EDGE}"><s:Header><wsa:Action>{action}</wsa:Action></s:Header>'
            f"<s:Body>{body}</s:Body></s:Envelope>"
        )

    def _fault(self, name: str, fns: str, reason: str, ver: str) -> web.Response:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        detail = (
            f'<f:{name} xmlns:f="{fns}" xmlns:bf="{BF}"><bf:Timestamp>{now}</bf:Timestamp>'
            f"</f:{name}>"
        )
        if ver == SOAP11:
            body = (
                f"<s:Fault><faultcode>s:Client</faultcode><faultstring>{reason}</faultstring>"
                f"<detail>{detail}</detail></s:Fault>"
            )
        else:
            body = (
                f"<s:Fault><s:Code><s:Value>s:Sender</s:Value></s:Code><s:Reason>"
                f'<s:Text xml:lang="en">{reason}</s:Text></s:Reason><s:Detail>{detail}'
                "</s:Detail></s:Fault>"
            )
        return web.Response(
            status=400 if ver == SOAP12 else 500,
            body=self._env(body, "http://docs.oasis-open.org/wsn/fault", ver).encode(),
            content_type="application/soap+xml" if ver == SOAP12 else "text/xml",
        )

    def _ok(self, body: str, action: str, ver: str) -> web.Response:
        return web.Response(
            body=self._env(body, action, ver).encode(),
            content_type="application/soap+xml" if ver == SOAP12 else "text/xml",
        )

    def _parse(self, request: web.Request, data: bytes) -> tuple[etree._Element, str]:
        env = etree.fromstring(data)
        self.received.append(env)
        ver = etree.QName(env).namespace or ""
        self.versions.append(ver)
        if ver == SOAP11:  # SOAP 1.1 HTTP binding: text/xml and a SOAPAction header
            assert request.content_type == "text/xml", request.content_type
            assert request.headers.get("SOAPAction", "").startswith('"http'), request.headers
        return env, ver

    @staticmethod
    def _version_mismatch() -> web.Response:
        body = (
            f'<s:Envelope xmlns:s="{SOAP11}"><s:Body><s:Fault><faultcode>s:VersionMismatch'
            "</faultcode><faultstring>SOAP 1.1 only</faultstring></s:Fault></s:Body></s:Envelope>"
        )
        return web.Response(status=500, body=body.encode(), content_type="text/xml")

    async def _producer(self, request: web.Request) -> web.Response:
        env, ver = self._parse(request, await request.read())
        if self.soap11_only and ver == SOAP12:
            return self._version_mismatch()
        sub = env.find(f"{{{ver}}}Body/{{{WSNT}}}Subscribe")
        assert sub is not None, etree.tostring(env)
        if self.fail_subscribe > 0:
            self.fail_subscribe -= 1
            self.log.append(("Subscribe-refused", ""))
            return self._fault("SubscribeCreationFailedFault", WSNT, "table full (test)", ver)
        cr = sub.find(f"{{{WSNT}}}ConsumerReference")
        assert cr is not None
        rps = cr.find(f"{{{WSA}}}ReferenceParameters")
        te = sub.find(f"{{{WSNT}}}Filter/{{{WSNT}}}TopicExpression")
        assert te is not None and te.text
        prefix, _, local = te.text.strip().rpartition(":")
        itt_el = sub.find(f"{{{WSNT}}}InitialTerminationTime")
        expires = None
        if itt_el is not None and itt_el.text:
            assert itt_el.text.startswith("PT") and itt_el.text.endswith("S"), itt_el.text
            expires = time.time() + float(itt_el.text[2:-1])
        sid = f"s{next(self._ids)}"
        self.subs[sid] = RemoteSub(
            id=sid,
            consumer=cr.findtext(f"{{{WSA}}}Address") or "",
            consumer_headers=[etree.tostring(c).decode() for c in rps] if rps is not None else [],
            topic=(te.nsmap.get(prefix or None), local),
            dialect=te.get("Dialect") or "",
            raw=sub.find(f"{{{WSNT}}}SubscriptionPolicy/{{{WSNT}}}UseRaw") is not None,
            itt=itt_el.text if itt_el is not None else None,
            expires=expires,
        )
        self.log.append(("Subscribe", sid))
        return self._ok(
            "<wsnt:SubscribeResponse><wsnt:SubscriptionReference>"
            f"<wsa:Address>{self.url}/subs/{sid}</wsa:Address><wsa:ReferenceParameters>"
            f"<edge:ResourceId>{sid}</edge:ResourceId></wsa:ReferenceParameters>"
            f"</wsnt:SubscriptionReference>{self._times(expires)}</wsnt:SubscribeResponse>",
            "http://docs.oasis-open.org/wsn/bw-2/NotificationProducer/SubscribeResponse",
            ver,
        )

    @staticmethod
    def _times(expires: float | None) -> str:
        # a skewed producer clock (one day ahead): the broker must read TerminationTime
        # relative to CurrentTime
        skew = 86400

        def fmt(t: float) -> str:
            return datetime.fromtimestamp(t + skew, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

        out = f"<wsnt:CurrentTime>{fmt(time.time())}</wsnt:CurrentTime>"
        if expires is not None:
            out += f"<wsnt:TerminationTime>{fmt(expires)}</wsnt:TerminationTime>"
        return out

    async def _manager(self, request: web.Request) -> web.Response:
        sid = request.match_info["sid"]
        env, ver = self._parse(request, await request.read())
        if self.soap11_only and ver == SOAP12:
            return self._version_mismatch()
        body = env.find(f"{{{ver}}}Body")
        assert body is not None
        op = etree.QName(body[0]).localname
        # the reference parameter comes back as a header (WS-Addressing SOAP binding §2.3)
        rid = env.findtext(f"{{{ver}}}Header/{{{EDGE}}}ResourceId")
        assert rid == sid, etree.tostring(env)
        s = self.subs.get(sid)
        if s is not None and s.expires is not None and s.expires <= time.time():
            del self.subs[sid]
            s = None
        if s is None:
            self.log.append((op + "-unknown", sid))
            return self._fault("ResourceUnknownFault", WSRF_R, f"no subscription {sid}", ver)
        self.log.append((op, sid))
        a = "http://docs.oasis-open.org/wsn/bw-2/SubscriptionManager/"
        if op == "PauseSubscription":
            s.paused = True
            return self._ok(
                "<wsnt:PauseSubscriptionResponse/>", a + "PauseSubscriptionResponse", ver
            )
        if op == "ResumeSubscription":
            s.paused = False
            return self._ok(
                "<wsnt:ResumeSubscriptionResponse/>", a + "ResumeSubscriptionResponse", ver
            )
        if op == "Unsubscribe":
            del self.subs[sid]
            return self._ok("<wsnt:UnsubscribeResponse/>", a + "UnsubscribeResponse", ver)
        if op == "Renew":
            tt = body[0].findtext(f"{{{WSNT}}}TerminationTime") or ""
            assert tt.startswith("PT"), tt
            s.expires = time.time() + float(tt[2:-1])
            return self._ok(
                f"<wsnt:RenewResponse>{self._times(s.expires)}</wsnt:RenewResponse>",
                a + "RenewResponse",
                ver,
            )
        raise AssertionError(op)

    async def start(self, port: int = 0) -> TestProducer:
        app = web.Application()
        app.router.add_post("/producer", self._producer)
        app.router.add_post("/subs/{sid}", self._manager)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{self.port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def address(self) -> str:
        return self.url + "/producer"

    def reboot(self) -> None:
        """Forget every subscription (as a rebooted device does)."""
        self.subs.clear()

    def by_topic(self, local: str) -> list[RemoteSub]:
        return [s for s in self.subs.values() if s.topic[1] == local]

    def ops(self, sid: str) -> list[str]:
        return [op for op, i in self.log if i == sid]

    async def notify(self, local: str, payload: str) -> int:
        """Push one wrapped Notify per active subscription on `local`; -> how many."""
        import aiohttp

        n = 0
        async with aiohttp.ClientSession() as session:
            for s in list(self.subs.values()):
                if s.paused or s.topic[1] != local:
                    continue
                hdrs = "".join(
                    h.replace(
                        "<edge:ResourceId", '<edge:ResourceId wsa:IsReferenceParameter="true"'
                    )
                    for h in s.consumer_headers
                )
                env = (
                    f'<s:Envelope xmlns:s="{SOAP12}" xmlns:wsa="{WSA}" xmlns:wsnt="{WSNT}" '
                    f'xmlns:edge="{EDGE}" xmlns:dt="{DT_NS}"><s:Header>'
                    f"<wsa:Action>{A_NOTIFY}</wsa:Action><wsa:To>{s.consumer}</wsa:To>{hdrs}"
                    "</s:Header><s:Body><wsnt:Notify><wsnt:NotificationMessage>"
                    f"<wsnt:SubscriptionReference><wsa:Address>{self.url}/subs/{s.id}"
                    "</wsa:Address></wsnt:SubscriptionReference>"
                    f'<wsnt:Topic Dialect="{SIMPLE}">dt:{local}</wsnt:Topic>'
                    f"<wsnt:ProducerReference><wsa:Address>{self.address}</wsa:Address>"
                    f"</wsnt:ProducerReference><wsnt:Message>{payload}</wsnt:Message>"
                    "</wsnt:NotificationMessage></wsnt:Notify></s:Body></s:Envelope>"
                )
                async with session.post(
                    s.consumer,
                    data=env.encode(),
                    headers={"Content-Type": "application/soap+xml; charset=utf-8"},
                ) as r:
                    assert r.status == 202, await r.text()
                n += 1
        return n
