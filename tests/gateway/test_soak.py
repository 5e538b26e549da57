"""The soak of tests/bench/soak_bench.py, short (issue 22, point 6): 90 seconds of devices,
subscribers coming and going, a slow and a dying consumer, hostile clients, a disk that
fills and empties and restarts by SIGTERM and kill -9, all at once, its intervals scaled
down. What the gateway acknowledged lands once and reaches the subscriber that stayed,
nothing is torn, no traceback, memory and descriptors stay flat. (The legitimate client's
latency is the bench's number, not an assertion.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_short_soak() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "bench" / "soak_bench.py"), "--minutes", "1.5",
         "--devices", "2", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    summary = {k: v for k, v in r.items() if k not in ("warnings", "events", "per_minute")}
    # traffic all along, so that what follows is not vacuous: acknowledged Notifys before
    # the first restart and between each two (after the last one there may be none: it
    # can come as the run ends). Not a count in a period: at load 17-26 runs had 469, 456
    # and 302 where 500 were asked, while the gateway kept every promise.
    spans = r["acknowledged_between_restarts"]
    assert all(n > 0 for n in spans[:-1]), summary
    assert r["lost_in_landing_count"] == 0, summary
    assert r["duplicated_lines"] == 0 and r["torn_lines"] == 0, summary
    # landed but never acknowledged is allowed: a Notify committed just before a kill -9 (or
    # answered after its client gave up under load) lands though its client never heard;
    # the promise is about what was acknowledged. Still bounded by the requests in flight.
    assert r["landed_unacknowledged"] <= 10, summary
    assert r["not_delivered"] == 0, summary
    assert r["tracebacks"] == 0, r["traceback_samples"]
    # latency is measured, not asserted (GUIDE: a test stays deterministic on a busy
    # machine; at load 6 this run's p99 was 477 ms): soak_bench.py prints it, and
    # docs/performance.md has the numbers; only an answer at all is required here
    assert r["latency_ms"]["max"] < 30_000, summary
    # restarted both ways, in turn (one every 13.5 s of the run; each took up to 20 s at
    # load 21-26, so how many fit in 90 s is the machine's, not the gateway's)
    restarts = [e for e in r["events"] if "restart by" in e]
    assert len(spans) == len(restarts) + 1, (spans, r["events"])
    assert any("SIGTERM" in e for e in restarts) and any("SIGKILL" in e for e in restarts)
    assert not any("FAILED" in e for e in r["events"]), r["events"]
    assert any("disk full" in e for e in r["events"]), r["events"]
    # flat: the last minute's peak within 60 MB and 20 descriptors of the first's
    first, last = r["per_minute"][0], r["per_minute"][-1]
    assert last["rss_mb_max"] - first["rss_mb_max"] < 60, r["per_minute"]
    assert last["fds_max"] - first["fds_max"] < 20, r["per_minute"]
