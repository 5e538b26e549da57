"""What libxml2 costs for XPath and lxml for serializing a payload, measured (the facts
gateway/topics/xpath_guard.py and wire/xmlutil.serialize rest on).

    python tests/bench/xpath_cost_bench.py

Each expression on a flat document (n records of three elements) and a nested one (n
leaves under 200 levels), for n = 2,000 and 8,000: the time and its growth; the
cost analysis' verdict beside it. Then `etree.tostring` of a sub-element under 5,000
in-scope namespace declarations against `xmlutil.serialize`, and both for a reading under
a SOAP envelope of 10 declarations.
"""

from __future__ import annotations

import sys
import time
import timeit
from pathlib import Path

from lxml import etree

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gateway.topics.xpath_guard import check
from gateway.wire.xmlutil import minimal_namespaces, serialize

EXPRS = [
    "//a", "//a/b", "boolean(//a[b > 0])", "//a//b", "//*//*", "//b/..", "//a | //b",
    "//a = //b", "count(//*)", "//a[b = c]", "//a/descendant::b", "//a[.//b]",
    "//a/following-sibling::a[1]", "//*[string-length(.) > 0]", "sum(//b)",
]  # fmt: skip


def flat(n: int) -> etree._Element:
    return etree.fromstring(("<r>" + "<a><b>1</b><c>x</c></a>" * n + "</r>").encode())


def nested(n: int) -> etree._Element:
    return etree.fromstring(("<r>" + "<a>" * 200 + "<b/>" * n + "</a>" * 200 + "</r>").encode())


def main() -> None:
    for name, make in (("flat", flat), ("nested", nested)):
        docs = (make(2000), make(8000))
        for e in EXPRS:
            x = etree.XPath(e)
            ts = []
            for d in docs:
                t0 = time.perf_counter()
                x(d)
                ts.append(time.perf_counter() - t0)
            verdict = "linear" if check(e) is None else "budget"
            print(
                f"{name:6s} {e:30s} {ts[0] * 1e3:9.2f} ms {ts[1] * 1e3:10.2f} ms "
                f"x{ts[1] / max(ts[0], 1e-7):5.1f}  {verdict}"
            )
    decls = " ".join(f'xmlns:p{i}="urn:{i}"' for i in range(5000))
    root = etree.fromstring(f"<e {decls}><m><x/></m></e>".encode())
    x = root[0][0]
    for label, fn in (("tostring", lambda: etree.tostring(x)), ("serialize", lambda: serialize(x))):
        n = 20 if label == "tostring" else 2000
        print(
            f"5,000 declarations in scope, {label}: {timeit.timeit(fn, number=n) / n * 1e3:.3f} ms"
        )
    env = (
        '<s:Envelope xmlns:s="http://www.w3.org/2003/05/soap-envelope" '
        + " ".join(f'xmlns:n{i}="urn:n{i}"' for i in range(9))
        + '><s:Body><rd:Reading xmlns:rd="urn:wsn-edge:reading" device="d1"><rd:value>21.5'
        "</rd:value><rd:unit>Cel</rd:unit><rd:time>2026-11-21T05:00:00Z</rd:time></rd:Reading>"
        "</s:Body></s:Envelope>"
    )
    p = etree.fromstring(env.encode())[0][0]
    n = 20000
    old = timeit.timeit(
        lambda: minimal_namespaces(etree.tostring(p, encoding="unicode", with_tail=False)),
        number=n,
    )
    new = timeit.timeit(lambda: serialize(p), number=n)
    print(f"a reading: tostring + minimal_namespaces {old / n * 1e6:.1f} us, ", end="")
    print(f"serialize {new / n * 1e6:.1f} us")


if __name__ == "__main__":
    main()
