# ruff: noqa: F821  (a MicroPython manifest: freeze/module/package/include are its API)
# Frozen into the 32-bit single-precision unix port (.cache/micropython/bin/micropython32).
# Only asyncio: the device code itself is loaded from device/ (MICROPYPATH=.frozen:device), as on
# the 64-bit unix port, so the same tests run unchanged on both interpreters. Debian's source has
# no micropython-lib beyond mip/requests, which the device does not use.
include("$(MPY_DIR)/extmod/asyncio")
