#!/usr/bin/env bash
# Build MicroPython from Debian's source package (trixie), for the device tests:
#   .cache/micropython/bin/qemu-mps2-an385.elf      QEMU MPS2-AN385 (Cortex-M3) firmware with the
#                                                   device's sans-I/O core + its unit tests frozen in
#   .cache/micropython/bin/qemu-mps2-an385-64k.elf  the same with a 64 KiB heap (small-board RAM)
#   .cache/micropython/bin/micropython32            32-bit unix port, single-precision floats
#   .cache/micropython/bin/mpy-cross                mpy-cross of the same version
#
# Idempotent and cached under .cache/micropython/<debian-version>/: the source is fetched once
# (no network afterwards), mpy-cross is built once, each firmware is rebuilt only when the hash of
# the files frozen into it (or the manifest / make options) changes. Quiet on success apart from a
# few progress lines; on failure prints the failing command and the tail of its output.
#
# Never touches the machine's apt configuration: `apt-get source` runs with a temporary sources
# file and private lists/cache directories passed as -o Dir::... options.
#
#   bash scripts/build_micropython.sh              # fetch (if needed) + build (if needed)
#   bash scripts/build_micropython.sh --refresh    # ask Debian again for the newest trixie source
#   bash scripts/build_micropython.sh --force      # rebuild the firmware and the unix port
#   bash scripts/build_micropython.sh --only qemu|unix32
#   bash scripts/build_micropython.sh --print-key qemu|qemu-64k   # print a firmware's cache key
#   bash scripts/build_micropython.sh --print-frozen     # list the files frozen into the firmware
# Environment: JOBS (make -j, default 2), WSN_MP_CACHE (cache dir, default .cache/micropython),
# WSN_MP_VERSION (Debian source version to fetch, default 1.25.0+ds-1; the newest trixie one if
# Debian no longer offers it).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=${WSN_MP_CACHE:-$ROOT/.cache/micropython}
JOBS=${JOBS:-2}
SUITE=trixie
PIN=${WSN_MP_VERSION:-1.25.0+ds-1}   # the Debian version the project is tested with
REFRESH=0
FORCE=0
ONLY=all
PRINT_KEY=""

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --refresh) REFRESH=1 ;;
    --force) FORCE=1 ;;
    --only) shift; ONLY=${1:-}; case "$ONLY" in qemu|unix32) ;; *) echo "build_micropython.sh: --only takes qemu or unix32" >&2; exit 2 ;; esac ;;
    --print-key) shift; PRINT_KEY=${1:-qemu} ;;
    --print-frozen) frozen_only=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "build_micropython.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

log() { printf '[micropython] %s\n' "$*"; }
die() { printf '[micropython] ERROR: %s\n' "$*" >&2; exit 1; }
rel() { printf '%s' "${1#"$ROOT"/}"; }

# run LOGFILE CMD...: run quietly; on failure show the command and the tail of its output.
run() {
  local logf=$1 st=0; shift
  mkdir -p "$(dirname "$logf")"
  "$@" >"$logf" 2>&1 || st=$?
  if [ "$st" != 0 ]; then
    {
      echo "[micropython] FAILED (exit status $st): $*"
      echo "[micropython] last 40 lines of $(rel "$logf"):"
      tail -n 40 "$logf" | sed 's/^/    /'
    } >&2
    exit 1
  fi
}

need_tool() {  # need_tool TOOL DEBIAN-PACKAGE
  command -v "$1" >/dev/null 2>&1 || die "'$1' not found: install the Debian package $2 (bash scripts/setup.sh --micropython does)"
}

# --- files frozen into the QEMU firmware (must match tools/micropython/qemu_manifest.py) -------
frozen_files() {
  {
    [ -f device/wsn/__init__.py ] && echo device/wsn/__init__.py
    [ -d device/wsn/core ] && find device/wsn/core -name '*.py'
    [ -f tests/device/mp_runner.py ] && echo tests/device/mp_runner.py
    [ -d tests/device/core ] && find tests/device/core -maxdepth 1 -name 'test_*.py'
    find tests/qemu/mp -maxdepth 1 -name '*.py'
    echo tools/micropython/qemu_manifest.py
  } | LC_ALL=C sort
}

qemu_key() {  # qemu_key EXTRA-MAKE-ARGS...
  { echo "version=$VERSION args=$*"; frozen_files | while read -r f; do echo "== $f"; cat "$f"; done; } \
    | sha256sum | cut -c1-16
}

if [ "${frozen_only:-0}" = 1 ]; then frozen_files; exit 0; fi
if [ -n "$PRINT_KEY" ]; then
  VERSION=$(cat "$CACHE/current-version" 2>/dev/null || echo none)
  case "$PRINT_KEY" in
    qemu) qemu_key ;;
    qemu-64k) qemu_key MICROPY_HEAP_SIZE=65536 ;;
    *) die "--print-key takes qemu or qemu-64k" ;;
  esac
  exit 0
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
if ! flock -n 9; then
  log "another build holds $(rel "$CACHE")/.lock; waiting for it"
  flock 9
fi
T0=$(date +%s)

# --- 1. Debian source ---------------------------------------------------------------------------
fetch_source() {
  need_tool apt-get apt
  need_tool dpkg-source dpkg-dev
  local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [ -f "$keyring" ] || die "$keyring missing: install the Debian package debian-archive-keyring"
  local apt=$CACHE/apt
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial"
  printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: %s\nComponents: main\nSigned-By: %s\n' \
    "$SUITE" "$keyring" >"$apt/$SUITE-src.sources"
  local A=(-o "Dir::Etc::SourceList=$apt/$SUITE-src.sources" -o Dir::Etc::SourceParts=/dev/null
           -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o Debug::NoLocking=1)
  log "fetching the index of Debian $SUITE sources (private apt dirs under $(rel "$apt"))"
  run "$apt/update.log" apt-get "${A[@]}" update
  local offered
  offered=$(apt-cache "${A[@]}" showsrc micropython 2>/dev/null | awk '/^Version:/{print $2}' | sort -uV)
  [ -n "$offered" ] || die "Debian $SUITE has no micropython source package (see $(rel "$apt")/update.log)"
  if printf '%s\n' "$offered" | grep -qxF "$PIN"; then
    VERSION=$PIN
  else
    VERSION=$(printf '%s\n' "$offered" | tail -n1)
    log "Debian $SUITE no longer offers micropython $PIN (tested); using $VERSION"
  fi
  local dir=$CACHE/$VERSION
  if [ -f "$dir/source.ok" ]; then
    log "Debian micropython $VERSION already fetched"
  else
    log "fetching Debian source micropython $VERSION (about 6 MB)"
    rm -rf "$dir/src"; mkdir -p "$dir/src"
    (cd "$dir/src" && run "$dir/source.log" apt-get "${A[@]}" source "micropython=$VERSION")
    local d
    d=$(find "$dir/src" -mindepth 1 -maxdepth 1 -type d -name 'micropython-*' | head -n1)
    [ -n "$d" ] && [ -d "$d/ports/qemu" ] || die "unpacked source has no ports/qemu (see $(rel "$dir")/source.log)"
    basename "$d" >"$dir/source.ok"
  fi
  echo "$VERSION" >"$CACHE/current-version"
}

if [ "$REFRESH" = 0 ] && [ -f "$CACHE/current-version" ] && [ -f "$CACHE/$(cat "$CACHE/current-version")/source.ok" ]; then
  VERSION=$(cat "$CACHE/current-version")
  log "reusing Debian source micropython $VERSION ($(rel "$CACHE/$VERSION/src"), no network)"
else
  fetch_source
fi
VDIR=$CACHE/$VERSION
M=$VDIR/src/$(cat "$VDIR/source.ok")
BIN=$CACHE/bin
mkdir -p "$BIN"
echo "$VERSION" >"$BIN/VERSION"

need_tool make make
need_tool gcc gcc

# install_bin SRC NAME: atomically put SRC at bin/NAME (a copy, so bin/ survives a version change)
install_bin() { cp -f "$1" "$BIN/.$2.tmp" && mv -f "$BIN/.$2.tmp" "$BIN/$2"; }

# --- 2. mpy-cross (the QEMU build needs it; also a board-matched mpy-cross for flash.sh) ---------
if [ -x "$M/mpy-cross/build/mpy-cross" ]; then
  log "reusing mpy-cross ($(rel "$M")/mpy-cross/build/mpy-cross)"
else
  log "building mpy-cross (make -j$JOBS)"
  run "$VDIR/mpy-cross.log" make -C "$M/mpy-cross" -j"$JOBS"
fi
install_bin "$M/mpy-cross/build/mpy-cross" mpy-cross

# --- 3. QEMU firmware: MPS2-AN385 with the device core + its unit tests frozen in ----------------
build_qemu() {  # build_qemu OUTPUT-NAME BUILD-SUBDIR EXTRA-MAKE-ARGS...
  local name=$1 sub=$2; shift 2
  local build=$VDIR/$sub key
  key=$(qemu_key "$@")
  if [ "$FORCE" = 0 ] && [ -f "$build/firmware.elf" ] && [ "$(cat "$build/.wsn-key" 2>/dev/null)" = "$key" ]; then
    log "reusing $name (frozen files unchanged, key $key)"
  else
    log "building $name ${*:+($*) }(frozen-files key $key, make -j$JOBS)"
    rm -f "$build/.wsn-key"
    # make decides by mtimes, the key by content: freeze again from scratch, so a source file
    # older than its last frozen .mpy (restored with an old mtime, e.g. by a checkout of an
    # older commit and back) is not skipped with the old bytecode frozen in (as fwbuild.py)
    rm -rf "$build/frozen_mpy" "$build/frozen_content.c"
    run "$VDIR/$sub.log" make -C "$M/ports/qemu" -j"$JOBS" BOARD=MPS2_AN385 BUILD="$build" \
      FROZEN_MANIFEST="$ROOT/tools/micropython/qemu_manifest.py" "$@"
    echo "$key" >"$build/.wsn-key"
  fi
  install_bin "$build/firmware.elf" "$name"
  echo "$key" >"$BIN/$name.key"
}

if [ "$ONLY" = all ] || [ "$ONLY" = qemu ]; then
  need_tool arm-none-eabi-gcc gcc-arm-none-eabi
  [ -f /usr/lib/arm-none-eabi/newlib/libc.a ] || [ -d /usr/lib/arm-none-eabi/include ] \
    || die "newlib for arm-none-eabi missing: install the Debian package libnewlib-arm-none-eabi"
  build_qemu qemu-mps2-an385.elf build-qemu
  build_qemu qemu-mps2-an385-64k.elf build-qemu-64k MICROPY_HEAP_SIZE=65536
fi

# --- 4. 32-bit single-precision unix port -------------------------------------------------------
if [ "$ONLY" = all ] || [ "$ONLY" = unix32 ]; then
  [ -f "$(gcc -m32 -print-libgcc-file-name 2>/dev/null)" ] \
    || die "32-bit C libraries missing (gcc -m32): install the Debian package gcc-multilib"
  U_ARGS=(VARIANT=standard MICROPY_PY_FFI=0 MICROPY_PY_BTREE=0 MICROPY_PY_SSL=0 MICROPY_FORCE_32BIT=1
          "CFLAGS_EXTRA=-DMICROPY_FLOAT_IMPL=MICROPY_FLOAT_IMPL_FLOAT"
          FROZEN_MANIFEST="$ROOT/tools/micropython/unix32_manifest.py")
  ubuild=$VDIR/build-unix32
  ukey=$({ echo "version=$VERSION ${U_ARGS[*]}"; cat tools/micropython/unix32_manifest.py; } | sha256sum | cut -c1-16)
  if [ "$FORCE" = 0 ] && [ -x "$ubuild/micropython" ] && [ "$(cat "$ubuild/.wsn-key" 2>/dev/null)" = "$ukey" ]; then
    log "reusing micropython32 (key $ukey)"
  else
    log "building micropython32 (32-bit, float32, make -j$JOBS)"
    rm -f "$ubuild/.wsn-key"
    run "$VDIR/build-unix32.log" make -C "$M/ports/unix" -j"$JOBS" "${U_ARGS[@]}" BUILD="$ubuild"
    echo "$ukey" >"$ubuild/.wsn-key"
  fi
  install_bin "$ubuild/micropython" micropython32
fi

ready=""
for f in qemu-mps2-an385.elf qemu-mps2-an385-64k.elf micropython32 mpy-cross; do
  [ -e "$BIN/$f" ] && ready+=" $f"
done
log "ready in $(( $(date +%s) - T0 )) s: $(rel "$BIN")/ ($VERSION):$ready"
