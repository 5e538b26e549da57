"""What the Notify seen-set (gateway/dedupe.py) costs the gateway (plain script, not collected
by pytest).

    python tests/bench/dedupe_bench.py [--quick] [--rounds N]

One `python -m gateway` at its durable defaults (tests/bench/gateway_bench.py `Gateway`);
wrk -t1 -c16 POSTs a single-message Notify of about 1 KB, no subscriber, in three forms, alternating
in the same sitting (none / fresh, N rounds, then repeated once):

* `none`: no wsa:MessageID (the same bytes every time, as gateway_bench's `http` section);
* `fresh`: a new wsa:MessageID per request (a wrk Lua `request()` numbering them): each is
  looked up in the seen-set, and recorded in its group commit, then pruned by the bounds;
* `repeat`: the same wsa:MessageID every time: after the first, each is a duplicate (looked
  up, answered 202, nothing written).

Prints requests/s and requests per CPU-second of the gateway process (user + system of all
its threads), steadier than rates while other work shares the cores.

`--loop` measures instead, in this process, what `dedupe.accept_once` itself costs per call
(CPU microseconds): without a key (the caller awaits the accept) and with a fresh key (the
accept runs as a shielded task of its own, so a cancelled handler cannot fail it), around an
accept that only yields once, as a commit's await does; the seen-set lookup is a stub, so
the numbers are the mechanism's own. Run it from two trees in turn to compare versions.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gateway_bench import (
    A_NOTIFY,
    CT,
    Gateway,
    cpu_seconds,
    envelope,
    lua_post,
    notify_body,
    payload,
    wrk_script,
)

MARK = "@@MID@@"


def _lua_fresh(body: bytes) -> str:
    """A wrk script that POSTs `body` with MARK replaced by a new id per request."""
    pre, post = body.decode().split(MARK)
    tag = uuid.uuid4().hex
    return (
        f'wrk.method = "POST"\nwrk.headers["Content-Type"] = "{CT}"\n'
        f"local pre, post = [==[{pre}]==], [==[{post}]==]\nlocal n = 0\n"
        "request = function()\n  n = n + 1\n"
        f'  return wrk.format(nil, nil, nil, pre .. "urn:bench:{tag}:" .. n .. post)\nend\n'
    )


async def accept_once_loop(rounds: int, n: int = 50_000) -> None:
    import time

    from gateway.dedupe import Dedupe
    from gateway.metrics import Counts

    class Seen:
        def seen(self, key: object) -> bool:
            return False

    async def accept() -> None:
        await asyncio.sleep(0)

    print(f"accept_once, CPU microseconds per call ({n:,} calls per figure)\n"
          f"{'without a key':>14}{'fresh key':>12}")  # fmt: skip
    for _ in range(rounds):
        row = []
        for keyed in (False, True):
            d = Dedupe(cast(Any, Seen()), Counts())
            t0 = time.process_time()
            for i in range(n):
                await d.accept_once(("p", str(i)) if keyed else None, accept)
            row.append((time.process_time() - t0) / n * 1e6)
        print(f"{row[0]:>14.2f}{row[1]:>12.2f}", flush=True)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter runs")
    ap.add_argument("--rounds", type=int, default=3, help="none/fresh pairs (default 3)")
    ap.add_argument("--loop", action="store_true", help="accept_once's own cost, in process")
    args = ap.parse_args()
    if args.loop:
        await accept_once_loop(args.rounds)
        return
    secs = 3.0 if args.quick else 10.0
    # the same ~1 KB message; the forms differ only by the wsa:MessageID header
    msg = notify_body(("tns:bench", payload(0, 220)))
    bare = envelope(msg, action=A_NOTIFY, message_id=None)
    with_id = envelope(msg, action=A_NOTIFY, message_id=MARK)
    forms = {
        "none": lua_post(bare),
        "fresh": "",  # made per run: ids never seen before
        "repeat": lua_post(with_id.replace(MARK.encode(), b"urn:bench:the-same-one")),
    }
    print(f"dedupe bench: wrk -t1 -c16 -d{secs:.0f}s, a single-message Notify of {len(bare)} "
          f"bytes (+ its wsa:MessageID header), no subscriber\n"
          f"{'form':<8}{'requests/s':>12}{'per CPU-second':>16}")  # fmt: skip
    with Gateway() as gw:
        await wrk_script(gw.url, _lua_fresh(with_id), 1)  # warm-up; the seen-set not empty
        order = ["none", "fresh"] * args.rounds + ["repeat"]
        for form in order:
            c0 = cpu_seconds(gw.pid)
            script = _lua_fresh(with_id) if form == "fresh" else forms[form]
            r = await wrk_script(gw.url, script, secs)
            per_cpu = r.requests / max(1e-9, cpu_seconds(gw.pid) - c0)
            err = f"   ({r.errors} errors!)" if r.errors else ""
            print(f"{form:<8}{r.rps:>12,.0f}{per_cpu:>16,.0f}{err}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
