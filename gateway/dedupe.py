"""A Notify sent again is published once (docs/gateway.md "Exactly once when an answer is
lost").

A publisher that gets no answer to a Notify cannot know whether the broker accepted it,
and sends it again. WS-Addressing 1.0 Core §3.2 makes a message's [message id]
(wsa:MessageID) an IRI that "uniquely identifies the message" and leaves what a receiver
does with a repeated one unspecified; this broker treats a Notify whose (publisher,
wsa:MessageID) it has already accepted as that message sent again: answered as the first
one was (202, nothing else to say: Notify is one-way, bw-2.wsdl) and not published, landed
or delivered again. A Notify without wsa:MessageID is published every time, as before.

A caller may rely on:

* `key_of` names the publisher by its registration's device id when the Notify was posted
  to a registration (the device id, not the registration id: a device that registers again,
  e.g. after its registration lapsed while it slept, keeps its key); else by the
  ProducerReference address of its first NotificationMessage; else "" (an anonymous
  publisher: the MessageID alone, whose uniqueness is the sender's duty). Two publishers
  known by a registration or a ProducerReference that happen to use the same MessageID
  therefore never suppress each other's messages;
* `accept_once` runs `accept` at most once per key at a time and not at all for a key in
  the seen-set (gateway.storage_seen: durable, bounded, written in the accept's own
  transaction); a concurrent Notify with the same key waits for the first one's commit
  and is then answered as a duplicate (or, if that commit failed, tries itself).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from gateway.storage import StorageError
from gateway.storage_seen import SeenKey
from gateway.wire import ns
from gateway.wire.faults import RECEIVER, WsnFault

if TYPE_CHECKING:
    from gateway.broker import NotificationBroker
    from gateway.notify import Item
    from gateway.publishers import Registration
    from gateway.wire.soap import SoapRequest

log = logging.getLogger("gateway.broker")


def key_of(
    b: NotificationBroker, req: SoapRequest, reg: Registration | None, items: list[Item]
) -> SeenKey | None:
    """The seen-set key of a Notify (module docstring), None when it carries no
    wsa:MessageID or the seen-set is off (`--notify-dedupe-ids 0`)."""
    mid = req.wsa.message_id
    if not mid or b.cfg.notify_dedupe_ids <= 0:
        return None
    if reg is not None:
        publisher = "device:" + reg.device_id if reg.device_id else "registration:" + reg.id
    else:
        producer = items[0][1] if items else None
        publisher = "producer:" + producer.address if producer is not None else ""
    return _bounded(publisher), _bounded(mid)


#: longest key part stored as sent; a longer one is stored as its digest, so a row of the
#: seen-set stays small whatever a sender puts in its MessageID or ProducerReference
_KEY_PART_MAX = 256


def _bounded(part: str) -> str:
    if len(part) <= _KEY_PART_MAX:
        return part
    return "sha256:" + hashlib.sha256(part.encode("utf-8", "surrogatepass")).hexdigest()


async def accept_once(
    b: NotificationBroker, key: SeenKey | None, accept: Callable[[], Awaitable[None]]
) -> None:
    """`accept()` unless `key` was accepted before (module docstring); always when `key`
    is None."""
    if key is None:
        await accept()
        return
    while (first := b.notify_inflight.get(key)) is not None:
        if await asyncio.shield(first):  # the same Notify, being committed: its outcome
            _duplicate(b, key)
            return
    try:
        seen = b.storage.seen(key)
    except StorageError as e:
        raise WsnFault(ns.BF, "BaseFault", f"notification not accepted: {e}", RECEIVER) from None
    if seen:
        _duplicate(b, key)
        return
    fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    b.notify_inflight[key] = fut
    try:
        await accept()
        fut.set_result(True)
    finally:
        if not fut.done():
            fut.set_result(False)
        del b.notify_inflight[key]


def _duplicate(b: NotificationBroker, key: SeenKey) -> None:
    b.duplicates += 1
    log.debug("Notify %s of %r accepted before: answered, not published again", key[1], key[0])
