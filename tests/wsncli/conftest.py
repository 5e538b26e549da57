"""Fixtures for the `wsn` client tests: the client as a real process (`python -m wsncli`),
a real gateway process (tests/gateway/gwtest.py) and a real device on the MicroPython unix
port (tests/device/devtest.py), all on 127.0.0.1. Helpers are imported, not copied."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for _d in (HERE.parent / "device", HERE.parent / "gateway", HERE):
    if str(_d) not in sys.path:
        sys.path.insert(0, str(_d))
