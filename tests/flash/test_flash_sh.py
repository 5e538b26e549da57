"""flash.sh: every target's command sequence, its errors, and the parts that run without a board.

No ESP32 or Pico W is attached here: the board targets are checked through --dry-run (the exact
commands), through their error paths (missing port, config, tool, board, drive), and by running
the printed mpy-cross commands and importing the resulting .mpy files on real MicroPythons.
The qemu target really boots the emulated board and runs the device self-test.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
from flash_report import flash_summaries

ROOT = Path(__file__).resolve().parents[2]
FLASH = ROOT / "flash.sh"
VENV_BIN = ROOT / ".venv" / "bin"
BIN = ROOT / ".cache" / "micropython" / "bin"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
SUMMARY = "passed, "
# Each test run stages compiled modules in its own directory (WSN_FLASH_STAGE), so parallel
# pytest sessions on the same checkout never share .cache/flash/.
STAGE = Path(tempfile.mkdtemp(prefix="wsn-flash-stage-"))
atexit.register(shutil.rmtree, STAGE, True)


def flash(
    *args: str, path: str | None = None, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ)
    e["PATH"] = path if path is not None else f"{VENV_BIN}:{os.environ['PATH']}"
    e["WSN_FLASH_STAGE"] = str(STAGE / args[0]) if args else str(STAGE)
    e.update(env or {})
    return subprocess.run(
        ["bash", str(FLASH), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=e,
        cwd=ROOT,
    )


def commands(out: str) -> list[list[str]]:
    """The '+ cmd' lines of a dry run, split like the shell would."""
    return [shlex.split(line[2:]) for line in out.splitlines() if line.startswith("+ ")]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"device_id": "test-01", "gateway": "http://127.0.0.1:9/wsn/broker"}))
    return cfg


def device_modules() -> list[Path]:
    return sorted((ROOT / "device" / "wsn").rglob("*.py"))


def only_tools(tmp_path: Path, *names: str) -> str:
    """A PATH with the system's /usr/bin:/bin plus just these .venv tools."""
    d = tmp_path / ("only-" + "-".join(names))
    d.mkdir()
    for n in names:
        (d / n).symlink_to(VENV_BIN / n)
    return f"{d}:/usr/bin:/bin"


# --- general -----------------------------------------------------------------------------------


def test_help_explains_every_target_and_option() -> None:
    r = flash("--help")
    assert r.returncode == 0, r.stderr
    for word in (
        "esp32",
        "rp2",
        "unix",
        "qemu",
        "--config",
        "--port",
        "--firmware",
        "--chip",
        "--baud",
        "--drive",
        "--no-compile",
        "--mpy-cross",
        "--heap",
        "--32bit",
        "--micropython",
        "--no-build",
        "--timeout",
        "--dry-run",
        "0x1000",
        "RPI-RP2",
        "MICROPYPATH=.frozen:device",
        "Exit status",
    ):
        assert word in r.stdout, f"--help does not mention {word}"
    # Every option the parser accepts is documented.
    src = FLASH.read_text()
    parsed = set(re.findall(r"^\s+(--[a-z0-9-]+)\)", src, flags=re.MULTILINE))
    parsed |= {
        "--config",
        "--port",
        "--firmware",
        "--chip",
        "--baud",
        "--drive",
        "--mpy-cross",
        "--heap",
        "--micropython",
        "--timeout",
    }
    for opt in parsed:
        assert opt in r.stdout, f"{opt} is parsed but not in --help"
    assert flash("esp32", "--help").stdout == r.stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        ((), 2, "no target given"),
        (("arduino",), 2, "unknown target 'arduino'"),
        (("--dry-run", "esp32"), 2, "the target comes first"),
        (("esp32", "--frobnicate"), 2, "unknown option '--frobnicate'"),
        (("esp32", "--port"), 2, "--port needs a value"),
        (("qemu", "--config", "x.json"), 2, "--config does not apply to target qemu"),
        (("unix", "--port", "/dev/ttyUSB0"), 2, "--port does not apply to target unix"),
        (("rp2", "--chip", "esp32s3"), 2, "--chip does not apply to target rp2"),
        (("esp32", "--heap", "64K"), 2, "--heap does not apply to target esp32"),
        (("qemu", "--heap", "32K", "--dry-run"), 2, "--heap is 64K"),
    ],
)
def test_usage_errors(args: tuple[str, ...], code: int, message: str) -> None:
    r = flash(*args)
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert message in r.stderr, r.stderr
    assert not commands(r.stdout), "nothing may run on a usage error"


# --- esp32 -------------------------------------------------------------------------------------


def test_esp32_dry_run_sequence(config: Path) -> None:
    r = flash("esp32", "--dry-run", "--port", "/dev/ttyUSB0", "--config", str(config))
    assert r.returncode == 0, r.stderr
    cmds = commands(r.stdout)
    stage = str(STAGE / "esp32")
    assert cmds[0] == ["rm", "-rf", stage] and cmds[1] == ["mkdir", "-p", stage]
    # Ask the board which .mpy version it loads before compiling for it.
    assert cmds[2][:4] == ["mpremote", "connect", "/dev/ttyUSB0", "exec"]
    assert "_mpy" in cmds[2][4]
    compiled = [c for c in cmds if c[0] == "mpy-cross"]
    mods = device_modules()
    assert len(compiled) == len(mods) and mods
    for c, src in zip(compiled, mods, strict=True):
        rel = src.relative_to(ROOT / "device").as_posix()
        assert c == [
            "mpy-cross",
            "-march=xtensawin",
            "-s",
            rel,
            "-o",
            f"{stage}/{rel[:-3]}.mpy",
            str(src),
        ]
    tail = cmds[2 + len(compiled) + 1 :]
    mp = ["mpremote", "connect", "/dev/ttyUSB0"]
    assert [c[:3] for c in tail if c[0] == "mpremote"] == [mp] * len(
        [c for c in tail if c[0] == "mpremote"]
    )
    board_steps = [c[3:] for c in tail if c[0] == "mpremote"]
    assert board_steps[0][0] == "exec" and 'rm("wsn")' in board_steps[0][1]
    assert ["cp", "-r", f"{stage}/wsn", ":wsn"] in board_steps
    assert ["cp", str(config), ":config.json"] in board_steps
    assert ["cp", str(ROOT / "device" / "main.py"), ":main.py"] in board_steps
    assert board_steps[-1] == ["reset"]
    assert not any(c[0] == "esptool" for c in cmds), "no firmware asked for"


@pytest.mark.parametrize(
    ("chip", "offset", "march"),
    [
        ("esp32", "0x1000", "xtensawin"),
        ("esp32s2", "0x1000", "xtensawin"),
        ("esp32s3", "0x0", "xtensawin"),
        ("esp32c3", "0x0", "rv32imc"),
    ],
)
def test_esp32_firmware_erase_then_write_at_the_chips_offset(
    tmp_path: Path, config: Path, chip: str, offset: str, march: str
) -> None:
    fw = tmp_path / "ESP32_GENERIC-20250415-v1.25.0.bin"
    fw.write_bytes(b"\xe9" + bytes(255))
    r = flash(
        "esp32",
        "--dry-run",
        "--port",
        "/dev/ttyUSB0",
        "--config",
        str(config),
        "--firmware",
        str(fw),
        "--chip",
        chip,
        "--baud",
        "921600",
    )
    assert r.returncode == 0, r.stderr
    cmds = commands(r.stdout)
    base = ["esptool", "--chip", chip, "--port", "/dev/ttyUSB0", "--baud", "921600"]
    assert cmds[0] == [*base, "erase-flash"]
    assert cmds[1] == [*base, "write-flash", "-z", offset, str(fw)]
    assert all(f"-march={march}" in c for c in cmds if c[0] == "mpy-cross")


def test_esp32_without_port_is_refused(config: Path) -> None:
    r = flash("esp32", "--dry-run", "--config", str(config))
    assert r.returncode == 2 and "needs --port" in r.stderr and "/dev/ttyUSB0" in r.stderr


def test_esp32_missing_serial_port(config: Path) -> None:
    r = flash("esp32", "--port", "/dev/ttyUSB-none", "--config", str(config))
    assert r.returncode == 4 and "serial port /dev/ttyUSB-none not found" in r.stderr, r.stderr
    assert not commands(r.stdout)


def test_esp32_port_without_a_board(config: Path) -> None:
    # /dev/null exists but no MicroPython answers there: a clear message, no copy attempted.
    r = flash("esp32", "--port", "/dev/null", "--config", str(config), timeout=60)
    assert r.returncode == 4 and "no MicroPython board answers on /dev/null" in r.stderr, r.stderr
    assert not any(c[:1] == ["mpy-cross"] for c in commands(r.stdout))


@pytest.mark.parametrize("target", ["esp32", "rp2", "unix"])
def test_missing_config(tmp_path: Path, target: str) -> None:
    port = ["--port", "/dev/ttyUSB0"] if target == "esp32" else []
    r = flash(target, *port)
    assert r.returncode == 2 and "needs --config FILE" in r.stderr, r.stderr
    assert not commands(r.stdout)
    # A dry run still shows the sequence, with a placeholder and a note.
    r = flash(target, "--dry-run", *port)
    assert r.returncode == 0 and "a real run needs --config FILE" in r.stderr, r.stderr
    assert any("CONFIG.json" in c for c in commands(r.stdout)), r.stdout
    r = flash(target, "--dry-run", *port, "--config", str(tmp_path / "nope.json"))
    assert r.returncode == 2 and "nope.json' not found" in r.stderr, r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"device_id": ')
    r = flash(target, "--dry-run", *port, "--config", str(bad))
    assert r.returncode == 2 and "is not valid JSON" in r.stderr, r.stderr


def test_acceptance_dry_runs_as_written() -> None:
    """The issue's literal commands print the full sequences."""
    r = flash("esp32", "--dry-run", "--port", "/dev/ttyUSB0")
    assert r.returncode == 0, r.stderr
    steps = [c[3:] for c in commands(r.stdout) if c[:3] == ["mpremote", "connect", "/dev/ttyUSB0"]]
    assert ["cp", "CONFIG.json", ":config.json"] in steps and steps[-1] == ["reset"]
    r = flash("rp2", "--dry-run")
    assert r.returncode == 0, r.stderr
    steps = [c[3:] for c in commands(r.stdout) if c[:3] == ["mpremote", "connect", "auto"]]
    assert ["cp", "CONFIG.json", ":config.json"] in steps and steps[-1] == ["reset"]


@pytest.mark.parametrize(
    ("target", "port"),
    [("esp32", ("--port", "/dev/ttyUSB0")), ("rp2", ()), ("unix", ()), ("qemu", ())],
)
def test_dry_run_without_any_tool_prints_everything(
    tmp_path: Path, config: Path, target: str, port: tuple[str, ...]
) -> None:
    """Issue 11 point 10: no mpremote, mpy-cross, esptool, micropython or qemu on PATH."""
    bare = tmp_path / "bare"
    bare.mkdir()
    assert not any(shutil.which(t, path=f"{bare}:/usr/bin:/bin") for t in ("mpremote", "mpy-cross"))
    cfg = ("--config", str(config)) if target != "qemu" else ()
    fw = ("--firmware", str(tmp_path / "fw.bin")) if target == "esp32" else ()
    if fw:
        (tmp_path / "fw.bin").write_bytes(b"\xe9")
    r = flash(target, "--dry-run", *port, *cfg, *fw, path=f"{bare}:/usr/bin:/bin")
    assert r.returncode == 0, r.stdout + r.stderr
    cmds = commands(r.stdout)
    if target in ("esp32", "rp2"):
        names = [c[0] for c in cmds]
        assert "esptool" in names if fw else True
        assert names.count("mpy-cross") == len(device_modules())
        assert cmds[-1][-1] == "reset"
    elif target == "unix":
        assert cmds[-1][-2:] == ["device/main.py", str(config)]
    else:
        assert any("qemu_run.py" in " ".join(c) for c in cmds)


def test_missing_firmware_file_and_wrong_kind(tmp_path: Path, config: Path) -> None:
    r = flash(
        "esp32",
        "--dry-run",
        "--port",
        "/dev/ttyUSB0",
        "--config",
        str(config),
        "--firmware",
        str(tmp_path / "none.bin"),
    )
    assert r.returncode == 2 and "none.bin' not found" in r.stderr
    uf2 = tmp_path / "fw.uf2"
    uf2.write_bytes(b"UF2\n")
    r = flash(
        "esp32",
        "--dry-run",
        "--port",
        "/dev/ttyUSB0",
        "--config",
        str(config),
        "--firmware",
        str(uf2),
    )
    assert r.returncode == 2 and "is a .bin image" in r.stderr


def test_missing_tools_via_path(tmp_path: Path, config: Path) -> None:
    # No mpremote on PATH.
    r = flash("esp32", "--port", "/dev/null", "--config", str(config), path="/usr/bin:/bin")
    assert r.returncode == 3 and "mpremote not found on PATH" in r.stderr, r.stderr
    # mpremote but no mpy-cross.
    r = flash(
        "rp2", "--port", "/dev/null", "--config", str(config), path=only_tools(tmp_path, "mpremote")
    )
    assert r.returncode == 3 and "mpy-cross not found on PATH" in r.stderr, r.stderr
    # Firmware asked for, but no esptool: refused before anything touches the board.
    fw = tmp_path / "fw.bin"
    fw.write_bytes(b"\xe9")
    r = flash(
        "esp32",
        "--port",
        "/dev/null",
        "--config",
        str(config),
        "--firmware",
        str(fw),
        path=only_tools(tmp_path, "mpremote", "mpy-cross"),
    )
    assert r.returncode == 3 and "esptool not found on PATH" in r.stderr, r.stderr
    assert not commands(r.stdout)
    # An explicit tool that does not exist.
    r = flash(
        "esp32",
        "--port",
        "/dev/null",
        "--config",
        str(config),
        env={"MPREMOTE": str(tmp_path / "no-mpremote")},
    )
    assert r.returncode == 3 and "no-mpremote not found" in r.stderr


def test_no_compile_copies_sources(config: Path) -> None:
    r = flash(
        "esp32", "--dry-run", "--no-compile", "--port", "/dev/ttyUSB0", "--config", str(config)
    )
    assert r.returncode == 0, r.stderr
    cmds = commands(r.stdout)
    assert not any(c[0] == "mpy-cross" for c in cmds)
    assert ["cp", "-r", str(ROOT / "device" / "wsn"), str(STAGE / "esp32" / "wsn")] in cmds


def _run_printed_compile(out: str) -> Path:
    """Run the dry run's mkdir + mpy-cross lines for real; returns the staging dir."""
    stage: Path | None = None
    for c in commands(out):
        if c[:2] == ["mkdir", "-p"]:
            stage = Path(c[2])
            subprocess.run(["rm", "-rf", str(stage)], check=True)
            stage.mkdir(parents=True)
        elif c[0] == "mpy-cross":
            Path(c[c.index("-o") + 1]).parent.mkdir(parents=True, exist_ok=True)
            subprocess.run([str(VENV_BIN / "mpy-cross"), *c[1:]], check=True, timeout=60)
    assert stage is not None
    return stage


@pytest.mark.parametrize("target", ["esp32", "rp2"])
def test_compiled_mpy_files_import_on_micropython(config: Path, target: str) -> None:
    """The printed mpy-cross commands give .mpy files that real MicroPythons import (no .py)."""
    port = ["--port", "/dev/ttyUSB0"] if target == "esp32" else []
    r = flash(target, "--dry-run", *port, "--config", str(config))
    assert r.returncode == 0, r.stderr
    stage = _run_printed_compile(r.stdout)
    try:
        assert not list(stage.rglob("*.py"))
        core = sorted(
            ".".join(p.relative_to(stage).with_suffix("").parts).removesuffix(".__init__")
            for p in (stage / "wsn" / "core").rglob("*.mpy")
        )
        assert core
        script = f"for m in {core!r}:\n    __import__(m)\nprint('imported', len({core!r}))"
        interpreters = [VENV_BIN / "micropython", BIN / "micropython32"]
        for mp in interpreters:
            if not mp.exists():
                if IN_CI:
                    pytest.fail(f"{mp} missing")
                continue
            p = subprocess.run(
                [str(mp), "-c", script],
                capture_output=True,
                text=True,
                timeout=60,
                env=dict(os.environ, MICROPYPATH=f".frozen:{stage}"),
            )
            assert p.returncode == 0 and f"imported {len(core)}" in p.stdout, (
                f"{mp}: {p.stdout}{p.stderr}"
            )
    finally:
        subprocess.run(["rm", "-rf", str(stage)], check=True)


# --- rp2 (Pico W) ------------------------------------------------------------------------------


def test_rp2_dry_run_sequence(config: Path) -> None:
    r = flash("rp2", "--dry-run", "--config", str(config))
    assert r.returncode == 0, r.stderr
    cmds = commands(r.stdout)
    assert all(c[:3] == ["mpremote", "connect", "auto"] for c in cmds if c[0] == "mpremote")
    assert all("-march=armv6m" in c for c in cmds if c[0] == "mpy-cross")
    steps = [c[3:] for c in cmds if c[0] == "mpremote"]
    assert ["cp", str(config), ":config.json"] in steps and steps[-1] == ["reset"]
    assert not any(c[0] in ("cp", "esptool") and c[1].endswith(".uf2") for c in cmds)


def _pico_drive(tmp_path: Path) -> Path:
    drive = tmp_path / "RPI-RP2"
    drive.mkdir()
    (drive / "INFO_UF2.TXT").write_text("UF2 Bootloader v3.0\nModel: Raspberry Pi RP2\n")
    return drive


def test_rp2_firmware_is_copied_to_the_drive_first(tmp_path: Path, config: Path) -> None:
    uf2 = tmp_path / "RPI_PICO_W-20250415-v1.25.0.uf2"
    uf2.write_bytes(b"UF2\n" + bytes(508))
    drive = _pico_drive(tmp_path)
    r = flash(
        "rp2",
        "--dry-run",
        "--config",
        str(config),
        "--firmware",
        str(uf2),
        "--drive",
        str(drive),
        "--port",
        "/dev/ttyACM0",
    )
    assert r.returncode == 0, r.stderr
    cmds = commands(r.stdout)
    assert cmds[0] == ["cp", str(uf2), f"{drive}/"] and cmds[1] == ["sync"]
    assert "wait (up to 30 s)" in r.stdout
    assert all(c[:3] == ["mpremote", "connect", "/dev/ttyACM0"] for c in cmds if c[0] == "mpremote")


def test_rp2_firmware_copy_for_real_then_no_board(tmp_path: Path, config: Path) -> None:
    """Without --dry-run the .uf2 lands on the drive; then the missing board is reported."""
    uf2 = tmp_path / "fw.uf2"
    uf2.write_bytes(b"UF2\n" + bytes(508))
    drive = _pico_drive(tmp_path)
    r = flash(
        "rp2",
        "--config",
        str(config),
        "--firmware",
        str(uf2),
        "--drive",
        str(drive),
        "--port",
        "/dev/null",
        env={"RP2_WAIT": "1"},
    )
    assert (drive / "fw.uf2").read_bytes() == uf2.read_bytes()
    assert r.returncode == 4 and "did not come back on serial port /dev/null" in r.stderr, r.stderr


def test_rp2_drive_errors(tmp_path: Path, config: Path) -> None:
    uf2 = tmp_path / "fw.uf2"
    uf2.write_bytes(b"UF2\n")
    not_pico = tmp_path / "usbstick"
    not_pico.mkdir()
    r = flash(
        "rp2",
        "--config",
        str(config),
        "--firmware",
        str(uf2),
        "--drive",
        str(not_pico),
        "--port",
        "/dev/null",
    )
    assert r.returncode == 4 and "not an RPI-RP2 drive" in r.stderr and "BOOTSEL" in r.stderr
    assert not list(not_pico.iterdir())
    bin_fw = tmp_path / "fw.bin"
    bin_fw.write_bytes(b"\xe9")
    r = flash("rp2", "--dry-run", "--config", str(config), "--firmware", str(bin_fw))
    assert r.returncode == 2 and "is a .uf2 file" in r.stderr


def test_rp2_without_a_pico(config: Path) -> None:
    r = flash("rp2", "--config", str(config))
    assert r.returncode == 4 and "no Raspberry Pi Pico" in r.stderr, r.stderr


# --- unix --------------------------------------------------------------------------------------


def test_unix_dry_run(config: Path) -> None:
    r = flash("unix", "--dry-run", "--config", str(config), "--heap", "64K")
    assert r.returncode == 0, r.stderr
    assert commands(r.stdout) == [
        ["cd", str(ROOT)],
        [
            "env",
            "MICROPYPATH=.frozen:device",
            "micropython",
            "-X",
            "heapsize=64K",
            "device/main.py",
            str(config),
        ],
    ]
    r = flash("unix", "--dry-run", "--config", str(config), "--32bit")
    assert commands(r.stdout)[1][2] == str(BIN / "micropython32")
    assert "-X" not in commands(r.stdout)[1]


def test_unix_option_errors(tmp_path: Path, config: Path) -> None:
    r = flash("unix", "--config", str(config), "--heap", "lots")
    assert r.returncode == 2 and "--heap takes a size" in r.stderr
    r = flash("unix", "--config", str(config), "--32bit", "--micropython", "/x")
    assert r.returncode == 2 and "exclude each other" in r.stderr
    r = flash("unix", "--config", str(config), "--micropython", str(tmp_path / "mp"))
    assert r.returncode == 3 and "not found" in r.stderr
    r = flash("unix", "--config", str(config), path="/usr/bin:/bin")
    assert r.returncode == 3 and "micropython not found on PATH" in r.stderr


def _make_exe(path: Path, body: str) -> Path:
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_unix_runs_main_py_with_the_right_path_and_heap(tmp_path: Path, config: Path) -> None:
    """flash.sh execs the interpreter from the repo root with MICROPYPATH and -X heapsize.

    A real MicroPython stands in for the device's main.py only as far as argv/env go: the
    interpreter is wrapped to print what it got and then run `import wsn` for real.
    """
    mp = VENV_BIN / "micropython"
    wrapper = _make_exe(
        tmp_path / "mp-wrapper",
        (
            "#!/bin/sh\n"
            'echo "cwd=$(pwd) path=$MICROPYPATH args=$*"\n'
            f"exec {mp} -X heapsize=64K -c \"import wsn; print('wsn', wsn.__version__)\"\n"
        ),
    )
    r = flash("unix", "--config", str(config), "--heap", "64K", "--micropython", str(wrapper))
    assert r.returncode == 0, r.stdout + r.stderr
    assert (
        f"cwd={ROOT} path=.frozen:device args=-X heapsize=64K device/main.py {config}" in r.stdout
    )
    assert "wsn " in r.stdout


# --- qemu --------------------------------------------------------------------------------------


def _need_artifact(name: str) -> None:
    if not (BIN / name).is_file():
        msg = f"{BIN / name} missing: run bash scripts/build_micropython.sh"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)


@pytest.mark.qemu
@pytest.mark.parametrize("heap", ["", "64K"])
def test_qemu_boots_and_runs_the_device_self_test(heap: str) -> None:
    _need_artifact("qemu-mps2-an385-64k.elf" if heap else "qemu-mps2-an385.elf")
    r = flash("qemu", *(["--heap", heap] if heap else []), timeout=900)
    out = r.stdout + r.stderr
    summaries = [line for line in r.stdout.splitlines() if SUMMARY in line and "failed" in line]
    flash_summaries.append(
        f"flash.sh qemu {'--heap ' + heap if heap else '(default heap)'}: " + " | ".join(summaries)
    )
    assert r.returncode == 0, f"flash.sh qemu failed: {summaries}\n{out[-6000:]}"
    assert "booted, serial on /dev/pts/" in r.stdout
    assert summaries and all(s.endswith(" 0 failed") for s in summaries), out[-6000:]
    if list((ROOT / "tests" / "device" / "core").glob("test_*.py")):
        assert "== device core unit tests" in r.stdout, "the core tests were not run"


def test_qemu_dry_run_and_missing_qemu(tmp_path: Path) -> None:
    r = flash("qemu", "--dry-run", "--heap", "64K")
    assert r.returncode == 0, r.stderr
    cmds = commands(r.stdout)
    assert cmds[0] == ["bash", str(ROOT / "scripts" / "build_micropython.sh"), "--only", "qemu"]
    assert "-serial pty -kernel" in r.stdout and "qemu-mps2-an385-64k.elf" in r.stdout
    assert cmds[-1][-8:-2] == [
        "--firmware",
        str(BIN / "qemu-mps2-an385-64k.elf"),
        "--tests",
        "all",
        "--timeout",
        "300",
    ]
    r = flash("qemu", "--no-build", env={"QEMU": str(tmp_path / "no-qemu")})
    assert r.returncode == 3 and "no-qemu not found" in r.stderr and "qemu-system-arm" in r.stderr
    r = flash("qemu", "--no-build", path="/usr/bin:/bin")
    assert r.returncode == 3 and "mpremote not found on PATH" in r.stderr


def test_qemu_failing_self_test_fails_flash_sh(tmp_path: Path) -> None:
    """A board that never opens its pty makes flash.sh qemu fail, clearly and without hanging."""
    _need_artifact("qemu-mps2-an385.elf")
    fake = _make_exe(
        tmp_path / "qemu-system-arm", "#!/bin/sh\necho 'qemu: no pty today'\nexec sleep 600\n"
    )
    r = flash("qemu", "--no-build", env={"QEMU": str(fake), "QEMU_BOOT_TIMEOUT": "2"}, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "no 'char device redirected" in r.stderr and "self-test on QEMU failed" in r.stderr


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_for_line(proc: subprocess.Popen[str], needle: str, timeout: float = 30) -> list[str]:
    """Read proc's output until a line contains needle; bounded, never hangs."""
    assert proc.stdout is not None
    stream = proc.stdout
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in stream], daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while not any(needle in x for x in seen):
        left = deadline - time.monotonic()
        if left <= 0 or (proc.poll() is not None and lines.empty()):
            pytest.fail(f"no line with {needle!r}; output:\n" + "".join(seen))
        try:
            seen.append(lines.get(timeout=min(left, 0.5)))
        except queue.Empty:
            continue
    return seen


def _http_status(url: str) -> int:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            status: int = resp.status
            return status
    except urllib.error.HTTPError as err:
        return err.code


@pytest.mark.parametrize("bits", ["64", "32"])
def test_unix_really_starts_the_device(tmp_path: Path, bits: str) -> None:
    """`flash.sh unix` starts device/main.py; its HTTP producer answers on 127.0.0.1."""
    if bits == "32":
        _need_artifact("micropython32")
    base = json.loads((ROOT / "device" / "config.example.json").read_text())
    port = _free_port()
    base.update(
        http_host="127.0.0.1",
        http_port=port,
        advertise_host="127.0.0.1",
        gateway="http://127.0.0.1:9/wsn/broker",  # nothing listens: gateway down
        sensors=[{"topic": "heartbeat", "kind": "heartbeat", "period_s": 60}],
    )
    cfg = tmp_path / "unix.json"
    cfg.write_text(json.dumps(base))
    e = dict(os.environ, PATH=f"{VENV_BIN}:{os.environ['PATH']}")
    args = ["bash", str(FLASH), "unix", "--config", str(cfg)]
    if bits == "32":
        args.append("--32bit")
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e, cwd=tmp_path
    )  # any cwd: flash.sh runs from the repo root
    try:
        _wait_for_line(proc, f"http://127.0.0.1:{port}/wsn/producer")
        assert 200 <= _http_status(f"http://127.0.0.1:{port}/wsn/producer") < 600
    finally:
        proc.kill()
        proc.wait()


# --- a whole deploy, over a serial line, to a board stand-in ----------------------------------


def _board_micropython() -> Path:
    mp = BIN / "micropython32"  # the 1.25 build: closest to a board's firmware
    return mp if mp.exists() else VENV_BIN / "micropython"


@pytest.mark.parametrize("target", ["esp32", "rp2"])
def test_deploy_over_serial_then_the_deployed_tree_boots(tmp_path: Path, target: str) -> None:
    """flash.sh (no --dry-run) against a pty speaking MicroPython's raw REPL: the board's
    flash ends up with wsn/**.mpy only (stale files gone), /config.json, /main.py,
    /topics.xml, and was reset; then that tree boots the device, which answers HTTP."""
    from fake_board import FakeBoard

    flash_root = tmp_path / "board-flash"
    (flash_root / "wsn" / "core").mkdir(parents=True)
    (flash_root / "wsn" / "core" / "xml.py").write_text("raise ImportError('stale source')\n")
    (flash_root / "keep.txt").write_text("user data\n")
    port = _free_port()
    cfg = json.loads((ROOT / "device" / "config.example.json").read_text())
    cfg.update(
        http_host="127.0.0.1",
        http_port=port,
        advertise_host="127.0.0.1",
        gateway="http://127.0.0.1:9/wsn/broker",
        sensors=[{"topic": "heartbeat", "kind": "heartbeat", "period_s": 60}],
    )
    cfg_file = tmp_path / "dev.json"
    cfg_file.write_text(json.dumps(cfg))
    with FakeBoard(flash_root, _board_micropython()) as board:
        r = flash(target, "--port", board.port, "--config", str(cfg_file), timeout=300)
        deadline = time.monotonic() + 10  # `mpremote reset` does not wait for the board
        while board.resets == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        resets = board.resets
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-5000:]
    assert resets == 1, out[-3000:]
    deployed = sorted(
        p.relative_to(flash_root).as_posix()
        for p in flash_root.rglob("*")
        if p.is_file() and p.name != ".fake-board-resets"
    )
    want_mpy = sorted(
        f"{p.relative_to(ROOT / 'device').as_posix()[:-3]}.mpy" for p in device_modules()
    )
    extras = [
        "config.json",
        "keep.txt",
        "main.py",
        *sorted(p.name for p in (ROOT / "device").glob("*.xml")),
    ]
    assert deployed == sorted(want_mpy + extras)
    assert json.loads((flash_root / "config.json").read_text()) == cfg
    assert (flash_root / "main.py").read_bytes() == (ROOT / "device" / "main.py").read_bytes()
    for mpy in want_mpy:
        assert (flash_root / mpy).read_bytes()[:2] == b"M\x06", f"{mpy} is not .mpy v6"

    # Boot what was deployed, the way the board does (main.py, config.json next to it).
    proc = subprocess.Popen(
        [str(_board_micropython()), "main.py", "config.json"],
        cwd=flash_root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, MICROPYPATH=".frozen"),
    )
    try:
        _wait_for_line(proc, f"http://127.0.0.1:{port}/wsn/producer")
        assert 200 <= _http_status(f"http://127.0.0.1:{port}/wsn/producer") < 600
    finally:
        proc.kill()
        proc.wait()


def test_mpy_version_mismatch_stops_before_copying(tmp_path: Path, config: Path) -> None:
    """The board is asked which .mpy version it loads; another mpy-cross is refused."""
    from fake_board import FakeBoard

    old = _make_exe(
        tmp_path / "mpy-cross-old",
        (
            "#!/bin/sh\n"
            'if [ "$1" = --version ]; then\n'
            '  echo "MicroPython v1.18 on 2022-01-17; mpy-cross emitting mpy v5"; exit 0\n'
            "fi\nexit 1\n"
        ),
    )
    flash_root = tmp_path / "board-flash"
    with FakeBoard(flash_root, _board_micropython()) as board:
        r = flash(
            "esp32",
            "--port",
            board.port,
            "--config",
            str(config),
            "--mpy-cross",
            str(old),
            timeout=120,
        )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "the board loads .mpy v6 but" in r.stderr and "emits v5" in r.stderr, r.stderr
    assert not any(c[0] == str(old) for c in commands(r.stdout))
    assert not list(flash_root.iterdir()), "nothing may be copied"
