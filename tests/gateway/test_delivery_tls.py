"""Delivery to an https NotificationConsumer (gateway/delivery_http.py): the certificate is
verified against the trust store the gateway process has (OpenSSL's SSL_CERT_FILE here,
pointing at the test's own self-signed certificate for 127.0.0.1), the Notify arrives over
TLS on a kept-alive connection, and a consumer whose certificate is not trusted gets no
Notify: the message stays queued and is retried."""

from __future__ import annotations

import asyncio
import re
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from gwtest import (
    RD,
    WSNT,
    call,
    notify_body,
    reading,
    start_gateway,
    stop_gateway,
    subscribe_body,
)
from lxml import etree

from tests.polling import until


def _self_signed(d: Path) -> tuple[Path, Path]:
    cert, key = d / "consumer.pem", d / "consumer.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


class TlsConsumer:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.peers: set[tuple[str, int]] = set()  # client (address, port): connections used
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.read())
        peer = request.transport.get_extra_info("peername") if request.transport else None
        if peer:
            self.peers.add((peer[0], peer[1]))
        return web.Response(status=202)

    async def start(self, cert: Path, key: Path) -> TlsConsumer:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert, key)
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"https://127.0.0.1:{port}/consumer"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def tls_consumer(tmp_path: Path) -> AsyncIterator[tuple[TlsConsumer, Path]]:
    cert, key = _self_signed(tmp_path)
    c = await TlsConsumer().start(cert, key)
    yield c, cert
    await c.stop()


async def _values_arrive(c: TlsConsumer, n: int, timeout: float = 10.0) -> None:
    async def wait() -> None:
        while len(c.bodies) < n:
            await asyncio.sleep(0.02)

    await asyncio.wait_for(wait(), timeout)


async def test_https_consumer_with_a_trusted_certificate(tls_consumer, tmp_path, monkeypatch):
    consumer, cert = tls_consumer
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the gateway process trusts it
    gw = start_gateway(tmp_path / "gw")
    try:
        r = await call(gw.url, subscribe_body(consumer.url))
        assert r.status == 200, r.text
        for v in range(3):  # one at a time: three requests
            r = await call(gw.url, notify_body(("tns:t", reading(v))))
            assert r.status == 202, r.text
            await _values_arrive(consumer, v + 1)
        values = [etree.fromstring(b).findtext(f".//{{{WSNT}}}Message/{RD}Reading/{RD}value")
                  for b in consumer.bodies]  # fmt: skip
        assert values == ["0", "1", "2"]
        assert len(consumer.peers) == 1  # one TLS connection, kept alive
    finally:
        assert stop_gateway(gw) == 0


async def test_https_consumer_with_an_untrusted_certificate_gets_nothing(
    tls_consumer, tmp_path, monkeypatch
):
    consumer, _cert = tls_consumer
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    gw = start_gateway(tmp_path / "gw")
    try:
        r = await call(gw.url, subscribe_body(consumer.url))
        assert r.status == 200, r.text
        r = await call(gw.url, notify_body(("tns:t", reading(1))))
        assert r.status == 202, r.text
        metrics = gw.url.rsplit("/wsn/", 1)[0] + "/metrics"

        async def deliveries() -> dict[str, float]:
            async with aiohttp.ClientSession() as s, s.get(metrics) as m:
                text = await m.text()
            lines = [ln for ln in text.splitlines() if ln.startswith("wsn_deliveries_total{")]
            return {
                m.group(1): float(ln.split()[-1])
                for ln in lines
                if (m := re.search(r'outcome="([^"]+)"', ln))
            }

        # several attempts (backoff 0.05-0.2 s): retried, not dropped, and none reached it
        async def retried_twice() -> bool:
            return (await deliveries()).get("retried", 0) >= 2

        await until(retried_twice, "two retried deliveries", 30)
        assert consumer.bodies == []
        assert (await deliveries()).get("ok") == 0
    finally:
        assert stop_gateway(gw) == 0
    err = gw.stderr.read_text()
    assert "Traceback" not in err, err[-2000:]
