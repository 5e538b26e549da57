# ruff: noqa: F821  (a MicroPython manifest: freeze/module/package/include are its API)
# Frozen into the QEMU firmware (MPS2-AN385, see scripts/build_micropython.sh):
#   - the device's sans-I/O core as the package wsn.core (with device/wsn/__init__.py),
#   - the core's unit tests (tests/device/core/test_*.py) and their runner
#     (tests/device/mp_runner.py) as top-level modules,
#   - the board self-checks of tests/qemu/mp/ as top-level modules.
# The board has no filesystem, so everything a test imports must be frozen here.
# Paths are relative to this file (makemanifest runs a manifest from its own directory).
# Keep in step with frozen_files() in scripts/build_micropython.sh: the firmware's cache key is
# a hash of exactly those files, so a change to any of them rebuilds the firmware.
import os

DEVICE = "../../device"
TESTS = "../../tests"

if os.path.isdir(DEVICE + "/wsn/core"):
    package("wsn/core", base_path=DEVICE)
    if os.path.isfile(DEVICE + "/wsn/__init__.py"):
        module("wsn/__init__.py", base_path=DEVICE)

if os.path.isfile(TESTS + "/device/mp_runner.py"):
    module("mp_runner.py", base_path=TESTS + "/device")

if os.path.isdir(TESTS + "/device/core"):
    for name in sorted(os.listdir(TESTS + "/device/core")):
        if name.startswith("test_") and name.endswith(".py"):
            module(name, base_path=TESTS + "/device/core")

freeze(TESTS + "/qemu/mp")
