#!/usr/bin/env bash
# Idempotent setup for a fresh Debian machine: system packages, the project's
# virtual environment, and (with --micropython) the MicroPython builds from
# Debian's source package. Safe to run again: every step checks first.
#
#   bash scripts/setup.sh                 # Python venv with all extras
#   bash scripts/setup.sh --micropython   # + QEMU firmware and 32-bit unix port
#   bash scripts/setup.sh --browser       # + Debian's chromium and chromium-driver
#                                         #   (the /status test drives them with Selenium)
#   bash scripts/setup.sh --micropython --no-build
#                                         # its Debian packages only; build later with
#                                         #   bash scripts/build_micropython.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WANT_MP=0
WANT_BROWSER=0
BUILD_MP=1
for a in "$@"; do
  case "$a" in
    --micropython) WANT_MP=1 ;;
    --no-build) BUILD_MP=0 ;;
    --browser) WANT_BROWSER=1 ;;
    *) echo "setup.sh: unknown option $a" >&2; exit 2 ;;
  esac
done

log() { printf '[setup] %s\n' "$*"; }

# --- system packages (Debian) ------------------------------------------------
need_pkgs=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
java_ok() { command -v java >/dev/null 2>&1 && java -version 2>&1 | grep -qE 'version "(17|21)'; }
java_ok || need_pkgs+=(openjdk-17-jre-headless)
# benchmarks (tests/bench/gateway_bench.py): wrk drives HTTP load, Mosquitto is the anchor
for p in wrk mosquitto mosquitto-clients; do
  have_pkg "$p" || need_pkgs+=("$p")
done
# tests/gateway/test_delivery_tls.py makes its consumer's self-signed certificate with it
have_pkg openssl || need_pkgs+=(openssl)
if [ "$WANT_MP" = 1 ]; then
  for p in gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm gcc-multilib dpkg-dev make; do
    have_pkg "$p" || need_pkgs+=("$p")
  done
fi
if [ "$WANT_BROWSER" = 1 ]; then
  # Debian's build: no browser download (none is possible here, nor wanted in CI)
  for p in chromium chromium-driver fonts-dejavu-core; do
    have_pkg "$p" || need_pkgs+=("$p")
  done
fi
if [ "${#need_pkgs[@]}" -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  log "installing Debian packages: ${need_pkgs[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

# --- Python virtual environment ----------------------------------------------
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.wsn-edge-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  log "installing the project and its extras into .venv (pyspark builds once, ~1 min)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[test,spark]"
  echo "$want" > "$stamp"
else
  log ".venv up to date"
fi

# --- MicroPython from Debian's source (QEMU board, 32-bit unix port) ----------
if [ "$WANT_MP" = 1 ] && [ "$BUILD_MP" = 1 ] && [ -f scripts/build_micropython.sh ]; then
  bash scripts/build_micropython.sh
fi
log "done"
