"""ONVIF cameras as producers inside the broker (issue 25; docs/gateway.md "Cameras"):
gateway.onvif's `EventSink` on the broker's Context, and the cameras' part of the app's
lifecycle.

A caller may rely on:

* `configured(cfg)` is the cameras of --onvif-camera and --onvif-config, checked (a
  ValueError naming the camera and field), and fails at once, with the remedy, when a
  camera is configured and onvif-zeep-async (the `onvif` extra) is not installed;
* each camera event is published through `notify.publish`, the entry a Notify uses: to
  subscribers of every dialect and filter, pull points, current messages and the landing
  zone, on its own topic with the camera's prefix (`tns1:RuleEngine/...`); subscribers of
  its second name `dev:<camera id>/tns1:RuleEngine/...` (gateway/onvif/naming.py) get it
  too, once, under its own topic;
* its landing line has `device_id` = the camera's id (the camera's producer address is
  made known to the landing lines' device lookup as that device);
* a camera's topic set (GetEventProperties) is grown into the broker's Topic Set under
  both names at each (re)connection;
* its topics and events are accounted to the camera's own address (the host of its
  configured URL) in the topic quota (--max-client-topics, gateway.quotas), as a Notify
  from that address would be: cameras do not share one quota. Its topic set is the
  operator's configuration and is held without refusal; an event on a topic beyond it is
  refused at the quota like a Notify's (counted, logged once per interval).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway import notify, quotas, topics
from gateway.config import Config
from gateway.context import Context
from gateway.notification_message import Publication
from gateway.onvif import (
    CameraConfig,
    CameraEvent,
    Cameras,
    CameraSource,
    CameraStatus,
    CameraTopic,
    device_topic,
    load_file,
    parse_option,
)
from gateway.onvif.client import onvif_module
from gateway.onvif.config import unique
from gateway.publishers import Registration
from gateway.wire.addressing import Epr, parse_epr

log = logging.getLogger("gateway.cameras")

#: the Notify endpoint for cameras without pull points, under the gateway's address
WEBHOOK_PATH = "/onvif/notify"


def configured(cfg: Config) -> list[CameraConfig]:
    """The cameras of `cfg` (options first, then the file), ids unique."""
    cams = [parse_option(o) for o in cfg.onvif_cameras]
    if cfg.onvif_config is not None:
        cams += load_file(cfg.onvif_config)
    cams = unique(cams)
    if cams:
        onvif_module()  # raises Missing, naming the extra to install
    return cams


class BrokerSink:
    """gateway.onvif.EventSink that publishes into the broker of `ctx`."""

    def __init__(self, ctx: Context, cams: Sequence[CameraConfig] = ()) -> None:
        self.ctx = ctx
        self._known: set[str] = set()  # producer addresses told to the landing lookup
        #: camera id -> its address's host: its client address for the quotas
        self.hosts = {c.id: c.host for c in cams}

    def camera_topics(self, camera_id: str, cam_topics: Sequence[CameraTopic]) -> None:
        """WS-Topics 1.3 §9 (a producer's topics grow the broker's Topic Set): the camera's
        topics and their device-hierarchy names. A topic the Topic Set refuses (a fixed
        one, --fixed-topic-set) is logged; its events are refused when they come."""
        grown: list[topics.ConcreteTopic] = []
        for t in cam_topics:
            grown.append(t.topic)
            with contextlib.suppress(topics.TopicError):
                grown.append(device_topic(camera_id, t.topic))
        ts = self.ctx.state.ts
        lacking = [g for g in grown if g not in ts]
        try:
            self.ctx.state.grow_topics(grown)
        except topics.TopicError as e:
            log.warning("camera %s: its topic set is not taken in whole: %s", camera_id, e)
        client = self.hosts.get(camera_id, "")
        for g in lacking:  # configured by the operator: held, never refused (module docstring)
            if g in ts:
                key = quotas.topic_key(g.namespace, "/".join(g.path))
                self.ctx.quotas.hold(quotas.TOPICS, client, key)

    async def camera_events(self, camera_id: str, events: Sequence[CameraEvent]) -> None:
        pubs: list[Publication] = []
        also: list[topics.ConcreteTopic | None] = []
        render = self.ctx.render
        for e in events:
            # topics keep their publisher's prefix: the camera's (gateway/topics/prefixes.py)
            render.prefixes.learn(e.producer, e.prefixes)
            self._know(camera_id, e.producer)
            producer: Epr | None = None
            if e.producer_epr is not None:
                with contextlib.suppress(ValueError):
                    producer = parse_epr(e.producer_epr)
            if producer is None or producer.address != e.producer:
                producer = Epr(e.producer)
            pubs.append(Publication(e.topic, producer, e.message, None))
            second: topics.ConcreteTopic | None = None
            with contextlib.suppress(topics.TopicError):
                second = device_topic(camera_id, e.topic)
            also.append(second)
        if pubs:
            client = self.hosts.get(camera_id, "")
            await notify.publish(self.ctx, pubs, also=also, client=client)

    def _know(self, camera_id: str, address: str) -> None:
        """The landing lines' device lookup (landing_record.RecordBuilder, a publisher
        observer) learns the camera's producer address as device `camera_id`, through the
        one seam it has: a registration-shaped record, never stored, never in the state."""
        if address in self._known:
            return
        self._known.add(address)
        now = datetime.now(UTC)
        self.ctx.landing.records.registration_created(
            Registration(
                f"onvif:{camera_id}:{address}", Epr(address), [], False, now, None, camera_id
            )
        )


class CameraCollector(Collector):
    """Prometheus gauges per camera, read at scrape (docs/gateway.md "Cameras")."""

    def __init__(self, statuses: Iterable[CameraStatus] | None = None) -> None:
        self.statuses: list[CameraStatus] = list(statuses or [])

    def describe(self) -> list[Metric]:
        return []  # dynamic: nothing to check at registration

    def collect(self) -> Iterable[Metric]:
        def fam(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=["camera"])

        def count(name: str, doc: str) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, labels=["camera"])

        connected = fam("wsn_camera_connected", "1 while the camera's subscription is live")
        expires = fam(
            "wsn_camera_subscription_expiry_timestamp_seconds",
            "when the camera's subscription ends unless renewed (Unix time)",
        )
        last = fam("wsn_camera_last_event_timestamp_seconds", "the camera's last event")
        events = count("wsn_camera_events", "events received from the camera")
        errors = count("wsn_camera_errors", "the camera's errors (unreachable, refused, ...)")
        subs = count("wsn_camera_subscriptions", "subscriptions made at the camera")
        for s in self.statuses:
            c = [s.camera_id]
            connected.add_metric(c, 1.0 if s.connected else 0.0)
            if s.expires is not None:
                expires.add_metric(c, s.expires.timestamp())
            if s.last_event is not None:
                last.add_metric(c, s.last_event.timestamp())
            events.add_metric(c, float(s.events))
            errors.add_metric(c, float(s.errors))
            subs.add_metric(c, float(s.subscriptions))
        yield from (connected, expires, last, events, errors, subs)


def sources(
    ctx: Context, cams: Sequence[CameraConfig], *, connect_timeout: float | None = None
) -> Cameras:
    """One CameraSource per camera, publishing through `ctx` (its Notify endpoint under
    the broker's address, now fixed: call after gateway.app.listening), its state files
    (a slot a killed process left) under --data-dir/onvif."""
    sink = BrokerSink(ctx, cams)
    cfg = ctx.cfg
    state_dir = cfg.data_dir / "onvif"
    state_dir.mkdir(parents=True, exist_ok=True)
    return Cameras(
        [
            CameraSource(
                c,
                sink,
                notify_base=ctx.render.base_url + WEBHOOK_PATH,
                state_dir=state_dir,
                backoff_initial=cfg.backoff_initial,
                backoff_max=cfg.backoff_max,
                timeout=connect_timeout if connect_timeout is not None else cfg.delivery_timeout,
            )
            for c in cams
        ]
    )
