"""Fuzzing benchmark of the gateway as a process (plain script, not collected by pytest).

    python tests/bench/fuzz_bench.py [--long] [--cases N] [--seed S]

The harness of tests/gateway/fuzz.py (the same one tests/gateway/test_fuzz.py runs for a
few hundred derandomized cases): SOAP requests built by Hypothesis from the official
schemas (b-2.xsd, t-1.xsd, ws-addr.xsd, bf-2.xsd, r-2.xsd), mutated at tree, byte,
Content-Type and path level, posted one by one to a fresh `python -m gateway` process on
127.0.0.1; after each case a canary Notify must be accepted within 1 s. Violations are
collected, not raised. Default 1,000 cases; `--long` 10,000.

Printed: cases, violations (each listed), crashes, slowest answer to a fuzz case, RSS at
start / max / end, canaries accepted, landing lines, the answers' status histogram and
the wall time.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "gateway"))

from fuzz import Case, Harness, cases, summary_json  # noqa: E402
from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--long", action="store_true", help="10,000 cases")
    ap.add_argument("--cases", type=int, help="number of cases (overrides --long)")
    ap.add_argument("--seed", type=int, default=13)
    args = ap.parse_args()
    n = args.cases or (10_000 if args.long else 1_000)
    with tempfile.TemporaryDirectory() as tmp:
        h = Harness(Path(tmp) / "gw", strict=False)
        h.start()
        t0 = time.monotonic()

        @settings(
            max_examples=n,
            deadline=None,
            database=None,
            phases=[Phase.generate],  # collect, never shrink
            suppress_health_check=list(HealthCheck),
        )
        @seed(args.seed)
        @given(case=cases())
        def run(case: Case) -> None:
            h.run(case)

        error = None
        try:
            run()
        except Exception as e:  # a violation or a harness error: report it with the numbers
            error = f"{type(e).__name__}: {e}"[:2000]
        result = h.finish()
        if error:
            result["stopped_by"] = error
        result["wall_s"] = round(time.monotonic() - t0, 1)
        print(summary_json(result))
        for v in h.violations[:50]:
            print("VIOLATION:", v[:1000])
    return 1 if h.violations or error else 0


if __name__ == "__main__":
    raise SystemExit(main())
