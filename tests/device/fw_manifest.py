# ruff: noqa: F821  (a MicroPython manifest)
# The unix-port "device firmware" of the small-heap test: asyncio + the device package frozen,
# as on a board (device/manifest.py), so a 64 KiB heap holds only data, not bytecode.
include("$(MPY_DIR)/extmod/asyncio")
include("../../device/manifest.py")
