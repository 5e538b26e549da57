# ruff: noqa: F821  (a MicroPython manifest: package/module/include/require are its API)
# Freeze the device into a firmware image (bytecode in flash, not in the RAM heap):
#   in your board manifest:  include("/path/to/wsn-edge/device/manifest.py")
#   then e.g.:  make -C ports/esp32 BOARD=ESP32_GENERIC FROZEN_MANIFEST=/path/to/board_manifest.py
# asyncio comes with every board's default manifest (include("$(PORT_DIR)/boards/manifest.py")).
# It freezes every package, the optional ones too (frozen, a module not imported costs no RAM).
# main.py and topics.xml go on the board's filesystem (mpremote cp), with /config.json.
metadata(description="wsn-edge: WS-Notification producer (WS-BaseNotification 1.3)",
         version="0.2.0", license="Apache-2.0")
package("wsn", base_path=".")
