# wsn-edge device: a WS-Notification producer for MicroPython (ESP32, Pico W, unix port).
# This file must stay import-free: the QEMU board freezes it together with wsn.core only.
__version__ = "0.2.0"
