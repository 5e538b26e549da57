"""`GET /metrics` (gateway.metrics, issue 14): parsed with prometheus_client.parser; every
counter moves by exactly what the test did."""

from __future__ import annotations

import asyncio
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from gwtest import (
    A_NOTIFY,
    A_SUBSCRIBE,
    CONCRETE,
    FULL,
    SOAP12,
    WSTOP,
    Consumer,
    call,
    notify_body,
    reading,
    subscribe_body,
    topic_filter,
)
from prometheus_client.parser import text_string_to_metric_families

from gateway import app
from gateway.metrics import REQUEST_REJECT_REASONS


async def scrape(gw: app.Running) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} of one scrape."""
    async with (
        aiohttp.ClientSession() as s,
        s.get(f"http://127.0.0.1:{gw.port}/metrics") as r,
    ):
        assert r.status == 200, await r.text()
        assert r.content_type == "text/plain"
        text = await r.text()
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            out[(smp.name, tuple(sorted(smp.labels.items())))] = smp.value
    return out


def v(m: dict[Any, float], name: str, **labels: str) -> float:
    return m.get((name, tuple(sorted(labels.items()))), 0.0)


async def notify(gw: app.Running, *msgs: tuple[str, str], dialect: str = CONCRETE) -> Any:
    return await call(gw.url, notify_body(*msgs, dialect=dialect), action=A_NOTIFY)


async def test_counters_move_by_exactly_what_happened(
    make_gateway: Any, make_consumer: Any
) -> None:
    gw = await make_gateway()
    flaky: Consumer = await make_consumer(fail=2)  # two failed attempts, then 2xx
    before = await scrape(gw)
    r = await call(
        gw.url, subscribe_body(flaky.url, topic_filter("tns:a", FULL)), action=A_SUBSCRIBE
    )
    assert not r.is_fault, r.text
    r = await notify(gw, ("tns:a", reading(0)))
    assert r.status == 202, r.text
    await flaky.wait_for(1, timeout=10)  # alone in both failed requests, then delivered
    for i in (1, 2):
        r = await notify(gw, ("tns:a", reading(i)))
        assert r.status == 202, r.text
    # a Notify whose Topic is not one concrete topic: InvalidTopicExpressionFault (§3.2)
    bad = await notify(gw, ("tns:*", reading(9)), dialect=FULL)
    assert bad.is_fault and bad.fault_name == "InvalidTopicExpressionFault"
    await flaky.wait_for(3, timeout=10)
    after = await scrape(gw)

    def d(name: str, **labels: str) -> float:
        return v(after, name, **labels) - v(before, name, **labels)

    assert d("wsn_notifications_accepted_total") == 3
    assert d("wsn_notifications_rejected_total", reason="InvalidTopicExpressionFault") == 1
    assert d("wsn_deliveries_total", outcome="retried") == 2
    assert d("wsn_deliveries_total", outcome="ok") == 3
    assert d("wsn_deliveries_total", outcome="failed") == 0
    assert d("wsn_deliveries_total", outcome="dropped") == 0
    assert d("wsn_delivery_latency_seconds_count") == 3
    assert d("wsn_request_duration_seconds_count", operation="Notify") == 4
    assert d("wsn_request_duration_seconds_count", operation="Subscribe") == 1
    assert d("wsn_sqlite_commit_seconds_count") >= 1  # group commit may merge Notifies
    assert v(after, "wsn_subscriptions", state="active") == 1
    assert v(after, "wsn_backlog_messages") == 0


async def test_backlog_gauges_and_drops(make_gateway: Any, make_consumer: Any) -> None:
    gw = await make_gateway(max_backlog=3)
    dead: Consumer = await make_consumer(fail=10**9)
    r = await call(gw.url, subscribe_body(dead.url, topic_filter("tns:a")), action=A_SUBSCRIBE)
    assert not r.is_fault, r.text
    pp = await call(gw.url, "<wsnt:CreatePullPoint/>")
    pp_addr = pp.body.findtext(".//{http://www.w3.org/2005/08/addressing}Address")
    r = await call(gw.url, subscribe_body(pp_addr, topic_filter("tns:a")), action=A_SUBSCRIBE)
    assert not r.is_fault, r.text
    before = await scrape(gw)
    # five messages in one Notify: the backlog bound (3) drops the two oldest at once
    r = await notify(gw, *[("tns:a", reading(i)) for i in range(5)])
    assert r.status == 202, r.text
    after = await scrape(gw)
    assert (
        v(after, "wsn_deliveries_total", outcome="dropped")
        - v(before, "wsn_deliveries_total", outcome="dropped")
        == 2
    )
    assert v(after, "wsn_backlog_messages") == 3
    assert v(after, "wsn_backlog_max_messages") == 3
    assert v(after, "wsn_pullpoints") == 1
    assert v(after, "wsn_pullpoint_messages") == 5
    assert v(after, "wsn_subscriptions", state="active") == 2
    assert v(after, "wsn_landing_lag_rows") >= 0


TYPED_NS = f"""<wstop:TopicNamespace xmlns:wstop="{WSTOP}" name="Typed"
  targetNamespace="urn:test" xmlns:m="urn:m"><wstop:Topic name="B" messageTypes="m:Good"/>
</wstop:TopicNamespace>"""


async def test_inadmissible_notifications_are_counted(make_gateway: Any, tmp_path: Path) -> None:
    """WS-Topics 1.3 §6: a message its topic's messageTypes do not admit is dropped from an
    accepted Notify (202); /metrics counts it apart from the accepted ones."""
    f = tmp_path / "typed.xml"
    f.write_text(TYPED_NS)
    gw = await make_gateway(topic_namespace_files=[f])
    before = await scrape(gw)
    bad = '<m:Bad xmlns:m="urn:m"/>'
    good = '<m:Good xmlns:m="urn:m"/>'
    r = await notify(gw, ("tns:B", bad), ("tns:B", good), ("tns:B", bad))
    assert r.status == 202, r.text
    after = await scrape(gw)
    assert (
        v(after, "wsn_notifications_inadmissible_total")
        - v(before, "wsn_notifications_inadmissible_total")
        == 2
    )
    assert (
        v(after, "wsn_notifications_accepted_total") - v(before, "wsn_notifications_accepted_total")
        == 1
    )


async def _raw(port: int, data: bytes) -> bytes:
    """Send `data` on a fresh connection; the status line of the answer."""
    r, w = await asyncio.open_connection("127.0.0.1", port)
    try:
        w.write(data)
        await w.drain()
        return (await asyncio.wait_for(r.read(), 5)).split(b"\r\n", 1)[0]
    finally:
        w.close()


async def test_requests_refused_before_an_operation_are_counted_by_reason(
    make_gateway: Any,
) -> None:
    """415, 413, 400 (not SOAP), a SOAP envelope fault and 408 (head and body) happen before
    the broker knows the operation: wsn_requests_rejected_total{reason} counts each."""
    gw = await make_gateway(max_request_bytes=1000, request_timeout=0.3)
    before = await scrape(gw)
    soap12 = {"Content-Type": "application/soap+xml"}
    async with aiohttp.ClientSession() as s:
        for data, headers, status in [
            (b"<x/>", {"Content-Type": "text/plain"}, 415),
            (b"<x/>" * 300, soap12, 413),
            (b"hello", soap12, 400),
            (b"", soap12, 400),
            (f'<s:Envelope xmlns:s="{SOAP12}"><s:Body/></s:Envelope>'.encode(), soap12, 400),
        ]:
            async with s.post(gw.url, data=data, headers=headers) as resp:
                assert resp.status == status, (data[:40], await resp.text())
    head = b"POST /wsn/broker HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/xml\r\n"
    assert await _raw(gw.port, head) == b"HTTP/1.1 408 Request Timeout"
    body = head + b"Content-Length: 500\r\n\r\n<s:Envelope"
    assert await _raw(gw.port, body) == b"HTTP/1.1 408 Request Timeout"
    after = await scrape(gw)

    def d(reason: str) -> float:
        return v(after, "wsn_requests_rejected_total", reason=reason) - v(
            before, "wsn_requests_rejected_total", reason=reason
        )

    got = {r: d(r) for r in REQUEST_REJECT_REASONS if d(r)}
    assert got == {
        "media-type": 1,
        "too-large": 1,
        "not-soap": 2,
        "soap-fault": 1,
        "head-timeout": 1,
        "body-timeout": 1,
    }, got


#: latencies on, between and past the histograms' bucket bounds
LATENCIES = [0.0, 0.0004, 0.001, 0.0010001, 0.0025, 0.007, 0.05, 0.3, 2.5, 29.9, 30.0, 31.0]


def histogram_samples(m: Any, family: str) -> list[tuple[str, dict[str, str], float]]:
    """(sample name, labels, value) of one histogram family in `m`'s exposition, without the
    _created samples (they differ between two Metrics by when each was made)."""
    fams = text_string_to_metric_families(m.exposition().decode())
    return [
        (s.name, s.labels, s.value)
        for f in fams
        if f.name == family
        for s in f.samples
        if not s.name.endswith("_created")
    ]


def test_batched_latency_observations_equal_one_observe_each() -> None:
    """A delivered batch's latencies go into the histogram at once (gateway.delivery): the
    exposition is the same as one observe() per message, bucket bounds included."""
    from gateway.metrics import Metrics

    one, batched = Metrics(), Metrics()
    values = LATENCIES
    for x in values:
        one.delivery_latency.observe(x)
    batched.observe_delivery_latencies(values[:5])
    batched.observe_delivery_latencies([])
    batched.observe_delivery_latencies(values[5:])

    samples = partial(histogram_samples, family="wsn_delivery_latency_seconds")
    a, b = samples(one), samples(batched)
    assert [(n, lb) for n, lb, _ in a] == [(n, lb) for n, lb, _ in b]
    assert [x for _, _, x in a] == pytest.approx([x for _, _, x in b])  # the sum's rounding
    assert ("wsn_delivery_latency_seconds_count", {}, float(len(values))) in samples(batched)


def test_request_durations_kept_then_flushed_equal_one_observe_each() -> None:
    """Request durations are kept and put into wsn_request_duration_seconds in batches
    (gateway.metrics.Metrics.observe_request): a scrape shows every request observed
    before it, over a batch boundary and with a partial batch pending, as one observe()
    per request would."""
    from gateway.metrics import Metrics

    one, kept = Metrics(), Metrics()
    values = LATENCIES
    requests = [("Notify" if i % 3 else "Subscribe", values[i % len(values)]) for i in range(700)]
    for op, x in requests:
        one.request_latency.labels(op).observe(x)
        kept.observe_request(op, x)

    samples = partial(histogram_samples, family="wsn_request_duration_seconds")
    a, b = samples(one), samples(kept)
    assert [(n, lb) for n, lb, _ in a] == [(n, lb) for n, lb, _ in b]
    assert [x for _, _, x in a] == pytest.approx([x for _, _, x in b])
    count = ("wsn_request_duration_seconds_count", {"operation": "Notify"}, 466.0)
    assert count in b
    kept.observe_request("Notify", 0.001)  # one more after the scrape: the next one has it
    assert ("wsn_request_duration_seconds_count", {"operation": "Notify"}, 467.0) in samples(kept)
