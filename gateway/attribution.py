"""Who a notification is attributed to (WS-BrokeredNotification 1.0 §5.4): the publisher
registration a Notify naming a producer belongs to. Its device, for the landing zone and the
per-device last-seen of /metrics, is `landing_record.RecordBuilder.device_id` and
`state.BrokerState.devices_seen`."""

from __future__ import annotations

from gateway import publishers, topics
from gateway.publishers import Registration
from gateway.state import BrokerState
from gateway.wire.addressing import Epr


def registration_for(
    state: BrokerState, producer: Epr | None, topic: topics.ConcreteTopic | None = None
) -> Registration | None:
    """The registration a Notify naming `producer` is attributed to: of that publisher's
    registrations (it may have several: WS-BrokeredNotification 1.0 §5.4 makes a new one on
    each RegisterPublisher), the newest that allows `topic`, else its newest."""
    if producer is None:
        return None
    regs = sorted(state.registrations_of(producer.address), key=lambda r: r.created)
    for r in reversed(regs):
        if r.allows(publishers.map_device_topic(topic, r.device_id) if topic else None, state.ts):
            return r
    return regs[-1] if regs else None
