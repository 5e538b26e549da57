"""Bounded fuzzing of the device's HTTP/SOAP parser (issue 13), the gateway harness's
smaller sibling: the schema-derived, mutated requests of tests/gateway/fuzz.py are posted
to a real device on MicroPython (both unix ports) over HTTP, derandomized. After each
case: the process lives, no 5xx that blames the device (SOAP 1.1 binds every fault to 500,
so the fault code decides), and a normal GetResourceProperty is answered 200 before the
device's read timeout (2 s here) has passed: a request left holding a connection slot or
the loop would make it wait for that timeout. (Not 1 s: at load 20 an idle device took
1.4 s to answer, the machine's delay, not the device's.) Only the device's HTTP interface
is used."""

from __future__ import annotations

import sys
from pathlib import Path

from devtest import WSNT, DeviceProcess, ctype, envelope
from hypothesis import HealthCheck, Phase, given, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gateway"))
from fuzz import Case, blames_server, cases, http_post, rss_kb

CASES = 80
CANARY = envelope(
    '<wsrf-rp:GetResourceProperty xmlns:wsrf-rp="http://docs.oasis-open.org/wsrf/rp-2" '
    f'xmlns:w="{WSNT}">w:FixedTopicSet</wsrf-rp:GetResourceProperty>'
)


def test_fuzzed_requests_keep_the_device_serving(device: DeviceProcess) -> None:
    rss_start = rss_kb(device.proc.pid)
    worst = 0.0
    seen: dict[int, int] = {}
    read_timeout = float(device.config["limits"]["read_timeout_s"])

    @settings(
        max_examples=CASES,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases())
    def run(case: Case) -> None:
        nonlocal worst
        path = case.path.replace("/wsn/broker", "/wsn/producer")
        a = http_post(device.port, path, case.body, case.content_type, timeout=15)
        seen[a.status] = seen.get(a.status, 0) + 1
        worst = max(worst, a.seconds)
        assert device.proc.poll() is None, device.output()[-3000:]
        why = blames_server(a)
        assert why is None, (case.note, why)
        c = http_post(device.port, "/wsn/producer", CANARY, ctype(12), timeout=5)
        assert c.status == 200 and c.seconds < read_timeout, (case.note, c.status, c.seconds)

    run()
    rss_end = rss_kb(device.proc.pid)
    print(f"device fuzz: {CASES} cases, statuses {dict(sorted(seen.items()))}, slowest "
          f"{worst:.3f} s, RSS {rss_start / 1024:.1f} -> {rss_end / 1024:.1f} MB")  # fmt: skip
    assert "Traceback" not in device.output()
    assert rss_end - rss_start < 32 * 1024
