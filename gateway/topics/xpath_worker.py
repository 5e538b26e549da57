"""The process that evaluates XPath expressions not proven linear (gateway/topics/
xpath_budget.py starts it, sends it work and kills it when an evaluation overruns).

Run as `python -m gateway.topics.xpath_worker MEMORY_MB`. It reads frames from stdin and
answers each with one frame on stdout; a frame is a 4-byte big-endian length and a JSON
object. A request is `{"x": TEXT, "ns": {PREFIX: URI}, "mode": "bool"|"topics", "key":
DOC_KEY, "doc": XML?}`: `doc` is sent only when the document differs from the last one
(`key`), parsed with the broker's hardened parser. Its first frame says it is ready. The
answer is `{"v": VALUE}` (XPath 1.0 boolean() of the result for "bool"; for "topics", the
topics a node-set result holds, as [namespace, [steps]]) or `{"e": WHY}`. Its address
space is limited to MEMORY_MB (a namespace axis over thousands of nodes allocates
gigabytes): past it, an evaluation fails with an answer, or the process dies, and the
broker treats either as no match.
"""

from __future__ import annotations

import contextlib
import ctypes
import resource
import signal
import struct
import sys
from collections import OrderedDict
from typing import Any, BinaryIO

import orjson
from lxml import etree

from gateway.topics.xpath import element_topic

#: the documents come from the broker, which parsed them with the hardened parser and
#: serialized them; still no DTD, entity, network or huge tree here (topics sits below wire)
_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)

_LEN = struct.Struct(">I")
_COMPILED_MAX = 256


def _read(stream: BinaryIO) -> dict[str, Any] | None:
    head = stream.read(4)
    if len(head) < 4:
        return None
    (n,) = _LEN.unpack(head)
    data = stream.read(n)
    if len(data) < n:
        return None
    out: dict[str, Any] = orjson.loads(data)
    return out


def _write(stream: BinaryIO, obj: dict[str, Any]) -> None:
    data = orjson.dumps(obj)
    stream.write(_LEN.pack(len(data)) + data)
    stream.flush()


def boolean(r: Any) -> bool:
    """XPath 1.0 boolean() of an lxml XPath result (§4.3)."""
    if isinstance(r, bool):
        return r
    if isinstance(r, float | int):
        return r == r and r != 0
    if isinstance(r, str | bytes | list):
        return len(r) > 0
    return bool(r)


def _die_with_parent() -> None:
    """Linux: killed when the broker ends, kill -9 included (an evaluation may run long
    before this process would read the end of its input)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def main(argv: list[str]) -> int:
    _die_with_parent()
    memory_mb = int(argv[1]) if len(argv) > 1 else 512
    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    compiled: OrderedDict[tuple[str, tuple[tuple[str, str], ...]], etree.XPath] = OrderedDict()
    doc_key: str | None = None
    doc: etree._Element | None = None
    _write(stdout, {"ready": True})  # imports done: the broker starts its clock from here
    while True:
        req = _read(stdin)
        if req is None:
            return 0
        try:
            if "doc" in req:
                doc_key, doc = None, None
                doc = etree.fromstring(req["doc"].encode(), _PARSER)
                doc_key = req["key"]
            if doc is None or req["key"] != doc_key:
                _write(stdout, {"e": "no document"})
                continue
            ns = tuple(sorted(req["ns"].items()))
            xp = compiled.get((req["x"], ns))
            if xp is None:
                xp = etree.XPath(req["x"], namespaces=dict(ns), regexp=False, smart_strings=False)
                compiled[(req["x"], ns)] = xp
                if len(compiled) > _COMPILED_MAX:
                    compiled.popitem(last=False)
            r = xp(doc)
            if req["mode"] == "bool":
                _write(stdout, {"v": boolean(r)})
                continue
            topics = []
            if isinstance(r, list):
                for item in r:
                    if isinstance(item, etree._Element):
                        t = element_topic(item)
                        if t is not None:
                            topics.append([t.namespace, list(t.path)])
            _write(stdout, {"v": topics})
        except (etree.XPathError, etree.XMLSyntaxError, MemoryError, ValueError, KeyError) as e:
            _write(stdout, {"e": f"{type(e).__name__}: {e}"[:300]})


if __name__ == "__main__":
    sys.exit(main(sys.argv))
