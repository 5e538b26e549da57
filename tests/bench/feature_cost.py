# ruff: noqa: E501 - the edits quote lines of the device's source verbatim
"""What each device feature costs in .mpy bytes (a plain script, not collected by pytest).

    .venv/bin/python tests/bench/feature_cost.py

For each feature, a copy of device/ has that feature's code taken out (its functions, its rows
of the operation table, its branches, config keys and /status fields) and is compiled with
mpy-cross at its defaults as device_bench.py section 1 does; the difference to the whole
device/wsn total is what the feature costs. The copies only need to compile, not to run.
Each edit names the exact source it removes: when the device's code changes under it, the
feature is reported as stale instead of measured wrongly. What a feature shares with others
(the XML reader, the envelope) is not counted, so the costs add up to less than the total.
"""

from __future__ import annotations

import ast
import re
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mpy_account

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
    drop(
        t,
        "core/rare.py",
        "PullPoint",
        "create_pullpoint",
        "get_messages",
        "destroy_pullpoint",
        "notify_pp",
    )
    for row in (
        '    "\\n- wsnt:CreatePullPoint create_pullpoint 1"\n',
        '    "\\np wsnt:GetMessages get_messages 6"\n',
        '    "\\np wsnt:DestroyPullPoint destroy_pullpoint 6"\n',
        ' "wsn/bw-2/CreatePullPoint",',
        '\n                "wsn/bw-2/PullPoint"',
        '            "max_pullpoints": 2,\n',
        '            "pullpoint_size": 32,  # messages per pull point (ring, drops the oldest)\n',
        '            "pullpoint_idle_s": 3600,  # a pull point not used for this long may'
        " be reclaimed\n",
        "    pullpoint = None  # PullPoint if the consumer is one of ours (in-memory delivery)\n",
        "        self._pps = []  # pull points (wsn.core.rare), at most max_pullpoints\n",
        '_PPS = const("/wsn/pullpoints/")\n',
    ):
        cut(t, "core/producer.py", row)
    P = "core/producer.py"
    cut(
        t,
        P,
        """        elif path.startswith(_PPS):
            kind, rid = "p", path[16:]
""",
    )
    cut(
        t,
        P,
        """                if kind == "p":  # Notify into a pull point (§5.1.1): HTTP 202, no envelope
                    from wsn.core import rare
                    rare.notify_pp(self, req, target)
                    return Response(202, ns.content_type(version), b"", actions)
""",
    )
    cut(
        t,
        P,
        """            if kind == "p":
                target.touched = now
""",
    )
    cut(t, P, 'if kind == "p" or (op and kind):', "if op and kind:")
    cut(t, P, 'r[0] in "sp"', 'r[0] == "s"')
    cut(t, P, 'for x in self.subs if kind == "s" else self._pps:', "for x in self.subs:")
    cut(
        t,
        P,
        """        k = addr.find(_PPS)
        pp = None
        if k > 0 and addr[:7] == "http://" and \\
                addr[7:k].rpartition(":")[2] == self.base[7:].rpartition(":")[2]:
            pp = self.get(addr[k + 16:], "p")
        if pp is None:
""",
        """        if 1:
""",
    )
    cut(t, P, '0 if pp else self.L["queue_len"]', 'self.L["queue_len"]')
    cut(
        t,
        P,
        """        if pp:
            s.pullpoint = pp
""",
    )
    cut(
        t,
        P,
        """            pp = s.pullpoint
            if pp is not None:
                if pp.active:
                    pp.ring.push(item)
                    s.delivered += 1
            elif""",
        "            if",
    )
    cut(
        t,
        P,
        """        idle = self.L["pullpoint_idle_s"]
        for pp in self._pps[:]:
            if idle and now - pp.touched >= idle:
                pp.active = False
                self._pps.remove(pp)
""",
    )
    cut(t, P, " or (s.pullpoint and not s.pullpoint.active)", "")
    cut(
        t,
        P,
        """        pd = 0
        for pp in self._pps:
            pd += pp.ring.dropped
""",
    )
    cut(t, P, ' ("pullpoints", len(self._pps)),', "")
    cut(t, P, ' ("pullpointDropped", pd),', "")
    D = "device.py"
    cut(t, D, " pullpoint_dropped=%d", "")
    cut(t, D, '\n                                  dict(p.counters())["pullpointDropped"],', "")
    cut(
        t,
        D,
        """,
                    "pullpoint_list": [{"id": q.id, "queued": len(q.ring),
                                        "dropped": q.ring.dropped} for q in p._pps or ()]""",
        "",
    )
    cut(t, D, ' dict(p.counters())["pullpointDropped"],', "")


def get_current(t: Path) -> None:
    drop(t, "core/rare.py", "get_current")
    cut(t, "core/producer.py", '    "\\n- wsnt:GetCurrentMessage get_current 0"\n')
    cut(
        t,
        "core/producer.py",
        """        self.current = [None] * len(topics.names)  # last payload per topic
""",
    )
    cut(
        t,
        "core/producer.py",
        "        self.current[ti] = payload\n        self.published += 1\n        kick",
        "        self.published += 1\n        kick",
    )
    cut(
        t,
        "core/producer.py",
        "        self.current[ti] = payload\n        self.published += 1\n        self.outbox",
        "        self.published += 1\n        self.outbox",
    )


def resource_properties(t: Path) -> None:
    drop(t, "core/rare.py", "_exprs", "get_rp")
    drop(t, "core/topics.py", "TopicSet.topic_set_xml")
    cut(t, "core/producer.py", '    "\\n- wsrf-rp:GetResourceProperty get_rp 2"\n')
    cut(t, "core/producer.py", '    "\\ns wsrf-rp:GetResourceProperty get_rp 2"\n')
    cut(t, "core/producer.py", '\n                "wsrf/rpw-2/GetResourceProperty",', "")
    cut(t, "core/ns.py", 'WSRF_RP = "http://docs.oasis-open.org/wsrf/rp-2"\n')


def pause_resume(t: Path) -> None:
    P = "core/producer.py"
    cut(t, P, '    "\\ns wsnt:PauseSubscription _state 4"\n')
    cut(t, P, '    "\\ns wsnt:ResumeSubscription _state 4"\n')
    cut(t, P, ' "wsn/bw-2/PausableSubscriptionManager",', "")
    cut(
        t,
        P,
        """
        else:
            s.paused = n[0] == "P"
            actions.append(("paused" if s.paused else "resumed", s))
""",
        "\n",
    )
    cut(t, P, "if s.paused or not", "if not")
    cut(t, P, "    paused = sending = False", "    sending = False")
    D = "device.py"
    cut(
        t,
        D,
        """            if act == "resumed":
                self.kick(s)
""",
    )
    cut(t, D, ', "paused", "resumed")', ")")
    cut(t, D, ' "paused": s.paused,', "")
    cut(
        t,
        D,
        "while s.active and not s.paused and len(s.queue):",
        "while s.active and len(s.queue):",
    )


def destroy(t: Path) -> None:
    cut(t, "core/producer.py", '    "\\ns wsrf-rl:Destroy _state 5"\n')
    cut(t, "core/producer.py", ' "wsrf/rlw-2/ImmediateResourceTermination",', "")


def soap11(t: Path) -> None:
    S = "core/soap.py"
    cut(
        t,
        S,
        """    else:
        if not f.base and f.fns == ns.WSA:
            code = fq  # WS-Addressing 1.0 SOAP binding §6: the subcode is the 1.1 faultcode
        else:
            code = "s:" + ("Client" if code == "Sender" else "Server" if code == "Receiver" else code)
        body = "<s:Fault><faultcode>%s</faultcode><faultstring>%s</faultstring>%s</s:Fault>" % (
            code, reason, wrap("detail", detail) if detail else "")
""",
    )
    cut(t, S, "    if version == ns.V12:\n        # code is", "    if 1:\n        # code is")
    cut(t, S, "if sns not in (ns.SOAP11, _SOAP12):", "if sns != _SOAP12:")
    cut(t, S, "r.version = ns.V12 if sns == _SOAP12 else ns.V11", "r.version = ns.V12")
    cut(t, S, "_SOAP12 if version == ns.V12 else ns.SOAP11", "_SOAP12")
    cut(
        t,
        S,
        'return 400 if version == ns.V12 and f.code == "Sender" else 500',
        'return 400 if f.code == "Sender" else 500',
    )
    cut(
        t,
        S,
        """        elif c.name == "faultstring":
            reason = c.value()
""",
    )
    cut(t, S, 'c.name in ("Detail", "detail")', 'c.name == "Detail"')
    N = "core/ns.py"
    cut(
        t,
        N,
        '''    if version == V12:
        return "application/soap+xml; charset=utf-8"
    return "text/xml; charset=utf-8"''',
        '''    return "application/soap+xml; charset=utf-8"''',
    )
    cut(t, N, 'SOAP11 = "http://schemas.xmlsoap.org/soap/envelope/"\n')
    cut(t, N, "V11 = const(11)\n")
    G = "gateway.py"
    cut(t, G, 'ns.V11 if str(c("gateway_soap", "1.2")) == "1.1" else ns.V12', "ns.V12")


def wsa_2004(t: Path) -> None:
    S = "core/soap.py"
    cut(t, S, '_WSA_2004 = const("http://schemas.xmlsoap.org/ws/2004/08/addressing")\n')
    cut(t, S, "if h.ns in (ns.WSA, _WSA_2004) and", "if h.ns == ns.WSA and")
    cut(t, S, "elif h.ns not in (ns.WSA, _WSA_2004) and", "elif h.ns != ns.WSA and")
    cut(t, S, "if c.ns in (ns.WSA, _WSA_2004):", "if c.ns == ns.WSA:")


def durations(t: Path) -> None:
    drop(t, "core/xml.py", "parse_duration")
    cut(
        t,
        "core/xml.py",
        """    if text[:1] == "P" or text[:2] == "-P":
        return now + parse_duration(text)
""",
    )


def raw_push(t: Path) -> None:
    P = "core/producer.py"
    cut(
        t,
        P,
        """        pol = el.find(W, "SubscriptionPolicy")
        raw = pol is not None and _unknown_children(
            pol, "UseRaw", "UnrecognizedPolicyRequestFault", "wsnt:UseRaw",
            "wsnt:UnrecognizedPolicy") > 0
""",
        "        raw = False\n",
    )
    cut(
        t,
        P,
        """        if s is not None and s.raw:
            return wrap("wsnt:Message", payload)
""",
    )
    cut(t, P, "item[2] if s.raw else wrap(", "wrap(")
    cut(
        t,
        P,
        """            raw = it[0] is not None and it[0].raw
            if raw and items:
                break
            items.append(it)
            if raw:
                break
""",
        "            items.append(it)\n",
    )
    cut(
        t,
        P,
        """        if s is not None and s.raw:
            out.append(items[0][2].encode())
        else:
            # each piece is encoded as it is made: one message's str at a time, not the batch's
            out.append(b"<wsnt:Notify>")
            for it in items:
                out.append(wrap("wsnt:NotificationMessage", self.nm_content(it)).encode())
            out.append(b"</wsnt:Notify>")
""",
        """        out.append(b"<wsnt:Notify>")
        for it in items:
            out.append(wrap("wsnt:NotificationMessage", self.nm_content(it)).encode())
        out.append(b"</wsnt:Notify>")
""",
    )
    cut(
        t,
        "core/rare.py",
        """        out = wrap(k, "<wsnt:UseRaw/>" if s.raw else "")""",
        """        out = wrap(k, "")""",
    )
    cut(t, "device.py", ' "raw": s.raw,', "")


def sleepy(t: Path) -> None:
    drop(t, "gateway.py", "Link._save", "Link.sleepy")
    drop(t, "core/producer.py", "Producer.buffer_for_gateway")
    D = "device.py"
    cut(
        t,
        D,
        """        # "awake" (default): serves Subscribe, pushes each reading; "sleepy": wsn.gateway
        if g("mode", "awake") not in ("awake", "sleepy") or g("mode") == "sleepy" and not g(
                "gateway"):
            raise ValueError("config: mode 'awake', or 'sleepy' with a 'gateway'")
""",
    )
    cut(
        t,
        D,
        """            if g("mode") == "sleepy":
                await self.link.sleepy()
                return
""",
    )
    R = "core/registration.py"
    cut(t, R, ",\n                       demand=True):", "):")
    cut(t, R, '"true" if demand else "false"', '"true"')
    G = "gateway.py"
    cut(t, G, "async def _register(self, demand):", "async def _register(self):")
    cut(t, G, "now() + self.ttl, demand).encode()", "now() + self.ttl).encode()")
    cut(
        t,
        G,
        """(Demand=%s) consumer %s" % (
            self.reg, "true" if demand else "false", con))""",
        """consumer %s" % (
            self.reg, con))""",
    )
    cut(t, G, "await self._register(True)", "await self._register()")


def gateway_link(t: Path) -> None:
    """The whole link (awake and sleepy): wsn.gateway, wsn.core.registration, the outbox."""
    (t / "wsn" / "gateway.py").unlink()
    (t / "wsn" / "core" / "registration.py").unlink()
    P = "core/producer.py"
    drop(t, P, "Producer.gateway_batch", "Producer.buffer_for_gateway", "Producer.set_gateway")
    drop(t, "core/soap.py", "fault_name")
    # (`if 0:` compiles to nothing: the branch goes whether it is an if or an elif here)
    cut(
        t,
        P,
        """self.gateway is not None and s.consumer == self.gateway:
                self.outbox.push(item)
                gw = True
""",
        """0:
                pass
""",
    )
    cut(
        t,
        P,
        """        self.gateway = None  # the gateway's ConsumerReference address (registration)
        self.gateway_rp = ""  # its reference parameters (header XML)
        self.outbox = Ring(L["gateway_buffer"])
""",
    )
    cut(
        t,
        P,
        '            "gateway_buffer": 64,  # pushes waiting for the gateway (drops the '
        "oldest, counted)\n",
    )
    cut(
        t,
        P,
        """,
                ("gatewayBuffered", len(self.outbox)), ("gatewayDropped", self.outbox.dropped)""",
        "",
    )
    D = "device.py"
    cut(
        t,
        D,
        """        if "gateway_buffer" in conf:
            lim["gateway_buffer"] = int(conf["gateway_buffer"])
""",
    )
    cut(
        t,
        D,
        """        # "awake" (default): serves Subscribe, pushes each reading; "sleepy": wsn.gateway
        if g("mode", "awake") not in ("awake", "sleepy") or g("mode") == "sleepy" and not g(
                "gateway"):
            raise ValueError("config: mode 'awake', or 'sleepy' with a 'gateway'")
""",
    )
    cut(
        t,
        D,
        """        if g("gateway"):
            from wsn import gateway
            self.link = gateway.Link(self)
            if g("mode") == "sleepy":
                await self.link.sleepy()
                return
""",
    )
    cut(
        t,
        D,
        """        if self.link:
            asyncio.create_task(self.link.run())
""",
    )
    cut(
        t,
        D,
        """            if gw and self.link:
                self.link.out.set()
""",
    )
    cut(
        t,
        D,
        """                    "gateway": self.link.status() if self.link else None,
""",
    )
    cut(t, D, """ gateway=%s buffered=%d dropped=%d""", "")
    cut(
        t,
        D,
        """self.link.state if self.link else "none",
                                  len(p.outbox), p.outbox.dropped, """,
        "",
    )
    cut(t, D, "k = (p.outbox.dropped, ", "k = (")


def status(t: Path) -> None:
    """GET /status, POST /admin/sample and the management secret that guards them."""
    drop(t, "core/httpmsg.py", "check_auth")
    cut(t, "core/httpmsg.py", "import binascii\n")
    D = "device.py"
    src = (t / "wsn" / D).read_text()
    a = src.index('        if (path, method) in (("/status", "GET"), ("/admin/sample", "POST")):')
    b = src.index('        if path == "/" and method == "GET":')
    (t / "wsn" / D).write_text(src[:a] + src[b:])
    drop(t, D, "Device.mem")
    src = (t / "wsn" / D).read_text()
    (t / "wsn" / D).write_text(re.sub(r"\n *self\.mem\(\)\n", "\n", src))
    if (t / "wsn" / "gateway.py").exists():
        drop(t, "gateway.py", "Link.status")
    drop(t, "core/topics.py", "TopicSet.mask_names")
    cut(t, D, "        self.uptime_ms = self.mem_peak = self.requests = 0\n", "")


def wifi(t: Path) -> None:
    drop(t, "device.py", "Device.wifi")
    cut(
        t,
        "device.py",
        """        w = g("wifi")
        if w and w.get("ssid"):
            adv = self.wifi(w)
""",
    )


def sensor_hardware(t: Path) -> None:
    """The board sensors (adc, internal_temp) beside the simulated ones and the heartbeat."""
    D = "device.py"
    cut(
        t,
        D,
        """                if k == "adc":
                    import machine
                    hw = machine.ADC(machine.Pin(sp["pin"]))
                elif k == "internal_temp":
                    try:
                        import esp32 as hw
                    except ImportError:
                        import machine
                        hw = machine.ADC(4)
                elif k not in""",
        "                if k not in",
    )
    cut(
        t,
        D,
        """            elif k == "adc":  # value = read_u16() * scale + offset
                v = hw.read_u16() * sp.get("scale", 1.0) + sp.get("offset", 0.0)
            elif k == "internal_temp":
                # RP2040: ADC 4, 27 degC at 0.706 V, -1.721 mV/K (datasheet §4.9.5); ESP32:
                # esp32.mcu_temperature() (degC) or raw_temperature() (degF)
                if hasattr(hw, "read_u16"):
                    v = 27 - (hw.read_u16() * 3.3 / 65535 - 0.706) / 0.001721
                elif hasattr(hw, "mcu_temperature"):
                    v = hw.mcu_temperature()
                else:
                    v = (hw.raw_temperature() - 32) / 1.8
""",
    )


def _optional_ops(t: Path) -> None:
    # every producer operation beyond Subscribe, Renew and Unsubscribe, and the protocol options
    for f in (
        raw_push,
        pull_point,
        get_current,
        resource_properties,
        pause_resume,
        destroy,
        soap11,
        wsa_2004,
        durations,
    ):
        f(t)
    (t / "wsn" / "core" / "rare.py").unlink()  # nothing left in it
    cut(
        t,
        "core/producer.py",
        """            if h[0] == "_":
                out = getattr(self, h)(req, target, now, actions)
            else:
                # the rarely used operations, imported on first use (then in sys.modules)
                from wsn.core import rare
                out = getattr(rare, h)(self, req, target, now, actions)
""",
        """            out = getattr(self, h)(req, target, now, actions)
""",
    )


def optional_ops(t: Path) -> None:
    _optional_ops(t)


def optional_ops_link(t: Path) -> None:
    _optional_ops(t)
    gateway_link(t)


def optional_all(t: Path) -> None:
    _optional_ops(t)
    gateway_link(t)
    status(t)
    wifi(t)
    sensor_hardware(t)


FEATURES = (
    (
        "pull point (CreatePullPoint, GetMessages, DestroyPullPoint, Notify into it, in-memory "
        "delivery to it, its /status fields)",
        pull_point,
    ),
    ("GetCurrentMessage", get_current),
    (
        "GetResourceProperty (producer and subscription properties, edge:Status, wstop:TopicSet)",
        resource_properties,
    ),
    ("Pause/ResumeSubscription", pause_resume),
    ("wsrf-rl:Destroy (beside Unsubscribe)", destroy),
    ("SOAP 1.1 beside SOAP 1.2 (requests, faults, gateway_soap)", soap11),
    ("WS-Addressing 2004/08 headers read like 1.0", wsa_2004),
    ("xsd:duration termination times (beside xsd:dateTime)", durations),
    ("raw push (wsnt:UseRaw)", raw_push),
    ("sleepy mode (beside the awake gateway link)", sleepy),
    (
        "gateway link, awake and sleepy (registration, renewal, batched Notify, the outbox)",
        gateway_link,
    ),
    ("GET /status, POST /admin/sample, the management secret", status),
    ("Wi-Fi join and NTP (boards)", wifi),
    ("board sensors (adc, internal_temp)", sensor_hardware),
    (
        "together: every operation but Subscribe, Renew, Unsubscribe, and every protocol option "
        "above (raw push, SOAP 1.1, WS-Addressing 2004/08, xsd:duration); wsn.core.rare goes",
        optional_ops,
    ),
    ("together: those and the gateway link", optional_ops_link),
    ("together: those, /status and /admin/sample, Wi-Fi, board sensors", optional_all),
)


def total(tree: Path) -> int:
    with tempfile.TemporaryDirectory() as out:
        return sum(s for _, s in mpy_account.compile_tree(tree, Path(out)))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        shutil.copytree(ROOT / "device" / "wsn", base / "wsn")
        full = total(base)
        print(f"device/wsn, every feature: {full} B of .mpy")
        print(f"{'bytes':>7s}  feature")
        for title, f in FEATURES:
            t = Path(tmp) / f.__name__
            shutil.copytree(base, t)
            try:
                f(t)
                print(f"{full - total(t):7d}  {title}")
            except Stale as e:
                print(f"  stale  {title}: {e}")
            except Exception as e:  # e.g. a copy that no longer compiles
                print(f"  error  {title}: {e!r}")


if __name__ == "__main__":
    main()
