"""The device's packages as MicroPython's package manager sees them (device/package.json and one
package.json per optional package, with URLs relative to it), and installing them the way
users do: MicroPython's own `mip` on the 64-bit unix port (the 32-bit build has none: install
with the 64-bit one, run on either), from this checkout served over HTTP on 127.0.0.1.

    with serve(ROOT) as base:                       # http://127.0.0.1:PORT
        mip_install(tree, [base + "/device/package.json"])

Used by test_mip.py, the flash.sh tests and tests/bench/device_bench.py."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEVICE = ROOT / "device"
MICROPYTHON = ROOT / ".venv" / "bin" / "micropython"


def package_files() -> dict[str, list[tuple[str, Path]]]:
    """{package: [(path installed, source file)]}: "default" is device/package.json, an
    optional package is named by its directory under device/ (e.g. "wsn/admin")."""
    out: dict[str, list[tuple[str, Path]]] = {}
    for pj in sorted(DEVICE.rglob("package.json")):
        name = "default" if pj.parent == DEVICE else str(pj.parent.relative_to(DEVICE))
        urls = json.loads(pj.read_text())["urls"]
        out[name] = [(dest, (pj.parent / src).resolve()) for dest, src in urls]
    return out


def module_name(rel: str) -> str:
    """wsn/core/xml.py -> wsn.core.xml (a package's __init__.py: the package)."""
    return rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def mpy_cross_args(rel: str) -> list[str]:
    """The mpy-cross options the project compiles device/<rel> with (flash.sh passes the same,
    tests/flash checks it). -O3: no line numbers (MicroPython's py/emitbc.c at level 3); a
    traceback still names the module and each function, every line as line 1, and nothing in
    the device reads line numbers. -s: the module's name as imported, which MicroPython interns
    when it imports the module anyway; a path would be one more name held in the heap for good
    (the stored source name is interned when the .mpy is loaded)."""
    return ["-O3", "-s", module_name(rel)]


def package_url(base: str, name: str) -> str:
    """The URL of a package's package.json in the checkout served at base."""
    return f"{base}/device/{'' if name == 'default' else name + '/'}package.json"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
    """directory served over HTTP on 127.0.0.1 (a free port) -> its base URL."""
    srv = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(directory))
    )
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def mip_install(target: Path, urls: list[str]) -> str:
    """MicroPython's mip (frozen into the 64-bit unix port) installs each package.json URL
    into target -> its output. Raises CalledProcessError when mip fails."""
    code = "import mip\n" + "".join(f"mip.install({u!r}, target={str(target)!r})\n" for u in urls)
    r = subprocess.run(
        [str(MICROPYTHON), "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "MICROPYPATH": ".frozen"},
        timeout=120,
        check=False,
    )
    if r.returncode or "Package not found" in r.stdout or "error" in r.stdout.lower():
        raise subprocess.CalledProcessError(r.returncode, "mip", r.stdout, r.stderr)
    return r.stdout
