# The sans-I/O core of the device: XML, SOAP, WS-Addressing, WS-BaseNotification and the
# producer's request handler. Nothing here imports socket, asyncio, time, network or select:
# the clock (integer seconds since 2000-01-01T00:00:00Z) and the entropy are passed in.
# Import the submodules directly (`from wsn.core import xml`): importing this package loads
# nothing else, so a board pays only for what it uses. soap, producer and httpc stay loaded on
# a device; the others are loaded for a request and dropped after (wsn.device.idle); wsrf,
# current and compat are optional packages (a package.json each).
