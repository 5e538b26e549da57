"""Fuzzing the gateway over HTTP (issue 13): Hypothesis strategies that build SOAP requests
from the OFFICIAL schemas (b-2.xsd, t-1.xsd, ws-addr.xsd, bf-2.xsd, r-2.xsd shipped in
onvif-zeep-async) and mutate them, and a harness that checks the invariants on a live
gateway process after every case:

- the process is alive;
- no 5xx that blames the server: a 5xx must be a SOAP fault whose code blames the client
  (SOAP 1.1 Client, VersionMismatch, MustUnderstand; SOAP 1.1 binds every fault to 500)
  or a resource-limit fault (the server's honest "full");
- a normal Notify (the canary) is accepted (202) after each case, within 1 s of the gateway's CPU;
- no accepted message is lost: every canary reaches the canary pull point, and the
  landing zone holds every accepted NotificationMessage (counted at the end);
- RSS stays bounded (measured; the test asserts growth under a bound).

Used by tests/gateway/test_fuzz.py (a few hundred cases, derandomized) and
tests/bench/fuzz_bench.py (--long: 10,000+ cases, numbers printed).
"""

from __future__ import annotations

import copy
import http.client
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gwtest import (
    SOAP11,
    SOAP12,
    WSA,
    WSDL_DIR,
    WSNT,
    GatewayProcess,
    cpu_seconds,
    envelope,
    notify_body,
    start_gateway,
    stop_gateway,
)
from hypothesis import strategies as st
from lxml import etree

XSD = "http://www.w3.org/2001/XMLSchema"
EDGE = "urn:wsn-edge"
SCHEMA_FILES = ("b-2.xsd", "t-1.xsd", "ws-addr.xsd", "bf-2.xsd", "r-2.xsd")
TOKEN = "fuzz-token"  # management operations need it: the fuzzer does not know it
CANARY_NS = "urn:fuzz-canary"


# ---------------------------------------------------------------- the schemas
class Schemas:
    """Global element and type declarations of the official schemas, by Clark name."""

    def __init__(self, wsdl_dir: Path = WSDL_DIR) -> None:
        self.elements: dict[str, etree._Element] = {}
        self.types: dict[str, etree._Element] = {}
        for f in SCHEMA_FILES:
            root = etree.parse(str(wsdl_dir / f)).getroot()
            tns = root.get("targetNamespace", "")
            for d in root:
                if not isinstance(d.tag, str) or d.get("name") is None:
                    continue
                key = f"{{{tns}}}{d.get('name')}"
                local = etree.QName(d).localname
                if local == "element":
                    self.elements[key] = d
                elif local in ("complexType", "simpleType"):
                    self.types[key] = d
        # the operations' request elements (what a client POSTs to the broker)
        self.requests = sorted(
            k
            for k in self.elements
            if k.startswith(f"{{{WSNT}}}")
            and not k.endswith(("Response", "Fault", "Reference"))
            and etree.QName(k).localname[0].isupper()
        )

    def qname(self, ctx: etree._Element, text: str) -> str:
        prefix, _, local = text.rpartition(":")
        ns = ctx.nsmap.get(prefix or None, "")
        return f"{{{ns}}}{local}"


SCHEMAS: Schemas | None = None


def schemas() -> Schemas:
    global SCHEMAS
    if SCHEMAS is None:
        SCHEMAS = Schemas()
    return SCHEMAS


# ---------------------------------------------------------------- values
HOSTILE_URLS = [
    "http://127.0.0.1:9/consumer",
    "http://169.254.169.254/latest/meta-data/",
    "http://u@127.0.0.1:1/x",
    "http://10.0.0.1.nip.io/",
    "http://[::1]:1/wsn/broker",
    "file:///etc/passwd",
    "gopher://127.0.0.1:25/",
    "http://0x7f000001:1/",
    "http://127.0.0.1:1\\@evil/",
    "",
    "http://" + "a" * 300 + "/",
]
TOPICS = ["tns:t", "tns:a/b", "tns:*", "tns:a//.", "//.", "tns:", ":", "x:y", "tns:a|tns:b"]
DIALECTS = [
    "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Simple",
    "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Concrete",
    "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Full",
    "http://www.w3.org/TR/1999/REC-xpath-19991116",
    "urn:unknown",
]
# XML-compatible text (lxml refuses the rest; byte mutations cover non-XML characters)
TEXT = st.text(
    alphabet=st.characters(
        blacklist_categories=("Cs", "Cc"),
        blacklist_characters="\ufffe\uffff",
        max_codepoint=0x2FFFF,
    ),
    max_size=40,
)


def _simple(draw: Any, type_name: str) -> str:
    local = type_name.rsplit("}", 1)[-1].rsplit(":", 1)[-1]
    good = draw(st.integers(0, 9)) < 7
    if local == "anyURI":
        return draw(st.sampled_from(HOSTILE_URLS + DIALECTS)) if good else draw(TEXT)
    if local in ("dateTime", "AbsoluteOrRelativeTimeType", "duration"):
        return draw(
            st.sampled_from(
                [
                    "PT1M",
                    "PT0S",
                    "P1Y",
                    "-PT1S",
                    "2026-11-24T05:00:00Z",
                    "9999-12-31T23:59:59Z",
                    "PT99999999999999999999S",
                    "P",
                    "0001-01-01T00:00:00",
                    "nil",
                ]
            )
        )
    if local == "boolean":
        return draw(st.sampled_from(["true", "false", "1", "0", "yes", ""]))
    if local == "QName":
        return draw(st.sampled_from(TOPICS))
    if local in ("nonNegativeInteger", "positiveInteger", "integer", "int", "long"):
        return str(draw(st.sampled_from([0, 1, 10, -1, 2**64, 10**30])))
    return draw(TEXT)


# ---------------------------------------------------------------- schema-driven builder
class Builder:
    """Builds one instance of a schema element, drawing every choice from Hypothesis."""

    def __init__(self, draw: Any, sc: Schemas, budget: int = 60) -> None:
        self.draw = draw
        self.sc = sc
        self.budget = budget  # elements left: bounds the document

    def element(self, decl: etree._Element, depth: int = 0) -> etree._Element | None:
        if decl.get("ref"):
            key = self.sc.qname(decl, decl.get("ref", ""))
            target = self.sc.elements.get(key)
            if target is None:
                return etree.Element(key)
            return self.element(target, depth)
        self.budget -= 1
        tns = decl.getroottree().getroot().get("targetNamespace", "")
        el = etree.Element(f"{{{tns}}}{decl.get('name')}")
        if self.budget <= 0 or depth > 8:
            return el
        t = decl.get("type")
        if t:
            key = self.sc.qname(decl, t)
            ty = self.sc.types.get(key)
            if ty is None:  # a built-in xsd type
                el.text = _simple(self.draw, key)
            elif etree.QName(ty).localname == "simpleType":
                el.text = _simple(self.draw, ty.get("name", ""))
            else:
                self.complex(ty, el, depth)
        else:
            for c in decl:
                if etree.QName(c).localname == "complexType":
                    self.complex(c, el, depth)
        return el

    def complex(self, ct: etree._Element, el: etree._Element, depth: int) -> None:
        if el.tag.endswith("}TopicExpression") or el.tag.endswith("}Topic"):
            if self.draw(st.integers(0, 9)) < 7:  # mostly valid: reach the topic engine
                el.set("Dialect", DIALECTS[1])
                el.text = self.draw(st.sampled_from(TOPICS[:2]))
            else:
                el.set("Dialect", self.draw(st.sampled_from(DIALECTS)))
                el.text = self.draw(st.sampled_from(TOPICS))
            return
        if ct.get("mixed") == "true" and self.draw(st.booleans()):
            el.text = self.draw(TEXT)
        for c in ct:
            if not isinstance(c.tag, str):
                continue
            local = etree.QName(c).localname
            if local in ("sequence", "choice", "all"):
                self.group(c, el, depth)
            elif local in ("complexContent", "simpleContent"):
                for ext in c:
                    if not isinstance(ext.tag, str):
                        continue
                    base = self.sc.types.get(self.sc.qname(ext, ext.get("base", "")))
                    if base is not None and etree.QName(base).localname == "complexType":
                        self.complex(base, el, depth)
                    elif local == "simpleContent":
                        el.text = _simple(self.draw, ext.get("base", ""))
                    self.complex(ext, el, depth)
            elif local == "attribute" and c.get("name") and self.draw(st.booleans()):
                el.set(c.get("name", ""), _simple(self.draw, c.get("type", "string")))

    def group(self, g: etree._Element, el: etree._Element, depth: int) -> None:
        kind = etree.QName(g).localname
        parts = [c for c in g if isinstance(c.tag, str)]
        if kind == "choice" and parts:
            parts = [self.draw(st.sampled_from(parts))]
        for p in parts:
            lo = int(p.get("minOccurs", "1"))
            hi_s = p.get("maxOccurs", "1")
            hi = lo + 2 if hi_s == "unbounded" else int(hi_s)
            n = self.draw(
                st.integers(min_value=lo if self.budget > 0 else 0, max_value=max(lo, hi))
            )
            for _ in range(n):
                local = etree.QName(p).localname
                if local == "element":
                    child = self.element(p, depth + 1)
                    if child is not None:
                        el.append(child)
                elif local in ("sequence", "choice"):
                    self.group(p, el, depth + 1)
                elif local == "any":
                    el.append(self.anything(depth + 1))

    def anything(self, depth: int) -> etree._Element:
        """An xsd:any: a schema element, a reading, or an element of an unknown namespace."""
        pick = self.draw(st.integers(0, 3))
        if pick == 0 and self.budget > 0 and depth < 6:
            key = self.draw(st.sampled_from(sorted(self.sc.elements)))
            built = self.element(self.sc.elements[key], depth)
            if built is not None:
                return built
        if pick == 1:
            return etree.fromstring(
                b'<rd:Reading xmlns:rd="urn:wsn-edge:reading" device="d"><rd:value>1</rd:value>'
                b"</rd:Reading>"
            )
        el = etree.Element(f"{{urn:fuzz}}{self.draw(st.sampled_from(['x', 'y', 'Message']))}")
        el.text = self.draw(TEXT)
        return el


# ---------------------------------------------------------------- mutations
def _mutate_tree(draw: Any, root: etree._Element) -> None:
    nodes = [e for e in root.iter() if isinstance(e.tag, str)]
    for _ in range(draw(st.integers(0, 3))):
        target = draw(st.sampled_from(nodes))
        op = draw(st.integers(0, 7))
        parent = target.getparent()
        if op == 0 and parent is not None:
            parent.remove(target)
            nodes = [e for e in root.iter() if isinstance(e.tag, str)]
        elif op == 1 and parent is not None:
            parent.append(copy.deepcopy(target))
        elif op == 2:
            target.tag = (
                f"{{{draw(st.sampled_from([WSNT, WSA, SOAP11, SOAP12, 'urn:x', '']))}}}"
                f"{etree.QName(target).localname}"
            )
        elif op == 3:
            target.text = draw(st.sampled_from(["x" * 100_000, "", " ", "&amp;", "\u202e"]))
        elif op == 4:  # deep nesting
            cur = target
            for _i in range(draw(st.sampled_from([50, 200, 2000]))):
                cur = etree.SubElement(cur, "{urn:fuzz}d")
        elif op == 5:  # many attributes
            for i in range(draw(st.sampled_from([10, 1000, 20000]))):
                target.set(f"a{i}", "v")
        elif op == 6:
            target.set(f"{{{SOAP12}}}mustUnderstand", draw(st.sampled_from(["1", "true", "x"])))
        elif op == 7:
            target.append(etree.Element(f"{{{EDGE}}}ResourceId"))


def _mutate_bytes(draw: Any, data: bytes) -> bytes:
    op = draw(st.integers(0, 12))
    if op == 0 and data:
        return data[: draw(st.integers(0, len(data) - 1))]
    if op == 1:
        i = draw(st.integers(0, len(data)))
        return data[:i] + draw(st.binary(max_size=16)) + data[i:]
    if op == 2 and data:
        i = draw(st.integers(0, len(data) - 1))
        return data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1 :]
    if op == 3:
        pad = "<!-- " + "p" * draw(st.sampled_from([10, 9000])) + " -->"
        dtd = draw(
            st.sampled_from(
                [
                    f'<!DOCTYPE e [{pad}<!ENTITY a "b">]>',
                    '<!DOCTYPE e SYSTEM "http://127.0.0.1:9/x.dtd">',
                    '<!DOCTYPE e [<!ENTITY x SYSTEM "file:///etc/passwd">]>',
                ]
            )
        )
        return dtd.encode() + data
    if op == 4:
        return b"\xef\xbb\xbf" + data
    if op == 5:
        return data.decode("utf-8", "replace").encode("utf-16")
    if op == 6:
        return b'<?xml version="1.0" encoding="ebcdic-cp-us"?>' + data
    if op == 7:
        return data.replace(b"<", b"<\x00", 1)
    if op == 8:
        return data * draw(st.sampled_from([2, 3]))
    return data


@dataclass
class Case:
    path: str
    content_type: str | None
    body: bytes
    is_notify: bool = False
    messages: int = 0  # NotificationMessages in an unmutated-bytes Notify (for counting)
    note: str = ""


CONTENT_TYPES = [
    "application/soap+xml; charset=utf-8",
    "text/xml; charset=utf-8",
    "application/xml",
    'application/soap+xml; action="urn:x"',
    "application/json",
    "image/png",
    "text/plain",
    "multipart/related",
    None,
]
PATHS = [
    "/wsn/broker",
    "/wsn/subscriptions/nope",
    "/wsn/pullpoints/nope",
    "/wsn/registrations/nope",
    "/wsn/broker?x=1",
    "/wsn/../wsn/broker",
]


@st.composite
def cases(draw: Any) -> Case:
    sc = schemas()
    # biased to the operations with the most code behind them
    req_key = draw(
        st.sampled_from([f"{{{WSNT}}}Notify"] * 4 + [f"{{{WSNT}}}Subscribe"] * 2 + sc.requests)
    )
    b = Builder(draw, sc)
    payload = b.element(sc.elements[req_key])
    assert payload is not None
    body_xml = etree.tostring(payload).decode()
    version = draw(st.sampled_from([11, 12]))
    action = draw(
        st.sampled_from(
            [
                None,
                "urn:any",
                "http://docs.oasis-open.org/wsn/bw-2/NotificationProducer/SubscribeRequest",
            ]
        )
    )
    # the topic prefix the generated expressions use (TOPICS) is declared on the envelope
    data = envelope(body_xml, version, action).replace(
        b"<s:Envelope ", b'<s:Envelope xmlns:tns="urn:test" ', 1
    )
    root = etree.fromstring(data)
    tree_mutated = draw(st.integers(0, 9)) < 4
    if tree_mutated:
        _mutate_tree(draw, root)
    data = etree.tostring(root)
    bytes_mutated = draw(st.integers(0, 9)) < 3
    if bytes_mutated:
        data = _mutate_bytes(draw, data)
    ct = (
        draw(st.sampled_from(CONTENT_TYPES))
        if draw(st.integers(0, 9)) < 3
        else (CONTENT_TYPES[0] if version == 12 else CONTENT_TYPES[1])
    )
    path = draw(st.sampled_from(PATHS)) if draw(st.integers(0, 9)) < 2 else "/wsn/broker"
    is_notify = req_key.endswith("}Notify")
    return Case(path, ct, data, is_notify, 0, f"{etree.QName(req_key).localname} v{version}")


# ---------------------------------------------------------------- the harness
@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    seconds: float


def http_post(port: int, path: str, body: bytes, ct: str | None, timeout: float = 10.0) -> Answer:
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.putrequest("POST", path, skip_accept_encoding=True)
        if ct is not None:
            c.putheader("Content-Type", ct)
        c.putheader("Content-Length", str(len(body)))
        c.putheader("Connection", "close")
        c.endheaders(body)
        r = c.getresponse()
        data = r.read()
        return Answer(
            r.status, {k.lower(): v for k, v in r.getheaders()}, data, time.monotonic() - t0
        )
    finally:
        c.close()


#: spec-defined faults that say a resource limit was reached, not that the server failed
HONEST_LIMIT_FAULTS = frozenset({"UnableToCreatePullPointFault"})


def blames_server(a: Answer) -> str | None:
    """Why a 5xx answer is a server failure, or None if it is the spec's answer to client
    garbage (SOAP 1.1 binds every fault to 500; SOAP 1.2 VersionMismatch/MustUnderstand are
    500 too) or an honest resource-limit fault."""
    if a.status < 500:
        return None
    try:
        root = etree.fromstring(a.body)
    except etree.XMLSyntaxError:
        return f"HTTP {a.status} without a SOAP fault: {a.body[:200]!r}"
    code = root.findtext(f".//{{{SOAP12}}}Code/{{{SOAP12}}}Value") or root.findtext(".//faultcode")
    reason = root.findtext(f".//{{{SOAP12}}}Text") or root.findtext(".//faultstring") or ""
    if code is None:
        return f"HTTP {a.status} without a SOAP fault code: {a.body[:200]!r}"
    # only Receiver (SOAP 1.2) / Server (SOAP 1.1) blames the server; SOAP 1.1 faults
    # carry other codes as they are (Client, wsa:ActionNotSupported: WS-Addressing 1.0
    # SOAP binding §6), all with 500
    if code.rsplit(":", 1)[-1] not in ("Receiver", "Server"):
        return None
    if "limit" in reason:
        return None
    # a full pull-point table is the fault WS-BaseNotification 1.3 §5.2 defines for it
    # (UnableToCreatePullPoint), a Receiver fault by nature, whatever its wording
    if any(etree.QName(e).localname in HONEST_LIMIT_FAULTS for e in root.iter(etree.Element)):
        return None
    return f"HTTP {a.status} {code}: {reason[:300]}"


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _pp_body() -> str:
    return "<wsnt:CreatePullPoint/>"


@dataclass
class Harness:
    """A live gateway process, a canary pull point and the invariant checks."""

    data_dir: Path
    strict: bool = True  # raise on the first violation (test) or collect (bench)
    gw: GatewayProcess | None = None
    port: int = 0
    pullpoint: str = ""
    canaries: list[str] = field(default_factory=list)
    cases: int = 0
    accepted_messages: int = 0  # NotificationMessages in Notify answered 202 (see count)
    uncountable: int = 0  # 202 to a Notify whose message count the harness cannot know
    violations: list[str] = field(default_factory=list)
    slowest: tuple[float, str] = (0.0, "")
    rss_start_kb: int = 0
    rss_max_kb: int = 0
    statuses: dict[int, int] = field(default_factory=dict)

    def start(self, *extra: str) -> None:
        self.gw = start_gateway(
            self.data_dir,
            "--auth-token",
            TOKEN,
            "--landing-max-age",
            "0.5",
            "--log-level",
            "WARNING",
            *extra,
        )
        self.port = int(self.gw.url.rsplit(":", 1)[1].split("/", 1)[0])
        a = self._soap(_pp_body())
        root = etree.fromstring(a.body)
        addr = root.findtext(f".//{{{WSNT}}}PullPoint/{{{WSA}}}Address")
        assert addr, a.body
        self.pullpoint = addr
        topic = (
            f'<wsnt:TopicExpression Dialect="{DIALECTS[1]}" xmlns:c="{CANARY_NS}">'
            "c:canary</wsnt:TopicExpression>"
        )
        sub = (
            f"<wsnt:Subscribe><wsnt:ConsumerReference><wsa:Address>{addr}</wsa:Address>"
            f"</wsnt:ConsumerReference><wsnt:Filter>{topic}</wsnt:Filter>"
            "</wsnt:Subscribe>"
        )
        a = self._soap(sub)
        assert a.status == 200, a.body
        self.rss_start_kb = rss_kb(self.gw.proc.pid)

    def _soap(self, body: str, path: str = "/wsn/broker") -> Answer:
        return http_post(self.port, path, envelope(body), "application/soap+xml")

    def _violation(self, what: str) -> None:
        self.violations.append(what)
        if self.strict:
            raise AssertionError(what)

    def run(self, case: Case) -> None:
        assert self.gw is not None
        self.cases += 1
        try:
            a = http_post(self.port, case.path, case.body, case.content_type)
        except (OSError, http.client.HTTPException) as e:
            a = Answer(0, {}, repr(e).encode(), 0.0)
            self._violation(f"case {self.cases} ({case.note}): no HTTP answer: {e!r}")
        self.statuses[a.status] = self.statuses.get(a.status, 0) + 1
        if a.seconds > self.slowest[0]:
            self.slowest = (a.seconds, case.note)
        why = blames_server(a)
        if why:
            self._violation(f"case {self.cases} ({case.note}): {why}")
        if a.status == 202:
            n = _count_messages(case)
            if n is None:
                self.uncountable += 1
            else:
                self.accepted_messages += n
        if self.gw.proc.poll() is not None:
            self._violation(
                f"case {self.cases} ({case.note}): gateway exited {self.gw.proc.returncode}"
            )
            return
        self.canary()
        rss = rss_kb(self.gw.proc.pid)
        self.rss_max_kb = max(self.rss_max_kb, rss)

    def canary(self) -> None:
        value = f"canary-{len(self.canaries)}"
        body = notify_body(
            ("c:canary", f'<cv:V xmlns:cv="urn:fuzz-canary-value">{value}</cv:V>'),
            nsdecl=f'xmlns:c="{CANARY_NS}"',
        )
        assert self.gw is not None
        c0 = cpu_seconds(self.gw.proc.pid)
        a = self._soap(body)
        cpu = cpu_seconds(self.gw.proc.pid) - c0
        if a.status != 202:
            self._violation(
                f"after case {self.cases}: canary Notify answered {a.status} in {a.seconds:.3f} s"
            )
            return
        self.canaries.append(value)  # accepted: it must land and reach the pull point
        # promptly: counted in the gateway's CPU, not the wall clock (gwtest.cpu_seconds;
        # at load 21-26 an idle gateway took 1.3 s to answer)
        if cpu > 1.0:
            self._violation(
                f"after case {self.cases}: canary Notify answered after {cpu:.3f} s of the "
                f"gateway's CPU ({a.seconds:.3f} s)"
            )

    def finish(self) -> dict[str, Any]:
        """Collect the canaries from the pull point, stop the gateway, count landing lines."""
        assert self.gw is not None
        got: list[str] = []
        for _ in range(100):
            a = self._soap(
                "<wsnt:GetMessages><wsnt:MaximumNumber>1000</wsnt:MaximumNumber>"
                "</wsnt:GetMessages>",
                self.pullpoint.split(str(self.port), 1)[1],
            )
            root = etree.fromstring(a.body)
            batch = [e.text or "" for e in root.iter("{urn:fuzz-canary-value}V")]
            got.extend(batch)
            if not batch:
                break
        missing = sorted(set(self.canaries) - set(got))
        if missing:
            self._violation(f"{len(missing)} accepted canaries lost: {missing[:5]}")
        rss_end = rss_kb(self.gw.proc.pid)
        code = stop_gateway(self.gw)
        if code != 0:
            self._violation(f"gateway exited {code} on SIGTERM")
        lines = 0
        for p in sorted((self.data_dir / "landing").glob("landing-*.jsonl")):
            lines += sum(1 for _ in p.open())
        expected = len(self.canaries) + self.accepted_messages
        if self.uncountable == 0 and lines != expected:
            self._violation(f"landing zone has {lines} lines, {expected} accepted")
        if self.uncountable and lines < expected:
            self._violation(f"landing zone has {lines} lines, at least {expected} accepted")
        stderr = self.gw.stderr.read_text()
        if "Traceback" in stderr:
            self._violation("traceback on stderr: " + stderr[stderr.index("Traceback") :][:2000])
        return {
            "cases": self.cases,
            "violations": len(self.violations),
            "crashes": sum("gateway exited" in v for v in self.violations),
            "slowest_answer_s": round(self.slowest[0], 3),
            "slowest_case": self.slowest[1],
            "rss_start_mb": round(self.rss_start_kb / 1024, 1),
            "rss_max_mb": round(self.rss_max_kb / 1024, 1),
            "rss_end_mb": round(rss_end / 1024, 1),
            "canaries": len(self.canaries),
            "landing_lines": lines,
            "statuses": dict(sorted(self.statuses.items())),
        }


def _count_messages(case: Case) -> int | None:
    """NotificationMessages the broker accepted for a 202 Notify, when the harness can
    tell (a well-formed envelope whose Body's first element is wsnt:Notify)."""
    try:
        root = etree.fromstring(case.body)
    except etree.XMLSyntaxError:
        return None
    body = None
    for c in root:
        if isinstance(c.tag, str) and etree.QName(c).localname == "Body":
            body = c
            break
    if body is None:
        return None
    kids = [c for c in body if isinstance(c.tag, str)]
    if not kids or kids[0].tag != f"{{{WSNT}}}Notify":
        return 0
    return len(kids[0].findall(f"{{{WSNT}}}NotificationMessage"))


def summary_json(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=1)
