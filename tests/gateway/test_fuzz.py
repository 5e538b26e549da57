"""Bounded fuzzing of a live gateway process over HTTP (issue 13): a few hundred
schema-derived, mutated SOAP requests (tests/gateway/fuzz.py), derandomized so the run is
deterministic; after each case the invariants of fuzz.py are checked. The long run is
tests/bench/fuzz_bench.py --long."""

from __future__ import annotations

from pathlib import Path

from fuzz import Case, Harness, cases
from hypothesis import HealthCheck, Phase, given, settings

CASES = 250
RSS_GROWTH_LIMIT_MB = 64


def test_fuzzed_requests_keep_the_gateway_serving(tmp_path: Path) -> None:
    h = Harness(tmp_path / "gw")
    h.start()
    try:

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
            h.run(case)

        run()
    finally:
        result = h.finish()
    print(result)
    assert not h.violations, h.violations
    assert result["cases"] >= CASES * 0.9
    assert result["rss_max_mb"] - result["rss_start_mb"] < RSS_GROWTH_LIMIT_MB, result
