"""Build the unix-port "device firmware": a 32-bit, single-precision MicroPython unix port with
asyncio and the device package frozen in (tests/device/fw_manifest.py -> device/manifest.py).

On a board the device's bytecode is frozen into flash and the RAM heap holds only data; this
build reproduces that on the host, so the 64 KiB-heap test measures what a board would need.
It uses the Debian MicroPython source fetched by ``bash scripts/build_micropython.sh``
(.cache/micropython/<version>/src) and builds into .cache/device-fw/, keyed by a hash of
everything frozen (rebuilt only when the device code changes; an incremental rebuild after a
change takes seconds, the first build about a minute).

    python tests/device/fwbuild.py      # build (if needed) and print the binary's path
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MP_CACHE = Path(os.environ.get("WSN_MP_CACHE", ROOT / ".cache" / "micropython"))
OUT = ROOT / ".cache" / "device-fw"
MANIFEST = Path(__file__).resolve().parent / "fw_manifest.py"
MAKE_ARGS = [
    "VARIANT=standard",
    "MICROPY_PY_FFI=0",
    "MICROPY_PY_BTREE=0",
    "MICROPY_PY_SSL=0",
    "MICROPY_FORCE_32BIT=1",
    "CFLAGS_EXTRA=-DMICROPY_FLOAT_IMPL=MICROPY_FLOAT_IMPL_FLOAT",
]
HINT = "bash scripts/build_micropython.sh"


class FirmwareUnavailable(RuntimeError):
    """The MicroPython source (or a tool) needed for the build is missing."""


def source_dir() -> Path:
    try:
        version = (MP_CACHE / "current-version").read_text().strip()
        name = (MP_CACHE / version / "source.ok").read_text().strip()
    except OSError as e:
        raise FirmwareUnavailable(
            f"no MicroPython source under {MP_CACHE}: fetch it with `{HINT}`"
        ) from e
    src = MP_CACHE / version / "src" / name
    if not (src / "ports" / "unix" / "Makefile").is_file():
        raise FirmwareUnavailable(f"{src} is incomplete: run `{HINT}`")
    return src


def frozen_key(src: Path) -> str:
    h = hashlib.sha256()
    h.update(str(src).encode() + b"\0" + " ".join(MAKE_ARGS).encode())
    files = [
        MANIFEST,
        ROOT / "device" / "manifest.py",
        *sorted((ROOT / "device" / "wsn").rglob("*.py")),
    ]
    for f in files:
        h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def device_firmware() -> Path:
    """Path of the built binary (built now if the frozen files changed)."""
    src = source_dir()
    if shutil.which("make") is None or shutil.which("gcc") is None:
        raise FirmwareUnavailable(f"make/gcc missing: run `{HINT}`")
    key = frozen_key(src)
    OUT.mkdir(parents=True, exist_ok=True)
    binary = OUT / "micropython32-device"
    keyfile = OUT / "micropython32-device.key"
    with open(OUT / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time (parallel test runs)
        if binary.exists() and keyfile.exists() and keyfile.read_text() == key:
            return binary
        build = OUT / "build32"
        # make decides by mtimes, the key by content: freeze again from scratch, so a source
        # file older than its last frozen .mpy (unpacked from an archive, copied with its
        # mtime) is not skipped and the old bytecode frozen in
        shutil.rmtree(build / "frozen_mpy", ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            (build / "frozen_content.c").unlink()
        log = OUT / "build.log"
        with open(log, "w") as out:
            r = subprocess.run(
                [
                    "make",
                    "-C",
                    str(src / "ports" / "unix"),
                    f"-j{os.environ.get('JOBS', '2')}",
                    *MAKE_ARGS,
                    f"FROZEN_MANIFEST={MANIFEST}",
                    f"BUILD={build}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if r.returncode != 0:
            tail = log.read_text()[-3000:]
            raise RuntimeError(f"device firmware build failed (see {log}):\n{tail}")
        tmp = OUT / ".micropython32-device.tmp"
        shutil.copy(build / "micropython", tmp)
        tmp.replace(binary)
        keyfile.write_text(key)
        return binary


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        try:
            print(device_firmware())
        except FirmwareUnavailable as e:
            print(e, file=sys.stderr)
            sys.exit(2)
