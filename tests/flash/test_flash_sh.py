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

from tests.device.packages import mpy_cross_args

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
    cfg.write_text(
        json.dumps(
            {"device_id": "test-01", "http_port": 8081, "gateway": "http://127.0.0.1:9/wsn/broker"}
        )
    )
    return cfg


def package_modules(*packages: str) -> list[Path]:
    """The modules of the default package (device/package.json) and of the optional packages
    named (their directories under device/), in install order."""
    out = []
    for pj in [ROOT / "device" / "package.json"] + [
        ROOT / "device" / p / "package.json" for p in packages
    ]:
        for _, src in json.loads(pj.read_text())["urls"]:
            f = (pj.parent / src).resolve()
            if f.suffix == ".py" and f.name != "main.py":
                out.append(f)
    return out


def session(cmds: list[list[str]]) -> list[list[str]]:
    """The one mpremote session that installs: its commands, split at `+`."""
    (c,) = [c for c in cmds if c[0] == "mpremote" and "mip" in c]
    steps: list[list[str]] = [[]]
    for a in c[3:]:
        if a == "+":
            steps.append([])
        else:
            steps[-1].append(a)
    return steps


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
        "--with",
        "--topics",
        "--monitor",
        "config.schema.json",
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
        "--with",
        "--topics",
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
        (("unix", "--monitor"), 2, "--monitor does not apply to target unix"),
        (("unix", "--with", "admin"), 2, "--with does not apply to target unix"),
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
    # Ask the board which .mpy version it loads before compiling for it.
    assert cmds[0][:4] == ["mpremote", "connect", "/dev/ttyUSB0", "exec"]
    assert "_mpy" in cmds[0][4]
    assert cmds[1] == ["rm", "-rf", stage] and cmds[2] == ["mkdir", "-p", stage]
    assert cmds[3][1:] == [str(ROOT / "tools/micropython/stage_packages.py"), stage, "--mpy"]
    compiled = [c for c in cmds if c[0] == "mpy-cross"]
    mods = package_modules()  # the config needs no optional package
    assert len(compiled) == len(mods) and mods
    for c, src in zip(compiled, mods, strict=True):
        rel = src.relative_to(ROOT / "device").as_posix()
        # compiled as the tests and the benches compile them
        assert c == [
            "mpy-cross",
            "-march=xtensawin",
            *mpy_cross_args(rel),
            "-o",
            f"{stage}/device/{rel[:-3]}.mpy",
            str(src),
        ]
    # one mpremote session installs: clean, mip install of the staged packages, config, reset
    assert len([c for c in cmds if c[0] == "mpremote"]) == 2
    steps = session(cmds)
    assert steps[0][0] == "exec" and 'rm("wsn")' in steps[0][1]
    assert steps[1] == ["mip", "install", "--target", ".", f"{stage}/device/package.json"]
    assert steps[2] == ["cp", str(config), ":config.json"]
    assert steps[-1] == ["reset"]
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
    cmds = commands(r.stdout)
    assert all(c[:3] == ["mpremote", "connect", "/dev/ttyUSB0"] for c in cmds if c[0] == "mpremote")
    steps = session(cmds)
    assert ["cp", "CONFIG.json", ":config.json"] in steps and steps[-1] == ["reset"]
    r = flash("rp2", "--dry-run")
    assert r.returncode == 0, r.stderr
    cmds = commands(r.stdout)
    assert all(c[:3] == ["mpremote", "connect", "auto"] for c in cmds if c[0] == "mpremote")
    steps = session(cmds)
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
        assert names.count("mpy-cross") == len(package_modules())
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
    stage = STAGE / "esp32"
    for src in package_modules():
        rel = src.relative_to(ROOT)
        assert ["cp", str(src), f"{stage}/{rel}"] in cmds
    assert "--mpy" not in cmds[3]


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
    tree = stage / "device"
    try:
        assert not list((tree / "wsn").rglob("*.py"))
        core = sorted(
            ".".join(p.relative_to(tree).with_suffix("").parts).removesuffix(".__init__")
            for p in (tree / "wsn" / "core").rglob("*.mpy")
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
                env=dict(os.environ, MICROPYPATH=f".frozen:{tree}"),
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
    steps = session(cmds)
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


def _mpremote_log(tmp_path: Path) -> tuple[Path, Path]:
    """An MPREMOTE that logs each invocation's arguments (one line each, newlines in them as
    spaces) and runs the real
    mpremote, except `repl` (the board stand-in has no interactive REPL): -> (tool, log)."""
    log = tmp_path / "mpremote.log"
    tool = _make_exe(
        tmp_path / "mpremote-logged",
        "#!/bin/sh\n"
        f'printf "%s" "$*" | tr "\\n" " " >> "{log}"; echo >> "{log}"\n'
        'case " $* " in *" repl "*) exit 0 ;; esac\n'
        f'exec "{VENV_BIN / "mpremote"}" "$@"\n',
    )
    return tool, log


@pytest.mark.parametrize("target", ["esp32", "rp2"])
def test_deploy_over_serial_then_the_deployed_tree_boots(tmp_path: Path, target: str) -> None:
    """flash.sh (no --dry-run) against a pty speaking MicroPython's raw REPL: in one mpremote
    session (after the .mpy version probe) the board gets the packages the config needs as
    .mpy (mip, from the staged package.json files; stale files gone), /config.json, /main.py,
    /topics.xml, and is reset; with --monitor flash.sh then follows its console. That tree
    boots the device, which answers HTTP."""
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
        secret="a-long-enough-secret",
    )
    cfg_file = tmp_path / "dev.json"
    cfg_file.write_text(json.dumps(cfg))
    tool, log = _mpremote_log(tmp_path)
    with FakeBoard(flash_root, _board_micropython()) as board:
        r = flash(
            target,
            "--port",
            board.port,
            "--config",
            str(cfg_file),
            "--monitor",
            env={"MPREMOTE": str(tool)},
            timeout=300,
        )
        deadline = time.monotonic() + 10  # `mpremote reset` does not wait for the board
        while board.resets == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        resets = board.resets
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-5000:]
    assert resets == 1, out[-3000:]
    # the version probe, one session, then the console
    calls = log.read_text().splitlines()
    assert len(calls) == 3, calls
    assert " mip install " in calls[1] and calls[1].endswith(" + reset")
    assert calls[2] == f"connect {board.port} repl"
    deployed = sorted(
        p.relative_to(flash_root).as_posix()
        for p in flash_root.rglob("*")
        if p.is_file() and p.name != ".fake-board-resets"
    )
    # the config has a secret (wsn/admin) and Wi-Fi (wsn/wifi)
    want_mpy = sorted(
        f"{p.relative_to(ROOT / 'device').as_posix()[:-3]}.mpy"
        for p in package_modules("wsn/admin", "wsn/wifi")
    )
    assert deployed == sorted([*want_mpy, "config.json", "keep.txt", "main.py", "topics.xml"])
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
        # the management page is there (wsn/admin), behind the secret
        assert _http_status(f"http://127.0.0.1:{port}/status") == 401
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


# --- the config, checked before anything is flashed -------------------------------------------


def _config(tmp_path: Path, **over: object) -> Path:
    cfg = {"device_id": "test-01", "http_port": 8081, **over}
    f = tmp_path / "c.json"
    f.write_text(json.dumps(cfg))
    return f


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"sensors": [{"topic": "lux"}]}, "sensors[0].topic: 'lux' is not a topic of"),
        ({"http_port": "8081"}, 'http_port: "8081" is not integer'),
        ({"http_port": 70000}, "http_port: 70000 is above 65535"),
        ({"sample_perod_s": 5}, "sample_perod_s: not a setting the device reads (did you mean"),
        ({"sensors": [{"topic": "light", "kind": "adc"}]}, "an adc sensor needs its pin"),
        ({"mode": "sleepy"}, "sleepy mode sends its readings to a gateway"),
        ({"limits": {"queue_len": 0}}, "limits.queue_len: 0 is below 1"),
        ({"gateway": "https://gw/wsn/broker"}, "gateway: 'https://gw/wsn/broker' does not match"),
    ],
)
@pytest.mark.parametrize("target", ["esp32", "unix"])
def test_a_config_the_device_would_refuse_stops_flash_sh(
    tmp_path: Path, over: dict[str, object], message: str, target: str
) -> None:
    port = ["--port", "/dev/ttyUSB0"] if target == "esp32" else []
    r = flash(target, "--dry-run", *port, "--config", str(_config(tmp_path, **over)))
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert "config.schema.json" in r.stderr
    assert not commands(r.stdout)


def test_the_example_config_passes_with_warnings() -> None:
    r = flash(
        "esp32", "--dry-run", "--port", "/dev/ttyUSB0", "--config", "device/config.example.json"
    )
    assert r.returncode == 0, r.stderr
    assert "warning: secret: still the example's 'change-me'" in r.stderr
    assert "warning: wifi.password: still the example's 'my-password'" in r.stderr
    # what it needs: board sensors, Wi-Fi, the secret's pages
    steps = session(commands(r.stdout))
    assert [a.rsplit("/device/", 1)[1] for a in steps[1][4:]] == [
        "package.json",
        "wsn/admin/package.json",
        "wsn/sensors/package.json",
        "wsn/wifi/package.json",
    ]


def test_own_topics_file_is_checked_against_and_copied(tmp_path: Path) -> None:
    topics = tmp_path / "acme.xml"
    topics.write_text(
        '<wstop:TopicNamespace xmlns:wstop="http://docs.oasis-open.org/wsn/t-1" '
        'targetNamespace="urn:acme:t"><wstop:Topic name="flow"/></wstop:TopicNamespace>'
    )
    cfg = _config(tmp_path, sensors=[{"topic": "flow"}])
    args = ("esp32", "--dry-run", "--port", "/dev/ttyUSB0", "--config", str(cfg))
    r = flash(*args)
    assert r.returncode == 2 and "'flow' is not a topic of urn:wsn-edge:device-topics" in r.stderr
    r = flash(*args, "--topics", str(topics))
    assert r.returncode == 0, r.stderr
    assert ["cp", str(topics), ":topics.xml"] in session(commands(r.stdout))


def test_with_all_installs_every_package(config: Path) -> None:
    r = flash("rp2", "--dry-run", "--config", str(config), "--with", "all", "--with", "current")
    assert r.returncode == 0, r.stderr
    cmds = commands(r.stdout)
    every = sorted(p for p in (ROOT / "device" / "wsn").rglob("*.py"))
    assert sorted(Path(c[-1]) for c in cmds if c[0] == "mpy-cross") == every
    jsons = session(cmds)[1][4:]
    assert len(jsons) == len(list((ROOT / "device").rglob("package.json")))
    r = flash("rp2", "--dry-run", "--config", str(config), "--with", "nope")
    assert r.returncode == 2 and "no package 'nope'" in r.stderr


def test_monitor_follows_the_console_after_the_reset(config: Path) -> None:
    r = flash("esp32", "--dry-run", "--port", "/dev/ttyUSB0", "--config", str(config), "--monitor")
    assert r.returncode == 0, r.stderr
    cmds = commands(r.stdout)
    assert session(cmds)[-1] == ["reset"]
    assert cmds[-1] == ["mpremote", "connect", "/dev/ttyUSB0", "repl"]
