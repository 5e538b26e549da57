"""How a camera's events are named in the broker (docs/gateway.md "Cameras").

Two promises, both kept by giving every camera event two names:

* **its own**: the event is published on the topic the camera named,
  ``tns1:RuleEngine/CellMotionDetector/Motion`` (namespace
  ``http://www.onvif.org/ver10/topics``), with the camera's ProducerReference; an ONVIF
  client subscribed to the gateway without a filter receives it under that text, which
  onvif-parsers and Home Assistant recognise (gateway/topics/prefixes.py keeps the prefix).
  Selecting this name selects one kind of event across all cameras.
* **the device hierarchy's** (docs/design.md, as for sensors): the camera's topic as an
  extension topic (WS-Topics 1.3 §6.1) under the camera's node of ``urn:wsn-edge:devices``,
  ``dev:<camera id>/tns1:RuleEngine/CellMotionDetector/Motion``. Selecting it selects one
  camera: ``dev:front-door//.`` (Full) is every event of camera front-door,
  ``dev:*/tns1:RuleEngine/CellMotionDetector/Motion`` motion of every camera.

A subscription that selects either name (or both) gets the event once, and always under
its own name: the name a subscriber's filter used is how it chose, not what it receives
(WS-BaseNotification 1.3 §3.2 carries one Topic per message).
"""

from __future__ import annotations

from gateway import topics

#: the device hierarchy's namespace (docs/design.md)
DEVICES = "urn:wsn-edge:devices"


def device_topic(camera_id: str, topic: topics.ConcreteTopic) -> topics.ConcreteTopic:
    """``dev:<camera_id>/<topic as an extension step>``; raises topics.TopicError for an id
    that is not a topic name (gateway.onvif.config checks ids)."""
    first = topic.path[0]
    root = "{" + topic.namespace + "}" + first if topic.namespace else first
    return topics.ConcreteTopic(DEVICES, (camera_id, root, *topic.path[1:]))


def camera_topic(device: topics.ConcreteTopic) -> tuple[str, topics.ConcreteTopic] | None:
    """The inverse of :func:`device_topic`: (camera id, the camera's own topic), or None
    when `device` is not such a name."""
    if device.namespace != DEVICES or len(device.path) < 2:
        return None
    ns, local = topics.model.split_step(device.path[1])
    try:
        return device.path[0], topics.ConcreteTopic(ns or "", (local, *device.path[2:]))
    except topics.TopicError:
        return None
