"""scripts/build_micropython.sh: cached, network-free second run; cache key follows frozen files."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

from mpboard import BIN, BUILD_CMD, ROOT, unavailable

SCRIPT = ROOT / "scripts" / "build_micropython.sh"
CACHE = ROOT / ".cache" / "micropython"


def build(
    *args: str, env: dict[str, str] | None = None, cwd: Path = ROOT, script: Path = SCRIPT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(script), *args], capture_output=True, text=True, timeout=900, env=env, cwd=cwd
    )


def _poisoned_path(tmp_path: Path) -> str:
    """A PATH whose apt-get / apt-cache fail loudly: proves the cached run needs no network."""
    fake = tmp_path / "fakebin"
    fake.mkdir()
    for tool in ("apt-get", "apt-cache"):
        exe = fake / tool
        exe.write_text('#!/bin/sh\necho "$0 was called: the cached build used apt" >&2\nexit 99\n')
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return f"{fake}:{os.environ['PATH']}"


def test_second_run_reuses_everything_without_network(tmp_path: Path) -> None:
    if not (BIN / "micropython32").is_file() or not (CACHE / "current-version").is_file():
        unavailable(f"no MicroPython build cache yet: run {BUILD_CMD}")
    # Bring the cache up to date first (a no-op in CI, where setup.sh has just built).
    first = build()
    assert first.returncode == 0, first.stdout + first.stderr
    env = dict(os.environ, PATH=_poisoned_path(tmp_path))
    t0 = time.monotonic()
    second = build(env=env)
    elapsed = time.monotonic() - t0
    out = second.stdout + second.stderr
    assert second.returncode == 0, out
    print(
        f"\n[build] second run of build_micropython.sh: {elapsed:.2f} s\n{second.stdout}",
        file=sys.__stdout__,
        flush=True,
    )
    for what in (
        "reusing Debian source micropython",
        "reusing mpy-cross",
        "reusing qemu-mps2-an385.elf",
        "reusing qemu-mps2-an385-64k.elf",
        "reusing micropython32",
    ):
        assert what in out, out
    assert "building" not in out and "fetching" not in out, out
    # a build takes minutes: 120 s tells reuse from building even on a busy machine
    assert elapsed < 120, f"second run took {elapsed:.1f} s:\n{out}"
    assert len(second.stdout.splitlines()) <= 8, "not quiet:\n" + out


def test_help_and_bad_option() -> None:
    h = build("--help")
    assert h.returncode == 0 and "--refresh" in h.stdout and "apt" in h.stdout, h.stdout
    bad = build("--frobnicate")
    assert bad.returncode == 2 and "unknown option --frobnicate" in bad.stderr


def _scratch_tree(tmp_path: Path) -> Path:
    """A copy of just what the cache key reads, so the test can change 'device' files."""
    root = tmp_path / "tree"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, root / "scripts")
    shutil.copytree(ROOT / "tools" / "micropython", root / "tools" / "micropython")
    shutil.copytree(ROOT / "tests" / "qemu" / "mp", root / "tests" / "qemu" / "mp")
    core = root / "device" / "wsn" / "core"
    core.mkdir(parents=True)
    (root / "device" / "wsn" / "__init__.py").write_text("")
    (core / "__init__.py").write_text("")
    (core / "xml.py").write_text("X = 1\n")
    (root / "device" / "wsn" / "http.py").write_text("import socket\n")
    (root / "tests" / "device" / "core").mkdir(parents=True)
    (root / "tests" / "device" / "mp_runner.py").write_text("def run(names):\n    return 0\n")
    return root


def test_firmware_key_follows_the_frozen_files(tmp_path: Path) -> None:
    root = _scratch_tree(tmp_path)
    script = root / "scripts" / "build_micropython.sh"
    env = dict(os.environ, WSN_MP_CACHE=str(tmp_path / "cache"))

    def key(variant: str = "qemu") -> str:
        r = build("--print-key", variant, script=script, env=env, cwd=root)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    k0 = key()
    assert k0 == key() and len(k0) == 16
    assert key("qemu-64k") != k0  # the heap size is part of the 64k firmware's key
    (root / "device" / "wsn" / "http.py").write_text("import socket  # I/O layer, not frozen\n")
    assert key() == k0
    (root / "device" / "wsn" / "core" / "xml.py").write_text("X = 2\n")
    k1 = key()
    assert k1 != k0
    (root / "tests" / "device" / "core" / "test_new.py").write_text("def test_a():\n    pass\n")
    k2 = key()
    assert k2 != k1
    (root / "tests" / "device" / "core" / "conftest.py").write_text("# CPython only\n")
    assert key() == k2
    listed = build("--print-frozen", script=script, env=env, cwd=root).stdout.split()
    assert "device/wsn/core/xml.py" in listed and "tests/device/core/test_new.py" in listed
    assert "device/wsn/http.py" not in listed


def test_manifest_freezes_exactly_the_keyed_files() -> None:
    """The files the manifest freezes are the ones build_micropython.sh hashes (or it rebuilds
    too rarely); checked with MicroPython's own manifest reader from the cached source."""
    version_file = CACHE / "current-version"
    if not version_file.is_file():
        unavailable(f"no Debian MicroPython source cached: run {BUILD_CMD}")
    vdir = CACHE / version_file.read_text().strip()
    src = vdir / "src" / (vdir / "source.ok").read_text().strip()
    sys.path.insert(0, str(src / "tools"))
    try:
        import manifestfile  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(src / "tools"))
    m = manifestfile.ManifestFile(
        manifestfile.MODE_FREEZE,
        {
            "MPY_DIR": str(src),
            "MPY_LIB_DIR": str(src / "lib" / "micropython-lib"),
            "PORT_DIR": str(src / "ports" / "qemu"),
            "BOARD_DIR": str(src / "ports" / "qemu" / "boards" / "MPS2_AN385"),
        },
    )
    m.execute(str(ROOT / "tools" / "micropython" / "qemu_manifest.py"))
    frozen = {os.path.relpath(f.full_path, ROOT) for f in m.files()}
    keyed = set(build("--print-frozen").stdout.split()) - {"tools/micropython/qemu_manifest.py"}
    assert frozen == keyed
    targets = {f.target_path for f in m.files()}
    assert "board_checks.py" in targets
    if (ROOT / "device" / "wsn" / "core" / "__init__.py").is_file():
        assert {"wsn/__init__.py", "wsn/core/__init__.py"} <= targets


def test_fetch_uses_private_apt_dirs_and_failures_are_loud(tmp_path: Path) -> None:
    """With an empty cache the script runs `apt-get update` with a temporary sources file and
    private lists/cache dirs (never the machine's apt configuration); a failing command stops
    the build with the command and the tail of its output."""
    root = _scratch_tree(tmp_path)
    fake = tmp_path / "fakeapt"
    fake.mkdir()
    calls = tmp_path / "apt-calls"
    for tool in ("apt-get", "apt-cache"):
        exe = fake / tool
        exe.write_text(
            "#!/bin/sh\n"
            f'echo "$0 $*" >> {calls}\n'
            "echo 'Ign:1 http://deb.debian.org/debian trixie InRelease'\n"
            "echo 'E: Failed to fetch http://deb.debian.org/debian/dists/trixie/InRelease'\n"
            "exit 100\n"
        )
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    cache = tmp_path / "cache"
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", WSN_MP_CACHE=str(cache))
    r = build(script=root / "scripts" / "build_micropython.sh", env=env, cwd=root)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAILED (exit status 100): apt-get" in r.stderr, r.stderr
    assert "E: Failed to fetch" in r.stderr, "the failing command's output tail is shown"
    args = calls.read_text()
    assert "apt-get " in args and " update" in args
    for opt in (
        f"Dir::Etc::SourceList={cache}/apt/trixie-src.sources",
        "Dir::Etc::SourceParts=/dev/null",
        f"Dir::State::Lists={cache}/apt/lists",
        f"Dir::Cache={cache}/apt/cache",
    ):
        assert opt in args, args
    sources = (cache / "apt" / "trixie-src.sources").read_text()
    assert "Types: deb-src" in sources and "Suites: trixie" in sources
