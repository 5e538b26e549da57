"""Every `§` citation in gateway/, device/ and docs/ names a section that exists in the
document it cites, with the right title where the citation gives one (docs/design.md
"Citations").

The sections come from tests/data/spec_sections.json, derived from the normative texts in
`../shared/specs/` by tools/spec_sections.py and committed, so a clean clone without the
texts checks the same citations; where the texts are present (`../shared/specs` from the
repository root, or $WSN_SPECS), the committed index must equal what they give.

A citation is `§N` (`§4.2`, `§6.1.1`); the document is the nearest one named before it in
the same file (`WS-BaseNotification 1.3 §6.1.1`, then a bare `§6.2.1` a line later). A
title is given as `Title (§N)` or `§N Title` (a run of capitalised words equal to a section
title of that document): then it must be the title of §N. Documents whose texts are not in
`../shared/specs` (SOAP, WS-Addressing, WS-ResourceLifetime, ...) are known by name only:
their section numbers cannot be checked here, their names can.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INDEX = ROOT / "tests" / "data" / "spec_sections.json"
SPECS = Path(os.environ.get("WSN_SPECS") or ROOT.parent / "shared" / "specs")
SOURCES = [("gateway", "*.py"), ("device", "*.py"), ("docs", "*.md")]

#: (document, pattern): where a text names a document; the longest match at a place wins
DOCUMENTS: list[tuple[str, str]] = [
    ("WS-BaseNotification 1.3", r"WS-Base ?Notification(?: 1\.3)?"),
    ("WS-Topics 1.3", r"WS-Topics(?: 1\.3)?(?! 1\.0| 2004| draft)"),
    ("WS-Topics 1.0", r"WS-Topics 1\.0"),
    ("WS-Topics 2004", r"WS-Topics(?: draft)? 2004(?: drafts?)?|\b2004(?= ?§)"),
    ("WS-BrokeredNotification 1.0", r"WS-BrokeredNotification(?: 1\.0)?(?! 1\.3)"),
    ("WS-BrokeredNotification 1.3", r"WS-BrokeredNotification 1\.3"),
    # known by name only (no text in ../shared/specs)
    ("WS-Addressing 1.0", r"WS-Addressing(?: 1\.0)?(?: (?:Core|Metadata|SOAP [Bb]inding))?"),
    ("WS-Addressing 1.0", r"\bSOAP [Bb]inding"),
    ("SOAP 1.1", r"\bSOAP 1\.1"),
    ("SOAP 1.2", r"\bSOAP 1\.2(?:,? part [12]| HTTP binding)?"),
    ("WS-ResourceLifetime 1.2", r"WS-ResourceLifetime(?: 1\.2)?"),
    ("WS-ResourceProperties 1.2", r"WS-ResourceProperties(?: 1\.2)?"),
    ("WS-Resource 1.2", r"WS-Resource(?: 1\.2)?(?![A-Za-z])"),
    ("WS-BaseFaults 1.2", r"WS-BaseFaults(?: 1\.2)?"),
    ("XML Schema Part 2", r"XML Schema Part 2"),
    ("XML 1.0", r"\bXML 1\.0"),
    ("XPath 1.0", r"\bXPath 1\.0"),
    ("RFC", r"\bRFC \d+"),
    ("ESP32 datasheet", r"\bdatasheet"),
]
#: documents whose texts are here, and what to cite instead of one that is not
NOT_HERE = {
    "WS-BrokeredNotification 1.3": "its text is not in ../shared/specs (README): cite the "
    "section of WS-BrokeredNotification 1.0 whose operation the broker implements in 1.3 form"
}
_DOC_RE = [(name, re.compile(p)) for name, p in DOCUMENTS]
_CITE = re.compile(r"§(\d+(?:\.\d+)*)")
_WORD = r"[A-Z][A-Za-z0-9-]*"
_TITLE_AFTER = re.compile(rf"\s*({_WORD}(?: {_WORD})*)")
_TITLE_BEFORE = re.compile(rf"((?:{_WORD}(?:[ /]{_WORD})*))\s*\(\s*$")


@dataclass(frozen=True)
class Citation:
    where: str  # file:line
    document: str | None
    section: str
    before: str  # the text before it on its line
    after: str  # the text after it on its line


def index() -> dict[str, dict[str, str]]:
    data = json.loads(INDEX.read_text())
    return {name: d["sections"] for name, d in data["documents"].items()}


def citations(where: str, text: str) -> list[Citation]:
    """Every § citation of `text` with the document it names (module docstring)."""
    names: list[tuple[int, int, str]] = []  # (end, -length, document) of each mention
    for name, rx in _DOC_RE:
        for m in rx.finditer(text):
            names.append((m.end(), m.start(), name))
    out = []
    for m in _CITE.finditer(text):
        before_all = [n for n in names if n[0] <= m.start()]
        doc = None
        if before_all:
            end = max(n[0] for n in before_all)  # the nearest mention, its longest match
            doc = min((n for n in before_all if n[0] == end), key=lambda n: n[1])[2]
        line_start = text.rfind("\n", 0, m.start()) + 1
        line_end = text.find("\n", m.end())
        line_end = len(text) if line_end < 0 else line_end
        line = text.count("\n", 0, m.start()) + 1
        out.append(
            Citation(
                f"{where}:{line}",
                doc,
                m.group(1),
                text[line_start : m.start()],
                text[m.end() : line_end],
            )
        )
    return out


def problems(cites: list[Citation], sections: dict[str, dict[str, str]]) -> list[str]:
    """What is wrong with each citation (module docstring), as messages."""
    out = []
    for c in cites:
        # a document name just before the § that is none of the known ones (a typo, say)
        near = c.before[-40:]
        for w in re.findall(r"WS-[A-Za-z]+(?: \d\.\d)?", near):
            if not any(rx.fullmatch(w) or rx.match(w) for _n, rx in _DOC_RE):
                out.append(f"{c.where}: §{c.section} cites {w!r}, a document not known here")
        if c.document is None:
            out.append(f"{c.where}: §{c.section} names no document before it in the file")
            continue
        if c.document in NOT_HERE:
            out.append(f"{c.where}: {c.document} §{c.section}: {NOT_HERE[c.document]}")
            continue
        secs = sections.get(c.document)
        if secs is None:
            continue  # known by name only
        if c.section not in secs:
            out.append(f"{c.where}: {c.document} has no §{c.section}")
            continue
        titles = {t.lower(): n for n, t in secs.items()}
        claimed = set()
        if (m := _TITLE_AFTER.match(c.after)) and m.group(1).lower() in titles:
            claimed.add(titles[m.group(1).lower()])
        if m := _TITLE_BEFORE.search(_without_document(c.before)):
            for part in m.group(1).split("/"):
                if part.lower() in titles:
                    claimed.add(titles[part.lower()])
        if claimed and c.section not in claimed:
            says = ", ".join(f"§{n} {secs[n]}" for n in sorted(claimed))
            out.append(
                f"{c.where}: {c.document} §{c.section} is {secs[c.section]!r}, the text says {says}"
            )
    return out


def _without_document(before: str) -> str:
    """`before` without the document name that ends it ("Title (Document " -> "Title (")."""
    b = before.rstrip()
    for _n, rx in _DOC_RE:
        for m in rx.finditer(b):
            if m.end() == len(b):
                return b[: m.start()]
    return before


def _sources() -> list[Path]:
    return sorted(p for d, pat in SOURCES for p in (ROOT / d).rglob(pat) if p.is_file())


def test_the_committed_index_is_what_the_texts_give() -> None:
    """With the texts present: the index equals what tools/spec_sections.py derives. Without
    them (a clean clone): the index is well formed, every document's sections in order."""
    data = json.loads(INDEX.read_text())
    if (SPECS / "README.md").exists():
        spec = importlib.util.spec_from_file_location(
            "spec_sections", ROOT / "tools/spec_sections.py"
        )
        assert spec is not None and spec.loader is not None
        tool = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tool)
        assert INDEX.read_text() == tool.dump(tool.derive(SPECS)), (
            "tests/data/spec_sections.json is stale: python tools/spec_sections.py"
        )
    for name, d in data["documents"].items():
        nums = [[int(x) for x in n.split(".")] for n in d["sections"]]
        assert nums == sorted(nums) and nums[0] == [1], name
        assert all(d["sections"].values()), name


def test_every_citation_names_a_section_of_its_document() -> None:
    secs = index()
    cites = [c for p in _sources() for c in citations(str(p.relative_to(ROOT)), p.read_text())]
    assert len(cites) > 300  # the scan found them (there are over 350)
    bad = problems(cites, secs)
    assert not bad, "\n".join(bad)


def test_the_check_fails_on_a_wrong_citation() -> None:
    """It fails when a citation names a section that is not there, gives the wrong title,
    names an unknown document or none."""
    secs = index()

    def check(text: str) -> list[str]:
        return problems(citations("x.py", text), secs)

    assert check("# WS-BaseNotification 1.3 §6.1.1 Renew, then Unsubscribe (§6.1.2)") == []
    assert check("# PauseSubscription/ResumeSubscription (§6.3)") == [
        "x.py:1: §6.3 names no document before it in the file"
    ]
    assert check("# WS-BaseNotification 1.3 §9.9") == [
        "x.py:1: WS-BaseNotification 1.3 has no §9.9"
    ]
    assert check("# Renew (WS-BaseNotification 1.3 §6.1)") == [
        "x.py:1: WS-BaseNotification 1.3 §6.1 is 'Base Subscription Manager', the text says "
        "§6.1.1 Renew"
    ]
    assert check("# WS-BaseNotification 1.3 §4\n# GetMessages (§5.1.3)") == [
        "x.py:2: WS-BaseNotification 1.3 §5.1.3 is 'Example SOAP Encoding of the GetMessages "
        "Message Exchange', the text says §5.1.2 GetMessages"
    ]
    assert check("# WS-BaseNotifcation 1.3 §4.2") == [
        "x.py:1: §4.2 cites 'WS-BaseNotifcation 1.3', a document not known here",
        "x.py:1: §4.2 names no document before it in the file",
    ]
    assert check("# SOAP 1.2 part 2 §7.1.4, WS-Addressing 1.0 Metadata §4.4.4") == []
    assert (
        "cite the section of WS-BrokeredNotification 1.0"
        in check("# WS-BrokeredNotification 1.3 §6")[0]
    )
