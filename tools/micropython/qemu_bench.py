"""Measure the QEMU boards and the builds (prints numbers; not a test).

    .venv/bin/python tools/micropython/qemu_bench.py

Firmware sizes, QEMU boot-to-pty time, an mpremote round trip, the heap left after importing
the whole device core on each firmware, and the wall time of the core unit tests.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import qemu_run

ROOT = qemu_run.ROOT
BIN = ROOT / ".cache" / "micropython" / "bin"


def core_modules() -> list[str]:
    core = ROOT / "device" / "wsn" / "core"
    return sorted(
        ".".join(p.relative_to(ROOT / "device").with_suffix("").parts).removesuffix(".__init__")
        for p in core.rglob("*.py")
    )


def main() -> int:
    size = shutil.which("arm-none-eabi-size")
    for name in ("qemu-mps2-an385.elf", "qemu-mps2-an385-64k.elf"):
        fw = BIN / name
        if not fw.exists():
            print(f"{name}: missing (bash scripts/build_micropython.sh)")
            continue
        if size:
            text, data, bss = (
                subprocess.run([size, str(fw)], capture_output=True, text=True, check=True)
                .stdout.splitlines()[1]
                .split()[:3]
            )
            print(f"{name}: text {int(text):,} B, data {int(data):,} B, bss {int(bss):,} B")
        t0 = time.monotonic()
        with qemu_run.QemuBoard(fw) as board:
            boot = time.monotonic() - t0
            t1 = time.monotonic()
            board.run("print(1)")
            rtt = time.monotonic() - t1
            mods = core_modules()
            script = (
                "import gc\ngc.collect()\nf0 = gc.mem_free()\n"
                f"for m in {mods!r}:\n    __import__(m)\n"
                "gc.collect()\nprint('HEAP', gc.mem_free() + gc.mem_alloc(), f0, gc.mem_free())\n"
            )
            _, out = board.run(script)
            heap = out.split("HEAP")[1].split() if "HEAP" in out else ["?"] * 3
            names = qemu_run.core_test_modules()
            t2 = time.monotonic()
            _, out = board.run(qemu_run.core_tests_script(names), timeout=600)
            tests = time.monotonic() - t2
        print(f"  boot to pty {boot * 1000:.0f} ms; mpremote run round trip {rtt * 1000:.0f} ms")
        print(
            f"  heap {heap[0]} B; free after boot {heap[1]} B; free after importing "
            f"{len(mods)} core modules {heap[2]} B"
        )
        print(f"  core unit tests ({len(names)} modules): {qemu_run.summary(out)} in {tests:.2f} s")
    mp32 = BIN / "micropython32"
    if mp32.exists():
        t0 = time.monotonic()
        subprocess.run([str(mp32), "-c", "pass"], check=True)
        ms = 1000 * (time.monotonic() - t0)
        print(f"micropython32: {mp32.stat().st_size:,} B, start {ms:.0f} ms")
    t0 = time.monotonic()
    r = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build_micropython.sh")], capture_output=True, text=True
    )
    print(f"build_micropython.sh (cached): {time.monotonic() - t0:.2f} s, exit {r.returncode}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
