"""Stage the device's packages for a board (flash.sh runs this; Python 3.8+, stdlib only).

    python3 tools/micropython/stage_packages.py STAGE [--mpy] [--plan] [PACKAGE ...]

Writes, under STAGE, the package.json of the default package (device/package.json) and of
each optional PACKAGE named (its directory under device/, e.g. wsn/admin), laid out as in
device/, and prints one line per file to put next to them: `SOURCE DEST` (DEST relative to
STAGE; --plan prints them and writes nothing). With --mpy a module is listed as a .mpy for
flash.sh to compile (mpy-cross), and the staged package.json names the .mpy; main.py stays a
.py (a board runs main.py at boot). The staged package.json files are what
`mpremote mip install` copies to the board: a board gets exactly the packages mip would
install from the checkout, compiled."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEVICE = ROOT / "device"


def packages() -> dict[str, Path]:
    """{name: package.json}: "default", and each optional package by its directory."""
    out = {}
    for pj in sorted(DEVICE.rglob("package.json")):
        out["default" if pj.parent == DEVICE else str(pj.parent.relative_to(DEVICE))] = pj
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("stage", type=Path)
    ap.add_argument("--mpy", action="store_true", help="modules as .mpy")
    ap.add_argument("--plan", action="store_true", help="print the files only, write nothing")
    ap.add_argument("package", nargs="*")
    a = ap.parse_intermixed_args(argv)
    known = packages()
    for name in a.package:
        if name not in known:
            opt = " ".join(n for n in known if n != "default")
            print(f"no package {name!r}: one of {opt}", file=sys.stderr)
            return 2
    for name in ["default", *dict.fromkeys(a.package)]:
        pj = known[name]
        urls = []
        for dest, src in json.loads(pj.read_text())["urls"]:
            if a.mpy and dest.endswith(".py") and dest != "main.py":
                dest, src = dest[:-3] + ".mpy", src[:-3] + ".mpy"
            urls.append([dest, src])
            rel = pj.parent.relative_to(ROOT)
            print(
                f"{rel / src if not src.endswith('.mpy') else rel / (src[:-4] + '.py')} {rel / src}"
            )
        if a.plan:
            continue
        out = a.stage / pj.relative_to(ROOT)
        out.parent.mkdir(parents=True, exist_ok=True)
        lines = ",\n".join("    " + json.dumps(u) for u in urls)
        out.write_text('{\n  "urls": [\n' + lines + '\n  ],\n  "deps": []\n}\n')
    return 0


if __name__ == "__main__":
    sys.exit(main())
