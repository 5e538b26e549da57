"""ONVIF cameras as event sources (issue 25): discovery, topic sets, pull point or Notify
subscriptions kept alive through camera quirks, and each event handed to an `EventSink`.

Depends on gateway.topics and gateway.wire only, never on the broker: the broker (or a
test) implements `EventSink`. The camera side speaks through onvif-zeep-async (the `onvif`
extra), imported on first use, so a gateway without cameras does not need it.

Modules: `config` (which cameras), `client` (the library, wrapped), `messages` (reading
NotificationMessages and TopicSets), `timing` (leases, absolute or relative times,
backoff), `source` (one camera's cycle; `Cameras` for many), `webhook` (the Notify
endpoint for cameras without pull points), `naming` (how camera events are named in the
broker), `model` (the data handed over).
"""

from .config import CameraConfig, load_file, parse_option
from .model import CameraEvent, CameraStatus, CameraTopic, EventSink
from .naming import camera_topic, device_topic
from .source import Cameras, CameraSource

__all__ = [
    "CameraConfig",
    "CameraEvent",
    "CameraSource",
    "CameraStatus",
    "CameraTopic",
    "Cameras",
    "EventSink",
    "camera_topic",
    "device_topic",
    "load_file",
    "parse_option",
]
