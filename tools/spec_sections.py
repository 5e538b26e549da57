"""Derive the section index of the normative texts (tests/data/spec_sections.json) from
`../shared/specs/` (its README maps the files; docs/design.md "Citations").

    python tools/spec_sections.py [--specs DIR] [--out FILE] [--check]

The texts were converted from PDFs, so each is read where its headings are cleanest:
WS-BaseNotification 1.3 from its trailing table of contents, WS-Topics 1.3 and
WS-BrokeredNotification 1.0 from their tables of contents (the latter's titles are upper
case there, so the body's heading gives the spelling), the two 2004 WS-Topics texts from
their body headings, in order. `--check` exits 1 when FILE differs from what the texts give
(tests/test_spec_citations.py does the same when the texts are present).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT.parent / "shared" / "specs"
OUT = ROOT / "tests" / "data" / "spec_sections.json"

Sections = dict[str, str]

_NUM = r"\d+(?:\.\d+)*"


def _tab_toc(text: str) -> Sections:
    """WS-BaseNotification 1.3: the contents at the end, one tab-indented line each."""
    out: Sections = {}
    for m in re.finditer(rf"^\t({_NUM}) (\S.*?)\s*$", text, re.M):
        out.setdefault(m.group(1), m.group(2))
    return out


def _numbered_toc(text: str) -> Sections:
    """WS-Topics 1.3: 'Table of Contents' lines `<line no>\\t<number>\\t<title>\\t<page>`,
    with the PDF's furniture: a page number run into the title, a digit of the number or a
    parenthesis repeated at the title's start."""
    start = text.index("Table of Contents")
    out: Sections = {}
    for line in text[start:].splitlines()[1:]:
        fields = [f.strip() for f in line.split("\t") if f.strip()]
        if not fields or not fields[0].isdigit():
            if out:
                break  # past the contents
            continue
        fields = fields[1:]  # the line number
        if fields and re.fullmatch(_NUM, fields[0]):
            num, title = fields[0], " ".join(fields[1:-1] if len(fields) > 2 else fields[1:])
        elif fields and (m := re.match(rf"({_NUM}) (.+)", fields[0])):
            num, title = m.group(1), m.group(2)
        else:
            continue  # an appendix ("Ap", "ppendix A. ...")
        title = re.sub(r"\s+\d+$", "", title)  # a page number run in
        last = num.rsplit(".", 1)[-1]
        title = re.sub(rf"^(?:{re.escape(last[-1])} |\) )", "", title)  # a repeated digit, ")"
        out.setdefault(num, title.strip())
    return out


def _caps_toc(text: str) -> Sections:
    """WS-BrokeredNotification 1.0: the contents give the numbers (titles in capitals),
    the body's heading of the same number and title the spelling."""
    start = text.index("Table of Contents")
    toc: Sections = {}
    for line in text[start:].splitlines()[1:]:
        m = re.match(rf"^({_NUM})\t(.+?)\t\d+$", line)
        if m:
            toc[m.group(1)] = re.sub(r"</?i>", "", m.group(2)).strip()
        elif toc and line.strip() and not line.startswith(tuple("0123456789")):
            break
    body = text[start:]
    out: Sections = {}
    for num, caps in toc.items():
        m = re.search(rf"^{re.escape(num)} ({re.escape(caps)})\s*$", body, re.M | re.I)
        out[num] = m.group(1).strip() if m else caps.title()
    return out


def _follows(prev: str | None, num: str) -> bool:
    """Whether section `num` may come right after `prev` in a document."""
    parts = [int(p) for p in num.split(".")]
    if prev is None:
        return parts == [1]
    p = [int(x) for x in prev.split(".")]
    if parts == [*p, 1]:
        return True  # the first child
    # the next sibling of prev or of one of its ancestors
    return any(parts == [*p[:depth], p[depth] + 1] for depth in range(len(p)))


def _body(text: str) -> Sections:
    """The 2004 WS-Topics texts: numbered heading lines of the body, each one the next
    section after the one before (which drops page furniture such as list items)."""
    out: Sections = {}
    prev: str | None = None
    for m in re.finditer(rf"^({_NUM}) +([A-Z][^\n]*?)\s*$", text, re.M):
        num, title = m.group(1), m.group(2)
        if _follows(prev, num):
            out[num] = re.sub(r"\s+", " ", title)
            prev = num
    return out


#: file -> (the document's name in citations, how its headings are read)
DOCUMENTS: dict[str, tuple[str, Callable[[str], Sections]]] = {
    "004_49bf4b7bb23f7a03.txt": ("WS-BaseNotification 1.3", _tab_toc),
    "001_20bdee9e48600162.txt": ("WS-Topics 1.3", _numbered_toc),
    "002_d3f668002b708882.txt": ("WS-BrokeredNotification 1.0", _caps_toc),
    "000_637fefe9df35642a.txt": ("WS-Topics 2004", _body),
    "003_32f9aee67e123f0c.txt": ("WS-Topics 1.0", _body),
}

#: what the README's table says each file is (checked, so a renamed file is noticed)
README_NAMES = {
    "004_49bf4b7bb23f7a03.txt": "WS-BaseNotification 1.3",
    "001_20bdee9e48600162.txt": "WS-Topics 1.3",
    "002_d3f668002b708882.txt": "WS-BrokeredNotification 1.0",
    "000_637fefe9df35642a.txt": "WS-Topics draft (2004",
    "003_32f9aee67e123f0c.txt": "WS-Topics 1.0",
}


def derive(specs: Path) -> dict[str, object]:
    """The index: per document, its file and its sections (number -> title)."""
    readme = (specs / "README.md").read_text()
    docs: dict[str, object] = {}
    for file, (name, read) in DOCUMENTS.items():
        row = next((line for line in readme.splitlines() if file in line), "")
        if README_NAMES[file] not in row:
            raise SystemExit(f"{specs}/README.md does not map {file} to {README_NAMES[file]!r}")
        sections = read((specs / file).read_text())
        docs[name] = {"file": file, "sections": dict(sorted(sections.items(), key=_key))}
    return {"source": "../shared/specs (tools/spec_sections.py)", "documents": docs}


def _key(item: tuple[str, str]) -> list[int]:
    return [int(p) for p in item[0].split(".")]


def dump(index: dict[str, object]) -> str:
    return json.dumps(index, indent=1, ensure_ascii=False) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--specs", type=Path, default=SPECS)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="compare, do not write")
    args = ap.parse_args()
    text = dump(derive(args.specs))
    if args.check:
        same = args.out.exists() and args.out.read_text() == text
        print(f"{args.out}: {'up to date' if same else 'differs from the texts'}")
        return 0 if same else 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
