# Entry point.
#   unix port:  micropython device/main.py CONFIG.json   (or MICROPYPATH=.frozen:device)
#   boards:     main.py runs at boot and reads /config.json
import sys

_here = sys.argv[0].rpartition("/")[0] if sys.argv and sys.argv[0] else ""
if _here and _here not in sys.path:
    sys.path.insert(0, _here)

import asyncio  # noqa: E402

from wsn.device import Device  # noqa: E402

asyncio.run(Device().run(sys.argv[1] if len(sys.argv) > 1 else "/config.json"))
